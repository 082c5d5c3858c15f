//! Injected faults and scenarios (DESIGN.md §5; docs/simulator.md "Faults"): per-operation
//! errors with and without Retry-After, latency, hangs, run-time replacement, determinism,
//! and the machine scenarios a reconciler must survive.

use crate::sim_support;

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;
use sim_support::{Sim, fleet};

fn with_faults(n: usize, faults: &str) -> metalform::sim::SimConfig {
    let mut config = fleet(n);
    config.faults = faults.to_string();
    config
}

#[tokio::test]
async fn injected_errors_take_no_effect_and_carry_retry_after() {
    let sim = Sim::start(with_faults(1, "machine.deploy:status=503,retry_after=7")).await;
    let sid = sim.system_ids().await.remove(0);
    let a = sim
        .op(&format!("machines/{sid}/"), "deploy", &[])
        .await
        .expect(503);
    assert_eq!(a.header("retry-after"), Some("7"));
    assert!(a.content_type().starts_with("text/plain"));
    assert_eq!(sim.status_name(&sid).await, "Ready");
    assert_eq!(sim.counters(&sid).await["deploy"], 0);

    sim.get("machines/", &[]).await.expect(200); // other actions are not affected
    sim.control(Method::PUT, "/sim/v1/faults", None)
        .await
        .expect(200);
    sim.op(&format!("machines/{sid}/"), "deploy", &[])
        .await
        .expect(200);
    assert_eq!(
        sim.counters(&sid).await["deploy"],
        1,
        "replaced with an empty spec"
    );

    let ops = sim
        .control(Method::GET, "/sim/v1/ops", None)
        .await
        .expect(200)
        .json();
    let failed = ops
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["status"] == 503)
        .unwrap();
    assert_eq!(failed["action"], "machine.deploy");
    assert_eq!(failed["op"], "deploy");
    assert_eq!(failed["system_id"], sid.as_str());
    assert_eq!(failed["fault"], "machine.deploy");
}

#[tokio::test]
async fn conflicts_with_and_without_retry_after_and_count() {
    let sim = Sim::start(with_faults(
        1,
        "release:status=409,retry_after=5,count=1; abort:status=409",
    ))
    .await;
    let sid = sim.system_ids().await.remove(0);
    sim.op(&format!("machines/{sid}/"), "deploy", &[])
        .await
        .expect(200);
    let a = sim
        .op(&format!("machines/{sid}/"), "abort", &[])
        .await
        .expect(409);
    assert_eq!(
        a.header("retry-after"),
        None,
        "a 409 without Retry-After is a state conflict"
    );
    // The handler's own NodeStateViolation text (nodes.py abort), as text/plain.
    assert_eq!(
        a.text,
        format!("Cannot abort in current state: node {sid} is in state Deploying.")
    );
    assert!(a.content_type().starts_with("text/plain"));
    let r = sim
        .op(&format!("machines/{sid}/"), "release", &[])
        .await
        .expect(409);
    // HttpResponseConflict (utils/views.py): Retry-After 5 and MAAS's 409.html.
    assert_eq!(r.header("retry-after"), Some("5"));
    assert!(r.content_type().starts_with("text/html"));
    assert!(
        r.text.contains("<title>Error: Conflict Error</title>"),
        "{}",
        r.text
    );
    sim.op(&format!("machines/{sid}/"), "release", &[])
        .await
        .expect(200);
    assert_eq!(sim.counters(&sid).await["release"], 1);
}

#[tokio::test]
async fn latency_and_hangs() {
    let sim = Sim::start(with_faults(
        1,
        "machines.read:latency=300ms; machine.read:hang",
    ))
    .await;
    let started = Instant::now();
    sim.get("machines/", &[]).await.expect(200);
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "latency applied"
    );
    let sid = sim
        .handle
        .with_world(|w| w.machines.values().next().unwrap().system_id.clone());
    let quick = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let hung = quick
        .get(sim.api(&format!("machines/{sid}/")))
        .header("Authorization", sim.auth_header_with(&sim.key))
        .send()
        .await;
    assert!(hung.unwrap_err().is_timeout());
}

#[tokio::test]
async fn fault_draws_are_deterministic_for_a_seed() {
    async fn pattern(seed: u64) -> Vec<u16> {
        let mut config = with_faults(12, "deploy:status=503,rate=0.5");
        config.seed = seed;
        let sim = Sim::start(config).await;
        let mut out = Vec::new();
        for sid in sim.system_ids().await {
            out.push(
                sim.op(&format!("machines/{sid}/"), "deploy", &[])
                    .await
                    .status,
            );
        }
        out
    }
    let a = pattern(5).await;
    assert_eq!(a, pattern(5).await);
    assert!(a.contains(&503) && a.contains(&200), "{a:?}");
    assert_ne!(a, pattern(6).await);
}

#[tokio::test]
async fn fault_spec_errors_are_reported() {
    let sim = Sim::start(fleet(1)).await;
    let a = sim
        .control(Method::PUT, "/sim/v1/faults", None)
        .await
        .expect(200);
    assert_eq!(a.json(), json!({"faults": ""}));
    let bad = sim
        .http
        .put(sim.url("/sim/v1/faults"))
        .body("deploy:status=200")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    assert_eq!(
        bad.json::<serde_json::Value>().await.unwrap()["error"],
        "invalid fault spec item `deploy:status=200`: status `200` is not an HTTP error code"
    );
    let mut config = fleet(1);
    config.faults = "nonsense".to_string();
    let err = metalform::sim::start(config).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid fault spec item `nonsense`"),
        "{err}"
    );
}

