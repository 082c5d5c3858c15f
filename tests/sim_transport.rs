//! HTTP-level tests of the simulator's MAAS transport and OAuth checking
//! (API_REFERENCE.md §1–§2).

use crate::sim_support;

use reqwest::Method;
use sim_support::{Sim, fleet};

#[tokio::test]
async fn anonymous_endpoints_version_and_describe() {
    let sim = Sim::start(fleet(1)).await;
    let v = sim
        .send(Method::GET, &sim.api("version/"), None, &[])
        .await
        .expect(200);
    assert_eq!(v.content_type(), "application/json; charset=utf-8");
    // json.dumps, compact, Python separators.
    assert!(
        v.text
            .starts_with("{\"capabilities\": [\"networks-management\", "),
        "{}",
        v.text
    );
    let json = v.json();
    assert_eq!(json["version"], "3.6.1");
    assert_eq!(json["subversion"], "");
    assert!(v.header("x-maas-api-hash").is_some_and(|h| h.len() == 40));

    let d = sim
        .send(Method::GET, &sim.api("describe/"), None, &[])
        .await
        .expect(200);
    let doc = d.json();
    let machine = doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "MachinesHandler")
        .unwrap();
    // Absolute uri built from the Host header: python-libmaas sends requests there.
    assert_eq!(
        machine["auth"]["uri"],
        format!("{}/MAAS/api/2.0/machines/", sim.handle.base_url())
    );
    assert_eq!(machine["anon"]["name"], "AnonMachinesHandler");
    assert_eq!(doc["hash"], d.header("x-maas-api-hash").unwrap());

    let plain = sim
        .send(Method::GET, &sim.url("/MAAS/api/version/"), None, &[])
        .await
        .expect(200);
    assert_eq!(plain.text, "2.0");
    let gone = sim
        .send(Method::GET, &sim.url("/MAAS/api/1.0/nodes/"), None, &[])
        .await
        .expect(410);
    assert_eq!(
        gone.text,
        "The 1.0 API is no longer available. Please use API version 2.0."
    );
}

#[tokio::test]
async fn paths_ops_and_signatures_as_maas() {
    let sim = Sim::start(fleet(1)).await;
    let sid = sim.system_ids().await.remove(0);

    let missing_slash = sim.get(&format!("machines/{sid}"), &[]).await.expect(404);
    assert_eq!(
        missing_slash.text,
        format!("Unknown API endpoint: /MAAS/api/2.0/machines/{sid}.")
    );
    assert!(missing_slash.content_type().starts_with("text/plain"));
    sim.get("nosuch/", &[]).await.expect(404);
    // Interfaces live only under nodes/.
    sim.get(&format!("machines/{sid}/interfaces/"), &[])
        .await
        .expect(404);
    sim.get(&format!("nodes/{sid}/interfaces/"), &[])
        .await
        .expect(200);

    let bad = sim.op("machines/", "foo", &[]).await.expect(400);
    assert_eq!(bad.text, "Unrecognised signature: method=POST op=foo");
    // A GET op called with POST is another signature.
    let wrong = sim
        .op(&format!("machines/{sid}/"), "query_power_state", &[])
        .await
        .expect(400);
    assert_eq!(
        wrong.text,
        "Unrecognised signature: method=POST op=query_power_state"
    );
    // A method the handler does not export: 405 with Allow.
    let put = sim.put("machines/", &[]).await.expect(405);
    assert_eq!(put.header("allow"), Some("GET, POST"));
    // `op=` empty is no op: plain read.
    sim.get("machines/", &[("op", "")]).await.expect(200);
    // op from the form body, and from the op-<name> path suffix.
    let power = sim
        .get(&format!("machines/{sid}/op-query_power_state"), &[])
        .await
        .expect(200);
    assert_eq!(power.json(), serde_json::json!({"state": "off"}));
    let body_op = sim
        .post(&format!("machines/{sid}/"), &[("op", "power_off")])
        .await
        .expect(200);
    assert_eq!(body_op.json()["power_state"], "off");

    let who = sim
        .get("users/", &[("op", "whoami")])
        .await
        .expect(200)
        .json();
    assert_eq!(who["username"], "admin");
    assert_eq!(who["is_superuser"], true);
    assert_eq!(who["resource_uri"], "/MAAS/api/2.0/users/admin/");

    let missing = sim.get("machines/nosuch/", &[]).await.expect(404);
    assert_eq!(missing.text, "No Machine matches the given query.");
}

