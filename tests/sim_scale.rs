//! A 10,000-machine region and determinism for a seed (DESIGN.md §5; issue 3 "Scale").
//! Speed is measured by `cargo bench --bench sim_list`, not asserted here.

use crate::sim_support;

use metalform::sim::{FleetOptions, InitialState, SimConfig};
use sim_support::Sim;

fn generated(seed: u64, machines: usize) -> SimConfig {
    SimConfig::generated(
        seed,
        &FleetOptions {
            machines,
            initial: InitialState::Ready,
            no_boss_every: 7,
            unknown: 3,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_machines_are_served_and_filtered() {
    let sim = Sim::start(generated(1, 10_000)).await;
    let one = sim
        .get("machines/", &[("hostname", "gpu05000")])
        .await
        .expect(200)
        .json();
    assert_eq!(one.as_array().unwrap().len(), 1);
    let sid = one[0]["system_id"].as_str().unwrap().to_string();
    assert_eq!(sim.machine(&sid).await["hostname"], "gpu05000");
    let ready = sim
        .get("nodes/", &[("status", "ready"), ("id", &sid)])
        .await
        .expect(200)
        .json();
    assert_eq!(ready.as_array().unwrap().len(), 1);
    // The 7th machine of every 7 has no BOSS disk.
    let m = sim
        .get("machines/", &[("hostname", "gpu00007")])
        .await
        .json();
    assert!(
        m[0]["blockdevice_set"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["model"] != "Dell BOSS-N1")
    );
    let summary = sim
        .control(reqwest::Method::GET, "/sim/v1/machines", None)
        .await
        .expect(200)
        .json();
    assert_eq!(summary["machines"].as_array().unwrap().len(), 10_000);
    assert_eq!(summary["unknown_bmcs"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn a_seed_fixes_system_ids_macs_tokens_and_timings() {
    async fn run(seed: u64) -> Vec<String> {
        let mut config = generated(seed, 4);
        config.timings.jitter = 0.2;
        let sim = Sim::start(config).await;
        let mut facts = Vec::new();
        for sid in sim.system_ids().await {
            sim.op(&format!("machines/{sid}/"), "deploy", &[])
                .await
                .expect(200);
            let m = sim.machine(&sid).await;
            let token = sim
                .get(&format!("machines/{sid}/"), &[("op", "get_token")])
                .await
                .json();
            facts.push(format!(
                "{sid} {} {} {}",
                m["interface_set"][0]["mac_address"], m["hardware_uuid"], token["token_key"]
            ));
        }
        // Jittered deployment times: who is Deployed after 560 s depends on the draws.
        sim.advance(560);
        for sid in sim.system_ids().await {
            facts.push(sim.status_name(&sid).await);
        }
        facts
    }
    let a = run(9).await;
    assert_eq!(a, run(9).await);
    assert_ne!(a, run(10).await);
}
