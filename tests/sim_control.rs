//! The control API (docs/contracts.md §3): PXE discovery through the IPMI stand-in, the op
//! log and counters, the SSH stand-in with hardware-sync reseeding (§4), and out-of-band
//! operator changes.

use crate::sim_support;

use reqwest::Method;
use serde_json::json;
use sim_support::{Sim, fleet};

#[tokio::test]
async fn power_cycling_an_unknown_bmc_enlists_a_new_machine() {
    let mut config = metalform::sim::SimConfig::generated(
        3,
        &metalform::sim::FleetOptions {
            machines: 1,
            initial: metalform::sim::InitialState::Ready,
            no_boss_every: 0,
            unknown: 2,
        },
    );
    config.timings.jitter = 0.0;
    let unknown_ip = config.machines[1].bmc_ip.clone().unwrap();
    let pxe_mac = config.machines[1].interfaces[0].mac.clone();
    let sim = Sim::start(config).await;
    assert_eq!(
        sim.system_ids().await.len(),
        1,
        "unknown BMCs are invisible to MAAS"
    );

    let nobody = sim
        .control(
            Method::POST,
            "/sim/v1/bmc/10.9.9.9/power",
            Some(json!({"action": "cycle", "boot": "pxe"})),
        )
        .await
        .expect(404);
    assert_eq!(nobody.json()["error"], "No BMC at 10.9.9.9.");
    let bad = sim
        .control(
            Method::POST,
            &format!("/sim/v1/bmc/{unknown_ip}/power"),
            Some(json!({"action": "explode"})),
        )
        .await
        .expect(400);
    assert_eq!(
        bad.json()["error"],
        "Unknown power action 'explode': expected on, off or cycle."
    );
    // Booting from disk does not enlist.
    let disk = sim
        .control(
            Method::POST,
            &format!("/sim/v1/bmc/{unknown_ip}/power"),
            Some(json!({"action": "on", "boot": "disk"})),
        )
        .await
        .expect(200);
    assert_eq!(disk.json()["enlisting"], false);
    sim.advance(300);
    assert_eq!(sim.system_ids().await.len(), 1);

    let cycled = sim
        .control(
            Method::POST,
            &format!("/sim/v1/bmc/{unknown_ip}/power"),
            Some(json!({"action": "cycle", "boot": "pxe"})),
        )
        .await
        .expect(200);
    assert_eq!(cycled.json()["enlisting"], true);
    sim.advance(60);
    assert_eq!(
        sim.system_ids().await.len(),
        1,
        "enlistment takes ~2 minutes"
    );
    sim.advance(61);
    let found = sim
        .get("machines/", &[("mac_address", &pxe_mac)])
        .await
        .expect(200)
        .json();
    let m = &found[0];
    assert_eq!(m["status_name"], "New");
    assert_eq!(m["power_type"], "ipmi");
    assert_eq!(m["interface_set"][0]["name"], "eno8303");
    let sid = m["system_id"].as_str().unwrap();
    let params = sim
        .get(&format!("machines/{sid}/"), &[("op", "power_parameters")])
        .await
        .json();
    assert_eq!(params["power_address"], unknown_ip.as_str());
    let events = sim
        .get("events/", &[("op", "query"), ("id", sid)])
        .await
        .json();
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "Performing PXE boot")
    );

    // Known now: power actions just power it.
    let again = sim
        .control(
            Method::POST,
            &format!("/sim/v1/bmc/{unknown_ip}/power"),
            Some(json!({"action": "off"})),
        )
        .await
        .expect(200);
    assert_eq!(again.json()["system_id"], sid);
    // Accept + commission then discovers storage.
    sim.op("machines/", "accept", &[("machines", sid)])
        .await
        .expect(200);
    sim.advance(400);
    assert_eq!(sim.status_name(sid).await, "Ready");
}