#[tokio::test]
async fn oauth_failures_are_answered_as_maas() {
    let sim = Sim::start(fleet(1)).await;
    let sid = sim.system_ids().await.remove(0);
    let url = sim.api(&format!("machines/{sid}/"));

    // No credentials: anonymous handler for machines/, 401 elsewhere.
    let anon = sim
        .send(Method::GET, &sim.api("machines/"), None, &[])
        .await
        .expect(400);
    assert_eq!(anon.text, "Unrecognised signature: method=GET op=None");
    let anon = sim.send(Method::GET, &url, None, &[]).await.expect(401);
    assert_eq!(anon.text, "Forbidden");

    let bad_consumer = sim.auth_header_with("nope:simtoken00000000000:x");
    let a = sim
        .send(Method::GET, &url, Some(bad_consumer), &[])
        .await
        .expect(401);
    assert_eq!(a.text, "Authorization Error: Invalid API key.");
    assert_eq!(a.header("www-authenticate"), Some("OAuth realm=\"OAuth\""));

    let consumer = sim.key.split(':').next().unwrap().to_string();
    let bad_token = sim.auth_header_with(&format!("{consumer}:WRONGTOKEN:x"));
    let a = sim
        .send(Method::GET, &url, Some(bad_token), &[])
        .await
        .expect(401);
    assert_eq!(
        a.text,
        "Authorization Error: 'Invalid access token: WRONGTOKEN'"
    );

    let token = sim.key.split(':').nth(1).unwrap().to_string();
    let bad_secret = sim.auth_header_with(&format!("{consumer}:{token}:not-the-secret"));
    let a = sim
        .send(Method::GET, &url, Some(bad_secret), &[])
        .await
        .expect(401);
    assert_eq!(a.text, "Authorization Error: 'Invalid signature.'");
    assert!(
        !a.text.contains("simsecret"),
        "never echo the expected secret"
    );

    let old = metalform::sim::auth::sign_header(
        &sim.key,
        "old-1",
        sim_support::start_time().timestamp() - 301,
    );
    let a = sim
        .send(Method::GET, &url, Some(old), &[])
        .await
        .expect(401);
    assert!(
        a.text
            .starts_with("Authorization Error: 'Expired timestamp: given "),
        "{}",
        a.text
    );
    assert!(
        a.text
            .ends_with("has a greater difference than threshold 300'"),
        "{}",
        a.text
    );

    let once = metalform::sim::auth::sign_header(
        &sim.key,
        "same-nonce",
        sim_support::start_time().timestamp(),
    );
    sim.send(Method::GET, &url, Some(once.clone()), &[])
        .await
        .expect(200);
    let replay = sim
        .send(Method::GET, &url, Some(once), &[])
        .await
        .expect(401);
    assert_eq!(
        replay.text,
        "Authorization Error: 'Nonce already used: same-nonce'"
    );

    let partial = format!("OAuth oauth_consumer_key=\"{consumer}\", oauth_token=\"{token}\"");
    let a = sim
        .send(Method::GET, &url, Some(partial), &[])
        .await
        .expect(400);
    assert_eq!(
        a.text,
        "Bad Request: 'Missing OAuth parameters: oauth_signature'"
    );

    // OAuth parameters in the query string work too.
    let secret = sim.key.split(':').nth(2).unwrap().to_string();
    let ts = sim_support::start_time().timestamp().to_string();
    let sig = format!("&{secret}");
    let q = [
        ("oauth_consumer_key", consumer.as_str()),
        ("oauth_token", token.as_str()),
        ("oauth_signature", sig.as_str()),
        ("oauth_signature_method", "PLAINTEXT"),
        ("oauth_timestamp", ts.as_str()),
        ("oauth_nonce", "q-1"),
    ];
    sim.send(Method::GET, &url, None, &q).await.expect(200);
}

