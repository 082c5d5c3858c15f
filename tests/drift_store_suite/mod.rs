//! The drift store suite (seed 000 §6.3 last agent contact, §6.5 `node_maas_state`, §6.6
//! resolve), run on SQLite (tests/drift_store.rs, hermetic) and on a real PostgreSQL
//! (tests/drift_store_postgres.rs, `--features services`). Each case takes the URL of an empty
//! store; nodes are onboarded through the agent suite's helpers (real enrollment tokens).

#![allow(dead_code)]

use chrono::Duration;
use metalform::drift::{self, Resolution, ResolveError};
use metalform::lifecycle::{DecommissionMode, JobKind, JobState, NodeState, Owner};
use metalform::store::{
    Actor, ConvergedHistory, ConvergedNode, DriftMark, DriftRecord, JobFilter, JobUpdate,
    MaasObservation, NewDecommission, NodeTransition, Store, StoreError,
};
use serde_json::json;
use uuid::Uuid;

use crate::agent_suite::{self, Onboarding, open, request, t0};

fn reconciler() -> Actor {
    Actor::system("metalform-drift")
}

/// An onboarded node: its agent enrolled at t0 + 12 min, the onboarding completed, active.
async fn active(
    store: &Store,
    clock: &metalform::clock::ManualClock,
    hostname: &str,
) -> (Onboarding, metalform::secrets::Secret) {
    let o = agent_suite::onboarding(store, hostname, &format!("sys-{hostname}")).await;
    clock.advance(Duration::minutes(12));
    let enrolled = store
        .enroll_agent(&request(&o.token, hostname, &format!("sys-{hostname}")))
        .await
        .unwrap();
    let mut done = JobUpdate::new(JobState::Completed);
    done.node_transition = Some(NodeTransition::new(
        NodeState::Active,
        Owner::OnboardingWorkflow,
        Actor::system("apply"),
    ));
    store
        .advance_job(JobKind::Onboarding, o.job, &done)
        .await
        .unwrap();
    (o, enrolled.agent_token)
}

fn observation(hostname: &str, status: Option<&str>) -> MaasObservation {
    MaasObservation {
        site: "dc1".into(),
        system_id: format!("sys-{hostname}"),
        status: status.map(str::to_owned),
        power_state: Some("on".into()),
        ips: vec!["10.0.0.5".into()],
    }
}

pub async fn agent_contact_is_the_newest_authenticated_call(url: String) {
    let (store, clock) = open(&url).await;
    let o = agent_suite::onboarding(&store, "c07u43", "x7k3pa").await;
    assert_eq!(store.last_agent_contact(o.node).await.unwrap(), None);
    clock.advance(Duration::minutes(12));
    let enrolled = store
        .enroll_agent(&request(&o.token, "c07u43", "x7k3pa"))
        .await
        .unwrap();
    let enrolled_at = t0() + Duration::minutes(12);
    assert_eq!(
        store.last_agent_contact(o.node).await.unwrap(),
        Some(enrolled_at)
    );
    // The agent's later calls with its token (task polls) move it on.
    clock.advance(Duration::minutes(40));
    store
        .authenticate_agent(&enrolled.agent_token)
        .await
        .unwrap()
        .expect("a current agent token");
    let polled_at = enrolled_at + Duration::minutes(40);
    assert_eq!(
        store.last_agent_contact(o.node).await.unwrap(),
        Some(polled_at)
    );
    let contacts = store.agent_contacts(Some("dc1")).await.unwrap();
    assert_eq!(contacts.get(&o.node), Some(&polled_at));
    assert!(store.agent_contacts(Some("dc2")).await.unwrap().is_empty());
    assert!(matches!(
        store.last_agent_contact(Uuid::new_v4()).await,
        Err(StoreError::NotFound { kind: "node", .. })
    ));
}