#[tokio::test]
async fn op_log_and_counters() {
    let sim = Sim::start(fleet(2)).await;
    let sids = sim.system_ids().await;
    sim.op(&format!("machines/{}/", sids[0]), "deploy", &[])
        .await
        .expect(200);
    sim.op(&format!("machines/{}/", sids[0]), "power_off", &[])
        .await
        .expect(200);
    sim.op(&format!("machines/{}/", sids[1]), "abort", &[])
        .await
        .expect(409);
    let all = sim
        .control(Method::GET, "/sim/v1/counters", None)
        .await
        .expect(200)
        .json();
    assert_eq!(all[&sids[0]]["deploy"], 1);
    assert_eq!(all[&sids[0]]["power_off"], 1);
    assert!(
        all.get(&sids[1]).is_none(),
        "a refused abort took no effect"
    );
    assert_eq!(
        sim.counters(&sids[1]).await,
        json!({"deploy":0,"release":0,"commission":0,"erase":0,"power_on":0,"power_off":0,"abort":0,"create":0,"delete":0})
    );
    sim.control(Method::GET, "/sim/v1/machines/nosuch/counters", None)
        .await
        .expect(404);
    let ops = sim
        .control(Method::GET, "/sim/v1/ops", None)
        .await
        .expect(200)
        .json();
    let ops = ops.as_array().unwrap();
    let last = ops.last().unwrap();
    assert_eq!(last["method"], "POST");
    assert_eq!(last["path"], format!("/MAAS/api/2.0/machines/{}/", sids[1]));
    assert_eq!(last["op"], "abort");
    assert_eq!(last["status"], 409);
    let seqs: Vec<u64> = ops.iter().map(|o| o["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
}

#[tokio::test]
async fn host_files_and_hardware_sync_reseed() {
    let sim = Sim::start(sim_support_faults(
        "hwsync_stale:machines=gpu00001; hwsync_never:machines=gpu00002",
    ))
    .await;
    let sids = sim.system_ids().await;
    let early = sim
        .control(
            Method::POST,
            &format!("/sim/v1/machines/{}/host/files", sids[0]),
            Some(json!({"path": "/etc/x", "content": "y"})),
        )
        .await
        .expect(409);
    assert!(
        early.json()["error"]
            .as_str()
            .unwrap()
            .contains("not Deployed")
    );
    for sid in &sids {
        sim.op(
            &format!("machines/{sid}/"),
            "deploy",
            &[("enable_hw_sync", "true")],
        )
        .await
        .expect(200);
    }
    sim.advance(600);
    for sid in &sids {
        assert_eq!(
            sim.machine(sid).await["last_sync"],
            "2026-03-01T12:10:00.000Z"
        );
    }
    sim.advance(1800);
    assert_eq!(
        sim.machine(&sids[0]).await["last_sync"],
        "2026-03-01T12:10:00.000Z",
        "stale: no sync after the first"
    );
    assert_eq!(
        sim.machine(&sids[2]).await["last_sync"],
        "2026-03-01T12:40:00.000Z",
        "healthy machines sync every 15 min"
    );

    // Reseed with the wrong token: still stale. With the current token_key: syncs again.
    let path = format!("/sim/v1/machines/{}/host/files", sids[0]);
    sim.control(
        Method::POST,
        &path,
        Some(json!({"path": "/etc/maas/maas-machine-creds.yml", "content": "token_key: old"})),
    )
    .await
    .expect(200);
    sim.advance(900);
    assert_eq!(
        sim.machine(&sids[0]).await["last_sync"],
        "2026-03-01T12:10:00.000Z"
    );
    let token = sim
        .get(&format!("machines/{}/", sids[0]), &[("op", "get_token")])
        .await
        .json();
    let creds = format!(
        "token_key: {}\ntoken_secret: {}\n",
        token["token_key"].as_str().unwrap(),
        token["token_secret"].as_str().unwrap()
    );
    sim.control(
        Method::POST,
        &path,
        Some(json!({"path": "/etc/maas/maas-machine-creds.yml", "content": creds})),
    )
    .await
    .expect(200);
    assert_eq!(
        sim.machine(&sids[0]).await["last_sync"],
        "2026-03-01T12:55:00.000Z",
        "reseed restarts the timer"
    );
    sim.advance(900);
    assert_eq!(
        sim.machine(&sids[0]).await["last_sync"],
        "2026-03-01T13:10:00.000Z"
    );

    let never = format!("/sim/v1/machines/{}/host/files", sids[1]);
    let token = sim
        .get(&format!("machines/{}/", sids[1]), &[("op", "get_token")])
        .await
        .json();
    sim.control(Method::POST, &never, Some(json!({"path": "/etc/maas/maas-machine-creds.yml", "content": token["token_key"].as_str().unwrap()}))).await.expect(200);
    sim.advance(900);
    assert_eq!(
        sim.machine(&sids[1]).await["last_sync"],
        "2026-03-01T12:10:00.000Z",
        "hwsync_never ignores reseeds"
    );
    let files = sim
        .control(Method::GET, &never, None)
        .await
        .expect(200)
        .json();
    assert!(files.get("/etc/maas/maas-machine-creds.yml").is_some());
}

fn sim_support_faults(faults: &str) -> metalform::sim::SimConfig {
    let mut config = fleet(3);
    config.faults = faults.to_string();
    config
}

#[tokio::test]
async fn out_of_band_operator_changes() {
    let sim = Sim::start(fleet(4)).await;
    let sids = sim.system_ids().await;
    for sid in &sids {
        sim.op(&format!("machines/{sid}/"), "deploy", &[])
            .await
            .expect(200);
    }
    sim.advance(601);
    let oob = |sid: &str, action: &str| {
        let path = format!("/sim/v1/machines/{sid}/oob");
        let body = json!({"action": action});
        let sim = &sim;
        async move { sim.control(Method::POST, &path, Some(body)).await }
    };
    let ip_before = sim.machine(&sids[0]).await["ip_addresses"][0].clone();
    oob(&sids[0], "change_ip").await.expect(200);
    assert_ne!(sim.machine(&sids[0]).await["ip_addresses"][0], ip_before);
    let r = oob(&sids[0], "release").await.expect(200).json();
    assert_eq!(r["status_name"], "Releasing");
    oob(&sids[1], "mark_broken").await.expect(200);
    assert_eq!(sim.status_name(&sids[1]).await, "Broken");
    oob(&sids[2], "fail_testing").await.expect(200);
    assert_eq!(sim.status_name(&sids[2]).await, "Failed testing");
    oob(&sids[3], "recommission").await.expect(200);
    assert_eq!(sim.status_name(&sids[3]).await, "Commissioning");
    let bad = oob(&sids[3], "redeploy").await.expect(409);
    assert!(
        bad.json()["error"]
            .as_str()
            .unwrap()
            .contains("not Deployed")
    );
    oob(&sids[3], "teleport").await.expect(400);
    oob(&sids[3], "delete").await.expect(200);
    sim.get(&format!("machines/{}/", sids[3]), &[])
        .await
        .expect(404);
    oob("nosuch", "delete").await.expect(404);
    let summary = sim
        .control(Method::GET, "/sim/v1/machines", None)
        .await
        .expect(200)
        .json();
    assert_eq!(summary["machines"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn export_of_a_real_maas_is_loaded() {
    let fixtures = sim_support::fixtures_dir();
    let deployed =
        std::fs::read_to_string(fixtures.join("yorc__all_test_data__machineDeployed.json"))
            .unwrap();
    let alt = std::fs::read_to_string(
        fixtures.join("gomaasapi__machine_test__altMachineResponse.json-fragment"),
    )
    .unwrap();
    let export = format!("[{deployed}, {alt}]");
    let mut config = metalform::sim::SimConfig::default();
    let summary = metalform::sim::export::load_export(&mut config, &export).unwrap();
    assert_eq!(summary.machines, 3);
    let sim = Sim::start(config).await;
    let m = sim.machine("tdgqkw").await;
    assert_eq!(m["hostname"], "alert-buck");
    assert_eq!(m["status_name"], "Deployed");
    assert_eq!(m["interface_set"][0]["mac_address"], "cb:d5:c9:f7:78:04");
    assert_eq!(m["blockdevice_set"][0]["model"], "ST1000NM0033-9ZM");
    assert_eq!(
        m["boot_interface"]["links"][0]["subnet"]["cidr"],
        "172.20.0.0/24"
    );
    let err = metalform::sim::export::load_export(
        &mut metalform::sim::SimConfig::default(),
        "{\"a\": 1}",
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "expected a JSON array of machine objects (the output of GET /MAAS/api/2.0/machines/)"
    );
}
