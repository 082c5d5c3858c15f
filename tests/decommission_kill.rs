//! A decommission executor killed in the middle of a release (its task aborted: no cleanup,
//! the lease left to expire, as after kill -9), then another executor resumes the job: it
//! completes, and by the simulator's counters MAAS received exactly one release and one erase
//! (seed 000 §5.8; DESIGN.md §4 "nothing lost, no stage runs twice").

use crate::onboard_support;

use std::time::Duration;

use metalform::apply::ExecutorOptions;
use metalform::apply::decommission::{DecommissionExecutor, DecommissionJob, DecommissionWork};
use metalform::lifecycle::{DecommissionMode, JobKind, JobState, NodeState};
use metalform::stages::decommission::{DecommissionFacts, DecommissionTarget};
use metalform::store::{JobFilter, NewDecommission};
use onboard_support::{Bed, Setup, SiteSetup};

fn executor(bed: &Bed, holder: &str) -> DecommissionExecutor {
    DecommissionExecutor::new(
        bed.env(),
        ExecutorOptions {
            holder: holder.into(),
            ..Bed::options()
        },
        bed.progress.clone(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_full_decommission_resumes_without_a_second_release_or_erase() {
    let mut site = SiteSetup::generated("dc1", 21, 1, 0);
    // A quick erase of ~4 s real time: long enough to kill the executor while MAAS erases.
    site.config.timings.quick_erase_secs = 2400.0;
    let bed = Bed::start(
        Setup::one_site(site).profile("  timeouts: {agentTask: 8s, release: 60s, powerOff: 20s}\n"),
    )
    .await;
    assert!(bed.executor().run(bed.onboard_all()).await.all_converged());
    let node = bed
        .store
        .find_node("dc1", "gpu00001")
        .await
        .unwrap()
        .unwrap()
        .id;
    let target = DecommissionTarget {
        node_id: node,
        site: "dc1".into(),
        hostname: "gpu00001".into(),
        resolved: Some(bed.target("dc1", "gpu00001")),
    };
    let work = DecommissionWork {
        target: target.clone(),
        job: DecommissionJob::New(NewDecommission {
            node_id: node,
            mode: DecommissionMode::FullDecommission,
            erase: None,
            storage_cleanup: None,
            reason: Some("hardware returned".into()),
            requested_by: Some("test".into()),
            plan_id: None,
        }),
    };
    let first = executor(&bed, "first");
    let running = tokio::spawn(async move { first.run(vec![work]).await });
    // Kill it once MAAS has taken the release and is erasing.
    let mut job_id = None;
    for _ in 0..1000 {
        let jobs = bed
            .store
            .list_jobs(JobKind::Decommission, &JobFilter::default())
            .await
            .unwrap();
        if let Some(job) = jobs.first() {
            job_id = Some(job.id);
            let facts = DecommissionFacts::from_details(&job.stage_details);
            if facts.release().is_some_and(|r| r.received) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.abort();
    let _ = running.await;
    let job_id = job_id.expect("the job was created");
    let killed = bed.store.job(JobKind::Decommission, job_id).await.unwrap();
    assert_eq!(
        (killed.state, killed.stage.as_str()),
        (JobState::Running, "release_maas_node"),
        "killed while MAAS erases"
    );

    // A second executor takes the node over once the dead one's lease expires.
    let report = executor(&bed, "second")
        .run(vec![DecommissionWork {
            target,
            job: DecommissionJob::Existing(job_id),
        }])
        .await;
    assert!(report.all_converged(), "{report:#?}");
    let job = bed.store.job(JobKind::Decommission, job_id).await.unwrap();
    assert_eq!(job.state, JobState::Completed);
    assert_eq!(
        bed.store.node(node).await.unwrap().status,
        NodeState::Deleted
    );
    let counters = bed.sim("dc1").counters();
    let c = counters.values().next().unwrap();
    assert_eq!((c.release, c.erase), (1, 1), "{c:?}");
    // The release stage's attempt was continued, not restarted.
    let starts = bed
        .store
        .job_events(JobKind::Decommission, job_id, 200)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.stage == "release_maas_node" && e.status == "started")
        .count();
    assert_eq!(starts, 1);
}