#[tokio::test]
async fn datasource_failure_hits_the_first_deploy_only() {
    let sim = Sim::start(with_faults(2, "datasource_failure:machines=gpu00001")).await;
    let sids = sim.system_ids().await;
    for sid in &sids {
        sim.op(&format!("machines/{sid}/"), "deploy", &[])
            .await
            .expect(200);
    }
    sim.advance(601);
    let m = sim.machine(&sids[0]).await;
    assert_eq!(m["status_name"], "Failed deployment");
    assert_eq!(
        m["status_message"],
        "Marking node failed - Installation failed (refer to the installation log for more information)."
    );
    assert_eq!(sim.status_name(&sids[1]).await, "Deployed");
    let events = sim
        .get(
            "events/",
            &[("op", "query"), ("id", &sids[0]), ("level", "ERROR")],
        )
        .await
        .json();
    let texts: Vec<String> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| format!("{}: {}", e["type"], e["description"]))
        .collect();
    // As MAAS logs cloud-init's failed stages (metadataserver/api.py
    // add_event_to_node_event_log: "'<origin>' <description>"), then mark_failed. Newest first.
    assert_eq!(
        texts,
        [
            "\"Marking node failed\": \"Installation failed (refer to the installation log for more information).\"",
            "\"Node installation failure\": \"'cloudinit' searching for network datasources\"",
            "\"Node installation failure\": \"'cloudinit' searching for network data from DataSourceMAAS\"",
        ]
    );
    // Recover: release, deploy again — the second deployment succeeds.
    sim.op(&format!("machines/{}/", sids[0]), "release", &[])
        .await
        .expect(200);
    sim.advance(11);
    sim.op(&format!("machines/{}/", sids[0]), "deploy", &[])
        .await
        .expect(200);
    sim.advance(601);
    assert_eq!(sim.status_name(&sids[0]).await, "Deployed");
}

#[tokio::test]
async fn commissioning_testing_and_erase_failures() {
    let mut config = with_faults(
        3,
        "commissioning_fails:machines=gpu00001; testing_fails:machines=gpu00002; erase_fails:machines=gpu00003; no_boot_disk:machines=gpu00002",
    );
    for m in &mut config.machines {
        m.initial = metalform::sim::InitialState::New;
    }
    let sim = Sim::start(config).await;
    let sids = sim.system_ids().await;
    for sid in &sids {
        sim.op(&format!("machines/{sid}/"), "commission", &[])
            .await
            .expect(200);
    }
    sim.advance(241);
    let m = sim.machine(&sids[0]).await;
    assert_eq!(m["status_name"], "Failed commissioning");
    assert_eq!(m["commissioning_status_name"], "Failed");
    sim.advance(61);
    let m = sim.machine(&sids[1]).await;
    assert_eq!(m["status_name"], "Failed testing");
    let models: Vec<&str> = m["blockdevice_set"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["model"].as_str().unwrap())
        .collect();
    assert!(
        !models.contains(&"Dell BOSS-N1"),
        "no_boot_disk: {models:?}"
    );
    assert_eq!(models.len(), 4);
    assert_eq!(sim.status_name(&sids[2]).await, "Ready");
    sim.op(&format!("machines/{}/", sids[2]), "deploy", &[])
        .await
        .expect(200);
    sim.advance(601);
    sim.op(
        &format!("machines/{}/", sids[2]),
        "release",
        &[("erase", "true")],
    )
    .await
    .expect(200);
    // A full wipe writes every byte of every disk: the BOSS at 400 MB/s, each NVMe at
    // 4,000 MB/s (write-zeroes), one after the other — 5,040 s here.
    sim.advance(5030);
    assert_eq!(sim.status_name(&sids[2]).await, "Disk erasing");
    sim.advance(11);
    assert_eq!(sim.status_name(&sids[2]).await, "Failed disk erasing");
}

#[tokio::test]
async fn out_of_band_scenarios_after_deployment() {
    let sim = Sim::start(with_faults(
        4,
        "released_oob:machines=gpu00001,after=60s; machine_deleted:machines=gpu00002,after=60s; powered_off:machines=gpu00003,after=60s; redeployed_oob:machines=gpu00004,after=60s",
    ))
    .await;
    let sids = sim.system_ids().await;
    let mut tokens = Vec::new();
    for sid in &sids {
        sim.op(&format!("machines/{sid}/"), "deploy", &[])
            .await
            .expect(200);
        tokens.push(
            sim.get(&format!("machines/{sid}/"), &[("op", "get_token")])
                .await
                .json(),
        );
    }
    sim.advance(601);
    for sid in &sids {
        assert_eq!(sim.status_name(sid).await, "Deployed");
    }
    sim.advance(61);
    assert_eq!(sim.status_name(&sids[0]).await, "Releasing");
    sim.get(&format!("machines/{}/", sids[1]), &[])
        .await
        .expect(404);
    let off = sim.machine(&sids[2]).await;
    assert_eq!(
        (off["status_name"].as_str(), off["power_state"].as_str()),
        (Some("Deployed"), Some("off"))
    );
    assert_eq!(sim.status_name(&sids[3]).await, "Deploying");
    let token = sim
        .get(&format!("machines/{}/", sids[3]), &[("op", "get_token")])
        .await
        .json();
    assert_ne!(
        token["token_key"], tokens[3]["token_key"],
        "a redeploy issues a new token"
    );
    // Requests by the client were counted; the operator's were not.
    assert_eq!(sim.counters(&sids[3]).await["deploy"], 1);
}
