//! The simulated status machine over HTTP: background transitions on the (manual) clock,
//! op gating per status with MAAS's exact answers, owner/token side effects, release with
//! erase, abort and mark_fixed (API_REFERENCE.md §4–§6).

use crate::sim_support;

use serde_json::json;
use sim_support::{Sim, fleet};

#[tokio::test]
async fn deploy_then_release_runs_through_maas_statuses() {
    let sim = Sim::start(fleet(1)).await;
    let sid = sim.system_ids().await.remove(0);
    let m = sim.machine(&sid).await;
    assert_eq!(m["status"], 4);
    assert_eq!(m["owner"], serde_json::Value::Null);
    let token = sim
        .get(&format!("machines/{sid}/"), &[("op", "get_token")])
        .await
        .expect(200);
    assert_eq!(token.text, "null", "no NodeKey while Ready");

    let d = sim
        .op(
            &format!("machines/{sid}/"),
            "deploy",
            &[
                ("distro_series", "ubuntu/jammy"),
                ("enable_hw_sync", "true"),
                ("user_data", "I2Nsb3VkLWNvbmZpZwo="),
            ],
        )
        .await
        .expect(200)
        .json();
    assert_eq!(d["status_name"], "Deploying");
    assert_eq!(d["status"], 9);
    assert_eq!(d["owner"], "admin");
    assert_eq!(d["osystem"], "ubuntu");
    assert_eq!(d["distro_series"], "jammy");
    assert_eq!(d["enable_hw_sync"], true);
    assert_eq!(d["power_state"], "on");
    assert_eq!(d["status_message"], "Deploying");
    assert_eq!(
        d["ip_addresses"],
        json!([]),
        "AUTO addresses are claimed post-commit"
    );
    let after = sim.machine(&sid).await;
    let ip = after["ip_addresses"][0]
        .as_str()
        .expect("AUTO address claimed");
    assert!(ip.starts_with("10.176.46."), "{ip}");
    let token1 = sim
        .get(&format!("machines/{sid}/"), &[("op", "get_token")])
        .await
        .json();
    assert!(token1["token_key"].is_string());

    sim.advance(500);
    assert_eq!(
        sim.status_name(&sid).await,
        "Deploying",
        "deployment takes ~600 s"
    );
    sim.advance(101);
    let m = sim.machine(&sid).await;
    assert_eq!(m["status_name"], "Deployed");
    assert_eq!(m["status_message"], "Deployed");
    // Background work happens at its due time (12:10:00), not when it is observed.
    assert_eq!(m["last_sync"], "2026-03-01T12:10:00.000Z");
    assert_eq!(m["sync_interval"], 900);
    assert_eq!(m["next_sync"], "2026-03-01T12:25:00.000Z");
    sim.advance(900);
    assert_eq!(
        sim.machine(&sid).await["last_sync"],
        "2026-03-01T12:25:00.000Z",
        "hardware sync every interval"
    );

    let r = sim
        .op(&format!("machines/{sid}/"), "release", &[])
        .await
        .expect(200)
        .json();
    assert_eq!(r["status_name"], "Releasing");
    assert_eq!(r["osystem"], "");
    assert_eq!(r["enable_hw_sync"], false);
    assert_eq!(r["last_sync"], serde_json::Value::Null);
    sim.advance(11);
    let m = sim.machine(&sid).await;
    assert_eq!(m["status_name"], "Ready");
    assert_eq!(m["owner"], serde_json::Value::Null);
    assert_eq!(m["ip_addresses"], json!([]), "AUTO address released");
    assert_eq!(m["power_state"], "off");
    assert_eq!(
        sim.get(&format!("machines/{sid}/"), &[("op", "get_token")])
            .await
            .text,
        "null"
    );

    // Redeploy: a new ownership, a new token.
    sim.op(&format!("machines/{sid}/"), "deploy", &[])
        .await
        .expect(200);
    let token2 = sim
        .get(&format!("machines/{sid}/"), &[("op", "get_token")])
        .await
        .json();
    assert_ne!(token1["token_key"], token2["token_key"]);

    let c = sim.counters(&sid).await;
    assert_eq!(c["deploy"], 2);
    assert_eq!(c["release"], 1);
    assert_eq!(c["erase"], 0);
}