pub async fn a_drift_record_is_written_whole_or_not_at_all(url: String) {
    let (store, clock) = open(&url).await;
    let (o, _) = active(&store, &clock, "c07u43").await;
    let node = store.node(o.node).await.unwrap();
    let serial = store.serial().await.unwrap();
    let quarantine = |node: &metalform::store::Node| {
        let mut record = DriftRecord::new(node, reconciler());
        record.observation = Some(observation("c07u43", Some("Ready")));
        record.mark = DriftMark::Flag(json!({"rule": "released_outside_workflow"}));
        record.transition = Some((NodeState::Quarantined, Owner::Reconciler));
        record.reason = Some("drift released_outside_workflow".into());
        record.audit = Some((
            "node.drift_detected".into(),
            json!({"rule": "released_outside_workflow"}),
        ));
        record
    };

    // Decided on an older read of the node: refused, nothing written.
    let mut stale = quarantine(&node);
    stale.expected_generation -= 1;
    assert!(matches!(
        store.record_drift(&stale).await,
        Err(StoreError::StaleGeneration { .. })
    ));
    // An illegal move (the reconciler may not retire a node): refused, and none of the record
    // (observation, flag, audit) is written.
    let mut illegal = quarantine(&node);
    illegal.transition = Some((NodeState::Retired, Owner::Reconciler));
    assert!(matches!(
        store.record_drift(&illegal).await,
        Err(StoreError::Transition { .. })
    ));
    assert_eq!(store.serial().await.unwrap(), serial);
    assert_eq!(store.maas_state(o.node).await.unwrap(), None);
    assert_eq!(store.node(o.node).await.unwrap().status, NodeState::Active);

    // A job opened meanwhile owns the node: refused.
    let job = store
        .create_decommission(&NewDecommission {
            node_id: o.node,
            mode: DecommissionMode::SoftReset,
            erase: None,
            storage_cleanup: None,
            reason: None,
            requested_by: None,
            plan_id: None,
        })
        .await
        .unwrap();
    let node = store.node(o.node).await.unwrap();
    assert!(matches!(
        store.record_drift(&quarantine(&node)).await,
        Err(StoreError::JobOpen {
            kind: "decommission",
            ..
        })
    ));
    assert_eq!(store.maas_state(o.node).await.unwrap(), None);
    store
        .advance_job(
            JobKind::Decommission,
            job.id,
            &JobUpdate::new(JobState::Cancelled),
        )
        .await
        .unwrap();

    // Otherwise: the observation, the flag, the quarantine and both audit rows at once.
    clock.advance(Duration::minutes(1));
    let node = store.node(o.node).await.unwrap();
    let (after, state) = store.record_drift(&quarantine(&node)).await.unwrap();
    assert_eq!(after.status, NodeState::Quarantined);
    let state = state.unwrap();
    assert_eq!(state.last_maas_status.as_deref(), Some("Ready"));
    assert_eq!(state.last_reconciled_at, Some(clock_now(&clock)));
    assert!(state.drift_detected);
    assert_eq!(state.drift_details["rule"], "released_outside_workflow");
    let actions: Vec<String> = store
        .audit_log("node", &o.node.to_string())
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.action)
        .filter(|a| a.starts_with("node.drift") || a == "node.transition")
        .collect();
    assert_eq!(
        actions.last().map(String::as_str),
        Some("node.drift_detected")
    );
    assert!(actions.contains(&"node.transition".to_owned()));

    // Clear only touches a flagged row, and stamps the resolution time.
    clock.advance(Duration::minutes(1));
    let node = store.node(o.node).await.unwrap();
    let mut clear = DriftRecord::new(&node, reconciler());
    clear.mark = DriftMark::Clear;
    let (_, state) = store.record_drift(&clear).await.unwrap();
    let state = state.unwrap();
    assert!(!state.drift_detected);
    assert_eq!(state.drift_resolved_at, Some(clock_now(&clock)));
    assert_eq!(
        state.drift_details["rule"], "released_outside_workflow",
        "kept"
    );
}

fn clock_now(clock: &metalform::clock::ManualClock) -> chrono::DateTime<chrono::Utc> {
    use metalform::clock::Clock;
    clock.now()
}

