//! The daemon end to end (issue 6): a fleet in a real git repository, a simulated MAAS site.
//! Commits add nodes and they converge (each machine deployed once); a commit that empties the
//! fleet is rejected and nothing acts on it; events reach the JSON-lines sink; /healthz and
//! /metrics report it; every route of openapi.yaml is served.

use crate::daemon_support;
use crate::onboard_support;

use std::time::Duration;

use daemon_support::{ADMIN_TOKEN, DaemonBed, call, commit, one_site};
use metalform::daemon::{DaemonOptions, start};
use onboard_support::{Setup, hostname_of, write_fleet};
use reqwest::Method;

fn setup(declared: Vec<usize>) -> Setup {
    one_site(61, declared)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_add_nodes_and_they_converge_and_an_empty_commit_is_not_acted_on() {
    let d = DaemonBed::start(setup(vec![0, 1]), "").await;
    // The agent channel answers plain HTTP here so the route probe below can reach it.
    d.set_agent("listen = \"127.0.0.1:0\"\nplain_http = true");
    let sim_config = setup(vec![]).sites[0].config.clone();
    let host = |i| hostname_of(&sim_config, i);
    let daemon = start(d.config(), DaemonOptions::default()).await.unwrap();
    let base = format!("http://{}", daemon.local_addr());
    let agent_base = format!("http://{}", daemon.agent_addr());

    let first: Vec<String> = (0..2).map(host).collect();
    let all: Vec<String> = (0..4).map(host).collect();
    d.converged_hosts("dc1", &first, Duration::from_secs(90))
        .await;
    let revision_one = daemon.revision().unwrap().revision.clone();

    // A commit adds two nodes: the daemon picks it up at its next poll and onboards them.
    write_fleet(&d.bed.fleet_dir, &setup(vec![0, 1, 2, 3]), &d.bed.sims);
    commit(&d.bed.fleet_dir, "fleet: two more nodes");
    d.converged_hosts("dc1", &all, Duration::from_secs(90))
        .await;
    let revision_two = daemon.revision().unwrap().revision.clone();
    assert_ne!(revision_one, revision_two);
    let deploys = d.bed.deploys("dc1");
    for name in &all {
        assert_eq!(
            deploys.get(name),
            Some(&1),
            "{name} deployed once: {deploys:?}"
        );
    }

    // A commit that deletes every node is rejected: the revision stays, nothing changes.
    std::fs::remove_file(d.bed.fleet_dir.join("nodes/dc1.yaml")).unwrap();
    commit(&d.bed.fleet_dir, "oops: nodes deleted");
    let mut rejected = false;
    for _ in 0..50 {
        let (status, health) = call(Method::GET, format!("{base}/healthz"), None, None).await;
        assert_eq!(status, 200, "{health}");
        if health["source_problem"]
            .as_str()
            .is_some_and(|p| p.contains("no nodes"))
        {
            assert_eq!(health["revision"], revision_two.as_str());
            rejected = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(rejected, "the empty commit was not reported");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, sites) = call(
        Method::GET,
        format!("{base}/api/v1/admin/maas-sites"),
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(sites["revision"], revision_two.as_str());
    assert_eq!(sites["sites"][0]["nodes_in_manifests"], 4);
    assert_eq!(sites["sites"][0]["inventory"]["active"], 4, "{sites}");
    assert_eq!(d.bed.deploys("dc1").values().sum::<u64>(), 4);

    // Metrics: reconciles, plan items, MAAS requests by operation, source reads.
    let (status, metrics) = call(Method::GET, format!("{base}/metrics"), None, None).await;
    assert_eq!(status, 200);
    let metrics = metrics.as_str().unwrap().to_owned();
    for needle in [
        "metalform_reconcile_duration_seconds_count{site=\"dc1\"}",
        "metalform_plan_items{site=\"dc1\",kind=\"noop\"} 4",
        "metalform_maas_requests_total{operation=\"deploy\",status=\"200\"} 4",
        "metalform_source_reads_total{outcome=\"rejected\"} 1",
        "metalform_stage_outcomes_total{stage=\"deploy_via_maas\",status=\"ok\"} 4",
        "metalform_node_outcomes_total{outcome=\"converged\",failure_class=\"\"} 4",
        "metalform_jobs{kind=\"onboarding\",site=\"dc1\",state=\"completed\"} 4",
    ] {
        assert!(metrics.contains(needle), "no `{needle}` in\n{metrics}");
    }

    // Every documented route is served (not a 404/405 from the router), each on its listener.
    let docs = saphyr::Yaml::load_from_str(metalform::api::OPENAPI_YAML).unwrap();
    use saphyr::LoadableYamlNode;
    let paths = docs[0]
        .as_mapping_get("paths")
        .unwrap()
        .as_mapping()
        .unwrap();
    let mut probed = 0;
    for (path, item) in paths {
        let concrete = path
            .as_str()
            .unwrap()
            .replace("{id}", "dc1")
            .replace("{node_id}", &uuid::Uuid::nil().to_string())
            .replace("{aid}", "x:y");
        for (method, _) in item.as_mapping().unwrap() {
            let method =
                Method::from_bytes(method.as_str().unwrap().to_uppercase().as_bytes()).unwrap();
            if method == Method::POST && concrete.ends_with("/reconciliation/run") {
                continue; // exercised below
            }
            let listener = if concrete.starts_with("/agent/") {
                &agent_base
            } else {
                &base
            };
            let (status, body) = call(
                method.clone(),
                format!("{listener}{concrete}"),
                Some(ADMIN_TOKEN),
                None,
            )
            .await;
            assert!(
                status != 405 && !(status == 404 && body["message"] == "no such route"),
                "{method} {concrete}: {status} {body}"
            );
            probed += 1;
        }
    }
    assert!(probed > 20);

    // Domain events reached the sink, in order, once each.
    let (status, run) = call(
        Method::POST,
        format!("{base}/api/v1/admin/reconciliation/run"),
        Some(ADMIN_TOKEN),
        Some(serde_json::json!({"site": "dc1", "wait": true, "reason": "check after the rejected commit"})),
    )
    .await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["results"][0]["plan"]["noop"], 4, "{run}");
    assert_eq!(run["results"][0]["started"], 0, "{run}");
    daemon.shutdown().await;
    let events = std::fs::read_to_string(&d.events_path).unwrap();
    let lines: Vec<serde_json::Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let completed = lines
        .iter()
        .filter(|e| e["type"] == "node.onboarding.completed")
        .count();
    let started = lines
        .iter()
        .filter(|e| e["type"] == "node.onboarding.started")
        .count();
    assert_eq!((started, completed), (4, 4), "{events}");
    let ids: Vec<i64> = lines.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "in outbox order: {ids:?}"
    );
    assert!(d.bed.store.pending_events(10).await.unwrap().is_empty());
}

/// A bed of `machines` Ready machines on dc1 under `maxParallel`, and their hostnames.
async fn limited_bed(seed: u64, machines: usize, max_parallel: u32) -> (DaemonBed, Vec<String>) {
    let site = onboard_support::SiteSetup::generated("dc1", seed, machines, 0);
    let all = (0..machines)
        .map(|i| hostname_of(&site.config, i))
        .collect();
    let mut setup = Setup::one_site(site).profile("  timeouts: {enrollment: 30s}\n");
    setup.max_parallel = max_parallel;
    (DaemonBed::start(setup, "").await, all)
}

/// One slot of dc1's profile, whose `maxParallel` is 1, for `hostname`.
fn slot_of(hostname: &str) -> metalform::store::SlotRequest<'_> {
    metalform::store::SlotRequest {
        group: "dc1/dc1-gpu",
        limit: 1,
        site: "dc1",
        hostname,
    }
}

