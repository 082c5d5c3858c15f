//! Every decommission mode against the simulator (seed 000 §5.2–§5.5, §5.8; seed 001 §3, §5.3,
//! §8): nodes are onboarded first, then decommissioned; the simulated agents run the typed
//! tasks through the task API, MAAS releases (with erase, and the no-erase fallback) and powers
//! off. Each mode ends in the node and job states of 001 §5.3; a failing agent task ends in
//! manual intervention.

use crate::onboard_support;

use std::time::Duration;

use metalform::apply::decommission::{
    DecommissionExecutor, DecommissionJob, DecommissionWork, cancel_decommission,
    request_soft_reset, request_storage_cleanup, retry_decommission, show_decommission,
};
use metalform::lifecycle::{DecommissionMode, FailureClass, JobKind, JobState, NodeState};
use metalform::sim::{TaskFault, TaskFaultMode};
use metalform::stages::decommission::{DecommissionFacts, DecommissionTarget};
use metalform::store::{Actor, Job, NewDecommission};
use onboard_support::{Bed, Setup, SiteSetup};
use uuid::Uuid;

/// The profile's decommission timeouts, short: a silent agent gives up in seconds.
const QUICK_TIMEOUTS: &str = "  timeouts: {agentTask: 8s, release: 60s, powerOff: 20s}\n";

async fn onboarded(seed: u64, n: usize, faults: &str) -> Bed {
    let bed = Bed::start(
        Setup::one_site(SiteSetup::generated("dc1", seed, n, 0).faults(faults))
            .profile(QUICK_TIMEOUTS),
    )
    .await;
    let report = bed.executor().run(bed.onboard_all()).await;
    assert!(report.all_converged(), "{report:#?}");
    bed
}

fn executor(bed: &Bed) -> DecommissionExecutor {
    DecommissionExecutor::new(bed.env(), Bed::options(), bed.progress.clone())
}

async fn node_of(bed: &Bed, hostname: &str) -> Uuid {
    bed.store
        .find_node("dc1", hostname)
        .await
        .unwrap()
        .unwrap()
        .id
}

async fn target(bed: &Bed, hostname: &str) -> DecommissionTarget {
    DecommissionTarget {
        node_id: node_of(bed, hostname).await,
        site: "dc1".into(),
        hostname: hostname.into(),
        resolved: Some(bed.target("dc1", hostname)),
    }
}

async fn new_work(
    bed: &Bed,
    hostname: &str,
    mode: DecommissionMode,
    storage: Option<&str>,
) -> DecommissionWork {
    let target = target(bed, hostname).await;
    DecommissionWork {
        job: DecommissionJob::New(NewDecommission {
            node_id: target.node_id,
            mode,
            erase: None,
            storage_cleanup: storage.map(str::to_owned),
            reason: Some("test".into()),
            requested_by: Some("test".into()),
            plan_id: None,
        }),
        target,
    }
}

async fn run_one(bed: &Bed, work: DecommissionWork) -> Job {
    let report = executor(bed).run(vec![work]).await;
    let job_id = report.results[0].job_id.expect("a job was taken up");
    for line in bed.progress_lines() {
        eprintln!("{line}");
    }
    bed.store.job(JobKind::Decommission, job_id).await.unwrap()
}

/// The task types the simulated agent of `hostname` ran, in order, with their outcome.
fn agent_tasks(bed: &Bed, hostname: &str) -> Vec<(String, String)> {
    bed.sim("dc1").with_world(|w| {
        w.agent_task_log
            .iter()
            .filter(|r| r.hostname == hostname)
            .map(|r| (r.task_type.clone(), r.outcome.clone()))
            .collect()
    })
}

fn system_id_of(bed: &Bed, hostname: &str) -> String {
    bed.sim("dc1").with_world(|w| {
        w.machines
            .values()
            .find(|m| m.hostname == hostname)
            .unwrap()
            .system_id
            .clone()
    })
}

fn counters(bed: &Bed, hostname: &str) -> metalform::sim::Counters {
    let id = system_id_of(bed, hostname);
    bed.sim("dc1")
        .counters()
        .get(&id)
        .cloned()
        .unwrap_or_default()
}

