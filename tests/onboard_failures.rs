//! Every simulator failure scenario ends in the job state and failure class seed 000 §4.6,
//! §4.7, §4.11 and §4.14 prescribe, with its compensation — all in one run, next to nodes that
//! converge (one node's failure never blocks another).

use crate::onboard_support;

use std::collections::BTreeMap;
use std::time::Duration;

use metalform::lifecycle::{FailureClass, JobKind, JobState, NodeState};
use metalform::sim::AgentBehaviour;
use metalform::sim::events::Level;
use metalform::sim::status::Status;
use metalform::stages::onboard::Facts;
use metalform::store::Job;
use onboard_support::{Bed, Setup, SiteSetup, hostname_of};

/// What a node's job must end in.
struct Expect {
    state: JobState,
    class: Option<FailureClass>,
    code: Option<&'static str>,
}

fn expect(state: JobState, class: FailureClass, code: &'static str) -> Expect {
    Expect {
        state,
        class: Some(class),
        code: Some(code),
    }
}

fn converged() -> Expect {
    Expect {
        state: JobState::Completed,
        class: None,
        code: None,
    }
}

/// Until the simulator shows `hostname` deploying for the second time, then fail that
/// deployment the way a datasource failure does (the simulator's own scenario fails only the
/// first deployment).
async fn fail_second_deployment_like_a_datasource(bed: &Bed, hostname: &str) {
    let sim = bed.sim("dc1");
    for _ in 0..2000 {
        let done = sim.with_world(|w| {
            let Some(m) = w.find_machine(hostname).cloned() else {
                return false;
            };
            if m.deployments < 2 || m.status != Status::Deploying {
                return false;
            }
            let now = chrono::Utc::now();
            w.event(
                m.id,
                Level::Error,
                "Node installation failure",
                "cloud-init: DataSourceNotFound: no datasource found (searched MAAS)",
                "unknown",
                now,
            );
            w.transition(m.id, Status::FailedDeployment, now).unwrap();
            true
        });
        if done {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{hostname} never deployed a second time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_failure_scenario_ends_where_the_seed_says() {
    let mut site = SiteSetup::generated("dc1", 21, 11, 1);
    let m = &mut site.config.machines;
    // gpu00001: commissioning fails.
    m[0].initial = metalform::sim::InitialState::New;
    // gpu00002: no BOSS/M.2 boot disk.
    m[1].disks.retain(|d| !d.model.contains("BOSS"));
    // gpu00007: the agent never calls.
    m[6].agent = AgentBehaviour::Never;
    // gpu00010 and gpu00011 share the BMC address of the undeclared machine the fleet calls
    // new00012: discovery is ambiguous.
    let shared_bmc = m[11].bmc_ip.clone();
    m[9].bmc_ip = shared_bmc.clone();
    m[10].bmc_ip = shared_bmc;
    site.declared = Some(vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 11]);
    let site = site.faults(
        "commissioning_fails:machines=gpu00001; datasource_failure:machines=gpu00003+gpu00004; \
         deploy_fails:machines=gpu00005; hwsync_never:machines=gpu00006; \
         machine_deleted:machines=gpu00008,after=1s",
    );
    let config = site.config.clone();
    let bed = Bed::start(
        Setup::one_site(site).profile("  timeouts: {hwSyncHealth: 2s, enrollment: 1500ms}\n"),
    )
    .await;
    let executor = bed.executor();
    let (report, ()) = tokio::join!(
        executor.run(bed.onboard_all()),
        fail_second_deployment_like_a_datasource(&bed, "gpu00003"),
    );
    for line in bed.progress_lines() {
        eprintln!("{line}");
    }

    use FailureClass as F;
    use JobState as J;
    let expected: BTreeMap<&str, Expect> = BTreeMap::from([
        (
            "gpu00001",
            expect(
                J::FailedManualIntervention,
                F::HardwareMismatch,
                "failed_commission",
            ),
        ),
        (
            "gpu00002",
            expect(
                J::FailedManualIntervention,
                F::HardwareMismatch,
                "boot_disk_not_found",
            ),
        ),
        (
            "gpu00003",
            expect(
                J::FailedManualIntervention,
                F::DeployCloudInitFailure,
                "datasource_failure_repeated",
            ),
        ),
        ("gpu00004", converged()),
        (
            "gpu00005",
            expect(
                J::FailedRetryable,
                F::DeployCloudInitFailure,
                "deploy_failed",
            ),
        ),
        (
            "gpu00006",
            expect(
                J::FailedManualIntervention,
                F::HardwareSyncFailure,
                "failed_hw_sync_health",
            ),
        ),
        (
            "gpu00007",
            expect(
                J::FailedManualIntervention,
                F::AgentEnrollmentFailure,
                "failed_enrollment",
            ),
        ),
        (
            "gpu00008",
            expect(
                J::FailedManualIntervention,
                F::StateAmbiguity,
                "machine_deleted",
            ),
        ),
        ("gpu00009", converged()),
        (
            "new00012",
            expect(
                J::FailedManualIntervention,
                F::StateAmbiguity,
                "discovery_ambiguous",
            ),
        ),
    ]);
    let jobs: BTreeMap<String, Job> = bed
        .jobs()
        .await
        .into_iter()
        .map(|j| (j.hostname.clone(), j))
        .collect();
    assert_eq!(jobs.len(), expected.len());
    for (host, want) in &expected {
        let job = &jobs[*host];
        assert_eq!(job.state, want.state, "{host}: {job:#?}");
        assert_eq!(job.failure_class, want.class, "{host}: {job:#?}");
        assert_eq!(job.error_code.as_deref(), want.code, "{host}: {job:#?}");
        if want.state.is_failed() {
            assert!(job.recommended_action.is_some(), "{host}: diagnostics");
            if job.maas_system_id.is_some() {
                assert!(job.last_maas_status.is_some(), "{host}: last MAAS status");
            }
        }
    }
    assert_eq!(report.converged(), 2, "{report:#?}");
    assert_eq!(report.failed(), 8, "{report:#?}");

    let deploys = bed.deploys("dc1");
    let counters = bed.sim("dc1").counters();
    let sim = bed.sim("dc1");
    let machine = |host: &str| sim.with_world(|w| w.find_machine(host).cloned());
    let counter = |host: &str| {
        machine(host)
            .and_then(|m| counters.get(&m.system_id).cloned())
            .unwrap_or_default()
    };
    // Pre-deploy failures never deploy, and boot-disk mismatch is not retried.
    assert_eq!(deploys["gpu00001"], 0);
    assert_eq!(deploys["gpu00002"], 0);
    let storage_attempts = bed
        .store
        .job_events(JobKind::Onboarding, jobs["gpu00002"].id, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.stage == "configure_storage" && e.status == "started")
        .count();
    assert_eq!(storage_attempts, 1, "boot disk not found is not retried");
    // Datasource: exactly one bounded redeploy; the second failure is released and blocks.
    assert_eq!(deploys["gpu00003"], 2);
    assert_eq!(
        deploys["gpu00004"], 2,
        "one redeploy after a datasource failure converges"
    );
    assert_eq!(
        counter("gpu00003").release,
        2,
        "released before the redeploy and after the second failure"
    );
    let facts = Facts::from_details(&jobs["gpu00003"].stage_details);
    assert_eq!(facts.datasource_retries, 1);
    // Generic deploy failure: released back to Ready, retryable, no automatic redeploy.
    assert_eq!(deploys["gpu00005"], 1);
    assert_eq!(counter("gpu00005").release, 1);
    // Post-deploy failures leave MAAS alone and the node out of service.
    for host in ["gpu00006", "gpu00007"] {
        assert_eq!(counter(host).release, 0, "{host}: MAAS left alone");
        assert_eq!(machine(host).unwrap().status, Status::Deployed, "{host}");
        let node = bed.store.node(jobs[host].node_id.unwrap()).await.unwrap();
        assert_eq!(node.status, NodeState::Enrolling, "{host}: not active");
    }
    let facts = Facts::from_details(&jobs["gpu00007"].stage_details);
    assert_eq!(facts.enrollment.token_refreshes, 1, "token refreshed once");
    // Ambiguity touches nothing.
    for host in ["gpu00010", "gpu00011"] {
        let c = counter(host);
        assert_eq!((c.commission, c.deploy, c.power_on), (0, 0, 0), "{host}");
    }
    assert_eq!(hostname_of(&config, 11), "new00012");
    // The converged nodes are active.
    for host in ["gpu00004", "gpu00009"] {
        let node = bed.store.node(jobs[host].node_id.unwrap()).await.unwrap();
        assert_eq!(node.status, NodeState::Active, "{host}");
    }
    // Domain events of 000 §8.0 were written with the transitions.
    let events = bed.store.pending_events(1000).await.unwrap();
    let count = |t: &str| events.iter().filter(|e| e.event_type == t).count();
    assert_eq!(count("node.onboarding.completed"), 2);
    assert_eq!(count("node.onboarding.manual_intervention_required"), 7);
    assert_eq!(count("node.onboarding.failed"), 1);
    assert!(count("node.onboarding.started") >= 10);
}

/// A run stopped after a failed deployment's compensating release and before its outcome was
/// journaled (a killed process) is resumed: the job ends as classified, and MAAS gets no
/// second release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_resumed_after_its_compensating_release_ends_as_classified() {
    let site = SiteSetup::generated("dc1", 22, 1, 0);
    let hostname = hostname_of(&site.config, 0);
    let site = site.faults(&format!("deploy_fails:machines={hostname}"));
    let bed = Bed::start(Setup::one_site(site)).await;
    // A run of the executor, which must end the job failed as classified and released.
    let run_to_classified = async || {
        bed.executor().run(bed.onboard_all()).await;
        let job = bed.jobs().await.remove(0);
        assert_eq!(
            (job.state, job.error_code.as_deref()),
            (JobState::FailedRetryable, Some("deploy_failed")),
            "{job:#?}"
        );
        assert!(
            job.error_message
                .as_deref()
                .is_some_and(|m| m.ends_with("released back to Ready")),
            "{job:#?}"
        );
        job
    };
    let job = run_to_classified().await;
    let recorded = Facts::from_details(&job.stage_details).deploy_failure;
    assert!(recorded.is_some_and(|f| f.releasing && f.events_read));
    let releases =
        |bed: &Bed| -> u64 { bed.sim("dc1").counters().values().map(|c| c.release).sum() };
    assert_eq!(releases(&bed), 1);

    // The store as it stood between the release and the journal write of the failure.
    let path = bed.state_url.trim_start_matches("sqlite://").to_owned();
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute(
        "UPDATE onboardings SET status = 'running', current_stage = 'classify_deploy_failure',
         failure_class = NULL, error_code = NULL, error_message = NULL, completed_at = NULL
         WHERE id = ?1",
        [job.id.to_string()],
    )
    .unwrap();
    drop(conn);
    run_to_classified().await;
    assert_eq!(releases(&bed), 1, "the release was not sent again");
}
