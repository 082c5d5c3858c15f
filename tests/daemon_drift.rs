//! Drift in the running daemon (issue 6, seed 000 §6.3–§6.6): nodes converge from a real git
//! repository on the simulator; then an operator changes MAAS out of band (release, delete,
//! change the IP, mark broken) and the inventory retires a node behind MAAS's back. The
//! daemon's own drift pass handles every change in the first reconcile that starts after it
//! (checked by counting reconciles, not by sleeping): quarantines without touching MAAS, the
//! host follows the new IP, the retired machine is released and powered off exactly once. The
//! reconcile reads the MAAS machines list once per site (the plan's observation is reused);
//! `/metrics` and `reconciliation/run` report the pass. The §6.6 routes over HTTP: auth, the
//! summary, the drift list, resolve refused (typed, nothing changed) and accepted (audited
//! with the token's name and role).

use crate::daemon_support;
use crate::drift_support;
use crate::onboard_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use daemon_support::{ADMIN_TOKEN, AGENT_TOKEN, DaemonBed, call};
use drift_support::{audits, counters, drift_env, out_of_band, retire_without_maas, sim_status};
use metalform::drift::DriftPolicy;
use metalform::lifecycle::NodeState;
use metalform::model::SiteName;
use metalform::store::Node;
use onboard_support::{Setup, SiteSetup, hostname_of};
use reqwest::Method;
use serde_json::json;

/// Declared nodes; the site has one more machine no manifest declares.
const NODES: usize = 6;

/// One series' value in the OpenMetrics text (`name{labels}`), if present.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

async fn scrape(base: &str) -> String {
    let (status, body) = call(Method::GET, format!("{base}/metrics"), None, None).await;
    assert_eq!(status, 200);
    body.as_str().unwrap().to_owned()
}

/// Reconciles of dc1 finished so far (observe, plan, dispatch and drift pass).
async fn reconciles(base: &str) -> u64 {
    let text = scrape(base).await;
    ["ok", "unreadable", "error"]
        .iter()
        .filter_map(|o| {
            metric(
                &text,
                &format!("metalform_reconciles_total{{site=\"dc1\",outcome=\"{o}\"}}"),
            )
        })
        .sum::<f64>() as u64
}

/// Wait until at least `n` reconciles of dc1 have finished.
async fn reconciled(base: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if reconciles(base).await >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "fewer than {n} reconciles in 60s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn audit_rows(d: &DaemonBed, id: uuid::Uuid) -> usize {
    d.bed
        .store
        .audit_log("node", &id.to_string())
        .await
        .unwrap()
        .len()
}