fn fault(task: &str, machine: &str, times: Option<u32>) -> TaskFault {
    TaskFault {
        task: task.into(),
        machine: Some(machine.into()),
        times,
        mode: TaskFaultMode::Fail,
        message: Some(format!("{task} broke (test)")),
    }
}

async fn outbox_types(bed: &Bed, job: Uuid) -> Vec<String> {
    bed.store
        .pending_events(1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.subject_id == job.to_string())
        .map(|e| e.event_type)
        .collect()
}

fn ok(tasks: &[&str]) -> Vec<(String, String)> {
    tasks
        .iter()
        .map(|t| (t.to_string(), "succeeded".to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn soft_reset_drains_cleans_scrubs_validates_and_gives_the_node_back() {
    let bed = onboarded(11, 1, "").await;
    let job = run_one(
        &bed,
        new_work(&bed, "gpu00001", DecommissionMode::SoftReset, Some("local")).await,
    )
    .await;
    assert_eq!(job.state, JobState::Completed, "{job:#?}");
    let node = bed.store.node(job.node_id.unwrap()).await.unwrap();
    assert_eq!(node.status, NodeState::Active);
    assert_eq!(
        agent_tasks(&bed, "gpu00001"),
        ok(&[
            "terminal.close",
            "allocation.revoke_user",
            "node.drain",
            "node.storage_cleanup",
            "node.gpu_scrub",
            "node.validate_clean",
        ])
    );
    let c = counters(&bed, "gpu00001");
    assert_eq!((c.release, c.deploy), (0, 1), "MAAS is not involved");
    let stages: Vec<String> = bed
        .store
        .job_events(JobKind::Decommission, job.id, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.status == "succeeded")
        .map(|e| e.stage)
        .collect();
    assert_eq!(
        stages,
        [
            "disable_node",
            "drain_node",
            "cleanup_storage",
            "scrub_gpu",
            "validate_clean_node",
            "enable_node"
        ]
    );
    assert_eq!(
        outbox_types(&bed, job.id).await,
        ["node.decommission.started", "node.decommission.completed"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn storage_cleanup_requested_through_the_service_runs_cleanup_and_validation_only() {
    let bed = onboarded(12, 1, "").await;
    let node = node_of(&bed, "gpu00001").await;
    let actor = Actor::admin("ops");
    let job = request_storage_cleanup(&bed.store, node, "weka", &actor, Some("tenant T1 left"))
        .await
        .unwrap();
    assert_eq!(job.state, JobState::Pending);
    // A second request while this one is open is a typed conflict.
    let again = request_soft_reset(&bed.store, node, None, &actor, None)
        .await
        .unwrap_err();
    assert!(
        again
            .to_string()
            .contains("already has an open decommission"),
        "{again}"
    );
    let job = run_one(
        &bed,
        DecommissionWork {
            target: target(&bed, "gpu00001").await,
            job: DecommissionJob::Existing(job.id),
        },
    )
    .await;
    assert_eq!(job.state, JobState::Completed, "{job:#?}");
    assert_eq!(
        bed.store.node(node).await.unwrap().status,
        NodeState::Active
    );
    assert_eq!(
        agent_tasks(&bed, "gpu00001"),
        ok(&["node.storage_cleanup", "node.validate_clean"])
    );
    let scope = bed
        .sim("dc1")
        .with_world(|w| w.agent_task_log[0].params.clone());
    assert_eq!(scope, serde_json::json!({"scope": "weka"}));
    let audit = bed
        .store
        .audit_log("decommission", &job.id.to_string())
        .await
        .unwrap();
    assert!(
        audit
            .iter()
            .any(|a| a.action == "decommission.request_storage_cleanup" && a.actor == "ops"),
        "{audit:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn residue_found_by_validation_quarantines_the_node_for_manual_intervention_then_retry_finishes()
 {
    let bed = onboarded(13, 1, "").await;
    bed.sim("dc1").with_world(|w| {
        w.replace_task_faults(vec![fault("node.validate_clean", "gpu00001", Some(1))])
    });
    let job = run_one(
        &bed,
        new_work(&bed, "gpu00001", DecommissionMode::SoftReset, None).await,
    )
    .await;
    assert_eq!(job.state, JobState::FailedManualIntervention, "{job:#?}");
    assert_eq!(job.stage, "validate_clean_node");
    assert_eq!(job.error_code.as_deref(), Some("validation_residue"));
    assert_eq!(
        job.error_message.as_deref(),
        Some(
            "the node agent reported node.validate_clean failed: node.validate_clean broke (test); the node is quarantined until an operator checks it"
        )
    );
    let node = job.node_id.unwrap();
    assert_eq!(
        bed.store.node(node).await.unwrap().status,
        NodeState::Quarantined
    );
    assert_eq!(
        outbox_types(&bed, job.id).await,
        [
            "node.decommission.started",
            "node.decommission.manual_intervention_required"
        ]
    );
    // The operator cleaned the host: retry the stage.
    let moved = retry_decommission(
        &bed.store,
        job.id,
        &Actor::admin("ops"),
        Some("cleaned by hand"),
    )
    .await
    .unwrap();
    assert_eq!(moved.state, JobState::Running);
    let job = run_one(
        &bed,
        DecommissionWork {
            target: target(&bed, "gpu00001").await,
            job: DecommissionJob::Existing(job.id),
        },
    )
    .await;
    assert_eq!(job.state, JobState::Completed, "{job:#?}");
    assert_eq!(
        bed.store.node(node).await.unwrap().status,
        NodeState::Active
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silent_agent_fails_the_drain_after_the_profiles_agent_task_timeout() {
    let bed = onboarded(15, 1, "").await;
    bed.sim("dc1")
        .out_of_band(&system_id_of(&bed, "gpu00001"), "stop_agent")
        .unwrap();
    let job = run_one(
        &bed,
        new_work(&bed, "gpu00001", DecommissionMode::SoftReset, None).await,
    )
    .await;
    assert_eq!(job.stage, "drain_node", "{job:#?}");
    assert_eq!(job.error_code.as_deref(), Some("agent_unreachable"));
    // The profile's `timeouts.agentTask` (QUICK_TIMEOUTS), not the 10-minute default.
    let message = job.error_message.as_deref().unwrap_or_default();
    assert!(
        message.starts_with("the node agent did not finish terminal.close within 8s"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_task_that_keeps_failing_ends_in_manual_intervention_after_bounded_retries() {
    let bed = onboarded(14, 1, "").await;
    bed.sim("dc1")
        .with_world(|w| w.replace_task_faults(vec![fault("node.drain", "gpu00001", None)]));
    let job = run_one(
        &bed,
        new_work(&bed, "gpu00001", DecommissionMode::Reimage, None).await,
    )
    .await;
    assert_eq!(job.state, JobState::FailedManualIntervention, "{job:#?}");
    assert_eq!(job.stage, "drain_node");
    assert_eq!(
        job.failure_class,
        Some(FailureClass::PostDeployConnectivityFailure)
    );
    assert_eq!(job.error_code.as_deref(), Some("agent_task_failed"));
    let drains = agent_tasks(&bed, "gpu00001")
        .into_iter()
        .filter(|(t, _)| t == "node.drain")
        .count();
    assert_eq!(drains, 3, "one try and two bounded retries");
    assert_eq!(
        bed.store.node(job.node_id.unwrap()).await.unwrap().status,
        NodeState::Quarantined
    );
    assert_eq!(counters(&bed, "gpu00001").release, 0, "MAAS not touched");
    // Cancel: nothing destructive happened, so the node goes back into service.
    let cancelled = cancel_decommission(
        &bed.store,
        job.id,
        &Actor::admin("ops"),
        Some("host replaced"),
        Duration::from_secs(3),
    )
    .await
    .unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    assert_eq!(
        bed.store.node(job.node_id.unwrap()).await.unwrap().status,
        NodeState::Active
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reimage_redeploys_the_same_node_id_and_the_agent_re_enrolls() {
    let bed = onboarded(15, 1, "").await;
    let node = node_of(&bed, "gpu00001").await;
    let first = bed.store.agent_enrollment(node).await.unwrap().unwrap();
    let job = run_one(
        &bed,
        new_work(&bed, "gpu00001", DecommissionMode::Reimage, Some("all")).await,
    )
    .await;
    assert_eq!(job.state, JobState::Completed, "{job:#?}");
    assert_eq!(job.node_id, Some(node));
    assert_eq!(
        bed.store.node(node).await.unwrap().status,
        NodeState::Active
    );
    let c = counters(&bed, "gpu00001");
    assert_eq!((c.release, c.erase, c.deploy), (1, 1, 2), "{c:?}");
    let again = bed.store.agent_enrollment(node).await.unwrap().unwrap();
    assert!(
        again.id > first.id,
        "the agent enrolled again into the same node"
    );
    assert_eq!(again.onboarding_id, Some(job.id.to_string()));
    let facts = DecommissionFacts::from_details(&job.stage_details);
    assert_eq!(facts.decommission.releases.len(), 1);
    assert_eq!(facts.decommission.releases[0].erase, "quick");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn full_decommission_releases_powers_off_and_deletes_and_re_onboarding_makes_a_new_node() {
    let bed = onboarded(16, 1, "").await;
    let node = node_of(&bed, "gpu00001").await;
    let job = run_one(
        &bed,
        new_work(&bed, "gpu00001", DecommissionMode::FullDecommission, None).await,
    )
    .await;
    assert_eq!(job.state, JobState::Completed, "{job:#?}");
    assert_eq!(
        bed.store.node(node).await.unwrap().status,
        NodeState::Deleted
    );
    let c = counters(&bed, "gpu00001");
    // MAAS powers a machine off when it releases it: the power-off stage finds it off.
    assert_eq!((c.release, c.erase, c.power_off), (1, 1, 0), "{c:?}");
    let (status, power) = bed.sim("dc1").with_world(|w| {
        let m = w
            .machines
            .values()
            .find(|m| m.hostname == "gpu00001")
            .unwrap();
        (m.status.name().to_owned(), format!("{:?}", m.power_state))
    });
    assert_eq!((status.as_str(), power.as_str()), ("Ready", "Off"));
    assert_eq!(
        agent_tasks(&bed, "gpu00001"),
        ok(&[
            "allocation.revoke_user",
            "terminal.close",
            "allocation.revoke_user",
            "node.drain"
        ])
    );
    let view = show_decommission(&bed.store, job.id).await.unwrap();
    let skipped: Vec<&str> = view
        .events
        .iter()
        .filter(|e| e.status == "skipped")
        .map(|e| e.stage.as_str())
        .collect();
    assert_eq!(
        skipped,
        ["power_off_maas_node", "remove_maas_record"],
        "already off; left in MAAS by default"
    );
    // Nothing is reactivated after deleted; onboarding the machine again makes a new node.
    let report = bed
        .executor()
        .run(vec![bed.onboard("dc1", "gpu00001")])
        .await;
    assert!(report.all_converged(), "{report:#?}");
    let new_node = node_of(&bed, "gpu00001").await;
    assert_ne!(new_node, node);
    assert_eq!(
        bed.store.node(node).await.unwrap().status,
        NodeState::Deleted
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retire_ends_retired_released_and_powered_off_and_a_failed_erase_falls_back_to_no_erase() {
    let bed = onboarded(17, 1, "erase_fails:machines=gpu00001").await;
    let node = node_of(&bed, "gpu00001").await;
    let job = run_one(
        &bed,
        new_work(&bed, "gpu00001", DecommissionMode::Retire, None).await,
    )
    .await;
    assert_eq!(job.state, JobState::Completed, "{job:#?}");
    assert_eq!(
        bed.store.node(node).await.unwrap().status,
        NodeState::Retired
    );
    let c = counters(&bed, "gpu00001");
    assert_eq!((c.release, c.erase), (2, 1), "{c:?}");
    let facts = DecommissionFacts::from_details(&job.stage_details);
    let releases: Vec<(&str, bool)> = facts
        .decommission
        .releases
        .iter()
        .map(|r| (r.erase.as_str(), r.fallback))
        .collect();
    assert_eq!(releases, [("quick", false), ("none", true)]);
    let (status, power) = bed.sim("dc1").with_world(|w| {
        let m = w
            .machines
            .values()
            .find(|m| m.hostname == "gpu00001")
            .unwrap();
        (m.status.name().to_owned(), format!("{:?}", m.power_state))
    });
    assert_eq!((status.as_str(), power.as_str()), ("Ready", "Off"));
}
