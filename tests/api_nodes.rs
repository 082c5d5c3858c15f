//! The operator read routes (issue 19): the node list with the status page's filters, one
//! node with its jobs and stage timelines, the current plan, and the audit log query — on a
//! daemon whose two nodes converged on the simulator. Bad filters are typed 400s whose
//! messages are pinned here.

use crate::daemon_support;
use crate::onboard_support;

use std::time::Duration;

use daemon_support::{ADMIN_TOKEN, DaemonBed, call, one_site};
use onboard_support::hostname_of;
use reqwest::Method;
use serde_json::{Value, json};

async fn get(base: &str, path: &str) -> (u16, Value) {
    call(
        Method::GET,
        format!("{base}/api/v1/admin{path}"),
        Some(ADMIN_TOKEN),
        None,
    )
    .await
}

async fn refused(base: &str, path: &str) -> String {
    let (status, body) = get(base, path).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("bad_request")),
        "{path}: {body}"
    );
    assert!(body["hint"].is_string(), "{path}: {body}");
    body["message"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_plan_and_audit_are_served_and_bad_filters_are_typed_errors() {
    let setup = one_site(77, vec![0, 1]);
    let config = setup.sites[0].config.clone();
    let bed = DaemonBed::start(setup, "").await;
    let daemon = metalform::daemon::start(bed.config(), Default::default())
        .await
        .unwrap();
    let base = format!("http://{}", daemon.local_addr());
    let hosts: Vec<String> = (0..2).map(|i| hostname_of(&config, i)).collect();
    bed.converged_hosts("dc1", &hosts, Duration::from_secs(90))
        .await;

    // The list: both nodes, active, with their inventory ids; filters narrow it.
    let (status, list) = get(&base, "/nodes").await;
    assert_eq!(status, 200, "{list}");
    let nodes = list["nodes"].as_array().unwrap();
    let mut listed: Vec<&str> = nodes
        .iter()
        .map(|n| n["hostname"].as_str().unwrap())
        .collect();
    listed.sort();
    let mut wanted: Vec<&str> = hosts.iter().map(String::as_str).collect();
    wanted.sort();
    assert_eq!(listed, wanted, "{list}");
    for node in nodes {
        assert_eq!(node["site"], "dc1");
        assert_eq!(node["state"], "active", "{node}");
        assert_eq!(node["failed"], false);
        assert!(node["node_id"].is_string(), "{node}");
    }
    let (_, active) = get(&base, "/nodes?site=dc1&state=active&drift=false").await;
    assert_eq!(active["nodes"].as_array().unwrap().len(), 2, "{active}");
    for path in [
        "/nodes?state=offline",
        "/nodes?site=dc9",
        "/nodes?failed=true",
        "/nodes?drift=true",
    ] {
        let (status, body) = get(&base, path).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(body["nodes"], json!([]), "{path}: {body}");
    }
    assert_eq!(
        refused(&base, "/nodes?state=broken").await,
        "unknown state `broken`; the states are bootstrap_issued, enrolling, active, offline, \
         quarantined, draining, retired, removing, not_onboarded, provisioned"
    );
    assert_eq!(
        refused(&base, "/nodes?drift=maybe").await,
        "`drift=maybe`: use drift=true or drift=false"
    );
    assert_eq!(
        refused(&base, "/nodes?failed=").await,
        "`failed=`: use failed=true or failed=false"
    );
    assert_eq!(
        refused(&base, "/nodes?colour=red").await,
        "unknown filter `colour`; the filters are site, state, group, drift and failed"
    );

    // One node: its completed onboarding with the stage timeline, the manifest, MAAS's view.
    let id = nodes[0]["node_id"].as_str().unwrap().to_owned();
    let (status, node) = get(&base, &format!("/nodes/{id}")).await;
    assert_eq!(status, 200, "{node}");
    assert_eq!(node["hostname"], nodes[0]["hostname"]);
    assert_eq!(node["node"]["id"], id.as_str());
    assert!(node["manifest"].is_object(), "{node}");
    assert_eq!(node["maas"]["last_maas_status"], "Deployed", "{node}");
    let job = &node["jobs"][0];
    assert_eq!(job["job"]["kind"], "onboarding", "{node}");
    assert_eq!(job["job"]["state"], "completed", "{node}");
    let timeline = job["timeline"].as_array().unwrap();
    // Every stage that ran succeeded or had nothing to do; the deploy-failure branch never ran.
    assert!(
        timeline
            .iter()
            .all(|s| ["succeeded", "skipped", "pending"].contains(&s["status"].as_str().unwrap())),
        "{node}"
    );
    assert_eq!(
        timeline.last().unwrap()["stage"],
        "wait_for_agent_enrollment"
    );
    assert_eq!(timeline.last().unwrap()["status"], "succeeded", "{node}");
    assert_eq!(
        node["audit"][0]["action"], "node.transition",
        "the newest audit row first: {node}"
    );
    assert_eq!(
        refused(&base, "/nodes/c07u43").await,
        "`c07u43` is not a node id (a UUID)"
    );
    let (status, body) = get(&base, "/nodes/0b6c1d8e-9f3a-4c2e-8d7b-1a2b3c4d5e6f").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );

    // The current plan: dc1's, planned from the accepted revision.
    let (status, plan) = get(&base, "/plan").await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["sites"][0]["site"], "dc1", "{plan}");
    assert!(plan["revision"].as_str().unwrap().starts_with("commit:"));
    assert_eq!(
        plan["sites"][0]["plan"]["fleet_revision"], plan["revision"],
        "{plan}"
    );

    // The audit log: an audited reconcile request, found by actor and time, not by another.
    let (status, body) = call(
        Method::POST,
        format!("{base}/api/v1/admin/reconciliation/run"),
        Some(ADMIN_TOKEN),
        Some(json!({"site": "dc1", "reason": "audit query test"})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let (status, audit) = get(
        &base,
        "/audit?actor=ops-alice&action=reconciliation.run_requested",
    )
    .await;
    assert_eq!(status, 200, "{audit}");
    let entries = audit["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{audit}");
    assert_eq!(entries[0]["reason"], "audit query test");
    assert_eq!(entries[0]["role"], "admin");
    let at = entries[0]["at"].as_str().unwrap();
    let (_, none) = get(&base, "/audit?actor=somebody-else").await;
    assert_eq!(none["entries"], json!([]), "{none}");
    let (_, after) = get(
        &base,
        &format!("/audit?since={}", urlencode("2999-01-01T00:00:00Z")),
    )
    .await;
    assert_eq!(after["entries"], json!([]), "{after}");
    let (_, within) = get(
        &base,
        &format!(
            "/audit?action=reconciliation.run_requested&since={}&limit=1",
            urlencode(at)
        ),
    )
    .await;
    assert_eq!(within["entries"].as_array().unwrap().len(), 1, "{within}");
    // Rows about a node are the node's and its jobs'.
    let jobs: Vec<Value> = node["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job"]["id"].clone())
        .collect();
    let (status, about) = get(&base, &format!("/audit?node={id}")).await;
    assert_eq!(status, 200, "{about}");
    for entry in about["entries"].as_array().unwrap() {
        assert!(
            entry["subject_id"] == json!(id) || jobs.contains(&entry["subject_id"]),
            "{entry}"
        );
    }
    assert_eq!(
        refused(&base, "/audit?since=yesterday").await,
        "`since=yesterday` is not an RFC 3339 time"
    );
    assert_eq!(
        refused(&base, "/audit?limit=5000").await,
        "`limit=5000`: give a number from 1 to 1000"
    );
    assert_eq!(
        refused(&base, "/audit?node=c07u43").await,
        "`c07u43` is not a node id (a UUID)"
    );
    assert_eq!(
        refused(&base, "/audit?subject=x").await,
        "unknown filter `subject`; the filters are node, actor, action, since, until and limit"
    );
    daemon.shutdown().await;
}

fn urlencode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}
