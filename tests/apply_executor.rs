//! Executor properties against the simulator: per-(site, profile) concurrency, leases held by
//! another executor, two executors racing over the same nodes on one store, and the limits of a
//! destructive item's permission to take a machine over.

use crate::onboard_support;

use metalform::apply::{
    FromPlan, NodeOutcome, ProgressStatus, Work, WorkItem, onboarding_lease_name,
};
use metalform::lifecycle::{JobKind, JobState, RecoveryAction};
use metalform::store::Actor;
use onboard_support::{Bed, BootingAtOnce, Setup, SiteSetup};

/// `maxParallel` bounds the machines of a (site, profile) booting at once (commissioning,
/// testing, deploying: read from the simulator's own log of status changes, so no moment is
/// missed), while as many nodes again run ahead of the slots to find and configure their
/// machines.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_most_max_parallel_machines_of_a_profile_boot_at_once() {
    let mut setup = Setup::one_site(SiteSetup::generated("dc1", 41, 6, 0));
    setup.max_parallel = 2;
    let bed = Bed::start(setup).await;
    let report = bed.executor().run(bed.onboard_all()).await;
    assert!(report.all_converged(), "{report:#?}");

    let (most_booting, changes) = bed.sim("dc1").with_world(|w| {
        let mut count = BootingAtOnce::default();
        for event in &w.events {
            count.see(&event.kind, &event.description);
        }
        let changes: Vec<&str> = w
            .events
            .iter()
            .filter(|e| e.kind == "Node changed status")
            .map(|e| e.description.as_str())
            .collect();
        (count.most, format!("{changes:?}"))
    });
    assert_eq!(
        most_booting, 2,
        "concurrency.maxParallel bounds the machines booting: {changes}"
    );

    let events = bed.progress.events.lock().unwrap().clone();
    let (mut running, mut most_running) = (0usize, 0usize);
    for event in &events {
        match event.status {
            ProgressStatus::Begin => running += 1,
            ProgressStatus::Converged | ProgressStatus::Failed | ProgressStatus::Left => {
                running -= 1
            }
            _ => {}
        }
        most_running = most_running.max(running);
    }
    assert_eq!(
        most_running, 4,
        "as many nodes again as maxParallel prepare ahead of the slots"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_whose_lease_another_executor_holds_is_left_alone() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 42, 2, 0))).await;
    let name = onboarding_lease_name("dc1", "gpu00001");
    let held = bed
        .store
        .acquire_lease(
            &name,
            "apply@elsewhere:1:live",
            chrono::Duration::seconds(60),
        )
        .await
        .unwrap();
    let report = bed.executor().run(bed.onboard_all()).await;
    let left = report.result("dc1/gpu00001").unwrap();
    match &left.outcome {
        NodeOutcome::Left { reason } => assert!(
            reason.starts_with("another executor (apply@elsewhere:1:live) is working on this node"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        report.result("dc1/gpu00002").unwrap().outcome,
        NodeOutcome::Converged { .. }
    ));
    // Nothing happened to the leased node: no job, no MAAS change.
    assert!(bed.jobs().await.iter().all(|j| j.hostname != "gpu00001"));
    assert_eq!(bed.deploys("dc1")["gpu00001"], 0);
    bed.store.release_lease(&held).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_executors_racing_over_the_same_nodes_onboard_each_once() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 43, 5, 1))).await;
    onboard_support::race_two_executors(&bed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interrupted_cancel_is_finished_by_resume() {
    let mut site = SiteSetup::generated("dc1", 44, 1, 0);
    site.config.time_scale = 100.0;
    let bed = Bed::start(Setup::one_site(site)).await;
    let executor = bed.executor();
    let items = bed.onboard_all();
    let run = tokio::spawn(async move { executor.run(items).await });
    let mut deploying = None;
    for _ in 0..2000 {
        if let Some(job) = bed
            .jobs()
            .await
            .into_iter()
            .find(|j| j.stage == "wait_for_deployed")
        {
            deploying = Some(job);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // The executor dies; an operator's cancel is recorded but its compensation never ran.
    run.abort();
    let job = deploying.expect("the job reached wait_for_deployed");
    let cancelled = bed
        .store
        .recover_job(
            JobKind::Onboarding,
            job.id,
            RecoveryAction::Cancel,
            &Actor::admin("alice"),
            Some("wrong rack"),
        )
        .await
        .unwrap();
    assert_eq!(cancelled.state, JobState::Compensating);

    let report = bed
        .executor()
        .run(vec![WorkItem::new(
            bed.target("dc1", "gpu00001"),
            Work::Resume { job_id: job.id },
        )])
        .await;
    assert!(
        matches!(report.results[0].outcome, NodeOutcome::Left { .. }),
        "{report:#?}"
    );
    let job = bed.store.job(JobKind::Onboarding, job.id).await.unwrap();
    assert_eq!(job.state, JobState::Cancelled);
    let sid = job.maas_system_id.unwrap();
    assert_eq!(
        bed.sim("dc1").counters()[&sid].release,
        1,
        "released back to Ready"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_over_permission_releases_only_the_machine_it_names() {
    let mut site = SiteSetup::generated("dc1", 44, 2, 0);
    site.config.machines[0].initial = metalform::sim::InitialState::Deployed;
    site.config.machines[1].initial = metalform::sim::InitialState::Allocated;
    let bed = Bed::start(Setup::one_site(site)).await;
    let sid_of = |host: &str| {
        bed.sim("dc1")
            .with_world(|w| w.find_machine(host).unwrap().system_id.clone())
    };
    let (deployed, allocated) = (sid_of("gpu00001"), sid_of("gpu00002"));
    let with_permission = |host: &str, takes_over: &str| WorkItem {
        plan: Some(FromPlan {
            plan_id: "sha256:00112233445566778899".into(),
            reason: "test".into(),
            takes_over: Some(takes_over.into()),
        }),
        ..bed.onboard("dc1", host)
    };
    // gpu00001's item names another machine; gpu00002's names its own (Allocated) one.
    let report = bed
        .executor()
        .run(vec![
            with_permission("gpu00001", &allocated),
            with_permission("gpu00002", &allocated),
        ])
        .await;
    let counters = bed.sim("dc1").counters();
    let released = |sid: &str| counters.get(sid).map_or(0, |c| c.release);
    assert_eq!(released(&deployed), 0, "{report:#?}");
    let refused = bed.job_of("dc1", "gpu00001").await;
    assert_eq!(
        (refused.state, refused.error_code.as_deref()),
        (
            JobState::FailedManualIntervention,
            Some("machine_deployed_elsewhere")
        ),
        "without a permission for it, a machine in use fails closed"
    );
    assert_eq!((released(&allocated), counters[&allocated].deploy), (1, 1));
    assert_eq!(
        bed.job_of("dc1", "gpu00002").await.state,
        JobState::Completed
    );
}

/// A node renders its payload ahead of its place under `maxParallel`, then waits for it (here
/// one whole run of the other node, over a twentieth of the token's lifetime): its deploy
/// renews the token, so it still lasts the deploy and the first boot, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_that_waited_for_its_place_is_renewed_at_deploy() {
    let mut setup = Setup::one_site(SiteSetup::generated("dc1", 45, 2, 0));
    setup.max_parallel = 1;
    let bed = Bed::start(setup).await;
    let mut items = bed.onboard_all();
    for item in &mut items {
        item.target.profile.enrollment.token_ttl = std::time::Duration::from_secs(10);
    }
    let report = bed.executor().run(items).await;
    assert!(report.all_converged(), "{report:#?}");

    let mut deploys = Vec::new();
    for job in bed.jobs().await {
        let events = bed
            .store
            .job_events(JobKind::Onboarding, job.id, 200)
            .await
            .unwrap();
        let deploy = events
            .into_iter()
            .find(|e| e.stage == "deploy_via_maas" && e.status == "succeeded")
            .expect("a deploy event");
        deploys.push(deploy);
    }
    deploys.sort_by_key(|e| e.occurred_at);
    // The second deploy waited for the first node's whole run (its deployment alone is over a
    // second): more than the twentieth of the token's lifetime that is never renewed.
    let second = deploys.last().unwrap();
    assert!(
        !second.details["token_renewed_until"].is_null(),
        "{:?}",
        second.details
    );
    let message = second.message.as_deref().unwrap_or_default();
    assert!(
        message.contains("the enrollment token, rendered before a place was free, renewed until"),
        "{message}"
    );
}
