//! Retirement and the way back through `metalform plan` and `apply` as processes against the
//! simulator (issue 18, seed 004): `lifecycle: retired` with a reason sets the retired flag
//! and reason and `status --retired` lists the node; `lifecycle: active` again is the
//! reactivation — planned as such, audited, the flag cleared, the machine cleaned and
//! redeployed with the same node id — after which the plan is empty.
//!
//! Also the other ways out the issue names, end to end (docs/recovery.md): a node quarantined by
//! drift is reimaged or released from its manifest; a node removed from git is pruned only when
//! pruning is on, behind its guards; a reimage waits for its maintenance window unless the
//! window is open or the operator overrides it (audited). None of them edits the database.

use crate::drift_support;
use crate::onboard_support;

use metalform::lifecycle::{DecommissionMode, JobKind, JobState, NodeState};
use metalform::stages::decommission::DecommissionFacts;
use metalform::store::{Job, JobFilter};
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

/// A bed whose machines were each onboarded to active by the in-process executor (their
/// agents keep talking to the bed's endpoint, which outlives every CLI process).
async fn onboarded(setup: Setup) -> Bed {
    let bed = Bed::start(setup).await;
    let report = bed.executor().run(bed.onboard_all()).await;
    assert!(report.all_converged(), "{report:#?}");
    bed
}

/// Add fields to a node's entry in the NodeGroup (an operator's commit).
fn set_fields(bed: &Bed, hostname: &str, fields: &str) {
    bed.edit_fleet(
        "nodes/dc1.yaml",
        &format!("{{hostname: {hostname}, "),
        &format!("{{hostname: {hostname}, {fields}, "),
    );
}

fn system_id(bed: &Bed, hostname: &str) -> String {
    bed.sim("dc1").with_world(|w| {
        let m = w
            .machines
            .values()
            .find(|m| m.hostname == hostname)
            .unwrap();
        m.system_id.clone()
    })
}

async fn node_id(bed: &Bed, hostname: &str) -> uuid::Uuid {
    bed.store
        .find_node("dc1", hostname)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{hostname} is in the inventory"))
        .id
}

async fn decommissions(bed: &Bed) -> Vec<Job> {
    bed.store
        .list_jobs(JobKind::Decommission, &JobFilter::default())
        .await
        .unwrap()
}

fn power_state(bed: &Bed, hostname: &str) -> String {
    bed.sim("dc1").with_world(|w| {
        let m = w
            .machines
            .values()
            .find(|m| m.hostname == hostname)
            .unwrap();
        format!("{:?}", m.power_state)
    })
}

fn apply(bed: &Bed, port: u16, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["apply", "--auto-approve"];
    args.extend_from_slice(extra);
    bed.cli(&args, port).output().unwrap()
}