pub async fn resolve_acknowledges_or_reactivates_and_refuses_otherwise(url: String) {
    let (store, clock) = open(&url).await;
    let (o, _) = active(&store, &clock, "c07u43").await;
    let admin = Actor::admin("oncall");
    let node = store.node(o.node).await.unwrap();
    let mut record = DriftRecord::new(&node, reconciler());
    record.observation = Some(observation("c07u43", Some("Broken")));
    record.mark = DriftMark::Flag(json!({"rule": "hardware_failure", "maas_status": "Broken"}));
    record.transition = Some((NodeState::Quarantined, Owner::Reconciler));
    store.record_drift(&record).await.unwrap();

    let refuse = |r: Result<drift::Resolved, ResolveError>| r.unwrap_err();
    let err = refuse(drift::resolve(&store, o.node, Resolution::Acknowledge, &admin, " ").await);
    assert!(matches!(err, ResolveError::MissingReason));
    let err =
        refuse(drift::resolve(&store, Uuid::nil(), Resolution::Acknowledge, &admin, "x").await);
    assert_eq!(err.http_status(), 404);
    let err = refuse(drift::resolve(&store, o.node, Resolution::Reactivate, &admin, "x").await);
    assert_eq!(err.kind(), "refused");
    assert!(
        err.to_string()
            .contains("MAAS last showed Broken for sys-c07u43"),
        "{err}"
    );

    let done = drift::resolve(
        &store,
        o.node,
        Resolution::Acknowledge,
        &admin,
        "known DIMM",
    )
    .await
    .unwrap();
    assert_eq!(
        done.node.status,
        NodeState::Quarantined,
        "acknowledge does not move it"
    );
    let state = done.maas_state.unwrap();
    assert!(!state.drift_detected);
    assert_eq!(state.drift_details["acknowledged"]["reason"], "known DIMM");
    let err = refuse(drift::resolve(&store, o.node, Resolution::Acknowledge, &admin, "x").await);
    assert_eq!((err.kind(), err.http_status()), ("nothing_to_resolve", 409));

    // MAAS shows it Deployed again: reactivation by an operator.
    let node = store.node(o.node).await.unwrap();
    let mut seen = DriftRecord::new(&node, reconciler());
    seen.observation = Some(observation("c07u43", Some("Deployed")));
    store.record_drift(&seen).await.unwrap();
    let done = drift::resolve(&store, o.node, Resolution::Reactivate, &admin, "fixed")
        .await
        .unwrap();
    assert_eq!(done.node.status, NodeState::Active);
    let err = refuse(drift::resolve(&store, o.node, Resolution::Reactivate, &admin, "x").await);
    assert!(
        err.to_string()
            .ends_with("it is active; only a quarantined node is reactivated"),
        "{err}"
    );
    let audit = store.audit_log("node", &o.node.to_string()).await.unwrap();
    let resolved: Vec<(&str, &str, Option<&str>)> = audit
        .iter()
        .filter(|a| a.action.starts_with("node.drift_"))
        .map(|a| (a.action.as_str(), a.actor.as_str(), a.reason.as_deref()))
        .collect();
    assert_eq!(
        resolved,
        vec![
            ("node.drift_acknowledged", "oncall", Some("known DIMM")),
            ("node.drift_reactivated", "oncall", Some("fixed")),
        ]
    );
}

pub async fn the_summary_counts_ok_drifted_and_unreconciled(url: String) {
    let (store, clock) = open(&url).await;
    let (a, _) = active(&store, &clock, "a1").await;
    let (b, _) = active(&store, &clock, "b1").await;
    active(&store, &clock, "c1").await;
    agent_suite::onboarding(&store, "d1", "sys-d1").await; // enrolling: not watched
    for (o, hostname, mark) in [
        (&a, "a1", DriftMark::Clear),
        (
            &b,
            "b1",
            DriftMark::Flag(json!({"rule": "unexpected_recommission"})),
        ),
    ] {
        let node = store.node(o.node).await.unwrap();
        let mut record = DriftRecord::new(&node, reconciler());
        record.observation = Some(observation(hostname, Some("Deployed")));
        record.mark = mark;
        store.record_drift(&record).await.unwrap();
    }
    let summary = drift::summary(&store).await.unwrap();
    assert_eq!(summary.nodes, 3);
    assert_eq!(
        (
            summary.counts.ok,
            summary.counts.drifted,
            summary.counts.unreconciled
        ),
        (1, 1, 1)
    );
    assert_eq!(summary.by_rule["unexpected_recommission"], 1);
    assert_eq!(summary.sites["dc1"].unreconciled, 1);
    let open = drift::list(&store, &drift::DriftFilter::default())
        .await
        .unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].hostname, "b1");
    assert_eq!(open[0].rule.as_deref(), Some("unexpected_recommission"));
}

/// A converged node of site dc1 for `Store::seed_converged`.
fn converged(hostname: &str) -> ConvergedNode {
    ConvergedNode {
        site: "dc1".into(),
        hostname: hostname.into(),
        sku: Some("mi300x.192g.8gpu".into()),
        gpus: Some(8),
        ipmi_ip: Some(format!("10.176.16.{}", hostname.len())),
        system_id: format!("sys-{hostname}"),
        maas_status: "Deployed".into(),
        power_state: "on".into(),
        ips: vec!["10.0.0.5".into()],
        host: Some("10.0.0.5".into()),
    }
}