#[tokio::test]
async fn release_with_erase_goes_through_disk_erasing() {
    let sim = Sim::start(fleet(1)).await;
    let sid = sim.system_ids().await.remove(0);
    sim.op(&format!("machines/{sid}/"), "deploy", &[])
        .await
        .expect(200);
    sim.advance(601);
    // Django BooleanField: "0" is true — the gotcha real MAAS has.
    let r = sim
        .op(
            &format!("machines/{sid}/"),
            "release",
            &[("erase", "0"), ("quick_erase", "true")],
        )
        .await
        .expect(200)
        .json();
    assert_eq!(r["status_name"], "Disk erasing");
    assert_eq!(r["status"], 14);
    sim.advance(30);
    assert_eq!(sim.status_name(&sid).await, "Disk erasing");
    sim.advance(31);
    assert_eq!(sim.status_name(&sid).await, "Ready", "quick erase ~60 s");
    let c = sim.counters(&sid).await;
    assert_eq!(
        (c["release"].as_u64(), c["erase"].as_u64()),
        (Some(1), Some(1))
    );
    // Releasing a Ready machine is a 200 no-op that counts nothing.
    sim.op(&format!("machines/{sid}/"), "release", &[])
        .await
        .expect(200);
    assert_eq!(sim.counters(&sid).await["release"], 1);
}

#[tokio::test]
async fn commissioning_runs_tests_then_ready_and_links_the_pxe_interface() {
    let mut config = fleet(1);
    config.machines[0].initial = metalform::sim::InitialState::New;
    let sim = Sim::start(config).await;
    let sid = sim.system_ids().await.remove(0);
    let m = sim.machine(&sid).await;
    assert_eq!(m["status_name"], "New");
    assert_eq!(
        m["blockdevice_set"],
        json!([]),
        "storage is unknown before commissioning"
    );
    assert_eq!(m["commissioning_status"], -1);

    let c = sim
        .op(
            &format!("machines/{sid}/"),
            "commission",
            &[("enable_ssh", "true"), ("skip_bmc_config", "true")],
        )
        .await
        .expect(200)
        .json();
    assert_eq!(c["status_name"], "Commissioning");
    assert_eq!(c["owner"], "admin");
    sim.advance(241);
    assert_eq!(sim.status_name(&sid).await, "Testing");
    sim.advance(61);
    let m = sim.machine(&sid).await;
    assert_eq!(m["status_name"], "Ready");
    assert_eq!(
        m["owner"],
        serde_json::Value::Null,
        "entering Ready clears the owner"
    );
    assert_eq!(m["commissioning_status_name"], "Passed");
    assert_eq!(m["testing_status_name"], "Passed");
    let boot = &m["boot_interface"];
    assert_eq!(boot["name"], "eno8303");
    assert_eq!(boot["links"][0]["mode"], "auto");
    assert_eq!(boot["links"][0]["subnet"]["cidr"], "10.176.46.0/24");
    assert_eq!(m["interface_set"][1]["links"], json!([]));
    let models: Vec<&str> = m["blockdevice_set"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["model"].as_str().unwrap())
        .collect();
    assert_eq!(models[0], "Dell BOSS-N1");
    assert_eq!(m["boot_disk"]["name"], "sda");

    // Accepting a New machine starts commissioning too; a Ready one is skipped.
    let list = sim
        .op("machines/", "accept", &[("machines", &sid)])
        .await
        .expect(200);
    assert_eq!(list.json(), json!([]));
    let unknown = sim
        .op(
            "machines/",
            "accept",
            &[("machines", "zzz"), ("machines", "yyy")],
        )
        .await
        .expect(400);
    assert_eq!(unknown.text, "Unknown machine(s): zzz, yyy.");
}