/// The hostname of a node whose machine is deploying (`only` that one, if given), once there
/// is one.
async fn wait_for_a_deploy(d: &DaemonBed, only: Option<&str>) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let jobs = d.bed.jobs().await;
        if let Some(job) = jobs
            .iter()
            .find(|j| j.stage == "wait_for_deployed" && only.is_none_or(|h| h == j.hostname))
        {
            return job.hostname.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no machine deploying: {jobs:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The daemon counts `maxParallel` as `apply` does: the machines MAAS boots at once, while as
/// many nodes again prepare ahead of the slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_boots_at_most_max_parallel_machines_while_more_nodes_prepare() {
    let (d, all) = limited_bed(62, 6, 2).await;
    let daemon = start(d.config(), DaemonOptions::default()).await.unwrap();
    d.converged_hosts("dc1", &all, Duration::from_secs(120))
        .await;
    daemon.shutdown().await;

    let most_booting = d.bed.sim("dc1").with_world(|w| {
        let mut count = onboard_support::BootingAtOnce::default();
        for event in &w.events {
            count.see(&event.kind, &event.description);
        }
        count.most
    });
    assert_eq!(
        most_booting, 2,
        "concurrency.maxParallel bounds the machines booting"
    );
    // Jobs running at once, from their journal: a start before an end at the same instant.
    let mut marks: Vec<(chrono::DateTime<chrono::Utc>, i32)> = Vec::new();
    for job in d.bed.jobs().await {
        marks.push((job.started_at.expect("started"), 1));
        marks.push((job.completed_at.expect("completed"), -1));
    }
    marks.sort();
    let (mut running, mut most_running) = (0, 0);
    for (_, step) in marks {
        running += step;
        most_running = most_running.max(running);
    }
    assert!(
        most_running > 2,
        "nodes prepare ahead of the slots: at most {most_running} onboardings ran at once"
    );
    assert!(
        most_running <= 4,
        "at most twice maxParallel onboardings run at once: {most_running}"
    );
    assert_eq!(d.bed.deploys("dc1").values().sum::<u64>(), 6);
}

/// A replica that died mid-deploy leaves the node's slot kept for it. The replica that resumes
/// the node runs it beside the new onboardings it admits: had it queued the node behind them,
/// they would wait for that very slot, and the node for them, for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_resumed_mid_deploy_takes_its_kept_slot_beside_new_onboardings() {
    use metalform::store::{SlotOutcome, SlotPick};
    let (d, all) = limited_bed(63, 3, 1).await;

    // The dead replica: it took the profile's one slot for the last node, deployed its
    // machine and was gone (its node lease and its slot lapse, the job stays running).
    let last = all[2].clone();
    let dead = "daemon@gone:1:dead";
    let slot = d
        .bed
        .store
        .acquire_slot(
            &slot_of(&last),
            SlotPick::Free,
            dead,
            chrono::Duration::seconds(3),
        )
        .await
        .unwrap();
    assert!(matches!(slot, SlotOutcome::Taken(_)), "{slot:?}");
    let executor = d.bed.executor();
    let item = d.bed.onboard("dc1", &last);
    let run = tokio::spawn(async move { executor.run(vec![item]).await });
    wait_for_a_deploy(&d, Some(&last)).await;
    run.abort();

    let daemon = start(d.config(), DaemonOptions::default()).await.unwrap();
    d.converged_hosts("dc1", &all, Duration::from_secs(90))
        .await;
    daemon.shutdown().await;
    let deploys = d.bed.deploys("dc1");
    for name in &all {
        assert_eq!(deploys.get(name), Some(&1), "{name}: {deploys:?}");
    }
}