pub async fn a_drift_batch_writes_every_record_but_the_refused_ones(url: String) {
    let (store, clock) = open(&url).await;
    let ids = store
        .seed_converged(
            &[converged("a1"), converged("a2"), converged("a3")],
            ConvergedHistory::default(),
        )
        .await
        .unwrap();
    let nodes: Vec<_> = futures::future::join_all(ids.iter().map(|id| store.node(*id)))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let seeded_at = store
        .maas_state(ids[0])
        .await
        .unwrap()
        .unwrap()
        .last_reconciled_at;
    clock.advance(Duration::minutes(5));
    let powered_off = |node: &metalform::store::Node, hostname: &str| {
        let mut record = DriftRecord::new(node, reconciler());
        let mut seen = observation(hostname, Some("Deployed"));
        seen.power_state = Some("off".into());
        record.observation = Some(seen);
        record
    };
    // a2 moved since the pass read it; a3 has an open job: both refused, a1 written.
    let mut stale = powered_off(&nodes[1], "a2");
    stale.expected_generation -= 1;
    store
        .create_decommission(&NewDecommission {
            node_id: ids[2],
            mode: DecommissionMode::SoftReset,
            erase: None,
            storage_cleanup: None,
            reason: None,
            requested_by: None,
            plan_id: None,
        })
        .await
        .unwrap();
    let results = store
        .record_drift_batch(&[
            powered_off(&nodes[0], "a1"),
            stale,
            powered_off(&nodes[2], "a3"),
        ])
        .await
        .unwrap();
    assert!(results[0].is_ok(), "{results:?}");
    assert!(
        matches!(results[1], Err(StoreError::StaleGeneration { .. })),
        "{results:?}"
    );
    assert!(
        matches!(results[2], Err(StoreError::JobOpen { .. })),
        "{results:?}"
    );
    let state = |i: usize| {
        let store = store.clone();
        let id = ids[i];
        async move { store.maas_state(id).await.unwrap().unwrap() }
    };
    assert_eq!(state(0).await.last_maas_power_state.as_deref(), Some("off"));
    assert_eq!(state(1).await.last_maas_power_state.as_deref(), Some("on"));
    assert_eq!(state(2).await.last_maas_power_state.as_deref(), Some("on"));
    assert_eq!(state(1).await.last_reconciled_at, seeded_at);

    // Seen again as recorded: only the reconcile time moves, for exactly those nodes.
    clock.advance(Duration::minutes(5));
    store.touch_reconciled(&ids[1..2]).await.unwrap();
    let touched = state(1).await;
    assert_eq!(
        touched.last_reconciled_at,
        Some(t0() + Duration::minutes(10))
    );
    assert_eq!(touched.last_maas_power_state.as_deref(), Some("on"));
    assert_eq!(touched.maas_system_id, "sys-a2");
    assert_eq!(
        state(0).await.last_reconciled_at,
        Some(t0() + Duration::minutes(5))
    );
    store.touch_reconciled(&[]).await.unwrap();
}