#[tokio::test]
async fn operations_are_gated_per_status_with_maas_texts() {
    let mut config = fleet(2);
    config.machines[1].initial = metalform::sim::InitialState::New;
    let sim = Sim::start(config).await;
    let sids = sim.system_ids().await;
    let (ready, new) = (&sids[0], &sids[1]);

    let a = sim
        .op(&format!("machines/{new}/"), "deploy", &[])
        .await
        .expect(409);
    assert_eq!(a.text, "Can't deploy a machine that is in the 'New' state");
    assert!(
        a.header("retry-after").is_none(),
        "state conflicts are not retryable"
    );
    let a = sim
        .op(&format!("machines/{ready}/"), "abort", &[])
        .await
        .expect(409);
    assert_eq!(
        a.text,
        format!("Cannot abort in current state: node {ready} is in state Ready.")
    );
    let a = sim
        .op(&format!("machines/{new}/"), "release", &[])
        .await
        .expect(409);
    assert_eq!(
        a.text,
        "Machine cannot be released in its current state ('New')."
    );
    let a = sim
        .op(&format!("machines/{ready}/"), "mark_fixed", &[])
        .await
        .expect(409);
    assert_eq!(a.text, "Can't mark a non-broken node as 'Ready'.");
    let a = sim
        .op(&format!("machines/{ready}/"), "power_on", &[])
        .await
        .expect(409);
    assert_eq!(a.text, "Can't start node: it hasn't been allocated.");
    let a = sim
        .op(&format!("machines/{ready}/"), "mark_broken", &[])
        .await
        .expect(403);
    assert_eq!(a.text, "", "only the owner may mark broken, even an admin");
    let a = sim
        .op(
            &format!("machines/{new}/"),
            "set_storage_layout",
            &[("storage_layout", "flat")],
        )
        .await
        .expect(409);
    assert_eq!(
        a.text,
        "Cannot change the storage layout on a machine that is not Ready."
    );
    let a = sim
        .op(&format!("machines/{ready}/"), "set_storage_layout", &[])
        .await
        .expect(400);
    assert_eq!(
        a.json(),
        json!({"storage_layout": ["This field is required."]})
    );
    let a = sim
        .op(
            &format!("machines/{ready}/"),
            "deploy",
            &[("distro_series", "plan9")],
        )
        .await
        .expect(400);
    assert!(
        a.json()["distro_series"][0]
            .as_str()
            .unwrap()
            .starts_with("'plan9' is not a valid distro_series.")
    );
    assert_eq!(
        sim.status_name(ready).await,
        "Ready",
        "a refused deploy changes nothing"
    );

    sim.op(&format!("machines/{ready}/"), "deploy", &[])
        .await
        .expect(200);
    let a = sim
        .op(&format!("machines/{ready}/"), "commission", &[])
        .await
        .expect(400);
    assert_eq!(a.content_type(), "application/json; charset=utf-8");
    assert_eq!(
        a.json(),
        json!({"__all__": ["Commission is not available because of the current state of the node."]})
    );
    let a = sim
        .op(&format!("machines/{ready}/"), "deploy", &[])
        .await
        .expect(409);
    assert_eq!(
        a.text,
        "Can't deploy a machine that is in the 'Deploying' state"
    );

    // Abort a deployment: back to Allocated, still owned.
    let a = sim
        .op(&format!("machines/{ready}/"), "abort", &[])
        .await
        .expect(200)
        .json();
    assert_eq!(a["status_name"], "Allocated");
    assert_eq!(a["owner"], "admin");
    sim.advance(700);
    assert_eq!(
        sim.status_name(ready).await,
        "Allocated",
        "an aborted deployment never completes"
    );
    // power_on of an Allocated machine is a deployment.
    let p = sim
        .op(&format!("machines/{ready}/"), "power_on", &[])
        .await
        .expect(200)
        .json();
    assert_eq!(p["status_name"], "Deploying");
    sim.advance(601);
    // Owner marks broken (released first), admin fixes it back to... Ready (not deployed).
    let b = sim
        .op(
            &format!("machines/{ready}/"),
            "mark_broken",
            &[("comment", "fan failure")],
        )
        .await
        .expect(200)
        .json();
    assert_eq!(b["status_name"], "Broken");
    assert_eq!(b["error_description"], "fan failure");
    let f = sim
        .op(&format!("machines/{ready}/"), "mark_fixed", &[])
        .await
        .expect(200)
        .json();
    assert_eq!(
        f["status_name"], "Deployed",
        "mark_fixed returns a broken deployed machine to Deployed"
    );
    assert_eq!(f["error_description"], "");
    let c = sim.counters(ready).await;
    assert_eq!(
        (
            c["deploy"].as_u64(),
            c["abort"].as_u64(),
            c["power_on"].as_u64()
        ),
        (Some(2), Some(1), Some(1))
    );

    // Abort commissioning → New, owner cleared.
    sim.op(&format!("machines/{new}/"), "commission", &[])
        .await
        .expect(200);
    let a = sim
        .op(&format!("machines/{new}/"), "abort", &[])
        .await
        .expect(200)
        .json();
    assert_eq!(a["status_name"], "New");
    assert_eq!(a["owner"], serde_json::Value::Null);
}