#[tokio::test]
async fn machine_token_and_non_admin_users_are_refused_what_maas_refuses() {
    let mut config = fleet(2);
    config.users.push(metalform::sim::config::UserSpec {
        username: "alice".to_string(),
        api_key: "aliceconsumer:alicetoken:alicesecret".to_string(),
    });
    let sim = Sim::start(config).await;
    let sids = sim.system_ids().await;
    // Deploy one machine as admin: it gets a per-ownership token.
    sim.op(&format!("machines/{}/", sids[0]), "deploy", &[])
        .await
        .expect(200);
    let token = sim
        .get(&format!("machines/{}/", sids[0]), &[("op", "get_token")])
        .await
        .expect(200)
        .json();
    let node_key = format!(
        "{}:{}:{}",
        token["consumer_key"].as_str().unwrap(),
        token["token_key"].as_str().unwrap(),
        token["token_secret"].as_str().unwrap()
    );
    let as_node = sim.auth_header_with(&node_key);
    let refused = sim
        .send(Method::GET, &sim.api("nodes/"), Some(as_node), &[])
        .await
        .expect(403);
    assert_eq!(refused.text, "");

    let alice = |sim: &Sim| sim.auth_header_with("aliceconsumer:alicetoken:alicesecret");
    // Alice does not see the admin's machine, and may not commission (admin only).
    let list = sim
        .send(Method::GET, &sim.api("machines/"), Some(alice(&sim)), &[])
        .await
        .expect(200);
    let visible: Vec<String> = list
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["system_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(visible, vec![sids[1].clone()]);
    let hidden = sim
        .send(
            Method::GET,
            &sim.api(&format!("machines/{}/", sids[0])),
            Some(alice(&sim)),
            &[],
        )
        .await
        .expect(403);
    assert_eq!(hidden.text, "");
    let url = format!(
        "{}?op=commission",
        sim.api(&format!("machines/{}/", sids[1]))
    );
    sim.send(Method::POST, &url, Some(alice(&sim)), &[])
        .await
        .expect(403);
    let url = format!(
        "{}?op=get_token",
        sim.api(&format!("machines/{}/", sids[1]))
    );
    sim.send(Method::GET, &url, Some(alice(&sim)), &[])
        .await
        .expect(403);
    let url = sim.api("subnets/");
    let sub = sim
        .send(
            Method::POST,
            &url,
            Some(alice(&sim)),
            &[("cidr", "10.9.0.0/31")],
        )
        .await
        .expect(403);
    assert_eq!(sub.text, "This method is reserved for admin users.");
    // But she may deploy an unowned Ready machine (edit permission).
    let url = format!("{}?op=deploy", sim.api(&format!("machines/{}/", sids[1])));
    let deployed = sim
        .send(Method::POST, &url, Some(alice(&sim)), &[])
        .await
        .expect(200);
    assert_eq!(deployed.json()["owner"], "alice");
}

#[tokio::test]
async fn bad_input_never_breaks_the_server() {
    let sim = Sim::start(fleet(1)).await;
    let sid = sim.system_ids().await.remove(0);
    let auth = sim.auth_header_with(&sim.key);
    let broken = sim
        .http
        .post(format!(
            "{}?op=deploy",
            sim.api(&format!("machines/{sid}/"))
        ))
        .header("Authorization", auth)
        .header("Content-Type", "multipart/form-data; boundary=zz")
        .body("--zz\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nno end")
        .send()
        .await
        .unwrap();
    assert_eq!(broken.status().as_u16(), 400);
    let bad_b64 = sim
        .http
        .post(format!("{}?op=deploy", sim.api(&format!("machines/{sid}/"))))
        .header("Authorization", sim.auth_header_with(&sim.key))
        .header("Content-Type", "multipart/form-data; boundary=zz")
        .body("--zz\r\nContent-Disposition: form-data; name=\"a\"\r\nContent-Transfer-Encoding: base64\r\n\r\n!!!\r\n--zz--\r\n")
        .send()
        .await
        .unwrap();
    assert_eq!(bad_b64.status().as_u16(), 400);
    assert_eq!(
        sim.status_name(&sid).await,
        "Ready",
        "a refused request changes nothing"
    );
    for path in [
        "machines/%00/",
        "machines/../../",
        "subnets/cidr:999.1.1.1/99/",
        "events/",
        "nodes/x/blockdevices/zz/",
    ] {
        let a = sim.get(path, &[("limit", "-5"), ("level", "INFO")]).await;
        assert!(a.status < 500, "{path}: {} {}", a.status, a.text);
    }
    let a = sim
        .get("events/", &[("op", "query"), ("limit", "abc")])
        .await
        .expect(400);
    // api/utils.py _validate_param: `Invalid <key>: <formencode's message>`.
    assert_eq!(a.text, "Invalid limit: Please enter an integer value");
    let timestamp = format!(
        "OAuth oauth_consumer_key=\"{}\", oauth_token=\"x\", oauth_signature=\"x\", oauth_signature_method=\"PLAINTEXT\", oauth_timestamp=\"soon\", oauth_nonce=\"n\"",
        sim.key.split(':').next().unwrap()
    );
    let _ = sim
        .send(Method::GET, &sim.api("machines/"), Some(timestamp), &[])
        .await;
    sim.get("version/", &[]).await.expect(200);
}

/// `GET machines/` is sent from each machine's kept rendering: still one piston (indent-4)
/// document with its Content-Length, whose objects are the detail reads' objects, and a
/// change shows in the next list.
#[tokio::test]
async fn the_machines_list_is_one_indented_document_that_follows_changes() {
    let sim = Sim::start(fleet(3)).await;
    let list = sim.get("machines/", &[]).await.expect(200);
    assert_eq!(list.content_type(), "application/json; charset=utf-8");
    assert_eq!(
        list.header("content-length"),
        Some(list.text.len().to_string().as_str())
    );
    assert_eq!(list.header("transfer-encoding"), None);
    let machines = list.json();
    assert_eq!(
        list.text.as_bytes(),
        metalform::sim::reply::to_piston_json(&machines),
        "indent-4 layout throughout"
    );
    let machines = machines.as_array().unwrap().clone();
    assert_eq!(machines.len(), 3);
    for machine in &machines {
        let sid = machine["system_id"].as_str().unwrap();
        assert_eq!(*machine, sim.machine(sid).await);
    }

    let sid = machines[1]["system_id"].as_str().unwrap();
    sim.put(&format!("machines/{sid}/"), &[("hostname", "renamed")])
        .await
        .expect(200);
    let again = sim.get("machines/", &[]).await.expect(200).json();
    assert_eq!(again[0], machines[0]);
    assert_eq!(again[1]["hostname"], "renamed");
    assert_eq!(again[1], sim.machine(sid).await);
    assert_eq!(again[2], machines[2]);
    let filtered = sim.get("machines/", &[("hostname", "renamed")]).await;
    assert_eq!(filtered.json(), serde_json::json!([again[1]]));
    let none = sim.get("machines/", &[("hostname", "nosuch")]).await;
    assert_eq!(none.text, "[]");
}