/// `metalform plan --detailed-exitcode`: its exit code and its whole output.
fn plan(bed: &Bed) -> (Option<i32>, String) {
    let out = bed
        .cli_plan(&["plan", "--detailed-exitcode"])
        .output()
        .unwrap();
    (out.status.code(), text(&out))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_quarantined_by_drift_is_reimaged_or_released_from_its_manifest() {
    let bed = onboarded(Setup::one_site(SiteSetup::generated("dc1", 73, 3, 0))).await;
    let port = free_port();
    let (reimaged, released) = (
        node_id(&bed, "gpu00001").await,
        node_id(&bed, "gpu00002").await,
    );
    // Both machines are released behind metalform's back; a drift pass quarantines their nodes.
    for host in ["gpu00001", "gpu00002"] {
        let (_, system_id) = drift_support::node_of(&bed, host).await;
        drift_support::out_of_band(&bed, &system_id, "release").await;
    }
    let env = drift_support::drift_env(&bed, bed.store.clone(), Default::default());
    drift_support::pass(&env, &bed).await;
    for id in [reimaged, released] {
        assert_eq!(
            bed.store.node(id).await.unwrap().status,
            NodeState::Quarantined
        );
    }

    // Quarantined, the manifest unchanged: the plan says how out, and needs an operator.
    let (code, shown) = plan(&bed);
    assert_eq!(code, Some(3), "{shown}");
    let held = line(&shown, "dc1/gpu00001");
    assert!(
        held.starts_with("! dc1/gpu00001 blocked the inventory holds it quarantined; ")
            && held.contains("bump reimage.generation to reimage it, set lifecycle: retired or decommissioned to release it"),
        "{shown}"
    );

    // The ways out, from the manifest: a reimage for one, a decommission for the other.
    set_fields(&bed, "gpu00001", "reimage: {generation: 1}");
    set_fields(&bed, "gpu00002", "lifecycle: decommissioned");
    let (code, shown) = plan(&bed);
    assert_eq!(code, Some(2), "{shown}");
    for (node, starts) in [
        (
            "dc1/gpu00001",
            "~/+ dc1/gpu00001 reimage reimage.generation 0 → 1; the node is quarantined, ",
        ),
        (
            "dc1/gpu00002",
            "- dc1/gpu00002 decommission lifecycle decommissioned; the node is quarantined, ",
        ),
    ] {
        assert!(line(&shown, node).starts_with(starts), "{shown}");
    }
    let out = apply(&bed, port, &["--allow-destructive"]);
    assert!(out.status.success(), "{}", text(&out));

    // Reimaged: the same node, active again with its new generation, deployed a second time.
    let node = bed.store.node(reimaged).await.unwrap();
    assert_eq!(node.status, NodeState::Active, "{node:#?}");
    assert_eq!(node.reimage_generation, Some(1));
    assert_eq!(
        node_id(&bed, "gpu00001").await,
        reimaged,
        "the same node id"
    );
    assert_eq!(machine_status(&bed, "gpu00001"), "Deployed");
    assert_eq!(bed.deploys("dc1")["gpu00001"], 2);
    // Released: the node is gone, its machine released and off, never deployed again.
    assert_eq!(
        bed.store.node(released).await.unwrap().status,
        NodeState::Deleted
    );
    assert_eq!(machine_status(&bed, "gpu00002"), "Ready");
    assert_eq!(power_state(&bed, "gpu00002"), "Off");
    assert_eq!(bed.deploys("dc1")["gpu00002"], 1);
    // The bystander was not touched.
    assert_eq!(bed.deploys("dc1")["gpu00003"], 1);
    let jobs = decommissions(&bed).await;
    let mut modes: Vec<(String, Option<DecommissionMode>, JobState)> = jobs
        .iter()
        .map(|j| (j.hostname.clone(), j.mode(), j.state))
        .collect();
    modes.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        modes,
        [
            (
                "gpu00001".into(),
                Some(DecommissionMode::Reimage),
                JobState::Completed
            ),
            (
                "gpu00002".into(),
                Some(DecommissionMode::FullDecommission),
                JobState::Completed
            ),
        ]
    );
    let (code, shown) = plan(&bed);
    assert_eq!(code, Some(0), "converged: {shown}");
}