#[tokio::test]
async fn create_update_delete_machines() {
    let sim = Sim::start(fleet(0)).await;
    // IPMI without architecture: the MACs are silently discarded (MAAS gotcha) → stays New.
    let m = sim
        .post(
            "machines/",
            &[
                ("power_type", "ipmi"),
                ("power_parameters_power_address", "10.0.0.9"),
                ("mac_addresses", "AA-BB-CC-DD-EE-01"),
                ("hostname", "c07u43"),
            ],
        )
        .await
        .expect(200)
        .json();
    assert_eq!(m["status_name"], "New");
    assert_eq!(m["interface_set"], json!([]));
    let sid = m["system_id"].as_str().unwrap().to_string();
    let dup = sim
        .post(
            "machines/",
            &[
                ("power_type", "ipmi"),
                ("power_parameters_power_address", "10.0.0.8"),
                ("hostname", "c07u43"),
            ],
        )
        .await
        .expect(400);
    assert_eq!(
        dup.json(),
        json!({"hostname": ["Node with hostname \"c07u43\" already exists."]})
    );
    let no_addr = sim
        .post("machines/", &[("power_type", "ipmi")])
        .await
        .expect(400);
    assert_eq!(
        no_addr.json(),
        json!({"power_parameters": ["IP address: This field is required."]})
    );
    let bad_mac = sim
        .post(
            "machines/",
            &[("architecture", "amd64"), ("mac_addresses", "nope")],
        )
        .await
        .expect(400);
    assert_eq!(
        bad_mac.json(),
        json!({"mac_addresses": ["'nope' is not a valid MAC address."]})
    );

    // With architecture and MAC: commissioning starts at once.
    let m2 = sim
        .post(
            "machines/",
            &[
                ("architecture", "amd64/generic"),
                ("power_type", "ipmi"),
                ("power_parameters_power_address", "10.0.0.7"),
                ("mac_addresses", "aa:bb:cc:dd:ee:02"),
            ],
        )
        .await
        .expect(200)
        .json();
    assert_eq!(m2["status_name"], "Commissioning");
    assert_eq!(m2["interface_set"][0]["mac_address"], "aa:bb:cc:dd:ee:02");
    let taken = sim
        .post(
            "machines/",
            &[
                ("architecture", "amd64"),
                ("mac_addresses", "aa:bb:cc:dd:ee:02"),
            ],
        )
        .await
        .expect(400);
    assert!(
        taken.json()["mac_addresses"][0]
            .as_str()
            .unwrap()
            .starts_with("MAC address aa:bb:cc:dd:ee:02 already in use on ")
    );

    let u = sim
        .put(
            &format!("machines/{sid}/"),
            &[
                ("hostname", "c07u44"),
                ("power_parameters_power_user", "svc"),
            ],
        )
        .await
        .expect(200)
        .json();
    assert_eq!(u["hostname"], "c07u44");
    let params = sim
        .get(&format!("machines/{sid}/"), &[("op", "power_parameters")])
        .await
        .expect(200)
        .json();
    assert_eq!(
        params,
        json!({"power_address": "10.0.0.9", "power_user": "svc"})
    );
    sim.delete(&format!("machines/{sid}/")).await.expect(204);
    sim.get(&format!("machines/{sid}/"), &[]).await.expect(404);
    let c = sim.counters(&sid).await;
    assert_eq!(
        (c["create"].as_u64(), c["delete"].as_u64()),
        (Some(1), Some(1))
    );
}

