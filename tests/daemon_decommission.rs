//! The daemon end to end with declarative decommissions (issue 6 "Show"): on a real git
//! repository and the simulator, a commit that bumps a node's `reimage.generation` reimages it
//! with the same node id, and a commit that retires a node leaves it retired with its machine
//! released and powered off — each with exactly one release per machine.

use crate::daemon_support;
use crate::onboard_support;

use std::time::{Duration, Instant};

use daemon_support::{DaemonBed, commit};
use metalform::daemon::{DaemonOptions, start};
use metalform::lifecycle::NodeState;
use metalform::store::Node;
use onboard_support::{Bed, Setup, SiteSetup, hostname_of};

fn setup() -> Setup {
    let site = SiteSetup::generated("dc1", 67, 2, 0);
    Setup::one_site(site).profile("  timeouts: {enrollment: 30s}\n")
}

/// Wait until `check` holds for the node, or fail with what it is.
async fn wait_for(bed: &Bed, hostname: &str, what: &str, check: impl Fn(&Node) -> bool) -> Node {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let node = bed.store.find_node("dc1", hostname).await.unwrap();
        if let Some(node) = node.filter(|n| check(n)) {
            return node;
        }
        assert!(
            Instant::now() < deadline,
            "dc1/{hostname} never got {what}: {:?}",
            bed.store.find_node("dc1", hostname).await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// (MAAS status, power state, releases) of a machine in the simulator.
fn machine(bed: &Bed, hostname: &str) -> (String, String, u64) {
    let sim = bed.sim("dc1");
    let (system_id, status, power) = sim.with_world(|w| {
        let m = w
            .machines
            .values()
            .find(|m| m.hostname == hostname)
            .unwrap();
        (
            m.system_id.clone(),
            m.status.name().to_owned(),
            format!("{:?}", m.power_state),
        )
    });
    let releases = sim.counters().get(&system_id).map_or(0, |c| c.release);
    (status, power, releases)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_reimage_a_node_with_its_id_and_retire_another() {
    let d = DaemonBed::start(setup(), "[self_heal]\nallow_destructive = true\n").await;
    let config = setup().sites[0].config.clone();
    let (first, second) = (hostname_of(&config, 0), hostname_of(&config, 1));
    let daemon = start(d.config(), DaemonOptions::default()).await.unwrap();
    d.converged(
        &[("dc1", first.as_str()), ("dc1", second.as_str())],
        Duration::from_secs(90),
    )
    .await;
    let before = d.bed.store.find_node("dc1", &first).await.unwrap().unwrap();
    assert_eq!(before.reimage_generation, Some(0));
    assert_eq!(d.bed.deploys("dc1")[&first], 1);

    // A commit bumps the generation: the daemon reimages the node and keeps its identity.
    d.bed.edit_fleet(
        "nodes/dc1.yaml",
        &format!("{{hostname: {first}, "),
        &format!("{{hostname: {first}, reimage: {{generation: 1}}, "),
    );
    commit(&d.bed.fleet_dir, "fleet: reimage the first node");
    let after = wait_for(&d.bed, &first, "reimaged and active", |n| {
        n.reimage_generation == Some(1) && n.status == NodeState::Active
    })
    .await;
    assert_eq!(after.id, before.id, "a reimage keeps the node id");
    assert_eq!(d.bed.deploys("dc1")[&first], 2);
    assert_eq!(machine(&d.bed, &first), ("Deployed".into(), "On".into(), 1));

    // A commit retires the other node: retired, its machine released once and powered off.
    d.bed.edit_fleet(
        "nodes/dc1.yaml",
        &format!("{{hostname: {second}, "),
        &format!("{{hostname: {second}, lifecycle: retired, retiredReason: \"PSU failure\", "),
    );
    commit(&d.bed.fleet_dir, "fleet: retire the second node");
    let retired = wait_for(&d.bed, &second, "retired", |n| {
        n.status == NodeState::Retired
    })
    .await;
    assert_eq!(d.bed.deploys("dc1")[&second], 1);
    assert_eq!(machine(&d.bed, &second), ("Ready".into(), "Off".into(), 1));

    // Settled: a few more reconciles change nothing.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let still = d
        .bed
        .store
        .find_node("dc1", &second)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((still.id, still.status), (retired.id, NodeState::Retired));
    assert_eq!(machine(&d.bed, &first).2, 1);
    assert_eq!(machine(&d.bed, &second).2, 1);
    assert_eq!(d.bed.deploys("dc1")[&first], 2);
    daemon.shutdown().await;
}