pub async fn observe_reads_the_current_jobs_not_the_history(url: String) {
    let (store, clock) = open(&url).await;
    let ids = store
        .seed_converged(
            &[converged("b1"), converged("b2")],
            ConvergedHistory {
                onboardings: 2,
                reimages: 2,
            },
        )
        .await
        .unwrap();
    let node = store.node(ids[0]).await.unwrap();
    assert_eq!(node.status, NodeState::Active);
    assert_eq!(node.host.as_deref(), Some("10.0.0.5"));
    assert_eq!(
        store.last_agent_contact(ids[0]).await.unwrap(),
        Some(t0()),
        "its agent was heard from"
    );
    let all = store
        .list_jobs(JobKind::Onboarding, &JobFilter::default())
        .await
        .unwrap();
    assert_eq!(all.len(), 6, "three onboardings per node");
    let current = store.current_jobs(JobKind::Onboarding, None).await.unwrap();
    assert_eq!(current.len(), 2, "{current:?}");
    for job in &current {
        assert_eq!(
            job.requested_at,
            t0() - Duration::days(2),
            "the newest of its node, before its reimages: {job:?}"
        );
        assert_eq!(
            job.maas_system_id.as_deref(),
            Some(&*format!("sys-{}", job.hostname))
        );
    }
    let reimages = store
        .list_jobs(JobKind::Decommission, &JobFilter::default())
        .await
        .unwrap();
    assert_eq!(reimages.len(), 4, "two reimages per node");
    let latest = store
        .current_jobs(JobKind::Decommission, None)
        .await
        .unwrap();
    assert_eq!(latest.len(), 2, "{latest:?}");
    for job in &latest {
        assert_eq!(job.state, JobState::Completed);
        assert_eq!(job.requested_at, t0(), "the newest of its node: {job:?}");
    }

    // A newer job without a machine: it is current, and so is the newest one with a machine
    // (the drift pass binds the node through it); an open job always is.
    clock.advance(Duration::minutes(1));
    let reonboard = store
        .create_onboarding(&metalform::store::NewOnboarding {
            site: "dc1".into(),
            hostname: "b1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let current = store
        .current_jobs(JobKind::Onboarding, Some("dc1"))
        .await
        .unwrap();
    let of_b1: Vec<_> = current.iter().filter(|j| j.hostname == "b1").collect();
    assert_eq!(of_b1.len(), 2, "{of_b1:?}");
    assert_eq!(of_b1[0].id, reonboard.id, "newest first");
    assert_eq!(of_b1[1].maas_system_id.as_deref(), Some("sys-b1"));
    assert!(
        store
            .current_jobs(JobKind::Onboarding, Some("dc2"))
            .await
            .unwrap()
            .is_empty()
    );

    // A reconcile reads the same in one go, for its observation and its drift pass: the serial
    // as it is, the site's live nodes, and the current jobs of every kind.
    let rows = store.site_rows(Some("dc1")).await.unwrap();
    assert_eq!(rows.serial, store.serial().await.unwrap());
    let hostnames: Vec<&str> = rows.nodes.iter().map(|n| n.hostname.as_str()).collect();
    assert_eq!(hostnames, ["b1", "b2"]);
    let kinds: Vec<JobKind> = rows.jobs.iter().map(|(kind, _)| *kind).collect();
    assert_eq!(kinds, JobKind::ALL);
    assert_eq!(rows.jobs[0].1, current);
    assert_eq!(rows.jobs[1], (JobKind::Decommission, latest));
    assert!(rows.jobs[2..].iter().all(|(_, jobs)| jobs.is_empty()));
    let elsewhere = store.site_rows(Some("dc2")).await.unwrap();
    assert!(elsewhere.nodes.is_empty() && elsewhere.jobs.iter().all(|(_, j)| j.is_empty()));

    let counts = store
        .job_counts(JobKind::Onboarding, Some("dc1"))
        .await
        .unwrap();
    assert_eq!(counts.get(&JobState::Completed), Some(&6));
    assert_eq!(counts.get(&JobState::Pending), Some(&1));
    assert_eq!(counts.len(), 2, "{counts:?}");
    let counts = store.job_counts(JobKind::Decommission, None).await.unwrap();
    assert_eq!(counts.get(&JobState::Completed), Some(&4));
    assert_eq!(counts.len(), 1, "{counts:?}");

    // Seeding a hostname that is already live is refused.
    assert!(
        store
            .seed_converged(&[converged("b2")], ConvergedHistory::default())
            .await
            .is_err()
    );
}

/// The ids of the current jobs of one kind and node name of site dc1, newest request first.
async fn current_ids(store: &Store, kind: JobKind, hostname: &str) -> Vec<Uuid> {
    let jobs = store.current_jobs(kind, Some("dc1")).await.unwrap();
    jobs.iter()
        .filter(|j| j.hostname == hostname)
        .map(|j| j.id)
        .collect()
}

/// Which jobs are current is kept on the rows: every write that can change it marks the jobs
/// it concerns again, whatever the order of the request times (a clock that jumped back).
pub async fn each_write_keeps_the_current_jobs(url: String) {
    let (store, clock) = open(&url).await;
    let onboarding = |hostname: &str| metalform::store::NewOnboarding {
        site: "dc1".into(),
        hostname: hostname.into(),
        ..Default::default()
    };
    let advance = |kind, id, state, maas: Option<&str>| {
        let store = &store;
        let mut update = JobUpdate::new(state);
        update.maas_system_id = maas.map(str::to_owned);
        async move { store.advance_job(kind, id, &update).await.unwrap() }
    };

    // A job ending while a newer job of its node name exists is no longer current. The newer
    // one is the earlier write: the clock went back between the two.
    clock.set(t0() + Duration::minutes(10));
    let late = store.create_onboarding(&onboarding("h9")).await.unwrap();
    advance(JobKind::Onboarding, late.id, JobState::Running, None).await;
    advance(JobKind::Onboarding, late.id, JobState::Completed, None).await;
    clock.set(t0() + Duration::minutes(5));
    let early = store.create_onboarding(&onboarding("h9")).await.unwrap();
    assert_eq!(
        current_ids(&store, JobKind::Onboarding, "h9").await,
        [late.id, early.id],
        "open, so current"
    );
    advance(JobKind::Onboarding, early.id, JobState::Running, None).await;
    advance(JobKind::Onboarding, early.id, JobState::Completed, None).await;
    assert_eq!(
        current_ids(&store, JobKind::Onboarding, "h9").await,
        [late.id]
    );
    // A new job replaces the finished ones of its node name.
    clock.set(t0() + Duration::minutes(15));
    let again = store.create_onboarding(&onboarding("h9")).await.unwrap();
    assert_eq!(
        current_ids(&store, JobKind::Onboarding, "h9").await,
        [again.id]
    );

    // A node's newest job on a MAAS machine stays current under a newer job without one,
    // until that one reaches the machine.
    clock.set(t0());
    let ids = store
        .seed_converged(
            &[converged("b1")],
            ConvergedHistory {
                onboardings: 0,
                reimages: 2,
            },
        )
        .await
        .unwrap();
    let seeded = current_ids(&store, JobKind::Decommission, "b1").await;
    assert_eq!(seeded.len(), 1, "the newer of two reimages");
    clock.advance(Duration::minutes(1));
    let reset = store
        .create_decommission(&NewDecommission {
            node_id: ids[0],
            mode: DecommissionMode::SoftReset,
            erase: None,
            storage_cleanup: None,
            reason: None,
            requested_by: Some("alice".into()),
            plan_id: None,
        })
        .await
        .unwrap();
    assert_eq!(
        current_ids(&store, JobKind::Decommission, "b1").await,
        [reset.id, seeded[0]]
    );
    advance(JobKind::Decommission, reset.id, JobState::Running, None).await;
    assert_eq!(
        current_ids(&store, JobKind::Decommission, "b1").await,
        [reset.id, seeded[0]],
        "no machine yet"
    );
    advance(
        JobKind::Decommission,
        reset.id,
        JobState::Running,
        Some("sys-b1"),
    )
    .await;
    assert_eq!(
        current_ids(&store, JobKind::Decommission, "b1").await,
        [reset.id]
    );
    advance(JobKind::Decommission, reset.id, JobState::Completed, None).await;
    assert_eq!(
        current_ids(&store, JobKind::Decommission, "b1").await,
        [reset.id]
    );

    // A store written before the marks existed gets them from its rows when it is upgraded.
    let forget = [
        "DROP INDEX onboardings_current",
        "DROP INDEX decommissions_current",
        "DROP INDEX provisioning_jobs_current",
        "ALTER TABLE onboardings DROP COLUMN superseded",
        "ALTER TABLE decommissions DROP COLUMN superseded",
        "ALTER TABLE provisioning_jobs DROP COLUMN superseded",
        "DELETE FROM schema_migrations WHERE version = 18",
    ];
    store.close().await;
    crate::store_suite::raw_sql(&url, &forget).await;
    let (store, _) = open(&url).await;
    assert_eq!(
        current_ids(&store, JobKind::Onboarding, "h9").await,
        [again.id]
    );
    assert_eq!(
        current_ids(&store, JobKind::Decommission, "b1").await,
        [reset.id]
    );
    let all = store
        .list_jobs(JobKind::Decommission, &JobFilter::default())
        .await
        .unwrap();
    assert_eq!(all.len(), 3, "the history is still there");
}

#[macro_export]
macro_rules! drift_store_suite_tests {
    ($make_url:path) => {
        $crate::drift_store_suite_tests!(@cases $make_url;
            agent_contact_is_the_newest_authenticated_call,
            a_drift_record_is_written_whole_or_not_at_all,
            resolve_acknowledges_or_reactivates_and_refuses_otherwise,
            the_summary_counts_ok_drifted_and_unreconciled,
            a_drift_batch_writes_every_record_but_the_refused_ones,
            observe_reads_the_current_jobs_not_the_history,
            each_write_keeps_the_current_jobs,
        );
    };
    (@cases $make_url:path; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                drift_store_suite::$case($make_url().await).await;
            }
        )+
    };
}