#[tokio::test]
async fn list_filters_and_events() {
    let sim = Sim::start(fleet(3)).await;
    let sids = sim.system_ids().await;
    let all = sim.get("machines/", &[]).await.expect(200).json();
    let mac = all[1]["interface_set"][0]["mac_address"]
        .as_str()
        .unwrap()
        .to_string();
    let by_host = sim
        .get("machines/", &[("hostname", "gpu00003")])
        .await
        .json();
    assert_eq!(by_host[0]["system_id"], sids[2].as_str());
    let by_ids = sim
        .get(
            "machines/",
            &[("id", &sids[0]), ("id", &sids[2]), ("id", "unknown")],
        )
        .await
        .json();
    assert_eq!(by_ids.as_array().unwrap().len(), 2);
    let by_mac = sim
        .get("machines/", &[("mac_address", &mac.to_uppercase())])
        .await
        .json();
    assert_eq!(by_mac[0]["system_id"], sids[1].as_str());
    let bad = sim
        .get("machines/", &[("mac_address", "xx")])
        .await
        .expect(400);
    assert_eq!(
        bad.json(),
        json!({"mac_address": ["Invalid parameter: invalid MAC address format"]})
    );
    let bad = sim
        .get("machines/", &[("status", "Sleeping")])
        .await
        .expect(400);
    assert_eq!(
        bad.json(),
        json!({"status": ["Select a valid choice. Sleeping is not one of the available choices."]})
    );

    sim.op(&format!("machines/{}/", sids[0]), "deploy", &[])
        .await
        .expect(200);
    sim.advance(601);
    let deploying = sim.get("machines/", &[("status", "deployed")]).await.json();
    assert_eq!(deploying.as_array().unwrap().len(), 1);

    let ev = sim
        .get("events/", &[("op", "query"), ("id", &sids[0])])
        .await
        .expect(200)
        .json();
    let events = ev["events"].as_array().unwrap();
    let ids: Vec<u64> = events.iter().map(|e| e["id"].as_u64().unwrap()).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(ids, sorted, "newest first");
    assert_eq!(events[0]["type"], "Deployed");
    assert_eq!(events[0]["level"], "INFO");
    assert_eq!(events[0]["created"], "Sun, 01 Mar. 2026 12:10:00");
    assert!(
        events.iter().all(|e| e["level"] != "DEBUG"),
        "DEBUG hidden at the default INFO level"
    );
    assert_eq!(ev["count"], events.len());
    let debug = sim
        .get(
            "events/",
            &[("op", "query"), ("id", &sids[0]), ("level", "DEBUG")],
        )
        .await
        .json();
    assert!(
        debug["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "Node changed status")
    );
    let limited = sim
        .get(
            "events/",
            &[("op", "query"), ("id", &sids[0]), ("limit", "2")],
        )
        .await
        .json();
    assert_eq!(limited["count"], 2);
    let oldest = limited["events"][1]["id"].as_u64().unwrap();
    assert_eq!(
        limited["prev_uri"],
        format!(
            "/MAAS/api/2.0/events/?op=query&id={}&limit=2&before={oldest}",
            sids[0]
        )
    );
    let a = sim
        .get("events/", &[("op", "query"), ("limit", "1001")])
        .await
        .expect(400);
    assert_eq!(
        a.text,
        "Requested number of events 1001 is greater than limit: 1000"
    );
    let a = sim
        .get(
            "events/",
            &[("op", "query"), ("after", "1"), ("before", "9")],
        )
        .await
        .expect(400);
    assert_eq!(
        a.text,
        "There is undetermined behaviour when both `after` and `before` are specified."
    );
    let a = sim
        .get("events/", &[("op", "query"), ("level", "info")])
        .await
        .expect(400);
    assert_eq!(a.text, "Unrecognised log level: info");
}

#[tokio::test]
async fn mark_broken_releases_an_allocation_first() {
    let sim = Sim::start(fleet(1)).await;
    let sid = sim.system_ids().await.remove(0);
    let a = sim
        .op("machines/", "allocate", &[("system_id", &sid)])
        .await
        .expect(200)
        .json();
    assert_eq!(a["status_name"], "Allocated");
    assert_eq!(a["constraints_by_type"], json!({}));
    let gone = sim
        .op("machines/", "allocate", &[("system_id", &sid)])
        .await
        .expect(409);
    assert_eq!(
        gone.text,
        format!("No machine with system ID {sid} available.")
    );
    let b = sim
        .op(
            &format!("machines/{sid}/"),
            "mark_broken",
            &[("comment", "psu")],
        )
        .await
        .expect(200)
        .json();
    assert_eq!(b["status_name"], "Broken");
    assert_eq!(b["owner"], serde_json::Value::Null);
    let f = sim
        .op(&format!("machines/{sid}/"), "mark_fixed", &[])
        .await
        .expect(200)
        .json();
    assert_eq!(f["status_name"], "Ready");
}