/// The plan's line for `node`, its columns joined by single spaces.
fn line(shown: &str, node: &str) -> String {
    let at = format!(" {node} ");
    shown
        .lines()
        .find(|l| l.contains(&at))
        .unwrap_or_else(|| panic!("no line for {node} in\n{shown}"))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Drop a node's line from the NodeGroup (the node leaves git).
fn remove_node(bed: &Bed, hostname: &str) {
    let path = bed.fleet_dir.join("nodes/dc1.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains(&format!("{{hostname: {hostname}, ")))
        .collect();
    assert_eq!(
        kept.len() + 1,
        text.lines().count(),
        "{hostname} in\n{text}"
    );
    std::fs::write(&path, kept.join("\n") + "\n").unwrap();
}

/// Nothing changed: no decommission job, the store's serial and MAAS's writes as they were,
/// every listed node still active.
async fn unchanged(bed: &Bed, serial: i64, writes: usize, hosts: &[&str]) {
    assert!(decommissions(bed).await.is_empty());
    assert_eq!(
        bed.store.serial().await.unwrap(),
        serial,
        "the store changed"
    );
    assert_eq!(bed.maas_writes("dc1").len(), writes, "MAAS was written to");
    for host in hosts {
        let id = node_id(bed, host).await;
        assert_eq!(
            bed.store.node(id).await.unwrap().status,
            NodeState::Active,
            "{host}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_removed_from_git_is_pruned_only_when_pruning_is_on_and_the_guards_allow() {
    let bed = onboarded(
        Setup::one_site(SiteSetup::generated("dc1", 74, 4, 0))
            .profile("  release: {erase: secure}\n"),
    )
    .await;
    let port = free_port();
    let hosts = ["gpu00001", "gpu00002", "gpu00003", "gpu00004"];
    // An apply of the fleet as it is records each node's release policy (a prune uses it).
    let out = apply(&bed, port, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("No changes."),
        "{}",
        text(&out)
    );
    let pruned = node_id(&bed, "gpu00004").await;
    let full_fleet = std::fs::read_to_string(bed.fleet_dir.join("nodes/dc1.yaml")).unwrap();

    // Off by default: a node removed from git is left alone, by plan and by apply.
    remove_node(&bed, "gpu00004");
    let (code, shown) = plan(&bed);
    assert_eq!(code, Some(0), "{shown}");
    assert_eq!(
        line(&shown, "dc1/gpu00004"),
        "* dc1/gpu00004 noop in the inventory (active), but no longer in the manifests: left alone"
    );
    let out = apply(&bed, port, &["--allow-destructive"]);
    assert!(out.status.success(), "{}", text(&out));
    let serial = bed.store.serial().await.unwrap();
    let writes = bed.maas_writes("dc1").len();
    unchanged(&bed, serial, writes, &hosts).await;
    assert_eq!(machine_status(&bed, "gpu00004"), "Deployed");

    // On for the site: the plan prunes it, with the erase its profile recorded.
    bed.edit_fleet(
        "sites/dc1.yaml",
        "  defaultProfile: dc1-gpu\n",
        "  defaultProfile: dc1-gpu\n  reconcile: {prune: true}\n",
    );
    let (code, shown) = plan(&bed);
    assert_eq!(code, Some(2), "{shown}");
    assert_eq!(
        line(&shown, "dc1/gpu00004"),
        "-- dc1/gpu00004 prune removed from the manifests and pruning is on; the node is active: decommission it (release with erase secure as its profile dc1-gpu recorded, power off, remove the node record)"
    );

    // The destructive gate: without --allow-destructive nothing runs.
    let out = apply(&bed, port, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "destructive item(s): dc1/gpu00004 (removed from the manifests and pruning is on;"
        ),
        "{}",
        text(&out)
    );
    unchanged(&bed, serial, writes, &hosts).await;

    // More of the site than one pass may prune (10% of 4 nodes: 1): nothing is pruned.
    remove_node(&bed, "gpu00003");
    let limit = "pruning 2 of site dc1's 4 nodes in one pass is more than its reconcile.maxPrunePercent 10% allows (1): nothing is pruned; would prune: removed from the manifests";
    let (code, shown) = plan(&bed);
    assert_eq!(code, Some(3), "{shown}");
    for host in ["gpu00003", "gpu00004"] {
        assert!(
            shown.contains(&format!("dc1/{host}  blocked  {limit}")),
            "{shown}"
        );
    }
    let out = apply(&bed, port, &["--allow-destructive"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "error: the fleet is not converged: 2 node(s) need an operator: dc1/gpu00003 ({limit}"
        )),
        "{}",
        text(&out)
    );
    unchanged(&bed, serial, writes, &hosts).await;

    // An empty source — the site's nodes gone from git at once — is a bad read, not a decision,
    // even where the share would allow it.
    std::fs::remove_file(bed.fleet_dir.join("nodes/dc1.yaml")).unwrap();
    bed.edit_fleet(
        "sites/dc1.yaml",
        "{prune: true}",
        "{prune: true, maxPrunePercent: 100}",
    );
    let (code, shown) = plan(&bed);
    assert_eq!(code, Some(3), "{shown}");
    let guard =
        "the mass-destruction guard holds for this site; would prune: removed from the manifests";
    for host in hosts {
        assert!(
            shown.contains(&format!("dc1/{host}  blocked  {guard}")),
            "{shown}"
        );
    }
    let out = apply(&bed, port, &["--allow-destructive"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("error: the fleet is not converged: 4 node(s) need an operator: dc1/gpu00001 (the mass-destruction guard holds"),
        "{}",
        text(&out)
    );
    unchanged(&bed, serial, writes, &hosts).await;

    // One node removed, within the share: pruned — a full decommission with the secure erase
    // recorded for it.
    std::fs::write(bed.fleet_dir.join("nodes/dc1.yaml"), &full_fleet).unwrap();
    remove_node(&bed, "gpu00004");
    bed.edit_fleet("sites/dc1.yaml", ", maxPrunePercent: 100}", "}");
    let out = apply(&bed, port, &["--allow-destructive"]);
    assert!(out.status.success(), "{}", text(&out));
    let jobs = decommissions(&bed).await;
    assert_eq!(jobs.len(), 1, "{jobs:#?}");
    assert_eq!(jobs[0].hostname, "gpu00004");
    assert_eq!(jobs[0].mode(), Some(DecommissionMode::FullDecommission));
    assert_eq!(jobs[0].state, JobState::Completed, "{:#?}", jobs[0]);
    let facts = DecommissionFacts::from_details(&jobs[0].stage_details);
    let erases: Vec<&str> = facts
        .decommission
        .releases
        .iter()
        .map(|r| r.erase.as_str())
        .collect();
    assert_eq!(erases, ["secure"]);
    assert_eq!(
        bed.store.node(pruned).await.unwrap().status,
        NodeState::Deleted
    );
    assert_eq!(machine_status(&bed, "gpu00004"), "Ready");
    assert_eq!(power_state(&bed, "gpu00004"), "Off");
    for host in hosts {
        let system_id = system_id(&bed, host);
        let c = drift_support::counters(&bed, &system_id);
        let (releases, erases) = (c.release, c.erase);
        let expected = if host == "gpu00004" { (1, 1) } else { (0, 0) };
        assert_eq!((releases, erases), expected, "{host}");
    }
    let (code, shown) = plan(&bed);
    assert_eq!(code, Some(0), "converged: {shown}");

    // A partial read of MAAS — none of the machines metalform's jobs are bound to listed — holds
    // the next prune too.
    for host in hosts {
        let system_id = system_id(&bed, host);
        drift_support::out_of_band(&bed, &system_id, "delete").await;
    }
    remove_node(&bed, "gpu00003");
    let (code, shown) = plan(&bed);
    assert_eq!(code, Some(3), "{shown}");
    assert!(
        line(&shown, "dc1/gpu00003").starts_with(&format!("! dc1/gpu00003 blocked {guard}")),
        "{shown}"
    );
    assert!(
        shown.contains("MAAS listed none of the 4 machine(s) metalform's jobs are bound to in site dc1: treated as a partial read"),
        "{shown}"
    );
    let serial = bed.store.serial().await.unwrap();
    let writes = bed.maas_writes("dc1").len();
    let out = apply(&bed, port, &["--allow-destructive"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(decommissions(&bed).await.len(), 1, "only the earlier prune");
    assert_eq!(
        bed.store.serial().await.unwrap(),
        serial,
        "the store changed"
    );
    assert_eq!(bed.maas_writes("dc1").len(), writes, "MAAS was written to");
    let id = node_id(&bed, "gpu00003").await;
    assert_eq!(bed.store.node(id).await.unwrap().status, NodeState::Active);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reimage_waits_for_its_maintenance_window_unless_it_is_open_or_overridden() {
    use chrono::Timelike;
    // Windows placed against the wall clock with hours of margin: one that opened at the top
    // of this hour for two hours (open now), one that opens twelve hours from this hour (closed).
    let hour = chrono::Utc::now().hour();
    let open = format!("\"0 {hour} * * *\", duration: 2h");
    let closed = format!("\"0 {} * * *\", duration: 1h", (hour + 12) % 24);
    let bed = onboarded(
        Setup::one_site(SiteSetup::generated("dc1", 75, 2, 0)).site(&format!(
            "  maintenanceWindows:\n    - {{name: night, schedule: {closed}, timeZone: UTC}}\n"
        )),
    )
    .await;
    let port = free_port();
    let (first, second) = (
        node_id(&bed, "gpu00001").await,
        node_id(&bed, "gpu00002").await,
    );
    set_fields(&bed, "gpu00001", "reimage: {generation: 1}");

    // Closed: the plan says what waits for which window; apply leaves it.
    let (code, shown) = plan(&bed);
    assert_eq!(code, Some(0), "{shown}");
    let waits = line(&shown, "dc1/gpu00001");
    assert!(
        waits.starts_with("@ dc1/gpu00001 blocked waits for window night (opens in 1")
            && waits.contains("); would reimage: reimage.generation 0 → 1; the node is active"),
        "{shown}"
    );
    let serial = bed.store.serial().await.unwrap();
    let out = apply(&bed, port, &["--allow-destructive"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Nothing to apply: 1 item(s) blocked"),
        "{}",
        text(&out)
    );
    assert!(decommissions(&bed).await.is_empty());
    assert_eq!(bed.deploys("dc1")["gpu00001"], 1);
    assert_eq!(
        bed.store.node(first).await.unwrap().reimage_generation,
        Some(0)
    );

    // Overridden: only with a reason, which the audit log keeps.
    let out = apply(&bed, port, &["--allow-destructive", "--ignore-windows"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "error: the plan overrides the maintenance window of dc1/gpu00001 (night): say why with --reason"
        ),
        "{}",
        text(&out)
    );
    assert!(decommissions(&bed).await.is_empty());
    assert_eq!(bed.store.serial().await.unwrap(), serial);
    let out = apply(
        &bed,
        port,
        &[
            "--allow-destructive",
            "--ignore-windows",
            "--reason",
            "kernel CVE (CHG-4411)",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(bed.deploys("dc1")["gpu00001"], 2);
    let node = bed.store.node(first).await.unwrap();
    assert_eq!(
        (node.status, node.reimage_generation),
        (NodeState::Active, Some(1))
    );
    let overrides =
        drift_support::audits(&bed.store, first, "plan.maintenance_window_ignored").await;
    assert_eq!(overrides.len(), 1, "{overrides:#?}");
    assert_eq!(
        overrides[0].reason.as_deref(),
        Some("kernel CVE (CHG-4411)")
    );
    assert_eq!(overrides[0].details["window"], "night");
    assert_eq!(overrides[0].details["action"], "reimage");

    // Open: a reimage runs without an override. (Another node: the one just reimaged reaches
    // the agent channel of the apply that deployed it, which is gone with that process.)
    set_fields(&bed, "gpu00002", "reimage: {generation: 1}");
    bed.edit_fleet("sites/dc1.yaml", &closed, &open);
    let (code, shown) = plan(&bed);
    assert_eq!(code, Some(2), "{shown}");
    assert!(
        line(&shown, "dc1/gpu00002")
            .starts_with("~/+ dc1/gpu00002 reimage reimage.generation 0 → 1"),
        "{shown}"
    );
    let out = apply(&bed, port, &["--allow-destructive"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(bed.deploys("dc1")["gpu00002"], 2);
    assert_eq!(bed.deploys("dc1")["gpu00001"], 2);
    assert_eq!(
        bed.store.node(second).await.unwrap().reimage_generation,
        Some(1)
    );
    assert!(
        drift_support::audits(&bed.store, second, "plan.maintenance_window_ignored")
            .await
            .is_empty(),
        "no override this time"
    );
}