async fn node(d: &DaemonBed, id: uuid::Uuid) -> Node {
    d.bed.store.node(id).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_detects_and_handles_out_of_band_changes_and_serves_the_drift_routes() {
    let mut site = SiteSetup::generated("dc1", 23, NODES + 1, 0);
    site.declared = Some((0..NODES).collect());
    let config = site.config.clone();
    // The agents enrolled once and are not polled here: a threshold past the test's length.
    let d = DaemonBed::start(
        Setup::one_site(site).profile("  timeouts: {enrollment: 30s}\n"),
        "\n[drift]\nheartbeat_threshold = \"1h\"\n",
    )
    .await;
    let daemon = metalform::daemon::start(d.config(), Default::default())
        .await
        .unwrap();
    let base = format!("http://{}", daemon.local_addr());
    let url = |p: &str| format!("{base}/api/v1/admin/reconciliation{p}");

    // Nodes converge, and a drift pass after that finds every one of them in order.
    let hosts: Vec<String> = (0..NODES).map(|i| hostname_of(&config, i)).collect();
    let pairs: Vec<(&str, &str)> = hosts.iter().map(|h| ("dc1", h.as_str())).collect();
    d.converged(&pairs, Duration::from_secs(90)).await;
    let after_converged = reconciles(&base).await;
    reconciled(&base, after_converged + 2).await;
    let (status, body) = call(Method::GET, url("/status"), Some(ADMIN_TOKEN), None).await;
    assert_eq!(status, 200, "{body}");
    let summary = &body["summary"];
    assert_eq!(
        (summary["nodes"].as_u64(), summary["ok"].as_u64()),
        (Some(NODES as u64), Some(NODES as u64)),
        "{body}"
    );
    assert_eq!(summary["drifted"], 0, "{body}");
    assert_eq!(summary["unreconciled"], 0, "{body}");

    // One MAAS machines list per site per reconcile: the drift pass takes the observation
    // the plan was made from. Lists start a reconcile, the count is taken at its end, so
    // over a quiet stretch the two differ by at most the one reconcile in flight.
    let before = scrape(&base).await;
    let lists = |text: &str| {
        metric(
            text,
            "metalform_maas_requests_total{operation=\"list_machines\",status=\"200\"}",
        )
        .unwrap_or(0.0)
    };
    let first = reconciles(&base).await;
    reconciled(&base, first + 4).await;
    let after = scrape(&base).await;
    let reconciles_then = reconciles(&base).await;
    let listed = lists(&after) - lists(&before);
    let ran = (reconciles_then - first) as f64;
    assert!(
        (listed - ran).abs() <= 1.0,
        "{listed} machine lists for {ran} reconciles"
    );
    let drift_findings = "metalform_drift_findings{site=\"dc1\",rule=\"deployed_active\"}";
    assert_eq!(
        metric(&after, drift_findings),
        Some(NODES as f64),
        "{after}"
    );
    assert_eq!(
        metric(
            &after,
            "metalform_drift_findings{site=\"dc1\",rule=\"unmanaged_machine\"}"
        ),
        Some(1.0)
    );

    // The out-of-band changes.
    let mut by_host = BTreeMap::new();
    for host in &hosts {
        let n = d.bed.store.find_node("dc1", host).await.unwrap().unwrap();
        let record = d.bed.store.maas_state(n.id).await.unwrap().unwrap();
        by_host.insert(host.clone(), (n, record.maas_system_id));
    }
    let role = |i: usize| by_host[&hosts[i]].clone();
    let (ok, ok_sid) = role(0);
    let (released, released_sid) = role(1);
    let (deleted, deleted_sid) = role(2);
    let (moved, moved_sid) = role(3);
    let (retired, retired_sid) = role(4);
    let (broken, broken_sid) = role(5);
    let counted: BTreeMap<String, _> = by_host
        .values()
        .map(|(_, sid)| (sid.clone(), counters(&d.bed, sid)))
        .collect();
    let changed_at = Instant::now();
    out_of_band(&d.bed, &released_sid, "release").await;
    out_of_band(&d.bed, &deleted_sid, "delete").await;
    out_of_band(&d.bed, &moved_sid, "change_ip").await;
    out_of_band(&d.bed, &broken_sid, "mark_broken").await;
    retire_without_maas(&d.bed.store, retired.id).await;
    let new_ips = d
        .bed
        .sim("dc1")
        .with_world(|w| w.machine(&moved_sid).unwrap().ip_addresses());
    // A reconcile may be running that observed MAAS before the changes; the one after it
    // starts after them and must handle all of them.
    let changed = reconciles(&base).await;
    reconciled(&base, changed + 2).await;
    eprintln!(
        "checked {:?} after the changes, {} reconciles later",
        changed_at.elapsed(),
        reconciles(&base).await - changed
    );

    for (n, rule) in [
        (&released, "released_outside_workflow"),
        (&deleted, "machine_deleted"),
        (&broken, "hardware_failure"),
    ] {
        assert_eq!(
            node(&d, n.id).await.status,
            NodeState::Quarantined,
            "{}",
            n.hostname
        );
        let record = d.bed.store.maas_state(n.id).await.unwrap().unwrap();
        assert!(record.drift_detected, "{}", n.hostname);
        assert_eq!(record.drift_details["rule"], rule, "{}", n.hostname);
        let transition = audits(&d.bed.store, n.id, "node.transition").await;
        let last = transition.last().unwrap();
        assert_eq!(last.expected_target.as_deref(), Some("quarantined"));
        assert_eq!(last.actor, "metalform-drift");
    }
    let host = node(&d, moved.id).await.host;
    assert_ne!(host, moved.host);
    assert!(
        new_ips.contains(host.as_ref().unwrap()),
        "{host:?} in {new_ips:?}"
    );
    assert_eq!(node(&d, moved.id).await.status, NodeState::Active);
    let record = d.bed.store.maas_state(moved.id).await.unwrap().unwrap();
    assert!(!record.drift_detected && record.drift_details["auto_healed"] == true);
    assert_eq!(node(&d, retired.id).await.status, NodeState::Retired);
    assert!(matches!(
        sim_status(&d.bed, &retired_sid).as_deref(),
        Some("Releasing" | "Ready")
    ));
    assert_eq!(node(&d, ok.id).await.status, NodeState::Active);

    // Later reconciles change nothing more: one release and one power off of the retired
    // machine, no request at all for the machines whose nodes were quarantined, one audited
    // detection each.
    let settled = reconciles(&base).await;
    reconciled(&base, settled + 3).await;
    let retired_now = counters(&d.bed, &retired_sid);
    assert_eq!(retired_now.release, counted[&retired_sid].release + 1);
    assert_eq!(retired_now.power_off, counted[&retired_sid].power_off + 1);
    assert_eq!(retired_now.deploy, counted[&retired_sid].deploy);
    assert_eq!(
        audits(&d.bed.store, retired.id, "node.drift_release_retired")
            .await
            .len(),
        1
    );
    for sid in [&ok_sid, &released_sid, &moved_sid, &broken_sid] {
        assert_eq!(
            counters(&d.bed, sid),
            counted[sid],
            "{sid}: no MAAS request"
        );
    }
    for n in [&released, &deleted, &broken] {
        assert_eq!(
            audits(&d.bed.store, n.id, "node.drift_detected")
                .await
                .len(),
            1,
            "{}",
            n.hostname
        );
    }
    // Nothing redeployed (the deleted machine is gone with its counters; the unmanaged one
    // was never deployed).
    let deploys = d.bed.deploys("dc1");
    assert_eq!(
        deploys.values().sum::<u64>(),
        NODES as u64 - 1,
        "{deploys:?}"
    );
    assert!(deploys.values().all(|n| *n <= 1), "{deploys:?}");

    // Metrics: actions by result (counted once each), findings of the last pass by rule.
    let text = scrape(&base).await;
    for (series, value) in [
        (
            "metalform_drift_actions_total{site=\"dc1\",action=\"quarantine\",result=\"taken\"}",
            3.0,
        ),
        (
            "metalform_drift_actions_total{site=\"dc1\",action=\"update_host\",result=\"taken\"}",
            1.0,
        ),
        (
            "metalform_drift_actions_total{site=\"dc1\",action=\"release_and_power_off\",result=\"taken\"}",
            1.0,
        ),
        (
            "metalform_drift_findings{site=\"dc1\",rule=\"not_in_service\"}",
            4.0,
        ),
        (
            "metalform_drift_findings{site=\"dc1\",rule=\"deployed_active\"}",
            2.0,
        ),
        (
            "metalform_drift_findings{site=\"dc1\",rule=\"machine_deleted\"}",
            0.0,
        ),
    ] {
        assert_eq!(metric(&text, series), Some(value), "{series} in\n{text}");
    }

    // reconciliation/run runs the drift pass too, and answers with it.
    let (status, run) = call(
        Method::POST,
        url("/run"),
        Some(ADMIN_TOKEN),
        Some(json!({"site": "dc1", "wait": true, "reason": "after the MAAS maintenance"})),
    )
    .await;
    assert_eq!(status, 200, "{run}");
    let pass = &run["results"][0]["drift"];
    assert_eq!(pass["by_rule"]["not_in_service"], 4, "{run}");
    assert_eq!(pass["by_rule"]["deployed_active"], 2, "{run}");
    assert_eq!(pass["by_rule"]["unmanaged_machine"], 1, "{run}");
    assert_eq!(pass["actions"], json!([]), "{run}");

    // The §6.6 routes: admin only.
    let nil = uuid::Uuid::nil();
    let routes = [
        (Method::GET, url("/status"), None),
        (Method::GET, url("/drift"), None),
        (
            Method::POST,
            url(&format!("/drift/{}/resolve", released.id)),
            Some(json!({"reason": "x"})),
        ),
    ];
    for (method, route, body) in &routes {
        let (status, answer) = call(method.clone(), route.clone(), None, body.clone()).await;
        assert_eq!(
            (status, answer["error"].as_str()),
            (401, Some("unauthorized"))
        );
        let (status, answer) = call(
            method.clone(),
            route.clone(),
            Some(AGENT_TOKEN),
            body.clone(),
        )
        .await;
        assert_eq!((status, answer["error"].as_str()), (403, Some("forbidden")));
    }
    assert!(node(&d, released.id).await.status == NodeState::Quarantined);

    // The summary and the list.
    let (status, body) = call(Method::GET, url("/status"), Some(ADMIN_TOKEN), None).await;
    assert_eq!(status, 200, "{body}");
    let summary = &body["summary"];
    assert_eq!(summary["drifted"], 3, "{body}");
    assert_eq!(summary["ok"], 3, "{body}");
    assert_eq!(summary["by_rule"]["hardware_failure"], 1, "{body}");
    assert_eq!(summary["sites"]["dc1"]["drifted"], 3, "{body}");
    let (status, body) = call(Method::GET, url("/drift"), Some(ADMIN_TOKEN), None).await;
    assert_eq!(status, 200, "{body}");
    let open: BTreeMap<&str, &str> = body["drift"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["hostname"].as_str().unwrap(), e["rule"].as_str().unwrap()))
        .collect();
    assert_eq!(
        open,
        BTreeMap::from([
            (released.hostname.as_str(), "released_outside_workflow"),
            (deleted.hostname.as_str(), "machine_deleted"),
            (broken.hostname.as_str(), "hardware_failure"),
        ])
    );
    let (_, body) = call(
        Method::GET,
        url("/drift?site=dc1&all=true"),
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(body["drift"].as_array().unwrap().len(), 5, "{body}");
    let (status, body) = call(Method::GET, url("/drift?al=1"), Some(ADMIN_TOKEN), None).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")));

    // Resolve refused: typed, and nothing changes (no audit row, the record as it was).
    let resolve = |id: String| url(&format!("/drift/{id}/resolve"));
    let rows = audit_rows(&d, released.id).await;
    let record = d.bed.store.maas_state(released.id).await.unwrap();
    for (id, body, status, code) in [
        (
            released.id.to_string(),
            json!({"action": "reactivate"}),
            400,
            "bad_request",
        ),
        (
            released.id.to_string(),
            json!({"reason": "   "}),
            400,
            "bad_request",
        ),
        (
            "gpu-1".to_owned(),
            json!({"reason": "looked"}),
            400,
            "bad_request",
        ),
        (
            nil.to_string(),
            json!({"reason": "looked"}),
            404,
            "not_found",
        ),
        (
            released.id.to_string(),
            json!({"action": "reactivate", "reason": "looks fine"}),
            409,
            "refused",
        ),
        (
            released.id.to_string(),
            json!({"action": "reboot", "reason": "looks fine"}),
            400,
            "bad_request",
        ),
        (
            ok.id.to_string(),
            json!({"reason": "nothing there"}),
            409,
            "nothing_to_resolve",
        ),
    ] {
        let (got, answer) = call(
            Method::POST,
            resolve(id.clone()),
            Some(ADMIN_TOKEN),
            Some(body.clone()),
        )
        .await;
        assert_eq!(
            (got, answer["error"].as_str()),
            (status, Some(code)),
            "{id} {body}: {answer}"
        );
        if code == "refused" {
            assert!(
                answer["message"]
                    .as_str()
                    .unwrap()
                    .contains("only once its machine is Deployed again"),
                "{answer}"
            );
        }
    }
    assert_eq!(audit_rows(&d, released.id).await, rows);
    assert_eq!(d.bed.store.maas_state(released.id).await.unwrap(), record);
    assert_eq!(node(&d, released.id).await.status, NodeState::Quarantined);

    // Acknowledge: resolved, the node stays quarantined, audited with the token's name.
    let (status, body) = call(
        Method::POST,
        resolve(released.id.to_string()),
        Some(ADMIN_TOKEN),
        Some(json!({"reason": "released for a BIOS update (CHG-1234)"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["resolution"], "acknowledge");
    assert_eq!(body["node"]["status"], "quarantined", "{body}");
    assert_eq!(body["maas_state"]["drift_detected"], false, "{body}");
    let acknowledged = audits(&d.bed.store, released.id, "node.drift_acknowledged").await;
    assert_eq!(acknowledged.len(), 1);
    assert_eq!(
        (
            acknowledged[0].actor.as_str(),
            acknowledged[0].role.as_str()
        ),
        ("ops-alice", "admin")
    );
    assert_eq!(
        acknowledged[0].reason.as_deref(),
        Some("released for a BIOS update (CHG-1234)")
    );
    let (status, body) = call(
        Method::POST,
        resolve(released.id.to_string()),
        Some(ADMIN_TOKEN),
        Some(json!({"reason": "again"})),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("nothing_to_resolve"))
    );

    // Reactivate: the broken machine is fixed in MAAS (Deployed again); once a pass of the
    // daemon recorded that, the admin brings the node back and the daemon keeps it active.
    let env = drift_env(&d.bed, d.bed.store.clone(), DriftPolicy::default());
    let client = env
        .maas
        .client(
            &d.bed.fleet.sites[&SiteName::new("dc1")],
            d.bed.secrets.as_ref(),
        )
        .await
        .unwrap();
    client
        .mark_fixed(&broken_sid, Some("reseated the GPU"))
        .await
        .unwrap();
    let fixed = reconciles(&base).await;
    reconciled(&base, fixed + 2).await;
    let record = d.bed.store.maas_state(broken.id).await.unwrap().unwrap();
    assert_eq!(record.last_maas_status.as_deref(), Some("Deployed"));
    assert_eq!(node(&d, broken.id).await.status, NodeState::Quarantined);
    let (status, body) = call(
        Method::POST,
        resolve(broken.id.to_string()),
        Some(ADMIN_TOKEN),
        Some(json!({"action": "reactivate", "reason": "GPU reseated, burn-in passed"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["node"]["status"], "active", "{body}");
    let reactivated = audits(&d.bed.store, broken.id, "node.drift_reactivated").await;
    assert_eq!(
        (reactivated[0].actor.as_str(), reactivated[0].role.as_str()),
        ("ops-alice", "admin")
    );
    let later = reconciles(&base).await;
    reconciled(&base, later + 2).await;
    assert_eq!(node(&d, broken.id).await.status, NodeState::Active);
    let record = d.bed.store.maas_state(broken.id).await.unwrap().unwrap();
    assert!(!record.drift_detected, "{:?}", record.drift_details);

    daemon.shutdown().await;
}