/// A daemon stopped while a machine deploys gives that node's slot back, and the store keeps it
/// for the node while its job runs: no other node (of any replica) boots in its place while
/// MAAS still deploys the machine, and the replica resuming the node takes it back at once.
/// (A daemon restarted mid-deploy continuing the node is `daemon_sigterm`'s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_daemon_keeps_a_deploying_nodes_slot_for_it() {
    use metalform::store::{SlotOutcome, SlotPick};
    let (d, all) = limited_bed(64, 2, 1).await;
    let daemon = start(d.config(), DaemonOptions::default()).await.unwrap();
    let deploying = wait_for_a_deploy(&d, None).await;
    daemon.shutdown().await;
    let job = d.bed.job_of("dc1", &deploying).await;
    assert_eq!(job.state.to_string(), "running", "{job:?}");

    // The other node gets no slot; the deploying one gets its own back.
    let other = all.iter().find(|h| **h != deploying).unwrap();
    let ttl = chrono::Duration::seconds(3);
    let taken = d
        .bed
        .store
        .acquire_slot(&slot_of(other), SlotPick::Free, "daemon@elsewhere:1:x", ttl)
        .await
        .unwrap();
    assert!(
        !matches!(taken, SlotOutcome::Taken(_)),
        "{other} took the slot of the machine still deploying: {taken:?}"
    );
    let back = d
        .bed
        .store
        .acquire_slot(&slot_of(&deploying), SlotPick::Left, "daemon@next:1:x", ttl)
        .await
        .unwrap();
    let SlotOutcome::Taken(lease) = back else {
        panic!("{deploying} did not get its slot back: {back:?}");
    };
    d.bed.store.release_lease(&lease).await.unwrap();
}
