//! Drift reconciliation against the simulator (seed 000 §6.3–§6.6): nodes are onboarded to
//! active for real, an operator changes MAAS out of band through `/sim/v1/machines/{id}/oob`,
//! and one drift pass detects and handles every row of the §6.4 table — checked on the node
//! state, `node_maas_state`, the audit log and the simulator's request counters.

use crate::drift_support;

use std::collections::BTreeMap;
use std::sync::Arc;

use metalform::clock::ManualClock;
use metalform::drift::{self, ActionResult, DriftFilter, DriftPolicy, Resolution, ResolveError};
use metalform::lifecycle::NodeState;
use metalform::store::{Actor, Store};

use drift_support::*;

fn rule_of(report: &drift::DriftReport, node: uuid::Uuid) -> &'static str {
    report
        .finding(node)
        .expect("a finding per node")
        .rule
        .as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_row_of_the_table_is_detected_and_handled_in_one_pass() {
    let bed = active_site(10, 2).await;
    let nodes = nodes(&bed).await;
    assert_eq!(nodes.len(), 10);
    let role = |i: usize| (nodes[i].0.clone(), nodes[i].1.clone());
    let (ok, ok_sid) = role(0);
    let (silent, silent_sid) = role(1);
    let (released, released_sid) = role(2);
    let (broken, broken_sid) = role(3);
    let (failed, failed_sid) = role(4);
    let (recommissioned, recommissioned_sid) = role(5);
    let (moved, moved_sid) = role(6);
    let (deleted, deleted_sid) = role(7);
    let (retired, retired_sid) = role(8);
    let (redeployed, redeployed_sid) = role(9);
    let before: BTreeMap<String, _> = nodes
        .iter()
        .map(|(_, sid)| (sid.clone(), counters(&bed, sid)))
        .collect();

    // The operator's changes, made in MAAS behind metalform's back.
    out_of_band(&bed, &released_sid, "release").await;
    out_of_band(&bed, &broken_sid, "mark_broken").await;
    out_of_band(&bed, &failed_sid, "fail_testing").await;
    out_of_band(&bed, &recommissioned_sid, "recommission").await;
    out_of_band(&bed, &moved_sid, "change_ip").await;
    out_of_band(&bed, &deleted_sid, "delete").await;
    // A redeploy that stays Deploying for the test's duration.
    bed.sim("dc1")
        .with_world(|w| w.config.timings.deploying_secs = 30.0 * 86_400.0);
    out_of_band(&bed, &redeployed_sid, "redeploy").await;
    silence_agent(&bed, silent.id, &silent_sid, chrono::Duration::hours(1)).await;
    retire_without_maas(&bed.store, retired.id).await;
    let new_ip = bed.sim("dc1").with_world(|w| {
        let m = w.machine(&moved_sid).unwrap();
        m.ip_addresses()
    });

    let env = drift_env(&bed, bed.store.clone(), DriftPolicy::default());
    let report = pass(&env, &bed).await;
    eprintln!("{}", serde_json::to_string_pretty(&report).unwrap());
    assert!(report.unreadable.is_none());
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.findings.len(), 10);

    let expect = [
        (&ok, "deployed_active", NodeState::Active),
        (&silent, "agent_not_polling", NodeState::Offline),
        (
            &released,
            "released_outside_workflow",
            NodeState::Quarantined,
        ),
        (&broken, "hardware_failure", NodeState::Quarantined),
        (&failed, "hardware_failure", NodeState::Quarantined),
        (
            &recommissioned,
            "unexpected_recommission",
            NodeState::Active,
        ),
        (&moved, "ip_changed", NodeState::Active),
        (&deleted, "machine_deleted", NodeState::Quarantined),
        (&retired, "retired_still_deployed", NodeState::Retired),
        (
            &redeployed,
            "released_outside_workflow",
            NodeState::Quarantined,
        ),
    ];
    for (node, rule, state) in expect {
        assert_eq!(rule_of(&report, node.id), rule, "{}", node.hostname);
        let now = bed.store.node(node.id).await.unwrap();
        assert_eq!(now.status, state, "{}", node.hostname);
        let record = bed.store.maas_state(node.id).await.unwrap().unwrap();
        assert!(record.last_reconciled_at.is_some(), "{}", node.hostname);
        assert_eq!(
            record.drift_details["rule"].as_str(),
            (rule != "deployed_active").then_some(rule),
            "{}",
            node.hostname
        );
    }
    assert_eq!(report.by_rule["unmanaged_machine"], 2);
    assert_eq!(report.unmanaged.len(), 2);

    // Row 1: nothing to do.
    let record = bed.store.maas_state(ok.id).await.unwrap().unwrap();
    assert!(!record.drift_detected);
    assert_eq!(record.last_maas_status.as_deref(), Some("Deployed"));
    assert_eq!(record.maas_system_id, ok_sid);

    // Quarantine rows: node quarantined with an audited reason, drift open, and MAAS left
    // exactly as the operator left it (no request of ours took effect on those machines).
    for (node, sid, status) in [
        (&released, &released_sid, vec!["Releasing", "Ready"]),
        (&broken, &broken_sid, vec!["Broken"]),
        (&failed, &failed_sid, vec!["Failed testing"]),
        (&redeployed, &redeployed_sid, vec!["Deploying"]),
    ] {
        let record = bed.store.maas_state(node.id).await.unwrap().unwrap();
        assert!(record.drift_detected, "{}", node.hostname);
        assert!(
            status.contains(&record.last_maas_status.as_deref().unwrap()),
            "{}: {:?}",
            node.hostname,
            record.last_maas_status
        );
        let transitions = audits(&bed.store, node.id, "node.transition").await;
        let last = transitions.last().unwrap();
        assert_eq!(last.expected_target.as_deref(), Some("quarantined"));
        assert_eq!(last.prior_state.as_deref(), Some("active"));
        assert_eq!(last.actor, "metalform-drift");
        assert_eq!(last.correlation_ids["owner"], "reconciler");
        assert!(
            last.reason.as_deref().unwrap().starts_with("drift "),
            "{:?}",
            last.reason
        );
        assert_eq!(
            audits(&bed.store, node.id, "node.drift_detected")
                .await
                .len(),
            1
        );
        assert_eq!(
            counters(&bed, sid),
            before[sid],
            "{}: no MAAS call",
            node.hostname
        );
    }
    let deleted_record = bed.store.maas_state(deleted.id).await.unwrap().unwrap();
    assert!(deleted_record.drift_detected);
    assert_eq!(deleted_record.last_maas_status, None, "absent");
    assert_eq!(deleted_record.maas_system_id, deleted_sid);

    // Offline: a warning, the node moved by the reconciler, no MAAS call.
    let record = bed.store.maas_state(silent.id).await.unwrap().unwrap();
    assert!(record.drift_detected);
    assert_eq!(counters(&bed, &silent_sid), before[&silent_sid]);
    let last = audits(&bed.store, silent.id, "node.transition").await;
    assert_eq!(
        last.last().unwrap().expected_target.as_deref(),
        Some("offline")
    );

    // Recommissioning: a warning only; the node stays active.
    let record = bed
        .store
        .maas_state(recommissioned.id)
        .await
        .unwrap()
        .unwrap();
    assert!(record.drift_detected);
    assert_eq!(record.last_maas_status.as_deref(), Some("Commissioning"));
    assert_eq!(
        counters(&bed, &recommissioned_sid),
        before[&recommissioned_sid]
    );

    // IP changed: the host follows MAAS, audited; the drift healed at once.
    let node = bed.store.node(moved.id).await.unwrap();
    assert_ne!(node.host, moved.host);
    assert!(
        new_ip.contains(node.host.as_ref().unwrap()),
        "{:?} in {new_ip:?}",
        node.host
    );
    let record = bed.store.maas_state(moved.id).await.unwrap().unwrap();
    assert!(!record.drift_detected);
    assert!(record.drift_resolved_at.is_some());
    assert_eq!(record.drift_details["auto_healed"], true);
    let set_host = audits(&bed.store, moved.id, "node.set_host").await;
    assert_eq!(set_host.last().unwrap().actor, "metalform-drift");
    assert_eq!(counters(&bed, &moved_sid), before[&moved_sid]);

    // Retired but Deployed: exactly one release and one power off, audited first.
    let after = counters(&bed, &retired_sid);
    assert_eq!(after.release, before[&retired_sid].release + 1);
    assert_eq!(after.power_off, before[&retired_sid].power_off + 1);
    assert_eq!(after.deploy, before[&retired_sid].deploy);
    assert!(matches!(
        sim_status(&bed, &retired_sid).as_deref(),
        Some("Releasing" | "Ready")
    ));
    assert_eq!(
        audits(&bed.store, retired.id, "node.drift_release_retired")
            .await
            .len(),
        1
    );
    let record = bed.store.maas_state(retired.id).await.unwrap().unwrap();
    assert!(!record.drift_detected && record.drift_details["auto_healed"] == true);
    let taken: Vec<(&str, &str)> = report
        .taken()
        .map(|a| (a.hostname.as_str(), a.action.as_str()))
        .collect();
    assert_eq!(taken.len(), 8, "{taken:?}");
    assert!(taken.contains(&(retired.hostname.as_str(), "release_and_power_off")));

    // A second pass changes nothing more: no action, no new audit, no MAAS request.
    let counters_now: BTreeMap<String, _> = nodes
        .iter()
        .map(|(_, sid)| (sid.clone(), counters(&bed, sid)))
        .collect();
    let again = pass(&env, &bed).await;
    assert_eq!(again.taken().count(), 0, "{:?}", again.actions);
    for (_, sid) in &nodes {
        assert_eq!(counters(&bed, sid), counters_now[sid], "{sid}");
    }
    assert_eq!(
        audits(&bed.store, recommissioned.id, "node.drift_detected")
            .await
            .len(),
        1
    );
    assert_eq!(rule_of(&again, retired.id), "not_in_service");
    assert_eq!(rule_of(&again, released.id), "not_in_service");

    // The read models: open drift, and the summary of 000 §6.6.
    let open = drift::list(&bed.store, &DriftFilter::default())
        .await
        .unwrap();
    let mut drifted: Vec<&str> = open.iter().map(|e| e.hostname.as_str()).collect();
    drifted.sort();
    let mut expected = vec![
        silent.hostname.as_str(),
        released.hostname.as_str(),
        broken.hostname.as_str(),
        failed.hostname.as_str(),
        recommissioned.hostname.as_str(),
        deleted.hostname.as_str(),
        redeployed.hostname.as_str(),
    ];
    expected.sort();
    assert_eq!(drifted, expected);
    let all = drift::list(
        &bed.store,
        &DriftFilter {
            include_resolved: true,
            ..DriftFilter::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        all.len(),
        9,
        "plus the healed IP change and retired cleanup"
    );
    let summary = drift::summary(&bed.store).await.unwrap();
    assert_eq!(summary.nodes, 10);
    assert_eq!(summary.counts.drifted, 7);
    assert_eq!(summary.counts.ok, 3);
    assert_eq!(summary.counts.unreconciled, 0);
    assert_eq!(summary.by_rule["hardware_failure"], 2);

    // Resolve: reactivating needs the machine Deployed again.
    let admin = Actor::admin("oncall");
    let err = drift::resolve(
        &bed.store,
        released.id,
        Resolution::Reactivate,
        &admin,
        "looked at it",
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ResolveError::Refused { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("it goes back to active only once its machine is Deployed again"),
        "{err}"
    );
    assert_eq!(err.http_status(), 409);
    // The broken machine is fixed in MAAS (mark_fixed returns a deployed machine to
    // Deployed): the next pass records it, then an admin reactivates the node.
    let site = &bed.fleet.sites[&metalform::model::SiteName::new("dc1")];
    let client = env.maas.client(site, bed.secrets.as_ref()).await.unwrap();
    client
        .mark_fixed(&broken_sid, Some("reseated the GPU"))
        .await
        .unwrap();
    assert_eq!(sim_status(&bed, &broken_sid).as_deref(), Some("Deployed"));
    let third = pass(&env, &bed).await;
    assert_eq!(rule_of(&third, broken.id), "not_in_service");
    assert_eq!(
        third.taken().count(),
        0,
        "a quarantined node is not reactivated by itself"
    );
    let resolved = drift::resolve(
        &bed.store,
        broken.id,
        Resolution::Reactivate,
        &admin,
        "GPU reseated, burn-in passed",
    )
    .await
    .unwrap();
    assert_eq!(resolved.node.status, NodeState::Active);
    let record = resolved.maas_state.unwrap();
    assert!(!record.drift_detected);
    assert_eq!(record.drift_details["acknowledged"]["by"], "oncall");
    let reactivated = audits(&bed.store, broken.id, "node.drift_reactivated").await;
    assert_eq!(
        reactivated[0].reason.as_deref(),
        Some("GPU reseated, burn-in passed")
    );
    assert_eq!(reactivated[0].role, "admin");
    let fourth = pass(&env, &bed).await;
    assert_eq!(rule_of(&fourth, broken.id), "deployed_active");

    // Acknowledge a warning: it stays resolved while nothing changes.
    drift::resolve(
        &bed.store,
        recommissioned.id,
        Resolution::Acknowledge,
        &admin,
        "firmware update",
    )
    .await
    .unwrap();
    let err = drift::resolve(
        &bed.store,
        recommissioned.id,
        Resolution::Acknowledge,
        &admin,
        "again",
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, ResolveError::NothingToResolve { .. }),
        "{err}"
    );
    let fifth = pass(&env, &bed).await;
    assert_eq!(
        rule_of(&fifth, recommissioned.id),
        "unexpected_recommission"
    );
    let record = bed
        .store
        .maas_state(recommissioned.id)
        .await
        .unwrap()
        .unwrap();
    assert!(!record.drift_detected, "acknowledged drift is not reopened");
    assert_eq!(
        audits(&bed.store, recommissioned.id, "node.drift_acknowledged")
            .await
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heartbeat_unreadable_site_and_partial_list() {
    let bed = active_site(4, 0).await;
    let nodes = nodes(&bed).await;
    let clock = ManualClock::new(chrono::Utc::now());
    let store = Store::open(&bed.state_url, Arc::new(clock.clone()))
        .await
        .unwrap();
    let policy = DriftPolicy {
        heartbeat_threshold: std::time::Duration::from_secs(300),
        ..DriftPolicy::default()
    };
    let env = drift_env(&bed, store.clone(), policy);
    let first = pass(&env, &bed).await;
    assert!(
        first
            .findings
            .iter()
            .all(|f| f.rule.as_str() == "deployed_active")
    );

    // 000 §6.3: no agent contact past the threshold → offline (owner: reconciler) …
    clock.advance(chrono::Duration::minutes(6));
    let report = pass(&env, &bed).await;
    for (node, sid) in &nodes {
        assert_eq!(rule_of(&report, node.id), "agent_not_polling");
        assert_eq!(
            store.node(node.id).await.unwrap().status,
            NodeState::Offline
        );
        assert_eq!(counters(&bed, sid).power_off, 0, "no MAAS action");
    }
    // … and back to active on contact (the agent's authenticated call records it).
    let back = &nodes[0].0;
    store.touch_agent_contact(back.id).await.unwrap();
    assert_eq!(
        store.last_agent_contact(back.id).await.unwrap(),
        Some(clock.now_for_test())
    );
    let report = pass(&env, &bed).await;
    assert_eq!(rule_of(&report, back.id), "deployed_active");
    assert_eq!(store.node(back.id).await.unwrap().status, NodeState::Active);
    let record = store.maas_state(back.id).await.unwrap().unwrap();
    assert!(!record.drift_detected, "the heartbeat drift healed");
    assert_eq!(record.drift_resolved_at, Some(clock.now_for_test()));
    assert_eq!(
        store.node(nodes[1].0.id).await.unwrap().status,
        NodeState::Offline
    );

    // An unreadable site is not an empty one: nothing is quarantined, nothing recorded.
    let good_key = serde_json::json!({"token": bed.sim("dc1").api_key().expose()});
    bed.put_secret("kv/dc1/api-token", serde_json::json!({"token": "x:y:z"}));
    let before: Vec<_> = futures_states(&store, &nodes).await;
    clock.advance(chrono::Duration::seconds(30));
    let report = pass(&env, &bed).await;
    assert!(report.unreadable.is_some());
    assert!(report.taken().count() == 0, "{:?}", report.actions);
    assert_eq!(futures_states(&store, &nodes).await, before);
    assert!(
        report
            .findings
            .iter()
            .all(|f| matches!(f.rule.as_str(), "maas_unreadable" | "agent_not_polling"))
    );
    bed.put_secret("kv/dc1/api-token", good_key);

    // Most machines gone from a list that did answer: taken for partial, nothing quarantined.
    for (_, sid) in &nodes[1..] {
        out_of_band(&bed, sid, "delete").await;
    }
    let report = pass(&env, &bed).await;
    assert!(report.guard.is_some());
    assert_eq!(report.by_rule["machine_deleted"], 3);
    let held: Vec<&ActionResult> = report
        .actions
        .iter()
        .filter(|a| a.action.as_str() == "quarantine")
        .map(|a| &a.result)
        .collect();
    assert_eq!(held.len(), 3);
    assert!(held.iter().all(|r| matches!(r, ActionResult::Held(_))));
    for (node, _) in &nodes[1..] {
        assert_eq!(
            store.node(node.id).await.unwrap().status,
            NodeState::Offline
        );
        assert!(
            store
                .maas_state(node.id)
                .await
                .unwrap()
                .unwrap()
                .drift_detected
        );
    }
}

/// Each node's (status, drift flag, reconciled at).
async fn futures_states(
    store: &Store,
    nodes: &[(metalform::store::Node, String)],
) -> Vec<(NodeState, bool, Option<chrono::DateTime<chrono::Utc>>)> {
    let mut out = Vec::new();
    for (node, _) in nodes {
        let record = store.maas_state(node.id).await.unwrap().unwrap();
        out.push((
            store.node(node.id).await.unwrap().status,
            record.drift_detected,
            record.last_reconciled_at,
        ));
    }
    out
}

trait NowForTest {
    fn now_for_test(&self) -> chrono::DateTime<chrono::Utc>;
}

impl NowForTest for ManualClock {
    fn now_for_test(&self) -> chrono::DateTime<chrono::Utc> {
        use metalform::clock::Clock;
        // The store keeps microseconds.
        let now = self.now();
        now - chrono::Duration::nanoseconds(now.timestamp_subsec_nanos() as i64 % 1000)
    }
}
