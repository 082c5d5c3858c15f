//! Retirement and the way back through `metalform plan` and `apply` as processes against the
//! simulator (issue 18, seed 004): `lifecycle: retired` with a reason sets the retired flag
//! and reason and `status --retired` lists the node; `lifecycle: active` again is the
//! reactivation — planned as such, audited, the flag cleared, the machine cleaned and
//! redeployed with the same node id — after which the plan is empty.

mod onboard_support;

use metalform::lifecycle::{DecommissionMode, JobKind, JobState, NodeState};
use metalform::store::JobFilter;
use onboard_support::{Bed, Setup, SiteSetup, free_port};

fn text(out: &std::process::Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn machine_status(bed: &Bed, hostname: &str) -> String {
    bed.sim("dc1").with_world(|w| {
        w.machines
            .values()
            .find(|m| m.hostname == hostname)
            .unwrap()
            .status
            .name()
            .to_owned()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retired_node_is_listed_then_returns_to_service_from_its_manifest() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 71, 2, 0))).await;
    assert!(bed.executor().run(bed.onboard_all()).await.all_converged());
    let port = free_port();
    let id = bed
        .store
        .find_node("dc1", "gpu00001")
        .await
        .unwrap()
        .unwrap()
        .id;

    bed.edit_fleet(
        "nodes/dc1.yaml",
        "{hostname: gpu00001, ",
        "{hostname: gpu00001, lifecycle: retired, retiredReason: \"PSU failure (HW-3001)\", ",
    );
    let out = bed
        .cli(&["apply", "--auto-approve", "--allow-destructive"], port)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let node = bed.store.node(id).await.unwrap();
    assert_eq!(node.status, NodeState::Retired);
    assert!(node.retired);
    assert_eq!(
        node.retired_reason.as_deref(),
        Some("PSU failure (HW-3001)")
    );
    assert_eq!(machine_status(&bed, "gpu00001"), "Ready");

    let listed = bed
        .cli_store(&["status", "--retired", "--format", "json"])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", text(&listed));
    let doc: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let hosts: Vec<&str> = doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["hostname"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["gpu00001"], "{doc:#}");

    // Back to service: the plan says reactivate, and apply does it.
    bed.edit_fleet(
        "nodes/dc1.yaml",
        "lifecycle: retired, retiredReason: \"PSU failure (HW-3001)\", ",
        "",
    );
    let planned = bed.cli_plan(&["plan"]).output().unwrap();
    let shown = text(&planned);
    assert!(
        shown.contains("dc1/gpu00001  reactivate  lifecycle active, but the node is retired and flagged retired (\"PSU failure (HW-3001)\")"),
        "{shown}"
    );
    let out = bed
        .cli(&["apply", "--auto-approve", "--allow-destructive"], port)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let node = bed.store.node(id).await.unwrap();
    assert_eq!(node.status, NodeState::Active, "{node:#?}");
    assert!(!node.retired);
    assert_eq!(node.retired_reason, None);
    assert_eq!(
        bed.store
            .find_node("dc1", "gpu00001")
            .await
            .unwrap()
            .unwrap()
            .id,
        id,
        "reactivation keeps the node id"
    );
    assert_eq!(machine_status(&bed, "gpu00001"), "Deployed");
    assert_eq!(bed.deploys("dc1")["gpu00001"], 2);
    let jobs = bed
        .store
        .list_jobs(JobKind::Decommission, &JobFilter::default())
        .await
        .unwrap();
    let modes: Vec<(Option<DecommissionMode>, JobState)> =
        jobs.iter().map(|j| (j.mode(), j.state)).collect();
    assert!(
        modes.contains(&(Some(DecommissionMode::Reactivate), JobState::Completed)),
        "{modes:?}"
    );
    let audit: Vec<String> = bed
        .store
        .audit_log("node", &id.to_string())
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.action)
        .collect();
    assert!(
        audit.iter().any(|a| a.contains("retired")),
        "the flag's clearing is audited: {audit:?}"
    );
    let empty = bed
        .cli_plan(&["plan", "--detailed-exitcode"])
        .output()
        .unwrap();
    assert_eq!(empty.status.code(), Some(0), "{}", text(&empty));
}
