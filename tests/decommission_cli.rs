//! `metalform decommissions list|show|retry|cancel` (seed 000 §5.7): a soft reset whose drain
//! task keeps failing is listed, shown with its failure and recommended action, retried (the
//! agent works again) to completion; a second one is cancelled; actions need --reason.

use crate::onboard_support;

use std::time::Duration;

use metalform::apply::decommission::{DecommissionExecutor, DecommissionJob, DecommissionWork};
use metalform::lifecycle::{DecommissionMode, JobKind, JobState, NodeState};
use metalform::sim::{TaskFault, TaskFaultMode};
use metalform::stages::decommission::DecommissionTarget;
use metalform::store::NewDecommission;
use onboard_support::{Bed, Setup, SiteSetup, free_port};

async fn soft_reset(bed: &Bed) -> uuid::Uuid {
    let node = bed
        .store
        .find_node("dc1", "gpu00001")
        .await
        .unwrap()
        .unwrap()
        .id;
    let report = DecommissionExecutor::new(bed.env(), Bed::options(), bed.progress.clone())
        .run(vec![DecommissionWork {
            target: DecommissionTarget {
                node_id: node,
                site: "dc1".into(),
                hostname: "gpu00001".into(),
                resolved: Some(bed.target("dc1", "gpu00001")),
            },
            job: DecommissionJob::New(NewDecommission {
                node_id: node,
                mode: DecommissionMode::SoftReset,
                erase: None,
                storage_cleanup: None,
                reason: Some("tenant turnover".into()),
                requested_by: Some("api".into()),
                plan_id: None,
            }),
        }])
        .await;
    report.results[0].job_id.unwrap()
}

fn run(command: &mut std::process::Command) -> (i32, String, String) {
    let out = command.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_show_retry_and_cancel() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 31, 1, 0))).await;
    assert!(bed.executor().run(bed.onboard_all()).await.all_converged());
    bed.sim("dc1").with_world(|w| {
        w.replace_task_faults(vec![TaskFault {
            task: "node.drain".into(),
            machine: None,
            times: None,
            mode: TaskFaultMode::Fail,
            message: Some("drain hook exited 1".into()),
        }])
    });
    let job = soft_reset(&bed).await;

    let (code, out, err) = run(&mut bed.cli_store(&["decommissions", "list"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("gpu00001  soft_reset  failed_manual_intervention  drain_node#3  post_deploy_connectivity_failure"),
        "{out}"
    );
    assert!(out.ends_with("\n1 decommission(s)\n"), "{out}");
    let (code, out, _) = run(&mut bed.cli_store(&[
        "decommissions",
        "list",
        "--job-state",
        "completed",
        "--format",
        "json",
    ]));
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap(),
        serde_json::json!({"decommissions": []})
    );
    let (code, out, err) = run(&mut bed.cli_store(&["decommissions", "show", "gpu00001"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("error          agent_task_failed: the node agent reported node.drain failed: drain hook exited 1"),
        "{out}"
    );
    assert!(
        out.contains("next action    check that the deployed host is reachable"),
        "{out}"
    );

    // Actions are audited: no --reason, no action.
    let (code, _, err) = run(&mut bed.cli_store(&["decommissions", "cancel", "gpu00001"]));
    assert_eq!(code, 2);
    assert!(err.starts_with("error: cancel needs --reason"), "{err}");

    // The agent works again: retry runs the rest.
    bed.sim("dc1")
        .with_world(|w| w.replace_task_faults(Vec::new()));
    let port = free_port();
    let (code, out, err) = run(&mut bed.cli(
        &[
            "decommissions",
            "retry",
            &job.to_string(),
            "--reason",
            "drain hook fixed",
        ],
        port,
    ));
    assert_eq!(code, 0, "{out}\n{err}");
    let done = bed.store.job(JobKind::Decommission, job).await.unwrap();
    assert_eq!(done.state, JobState::Completed);
    let node = done.node_id.unwrap();
    assert_eq!(
        bed.store.node(node).await.unwrap().status,
        NodeState::Active
    );

    // A second one fails the same way; cancelling gives the node back.
    bed.sim("dc1").with_world(|w| {
        w.replace_task_faults(vec![TaskFault {
            task: "terminal.close".into(),
            machine: None,
            times: None,
            mode: TaskFaultMode::Fail,
            message: None,
        }])
    });
    let second = soft_reset(&bed).await;
    let (code, out, err) = run(&mut bed.cli_store(&[
        "decommissions",
        "cancel",
        &second.to_string(),
        "--reason",
        "tenant stays",
        "--as",
        "ops",
    ]));
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(&format!("decommission {second} is cancelled (was failed_manual_intervention at drain_node; audited as ops)")), "{out}");
    assert_eq!(
        bed.store.node(node).await.unwrap().status,
        NodeState::Active
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
}
