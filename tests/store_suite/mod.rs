//! The store suite, run on SQLite (tests/store_sqlite.rs, hermetic) and on a real PostgreSQL
//! (tests/store_postgres.rs, `--features services`). Each case takes the URL of an empty store.

#![allow(dead_code)]

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use metalform::clock::{Clock, ManualClock};
use metalform::lifecycle::{
    DecommissionMode, FailureClass, JobKind, JobState, MaasStatus, NodeState, OnboardingStage,
    Owner, Provider, RecoveryAction, Verb,
};
use metalform::model::{EraseMode, NodePolicy, ProfileName};
use metalform::store::{
    Actor, EnsureOutcome, EventStatus, Job, JobFailure, JobFilter, JobUpdate, MaasStateUpdate,
    NewDecommission, NewNode, NewOnboarding, NewPlan, Node, NodeFilter, NodeTransition, Observed,
    RetryWait, StageEvent, Store, StoreError, TaskOutcome, TaskStatus, TokenError,
};
use serde_json::json;

pub fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-01T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

pub async fn open(url: &str) -> (Store, ManualClock) {
    let clock = ManualClock::new(t0());
    let store = Store::open(url, Arc::new(clock.clone()))
        .await
        .expect("open store");
    (store, clock)
}

/// A SQLite store at `url` as a newer metalform leaves it: migrated, then marked with a schema
/// version this one does not know (99).
pub async fn sqlite_from_a_newer_metalform(url: &str) {
    use sqlx::Connection;
    let (store, _) = open(url).await;
    store.close().await;
    let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
    sqlx::query(
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (99, 'future', 'x')",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
}

/// Statements run on the store at `url` outside metalform, in order, on one connection.
pub async fn raw_sql(url: &str, statements: &[&str]) {
    use sqlx::Connection;
    let script = sqlx::AssertSqlSafe(statements.join(";\n"));
    if url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::raw_sql(script).execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();
    } else {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::raw_sql(script).execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();
    }
}

fn ops() -> Actor {
    Actor::admin("alice")
}

fn exec() -> Actor {
    Actor::system("apply")
}

pub fn new_node(site: &str, hostname: &str) -> NewNode {
    NewNode {
        site: site.into(),
        hostname: hostname.into(),
        provider: Provider::Maas,
        status: NodeState::Enrolling,
        sku: Some("mi300x.192g.8gpu".into()),
        gpus: Some(8),
        ipmi_ip: Some("10.176.16.128".into()),
    }
}

async fn observe(store: &Store, node: uuid::Uuid, status: MaasStatus) {
    store
        .upsert_maas_state(&MaasStateUpdate {
            node_id: node,
            site: "dc1".into(),
            maas_system_id: "abc123".into(),
            status: Some(status.name().into()),
            power_state: Some("on".into()),
            ips: vec!["10.176.46.20".into()],
            drift: None,
        })
        .await
        .unwrap();
}

/// Drive a node to active through a completed onboarding (the executor's path).
/// A node of site dc1 and its first onboarding, pending.
async fn node_and_onboarding(store: &Store, hostname: &str) -> (Node, Job) {
    let node = store
        .create_node(&new_node("dc1", hostname), &exec())
        .await
        .unwrap();
    let job = store
        .create_onboarding(&NewOnboarding {
            node_id: Some(node.id),
            site: "dc1".into(),
            hostname: hostname.into(),
            ..NewOnboarding::default()
        })
        .await
        .unwrap();
    (node, job)
}

pub async fn onboard_to_active(store: &Store, hostname: &str) -> uuid::Uuid {
    let (node, job) = node_and_onboarding(store, hostname).await;
    store
        .advance_job(
            JobKind::Onboarding,
            job.id,
            &JobUpdate::new(JobState::Running),
        )
        .await
        .unwrap();
    let mut done = JobUpdate::new(JobState::Completed);
    done.stage = Some(OnboardingStage::WaitForAgentEnrollment.as_str().into());
    done.node_transition = Some(NodeTransition::new(
        NodeState::Active,
        Owner::OnboardingWorkflow,
        exec(),
    ));
    store
        .advance_job(JobKind::Onboarding, job.id, &done)
        .await
        .unwrap();
    observe(store, node.id, MaasStatus::Deployed).await;
    node.id
}

pub async fn migrations_are_idempotent_and_concurrent(url: String) {
    // Two processes starting at once: both opens succeed and the schema is applied once.
    let (a, b) = tokio::join!(open(&url), open(&url));
    assert_eq!(
        a.0.schema_versions().await.unwrap(),
        metalform::store::migration_versions()
    );
    assert_eq!(
        b.0.schema_versions().await.unwrap(),
        metalform::store::migration_versions()
    );
    a.0.close().await;
    b.0.close().await;
    let (again, _) = open(&url).await;
    assert_eq!(
        again.schema_versions().await.unwrap(),
        metalform::store::migration_versions()
    );
    assert_eq!(again.serial().await.unwrap(), 0);
}

/// An onboarding of dc1/`hostname` before the node has an inventory record.
async fn first_onboarding(store: &Store, hostname: &str) -> Result<Job, StoreError> {
    store
        .create_onboarding(&NewOnboarding {
            site: "dc1".into(),
            hostname: hostname.into(),
            ..NewOnboarding::default()
        })
        .await
}

/// The second onboarding of [`store_with_two_open_onboardings_of_a_node`].
pub const SECOND_OPEN_ONBOARDING: &str = "00000000-0000-4000-8000-000000000002";

/// A store of schema version 15 in which two onboardings of dc1/c07u50 are open (what a race
/// between replicas could leave before version 16's unique index): the first pending, made by
/// metalform, the second failed ([`SECOND_OPEN_ONBOARDING`]). dc1/c07u51 has one open
/// onboarding. Returns the first's id.
pub async fn store_with_two_open_onboardings_of_a_node(url: &str) -> uuid::Uuid {
    let (store, _) = open(url).await;
    let first = first_onboarding(&store, "c07u50").await.unwrap();
    first_onboarding(&store, "c07u51").await.unwrap();
    store.close().await;
    raw_sql(
        url,
        &[
            "DROP INDEX onboardings_one_open",
            "DELETE FROM schema_migrations WHERE version = 16",
            &format!(
                "INSERT INTO onboardings (id, site, hostname, current_stage, status, requested_at,
                    updated_at)
                 VALUES ('{SECOND_OPEN_ONBOARDING}', 'dc1', 'c07u50', 'create_or_find_in_maas',
                    'failed_manual_intervention', '2026-03-01T09:00:00.000000Z',
                    '2026-03-01T09:00:00.000000Z')"
            ),
        ],
    )
    .await;
    first.id
}

/// The store of [`store_with_two_open_onboardings_of_a_node`] is not upgraded: the open is
/// refused, naming both jobs, and the store is left as it was (another node's single open
/// onboarding is no reason to refuse). Once the operator has cancelled one, the upgrade goes
/// through, and from then on the index holds.
pub async fn a_store_with_two_open_onboardings_of_a_node_is_not_upgraded(url: String) {
    let first = store_with_two_open_onboardings_of_a_node(&url).await;
    let second = SECOND_OPEN_ONBOARDING;
    for _ in 0..2 {
        let err = Store::open(&url, Arc::new(ManualClock::new(t0())))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the state store cannot be upgraded to schema version 16: more than one open \
                 onboarding of the same node (dc1/c07u50: {} (pending), {second} \
                 (failed_manual_intervention)); this version allows one per node",
                first
            )
        );
        assert!(matches!(err, StoreError::UpgradeRefused { .. }));
    }
    // The operator cancels the second, as the older metalform would. This only happens if the
    // refused opens left version 16 unrecorded; had they recorded it, the second would stay
    // open and the check below would fail.
    raw_sql(
        &url,
        &[&format!(
            "UPDATE onboardings SET status = 'cancelled'
             WHERE id = '{second}' AND status = 'failed_manual_intervention'
               AND NOT EXISTS (SELECT 1 FROM schema_migrations WHERE version = 16)"
        )],
    )
    .await;
    let (store, _) = open(&url).await;
    assert_eq!(
        store.schema_versions().await.unwrap(),
        metalform::store::migration_versions()
    );
    let open_jobs = store
        .list_jobs(
            JobKind::Onboarding,
            &JobFilter {
                site: Some("dc1".into()),
                hostname: Some("c07u50".into()),
                open_only: true,
                ..JobFilter::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        open_jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![first]
    );
    // And from now on the index holds: another open onboarding of the node is refused.
    let err = first_onboarding(&store, "c07u50").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "node dc1/c07u50 already has an open onboarding ({}, pending)",
            first
        )
    );
}

pub async fn nodes_follow_the_lifecycle_rules(url: String) {
    let (store, _) = open(&url).await;
    let node = store
        .create_node(&new_node("dc1", "c07u43"), &exec())
        .await
        .unwrap();
    assert_eq!(node.status, NodeState::Enrolling);
    assert_eq!(node.generation, 1);
    assert_eq!(
        store.find_node("dc1", "c07u43").await.unwrap().unwrap().id,
        node.id
    );
    assert!(matches!(
        store.create_node(&new_node("dc1", "c07u43"), &exec()).await,
        Err(StoreError::DuplicateNode { .. })
    ));
    // The same hostname in another site is another node.
    store
        .create_node(&new_node("dc2", "c07u43"), &exec())
        .await
        .unwrap();
    let mut bad = new_node("dc1", "x");
    bad.status = NodeState::Active;
    assert!(matches!(
        store.create_node(&bad, &exec()).await,
        Err(StoreError::Transition { .. })
    ));

    // A refused transition changes nothing: state, generation, serial, audit rows.
    let serial = store.serial().await.unwrap();
    let audits = store
        .audit_log("node", &node.id.to_string())
        .await
        .unwrap()
        .len();
    let err = store
        .transition_node(
            node.id,
            &NodeTransition::new(NodeState::Retired, Owner::Operator, ops()),
        )
        .await
        .unwrap_err();
    assert!(err.is_conflict());
    assert_eq!(
        err.to_string(),
        format!(
            "node {}: illegal node transition enrolling -> retired (legal from enrolling: active, quarantined)",
            node.id
        )
    );
    let after = store.node(node.id).await.unwrap();
    assert_eq!((after.status, after.generation), (NodeState::Enrolling, 1));
    assert_eq!(store.serial().await.unwrap(), serial);
    assert_eq!(
        store
            .audit_log("node", &node.id.to_string())
            .await
            .unwrap()
            .len(),
        audits
    );

    // Not the owner: the heartbeat logic cannot quarantine an enrolling node.
    assert!(matches!(
        store
            .transition_node(
                node.id,
                &NodeTransition::new(NodeState::Active, Owner::Reconciler, exec())
            )
            .await,
        Err(StoreError::Transition { .. })
    ));
    let q = store
        .transition_node(
            node.id,
            &NodeTransition::new(NodeState::Quarantined, Owner::Operator, ops()),
        )
        .await
        .unwrap();
    assert_eq!((q.status, q.generation), (NodeState::Quarantined, 2));
    assert!(store.serial().await.unwrap() > serial);
    // Idempotent: already there.
    let again = store
        .transition_node(
            node.id,
            &NodeTransition::new(NodeState::Quarantined, Owner::Operator, ops()),
        )
        .await
        .unwrap();
    assert_eq!(again.generation, 2);
    // A writer holding an old generation is refused.
    let mut stale = NodeTransition::new(NodeState::Active, Owner::Operator, ops());
    stale.expected_generation = Some(1);
    assert!(matches!(
        store.transition_node(node.id, &stale).await,
        Err(StoreError::StaleGeneration {
            expected: 1,
            found: 2,
            ..
        })
    ));
    // Draining needs an owning decommission.
    let err = store
        .transition_node(
            node.id,
            &NodeTransition::new(NodeState::Draining, Owner::Operator, ops()),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("needs an owning lifecycle operation"),
        "{err}"
    );

    let audit = store.audit_log("node", &node.id.to_string()).await.unwrap();
    let last = audit.last().unwrap();
    assert_eq!(last.action, "node.transition");
    assert_eq!(last.actor, "alice");
    assert_eq!(last.role, "admin");
    assert_eq!(last.prior_state.as_deref(), Some("enrolling"));
    assert_eq!(last.expected_target.as_deref(), Some("quarantined"));

    let listed = store
        .list_nodes(&NodeFilter {
            site: Some("dc1".into()),
            ..NodeFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    let quarantined = store
        .list_nodes(&NodeFilter {
            status: Some(NodeState::Quarantined),
            ..NodeFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(quarantined.len(), 1);
}

pub async fn full_decommission_removes_identity_and_reonboarding_creates_a_new_node(url: String) {
    let (store, _) = open(&url).await;
    let id = onboard_to_active(&store, "c07u44").await;
    let decom = store
        .create_decommission(&NewDecommission {
            node_id: id,
            mode: DecommissionMode::FullDecommission,
            erase: Some("quick".into()),
            storage_cleanup: None,
            reason: Some("hardware_removal".into()),
            requested_by: Some("alice".into()),
            plan_id: None,
        })
        .await
        .unwrap();
    assert_eq!(decom.stage, "disable_node");
    assert!(matches!(
        store
            .create_decommission(&NewDecommission {
                node_id: id,
                mode: DecommissionMode::SoftReset,
                erase: None,
                storage_cleanup: None,
                reason: None,
                requested_by: None,
                plan_id: None,
            })
            .await,
        Err(StoreError::JobOpen { .. })
    ));
    let step = |state, stage: &str, to: Option<NodeState>| {
        let mut u = JobUpdate::new(state);
        u.stage = Some(stage.into());
        u.node_transition =
            to.map(|to| NodeTransition::new(to, Owner::DecommissionWorkflow, exec()));
        u
    };
    for (stage, to) in [
        ("disable_node", None),
        ("drain_node", Some(NodeState::Draining)),
        ("retire_gpuaas_node", Some(NodeState::Retired)),
    ] {
        store
            .advance_job(
                JobKind::Decommission,
                decom.id,
                &step(JobState::Running, stage, to),
            )
            .await
            .unwrap();
    }
    // A retired node under a full decommission is not reactivated.
    let err = store
        .transition_node(
            id,
            &NodeTransition::new(NodeState::Active, Owner::Operator, ops()),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("retained identity"), "{err}");
    // A stage outside the mode is refused.
    assert!(matches!(
        store
            .advance_job(
                JobKind::Decommission,
                decom.id,
                &step(JobState::Running, "scrub_gpu", None)
            )
            .await,
        Err(StoreError::Invalid(_))
    ));
    // Completing while the node is not deleted is inconsistent (001 §5.3).
    assert!(matches!(
        store
            .advance_job(
                JobKind::Decommission,
                decom.id,
                &step(JobState::Completed, "remove_maas_record", None)
            )
            .await,
        Err(StoreError::JobState { .. })
    ));
    store
        .advance_job(
            JobKind::Decommission,
            decom.id,
            &step(
                JobState::Running,
                "remove_gpuaas_node_record",
                Some(NodeState::Removing),
            ),
        )
        .await
        .unwrap();
    let done = store
        .advance_job(
            JobKind::Decommission,
            decom.id,
            &step(
                JobState::Completed,
                "remove_maas_record",
                Some(NodeState::Deleted),
            ),
        )
        .await
        .unwrap();
    assert_eq!(done.state, JobState::Completed);
    assert!(done.completed_at.is_some());
    let gone = store.node(id).await.unwrap();
    assert_eq!(gone.status, NodeState::Deleted);
    // Nothing leaves deleted.
    let err = store
        .transition_node(
            id,
            &NodeTransition::new(NodeState::Active, Owner::Operator, ops()),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("nothing leaves deleted"), "{err}");
    assert!(store.find_node("dc1", "c07u44").await.unwrap().is_none());
    let reborn = store
        .create_node(&new_node("dc1", "c07u44"), &exec())
        .await
        .unwrap();
    assert_ne!(reborn.id, id);
    let events: Vec<String> = store
        .pending_events(100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert!(events.contains(&"node.decommission.started".to_string()));
    assert!(events.contains(&"node.decommission.completed".to_string()));
}

pub async fn onboarding_journal_records_failures_and_recovery(url: String) {
    let (store, clock) = open(&url).await;
    let node = store
        .create_node(&new_node("dc1", "c07u45"), &exec())
        .await
        .unwrap();
    let job = store
        .create_onboarding(&NewOnboarding {
            node_id: Some(node.id),
            site: "dc1".into(),
            hostname: "c07u45".into(),
            ipmi_ip: Some("10.176.16.130".into()),
            ..NewOnboarding::default()
        })
        .await
        .unwrap();
    assert_eq!(
        (job.state, job.stage.as_str(), job.attempt),
        (JobState::Pending, "load_site_config", 0)
    );
    assert!(matches!(
        store
            .create_onboarding(&NewOnboarding {
                site: "dc1".into(),
                hostname: "c07u45".into(),
                ..NewOnboarding::default()
            })
            .await,
        Err(StoreError::JobOpen { .. })
    ));
    let serial = store.serial().await.unwrap();
    clock.advance(Duration::seconds(5));
    let mut run = JobUpdate::new(JobState::Running);
    run.stage = Some("configure_storage".into());
    run.attempt = Some(1);
    run.maas_system_id = Some("abc123".into());
    run.event = Some(StageEvent {
        stage: "configure_storage".into(),
        attempt: 1,
        status: EventStatus::Started,
        message: None,
        details: json!({}),
    });
    let running = store
        .advance_job(JobKind::Onboarding, job.id, &run)
        .await
        .unwrap();
    assert_eq!(running.started_at, Some(t0() + Duration::seconds(5)));
    assert!(store.serial().await.unwrap() > serial);

    // A write carrying the facts returns them as written and the row keeps them; a write
    // without facts leaves the row's as they were, and returns those.
    let facts = json!({"system_id": "abc123", "round": 2, "deploy": {"received": true}});
    let mut with_facts = JobUpdate::new(JobState::Running);
    with_facts.stage_details = Some(facts.clone());
    let written = store
        .advance_job(JobKind::Onboarding, job.id, &with_facts)
        .await
        .unwrap();
    assert_eq!(written.stage_details, facts);
    assert_eq!(written.maas_system_id.as_deref(), Some("abc123"));
    let without = store
        .advance_job(
            JobKind::Onboarding,
            job.id,
            &JobUpdate::new(JobState::Running),
        )
        .await
        .unwrap();
    assert_eq!(without.stage_details, facts);
    let read = store.job(JobKind::Onboarding, job.id).await.unwrap();
    assert_eq!(read.stage_details, facts);

    // Unknown stage names and failed-without-class are refused.
    let mut bogus = JobUpdate::new(JobState::Running);
    bogus.stage = Some("deploy_everything".into());
    let err = store
        .advance_job(JobKind::Onboarding, job.id, &bogus)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("unknown onboarding stage `deploy_everything`"),
        "{err}"
    );
    assert!(matches!(
        store
            .advance_job(
                JobKind::Onboarding,
                job.id,
                &JobUpdate::new(JobState::FailedManualIntervention)
            )
            .await,
        Err(StoreError::Invalid(_))
    ));

    let mut fail = JobUpdate::new(JobState::FailedManualIntervention);
    fail.failure = Some(JobFailure {
        class: FailureClass::HardwareMismatch,
        code: "boot_disk_not_found".into(),
        message: "no block device matches (?i)boss|boot optimized|m\\.2".into(),
        details: json!({"disks": ["sda", "sdb"]}),
    });
    fail.observed = Some(Observed {
        status: Some("Ready".into()),
        power_state: Some("off".into()),
        ips: vec![],
    });
    fail.event = Some(StageEvent {
        stage: "configure_storage".into(),
        attempt: 1,
        status: EventStatus::Failed,
        message: Some("boot disk not found".into()),
        details: json!({}),
    });
    let failed = store
        .advance_job(JobKind::Onboarding, job.id, &fail)
        .await
        .unwrap();
    assert_eq!(failed.failure_class, Some(FailureClass::HardwareMismatch));
    assert_eq!(failed.error_code.as_deref(), Some("boot_disk_not_found"));
    assert_eq!(failed.last_maas_status.as_deref(), Some("Ready"));
    assert_eq!(failed.maas_system_id.as_deref(), Some("abc123"));
    assert!(
        failed
            .recommended_action
            .as_deref()
            .unwrap()
            .contains("bootDisk.match")
    );
    let events = store
        .job_events(JobKind::Onboarding, job.id, 10)
        .await
        .unwrap();
    assert_eq!(
        events.iter().map(|e| e.status.as_str()).collect::<Vec<_>>(),
        vec!["started", "failed"]
    );

    // Completing from a failed state is not a legal move; recovery is.
    assert!(matches!(
        store
            .advance_job(
                JobKind::Onboarding,
                job.id,
                &JobUpdate::new(JobState::Completed)
            )
            .await,
        Err(StoreError::JobState { .. })
    ));
    let err = store
        .recover_job(
            JobKind::Onboarding,
            job.id,
            RecoveryAction::MarkManualInterventionRequired,
            &ops(),
            None,
        )
        .await;
    assert!(err.is_ok(), "marking an already frozen job is idempotent");
    let retried = store
        .recover_job(
            JobKind::Onboarding,
            job.id,
            RecoveryAction::RetryStage,
            &ops(),
            Some("disk replaced"),
        )
        .await
        .unwrap();
    assert_eq!(
        (retried.state, retried.stage.as_str(), retried.attempt),
        (JobState::Running, "configure_storage", 2)
    );
    assert_eq!(retried.failure_class, None);
    let audit = store
        .audit_log("onboarding", &job.id.to_string())
        .await
        .unwrap();
    let last = audit.last().unwrap();
    assert_eq!(last.action, "onboarding.retry_stage");
    assert_eq!(last.reason.as_deref(), Some("disk replaced"));
    assert_eq!(
        last.prior_state.as_deref(),
        Some("failed_manual_intervention at configure_storage#1")
    );
    assert_eq!(last.expected_target.as_deref(), Some("running"));
    assert_eq!(last.correlation_ids["job_id"], json!(job.id));
    let err = store
        .recover_job(
            JobKind::Onboarding,
            job.id,
            RecoveryAction::Rerun,
            &ops(),
            None,
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("rerun does not apply to a running job"),
        "{err}"
    );

    // Completing without making the node active is inconsistent (001 §4.3).
    let err = store
        .advance_job(
            JobKind::Onboarding,
            job.id,
            &JobUpdate::new(JobState::Completed),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("consistent node states: active"),
        "{err}"
    );
    assert_eq!(
        store.node(node.id).await.unwrap().status,
        NodeState::Enrolling
    );
    // Adopt, then finish together with the node transition: reconciled.
    store
        .recover_job(
            JobKind::Onboarding,
            job.id,
            RecoveryAction::AdoptObservedState,
            &ops(),
            Some("enrolled late"),
        )
        .await
        .unwrap();
    let mut finish = JobUpdate::new(JobState::on_success(true));
    finish.node_transition = Some(NodeTransition::new(
        NodeState::Active,
        Owner::OnboardingWorkflow,
        exec(),
    ));
    let done = store
        .advance_job(JobKind::Onboarding, job.id, &finish)
        .await
        .unwrap();
    assert_eq!(done.state, JobState::Reconciled);
    assert_eq!(store.node(node.id).await.unwrap().status, NodeState::Active);
    assert!(
        store
            .advance_job(
                JobKind::Onboarding,
                job.id,
                &JobUpdate::new(JobState::Running)
            )
            .await
            .is_err()
    );

    let outbox: Vec<String> = store
        .pending_events(100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(
        outbox,
        vec![
            "node.onboarding.started",
            "node.onboarding.manual_intervention_required",
            "node.onboarding.started",
            "node.onboarding.completed",
        ]
    );
    let ids: Vec<i64> = store
        .pending_events(100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    store.mark_delivered(&ids[..2]).await.unwrap();
    assert_eq!(store.pending_events(100).await.unwrap().len(), 2);

    let latest = store.latest_job_for_node(node.id).await.unwrap().unwrap();
    assert_eq!(latest.id, job.id);
    let listed = store
        .list_jobs(
            JobKind::Onboarding,
            &JobFilter {
                open_only: true,
                ..JobFilter::default()
            },
        )
        .await
        .unwrap();
    assert!(listed.is_empty());
}

/// Issue 18: an adopted job that fails and is rerun from the top ends `completed` (its success
/// is the rerun's, not the adoption's); it keeps owning what it adopted. An adopt that finishes
/// a job ends it `reconciled`.
pub async fn an_adopted_job_rerun_ends_completed(url: String) {
    let (store, _) = open(&url).await;
    let (_, job) = node_and_onboarding(&store, "c07u50").await;
    let fail = |code: &str| {
        let mut update = JobUpdate::new(JobState::FailedManualIntervention);
        update.failure = Some(JobFailure {
            class: FailureClass::AgentEnrollmentFailure,
            code: code.into(),
            message: "no agent".into(),
            details: json!({}),
        });
        update
    };
    store
        .advance_job(
            JobKind::Onboarding,
            job.id,
            &JobUpdate::new(JobState::Running),
        )
        .await
        .unwrap();
    store
        .advance_job(JobKind::Onboarding, job.id, &fail("failed_enrollment"))
        .await
        .unwrap();
    let adopted = store
        .recover_job(
            JobKind::Onboarding,
            job.id,
            RecoveryAction::AdoptObservedState,
            &ops(),
            Some("late agent"),
        )
        .await
        .unwrap();
    assert!(adopted.adopted && adopted.ends_reconciled);
    assert_eq!(
        JobState::on_success(adopted.ends_reconciled),
        JobState::Reconciled
    );
    // The adoption fails too; the operator reruns it from the top.
    store
        .advance_job(JobKind::Onboarding, job.id, &fail("failed_hw_sync_health"))
        .await
        .unwrap();
    let rerun = store
        .recover_job(
            JobKind::Onboarding,
            job.id,
            RecoveryAction::Rerun,
            &ops(),
            Some("host fixed"),
        )
        .await
        .unwrap();
    assert_eq!(
        (rerun.state, rerun.stage.as_str(), rerun.attempt),
        (JobState::Running, "load_site_config", 0)
    );
    assert!(
        rerun.adopted,
        "the job still owns the deployment it adopted"
    );
    assert!(!rerun.ends_reconciled);
    // The executor's completion: the success state comes from the job row.
    let mut done = JobUpdate::new(JobState::on_success(rerun.ends_reconciled));
    done.stage = Some(OnboardingStage::WaitForAgentEnrollment.as_str().into());
    done.node_transition = Some(NodeTransition::new(
        NodeState::Active,
        Owner::OnboardingWorkflow,
        exec(),
    ));
    let finished = store
        .advance_job(JobKind::Onboarding, job.id, &done)
        .await
        .unwrap();
    assert_eq!(finished.state, JobState::Completed);
}

pub async fn retirement_and_protection_follow_seed_004(url: String) {
    let (store, _) = open(&url).await;
    let id = onboard_to_active(&store, "c07u46").await;
    // Unknown provider state: refused with a hint.
    let fresh = store
        .create_node(&new_node("dc1", "c07u47"), &exec())
        .await
        .unwrap();
    assert!(matches!(
        store.set_retired(fresh.id, "EOL", &ops()).await,
        Err(StoreError::ProviderStateUnknown { .. })
    ));
    // AVAILABLE (MAAS Ready) refuses retirement.
    observe(&store, fresh.id, MaasStatus::Ready).await;
    let err = store
        .set_retired(fresh.id, "EOL", &ops())
        .await
        .unwrap_err();
    assert!(err.is_conflict());
    assert!(
        err.to_string()
            .contains("`retired` cannot be set in AVAILABLE"),
        "{err}"
    );
    assert!(matches!(
        store.set_retired(id, " ", &ops()).await,
        Err(StoreError::Invalid(_))
    ));
    let retired = store
        .set_retired(id, "end of warranty", &ops())
        .await
        .unwrap();
    assert!(retired.retired);
    assert_eq!(retired.retired_reason.as_deref(), Some("end of warranty"));
    // Listing retired nodes.
    let list = store
        .list_nodes(&NodeFilter {
            retired: Some(true),
            ..NodeFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(list.iter().map(|n| n.id).collect::<Vec<_>>(), vec![id]);
    // Released to Ready and cleaned: MAAS now says Retired/manageable; provide is a conflict.
    observe(&store, id, MaasStatus::Retired).await;
    let err = store.check_verb(id, Verb::Provide).await.unwrap_err();
    assert!(err.is_conflict());
    assert!(
        err.to_string()
            .contains("node is retired (end of warranty)"),
        "{err}"
    );
    store.unset_retired(id, &ops()).await.unwrap();
    // With the flag cleared, provide is allowed again: MANAGEABLE -> CLEANING (to AVAILABLE).
    assert_eq!(
        store.check_verb(id, Verb::Provide).await.unwrap(),
        metalform::lifecycle::ProvisionState::Cleaning
    );
}

pub async fn protection_blocks_destructive_decommission(url: String) {
    let (store, _) = open(&url).await;
    let id = onboard_to_active(&store, "c07u48").await;
    let protected = store
        .set_protected(id, Some("tenant run"), &ops())
        .await
        .unwrap();
    assert!(protected.protected);
    for verb in [Verb::Rebuild, Verb::Delete] {
        assert!(store.check_verb(id, verb).await.unwrap_err().is_conflict());
    }
    let reimage = NewDecommission {
        node_id: id,
        mode: DecommissionMode::Reimage,
        erase: None,
        storage_cleanup: None,
        reason: None,
        requested_by: None,
        plan_id: None,
    };
    let err = store.create_decommission(&reimage).await.unwrap_err();
    assert!(err.to_string().contains("node is protected"), "{err}");
    // Soft reset does not undeploy: allowed.
    let soft = store
        .create_decommission(&NewDecommission {
            mode: DecommissionMode::SoftReset,
            ..reimage.clone()
        })
        .await
        .unwrap();
    assert_eq!(soft.stage, "disable_node");
    store.unset_protected(id, &ops()).await.unwrap();
    // Protection is only settable when deployed.
    observe(&store, id, MaasStatus::Ready).await;
    assert!(
        store
            .set_protected(id, None, &ops())
            .await
            .unwrap_err()
            .is_conflict()
    );
}

pub async fn leases_fence_stale_holders(url: String) {
    let (store, clock) = open(&url).await;
    let id = onboard_to_active(&store, "c07u49").await;
    let name = metalform::store::node_lease_name(id);
    let a = store
        .acquire_lease(&name, "exec-a", Duration::seconds(30))
        .await
        .unwrap();
    assert_eq!(a.fencing, 1);
    let err = store
        .acquire_lease(&name, "exec-b", Duration::seconds(30))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::LeaseHeld { ref holder, .. } if holder == "exec-a"),
        "{err}"
    );
    // Re-acquire by the holder renews, same generation.
    clock.advance(Duration::seconds(10));
    let a = store
        .acquire_lease(&name, "exec-a", Duration::seconds(30))
        .await
        .unwrap();
    assert_eq!(a.fencing, 1);
    let a = store.renew_lease(&a, Duration::seconds(30)).await.unwrap();
    // Slowed past its TTL with nobody taking over (a loaded machine): the holder renews, at
    // the same generation, and its fenced writes pass.
    clock.advance(Duration::seconds(31));
    store.check_fence(&a.fence()).await.unwrap();
    let a = store.renew_lease(&a, Duration::seconds(30)).await.unwrap();
    assert_eq!(a.fencing, 1);
    // Expiry: b steals with a new generation; a can neither renew nor write.
    clock.advance(Duration::seconds(31));
    let b = store
        .acquire_lease(&name, "exec-b", Duration::seconds(30))
        .await
        .unwrap();
    assert_eq!(b.fencing, 2);
    assert!(matches!(
        store.renew_lease(&a, Duration::seconds(30)).await,
        Err(StoreError::LeaseLost { .. })
    ));
    let decom = store
        .create_decommission(&NewDecommission {
            node_id: id,
            mode: DecommissionMode::SoftReset,
            erase: None,
            storage_cleanup: None,
            reason: None,
            requested_by: None,
            plan_id: None,
        })
        .await
        .unwrap();
    let mut stale = JobUpdate::new(JobState::Running);
    stale.fence = Some(a.fence());
    let err = store
        .advance_job(JobKind::Decommission, decom.id, &stale)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::LeaseLost { fencing: 1, .. }),
        "{err}"
    );
    assert_eq!(
        store
            .job(JobKind::Decommission, decom.id)
            .await
            .unwrap()
            .state,
        JobState::Pending
    );
    let mut node_move = NodeTransition::new(NodeState::Quarantined, Owner::Reconciler, exec());
    node_move.fence = Some(a.fence());
    assert!(store.transition_node(id, &node_move).await.is_err());
    assert_eq!(store.node(id).await.unwrap().status, NodeState::Active);
    let mut fresh = JobUpdate::new(JobState::Running);
    fresh.fence = Some(b.fence());
    store
        .advance_job(JobKind::Decommission, decom.id, &fresh)
        .await
        .unwrap();
    // Release lets the next holder in without waiting; a stale release is a no-op.
    assert!(!store.release_lease(&a).await.unwrap());
    assert!(store.release_lease(&b).await.unwrap());
    assert!(store.lease(&name).await.unwrap().is_none());
    let c = store
        .acquire_lease(&name, "exec-c", Duration::seconds(30))
        .await
        .unwrap();
    assert_eq!(c.fencing, 3);
}

pub async fn concurrent_acquirers_get_one_lease(url: String) {
    let (store, _) = open(&url).await;
    let mut handles = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            store
                .acquire_lease("site:dc1", &format!("worker-{i}"), Duration::seconds(60))
                .await
        }));
    }
    let mut winners = Vec::new();
    for h in handles {
        match h.await.unwrap() {
            Ok(lease) => winners.push(lease),
            Err(StoreError::LeaseHeld { .. }) => {}
            Err(other) => panic!("unexpected: {other}"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(winners[0].fencing, 1);
}

pub async fn agent_tasks_are_never_duplicated(url: String) {
    let (store, clock) = open(&url).await;
    let id = onboard_to_active(&store, "c07u50").await;
    let params = json!({"reason": "retire"});
    let (task, outcome) = store
        .ensure_task(id, "node.drain", &params, Some("job-1"))
        .await
        .unwrap();
    assert_eq!(outcome, EnsureOutcome::Created);
    let (same, outcome) = store
        .ensure_task(id, "node.drain", &params, Some("job-1"))
        .await
        .unwrap();
    assert_eq!((same.id, outcome), (task.id, EnsureOutcome::AlreadyQueued));
    // Two agents poll at once: one gets it.
    let (x, y) = tokio::join!(
        store.claim_task(id, "agent-1", Duration::seconds(60)),
        store.claim_task(id, "agent-2", Duration::seconds(60))
    );
    let claimed: Vec<_> = [x.unwrap(), y.unwrap()].into_iter().flatten().collect();
    assert_eq!(claimed.len(), 1);
    let holder = claimed[0].lease_holder.clone().unwrap();
    let (live, outcome) = store
        .ensure_task(id, "node.drain", &params, None)
        .await
        .unwrap();
    assert_eq!((live.id, outcome), (task.id, EnsureOutcome::LiveLease));
    // The lease goes stale: ensure re-queues, another agent claims, the stale one cannot report.
    clock.advance(Duration::seconds(61));
    let (requeued, outcome) = store
        .ensure_task(id, "node.drain", &params, None)
        .await
        .unwrap();
    assert_eq!(
        (requeued.id, outcome, requeued.status),
        (task.id, EnsureOutcome::Requeued, TaskStatus::Queued)
    );
    let other = if holder == "agent-1" {
        "agent-2"
    } else {
        "agent-1"
    };
    let again = store
        .claim_task(id, other, Duration::seconds(60))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((again.id, again.dispatch_count), (task.id, 2));
    let ok = TaskOutcome {
        succeeded: true,
        message: Some("drained".into()),
        details: json!({}),
    };
    assert!(matches!(
        store.complete_task(task.id, &holder, &ok).await,
        Err(StoreError::LeaseLost { .. })
    ));
    let done = store.complete_task(task.id, other, &ok).await.unwrap();
    assert_eq!(done.status, TaskStatus::Succeeded);
    assert_eq!(
        store
            .complete_task(task.id, other, &ok)
            .await
            .unwrap()
            .status,
        TaskStatus::Succeeded
    );
    assert!(
        store
            .claim_task(id, "agent-1", Duration::seconds(60))
            .await
            .unwrap()
            .is_none()
    );
    // A finished task does not block a new one.
    let (_, outcome) = store
        .ensure_task(id, "node.drain", &params, None)
        .await
        .unwrap();
    assert_eq!(outcome, EnsureOutcome::Created);
    assert_eq!(store.tasks_for_node(id).await.unwrap().len(), 2);
}

pub async fn enrollment_tokens_are_single_use_with_ttl(url: String) {
    let (store, clock) = open(&url).await;
    let node = store
        .create_node(&new_node("dc1", "c07u51"), &exec())
        .await
        .unwrap();
    let (token, expires) = store
        .issue_enrollment_token(node.id, Some("onb-1"), Duration::hours(2))
        .await
        .unwrap();
    assert_eq!(expires, t0() + Duration::hours(2));
    assert_eq!(format!("{token:?}"), "Secret(<redacted>)");
    let unknown = metalform::secrets::Secret::new("not-a-token");
    assert!(matches!(
        store.consume_enrollment_token(&unknown).await,
        Err(StoreError::Token(TokenError::Unknown))
    ));
    let claim = store.consume_enrollment_token(&token).await.unwrap();
    assert_eq!(
        (claim.node_id, claim.onboarding_id.as_deref()),
        (node.id, Some("onb-1"))
    );
    assert!(matches!(
        store.consume_enrollment_token(&token).await,
        Err(StoreError::Token(TokenError::AlreadyUsed))
    ));
    let (late, _) = store
        .issue_enrollment_token(node.id, None, Duration::minutes(30))
        .await
        .unwrap();
    clock.advance(Duration::minutes(20));
    // Refresh = extend the same token.
    assert_eq!(
        store
            .extend_enrollment_tokens(node.id, Duration::minutes(30))
            .await
            .unwrap(),
        1
    );
    clock.advance(Duration::minutes(20));
    store.consume_enrollment_token(&late).await.unwrap();
    let (expired, _) = store
        .issue_enrollment_token(node.id, None, Duration::minutes(5))
        .await
        .unwrap();
    clock.advance(Duration::minutes(6));
    let err = store.consume_enrollment_token(&expired).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid enrollment token: expired at"),
        "{err}"
    );
    assert!(!err.to_string().contains(expired.expose()));

    // A render replaces the node's unused tokens under the node lease. An executor paused past
    // its lease while another took the node over renders once it resumes: refused, so the
    // token the other one deployed still works, and nothing of the write stays.
    let name = metalform::store::node_lease_name(node.id);
    let paused = store
        .acquire_lease(&name, "exec-a", Duration::seconds(30))
        .await
        .unwrap();
    let (stale, _, _) = store
        .replace_enrollment_token(node.id, None, Duration::hours(2), &paused.fence())
        .await
        .unwrap();
    clock.advance(Duration::seconds(31));
    let holder = store
        .acquire_lease(&name, "exec-b", Duration::seconds(30))
        .await
        .unwrap();
    let (deployed, _, replaced) = store
        .replace_enrollment_token(node.id, None, Duration::hours(2), &holder.fence())
        .await
        .unwrap();
    assert_eq!(replaced, 1, "exec-a's undelivered token is expired");
    let refused = store
        .replace_enrollment_token(node.id, None, Duration::hours(2), &paused.fence())
        .await;
    assert!(
        matches!(&refused, Err(StoreError::LeaseLost { holder, .. }) if holder == "exec-a"),
        "{refused:?}"
    );
    assert!(matches!(
        store
            .expire_enrollment_tokens(node.id, &paused.fence())
            .await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert_eq!(
        store.enrollment_token_expiry(node.id).await.unwrap(),
        Some(t0() + Duration::minutes(46) + Duration::seconds(31) + Duration::hours(2)),
        "no token was issued or expired by the refused writes"
    );

    // The MAAS call is not fenced: the paused executor may still deploy its own payload
    // after the takeover replaced its token. The refresh brings that token back too (every
    // unused one: with the token that ran out above, three).
    assert_eq!(
        store
            .extend_enrollment_tokens(node.id, Duration::minutes(30))
            .await
            .unwrap(),
        3
    );
    store.consume_enrollment_token(&stale).await.unwrap();
    assert_eq!(
        store
            .expire_enrollment_tokens(node.id, &holder.fence())
            .await
            .unwrap(),
        2
    );
    let err = store.consume_enrollment_token(&deployed).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid enrollment token: expired at"),
        "{err}"
    );
}

pub async fn plans_applies_and_serial(url: String) {
    let (store, _) = open(&url).await;
    let serial = store.serial().await.unwrap();
    let plan = store
        .record_plan(&NewPlan {
            fleet_revision: Some("abc123".into()),
            snapshot_fingerprint: "sha256:00".into(),
            store_serial: serial,
            parent_id: None,
            summary: json!({"onboard": 2}),
            body: json!({"items": []}),
        })
        .await
        .unwrap();
    assert_eq!(store.plan(plan.id).await.unwrap(), plan);
    let apply = store.start_apply(plan.id, &exec()).await.unwrap();
    assert_eq!(apply.status, "running");
    let done = store
        .finish_apply(apply.id, "succeeded", &json!({"nodes": 2}))
        .await
        .unwrap();
    assert_eq!(done.status, "succeeded");
    assert!(done.finished_at.is_some());
    // Recording a plan is not an inventory change; creating a node is.
    assert_eq!(store.serial().await.unwrap(), serial);
    store
        .create_node(&new_node("dc1", "c07u52"), &exec())
        .await
        .unwrap();
    assert_eq!(store.serial().await.unwrap(), serial + 1);
    assert!(matches!(
        store.plan(uuid::Uuid::new_v4()).await,
        Err(StoreError::NotFound { kind: "plan", .. })
    ));
}

pub async fn deploy_targets_are_recorded_in_one_audited_write(url: String) {
    let (store, _) = open(&url).await;
    let node = store
        .create_node(&new_node("dc1", "c07u53"), &exec())
        .await
        .unwrap();
    let policy = NodePolicy {
        profile: ProfileName::new("gpu-mi300x"),
        erase: EraseMode::Quick,
        fallback_no_erase: true,
        remove_from_maas: false,
        protected: false,
    };
    let written = store
        .record_deploy_targets(node.id, 3, &policy, &exec())
        .await
        .unwrap();
    assert_eq!(written.reimage_generation, Some(3));
    assert_eq!(written.release_policy.as_ref(), Some(&policy));
    assert_eq!(written.generation, node.generation + 1, "one write");
    let audit = store.audit_log("node", &node.id.to_string()).await.unwrap();
    let recorded: Vec<_> = audit
        .iter()
        .filter(|a| a.action == "node.record_deploy_targets")
        .collect();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].details["reimage_generation"], json!(3));
    assert_eq!(
        recorded[0].details["release_policy"]["erase"],
        json!("quick")
    );
    // Recorded already: nothing written.
    let again = store
        .record_deploy_targets(node.id, 3, &policy, &exec())
        .await
        .unwrap();
    assert_eq!(again.generation, written.generation);
    // A new generation alone is written alone.
    let moved = store
        .record_deploy_targets(node.id, 4, &policy, &exec())
        .await
        .unwrap();
    assert_eq!(moved.reimage_generation, Some(4));
    let audit = store.audit_log("node", &node.id.to_string()).await.unwrap();
    let last = audit.last().unwrap();
    assert_eq!(last.action, "node.record_deploy_targets");
    assert_eq!(last.details, json!({"reimage_generation": 4}));
}

pub async fn paused_host_and_agent_contact_are_recorded(url: String) {
    let (store, clock) = open(&url).await;
    let id = onboard_to_active(&store, "c07u54").await;
    let before = store.node(id).await.unwrap();
    let paused = store.set_paused(id, true, &ops()).await.unwrap();
    assert!(paused.paused);
    assert_eq!(paused.generation, before.generation + 1);
    let hosted = store.set_host(id, "10.176.46.30", &exec()).await.unwrap();
    assert_eq!(hosted.host.as_deref(), Some("10.176.46.30"));
    assert!(hosted.paused);
    clock.advance(Duration::minutes(3));
    store.touch_agent_contact(id).await.unwrap();
    assert_eq!(
        store.node(id).await.unwrap().last_agent_contact_at,
        Some(t0() + Duration::minutes(3))
    );
    assert!(matches!(
        store.touch_agent_contact(uuid::Uuid::new_v4()).await,
        Err(StoreError::NotFound { kind: "node", .. })
    ));
    let actions: Vec<String> = store
        .audit_log("node", &id.to_string())
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.action)
        .collect();
    assert!(
        actions.ends_with(&["node.set_paused".to_string(), "node.set_host".to_string()]),
        "{actions:?}"
    );
}

pub async fn concurrent_writers_move_a_node_once(url: String) {
    let (store, _) = open(&url).await;
    let id = onboard_to_active(&store, "c07u55").await;
    let before = store.node(id).await.unwrap();
    let audits = store
        .audit_log("node", &id.to_string())
        .await
        .unwrap()
        .len();
    let mut handles = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            store
                .transition_node(
                    id,
                    &NodeTransition::new(
                        NodeState::Offline,
                        Owner::Reconciler,
                        Actor::system(format!("r{i}")),
                    ),
                )
                .await
        }));
    }
    for h in handles {
        match h.await.unwrap() {
            Ok(node) => assert_eq!(node.status, NodeState::Offline),
            // Lost the race after reading the old generation: refused, nothing written.
            Err(err) => assert!(err.is_transient() && err.is_conflict(), "{err}"),
        }
    }
    let after = store.node(id).await.unwrap();
    assert_eq!(
        (after.status, after.generation),
        (NodeState::Offline, before.generation + 1)
    );
    assert_eq!(
        store
            .audit_log("node", &id.to_string())
            .await
            .unwrap()
            .len(),
        audits + 1
    );
}

pub async fn cancel_and_restart_clean_go_through_compensation(url: String) {
    let (store, _) = open(&url).await;
    let node = store
        .create_node(&new_node("dc1", "c07u56"), &exec())
        .await
        .unwrap();
    let new = NewOnboarding {
        node_id: Some(node.id),
        site: "dc1".into(),
        hostname: "c07u56".into(),
        batch_id: Some("batch-7".into()),
        ..NewOnboarding::default()
    };
    let job = store.create_onboarding(&new).await.unwrap();
    let cancelled = store
        .recover_job(
            JobKind::Onboarding,
            job.id,
            RecoveryAction::Cancel,
            &ops(),
            Some("wrong rack"),
        )
        .await
        .unwrap();
    assert_eq!(cancelled.state, JobState::Compensating);
    let done = store
        .advance_job(
            JobKind::Onboarding,
            job.id,
            &JobUpdate::new(JobState::Cancelled),
        )
        .await
        .unwrap();
    assert_eq!(done.state, JobState::Cancelled);
    assert!(
        store
            .recover_job(
                JobKind::Onboarding,
                job.id,
                RecoveryAction::Resume,
                &ops(),
                None
            )
            .await
            .is_err()
    );
    // A cancelled job no longer blocks a new onboarding of the same host.
    let second = store.create_onboarding(&new).await.unwrap();
    let mut fail = JobUpdate::new(JobState::FailedRetryable);
    fail.failure = Some(JobFailure {
        class: FailureClass::UpstreamTransient,
        code: "maas_timeout".into(),
        message: "MAAS did not answer".into(),
        details: json!({}),
    });
    store
        .advance_job(
            JobKind::Onboarding,
            second.id,
            &JobUpdate::new(JobState::Running),
        )
        .await
        .unwrap();
    store
        .advance_job(JobKind::Onboarding, second.id, &fail)
        .await
        .unwrap();
    let restarted = store
        .recover_job(
            JobKind::Onboarding,
            second.id,
            RecoveryAction::RestartClean,
            &ops(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(restarted.state, JobState::Compensating);
    let pending = store
        .advance_job(
            JobKind::Onboarding,
            second.id,
            &JobUpdate::new(JobState::Pending),
        )
        .await
        .unwrap();
    assert_eq!(pending.state, JobState::Pending);
    let by_batch = store
        .list_jobs(
            JobKind::Onboarding,
            &JobFilter {
                batch_id: Some("batch-7".into()),
                ..JobFilter::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(by_batch.len(), 2);
    let cancelled_only = store
        .list_jobs(
            JobKind::Onboarding,
            &JobFilter {
                state: Some(JobState::Cancelled),
                site: Some("dc1".into()),
                ..JobFilter::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        cancelled_only.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![job.id]
    );
    // Outbox: a failed delivery keeps the event pending and counts the attempt.
    store
        .publish(&metalform::store::DomainEvent {
            event_type: "node.test".into(),
            subject_id: "x".into(),
            payload: json!({}),
        })
        .await
        .unwrap();
    let pending_events = store.pending_events(100).await.unwrap();
    let last = pending_events.last().unwrap();
    assert_eq!(last.event_type, "node.test");
    store.mark_delivery_failed(last.id).await.unwrap();
    let again = store.pending_events(100).await.unwrap();
    assert_eq!(again.last().unwrap().attempts, 1);
}

pub async fn drift_is_recorded_and_resolved(url: String) {
    let (store, _) = open(&url).await;
    let id = onboard_to_active(&store, "c07u53").await;
    let state = store
        .upsert_maas_state(&MaasStateUpdate {
            node_id: id,
            site: "dc1".into(),
            maas_system_id: "abc123".into(),
            status: Some("Ready".into()),
            power_state: Some("off".into()),
            ips: vec![],
            drift: Some(json!({"rule": "released_outside_workflow", "maas_status": "Ready", "expected": "Deployed"})),
        })
        .await
        .unwrap();
    assert!(state.drift_detected);
    assert_eq!(store.drifted().await.unwrap().len(), 1);
    let resolved = store
        .upsert_maas_state(&MaasStateUpdate {
            node_id: id,
            site: "dc1".into(),
            maas_system_id: "abc123".into(),
            status: Some("Deployed".into()),
            power_state: Some("on".into()),
            ips: vec!["10.176.46.21".into()],
            drift: Some(serde_json::Value::Null),
        })
        .await
        .unwrap();
    assert!(!resolved.drift_detected);
    assert!(resolved.drift_resolved_at.is_some());
    assert_eq!(resolved.last_maas_ips, vec!["10.176.46.21".to_string()]);
    assert!(store.drifted().await.unwrap().is_empty());
}

/// A `failed_retryable` move that records its next try (what the executor writes).
fn failed_waiting(failures: i64, wait_secs: i64, spec: &str) -> JobUpdate {
    let mut failed = JobUpdate::new(JobState::FailedRetryable);
    failed.failure = Some(JobFailure {
        class: FailureClass::UpstreamTransient,
        code: "maas_unavailable".into(),
        message: "MAAS answered 503".into(),
        details: json!({}),
    });
    failed.retry = Some(RetryWait {
        failures,
        next_try_at: t0() + Duration::seconds(wait_secs),
        spec: spec.into(),
    });
    failed
}

pub async fn failed_jobs_record_their_next_try(url: String) {
    let (store, clock) = open(&url).await;
    let (node, job) = node_and_onboarding(&store, "c07u46").await;
    assert_eq!((job.retry_failures, job.next_try_at), (0, None));
    let running = JobUpdate::new(JobState::Running);
    store
        .advance_job(JobKind::Onboarding, job.id, &running)
        .await
        .unwrap();

    // A wait goes only with a move to failed_retryable: refused otherwise, nothing written.
    let mut bogus = JobUpdate::new(JobState::Running);
    bogus.retry = failed_waiting(1, 60, "sha256:a").retry;
    let err = store
        .advance_job(JobKind::Onboarding, job.id, &bogus)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "onboarding {}: only a failed_retryable job waits for its next try, not a running one",
            job.id
        )
    );
    assert_eq!(
        store
            .job(JobKind::Onboarding, job.id)
            .await
            .unwrap()
            .next_try_at,
        None
    );

    let failed = store
        .advance_job(
            JobKind::Onboarding,
            job.id,
            &failed_waiting(1, 60, "sha256:a"),
        )
        .await
        .unwrap();
    assert_eq!(failed.state, JobState::FailedRetryable);
    assert_eq!(failed.retry_failures, 1);
    assert_eq!(failed.next_try_at, Some(t0() + Duration::seconds(60)));
    assert_eq!(failed.retry_spec.as_deref(), Some("sha256:a"));
    clock.advance(Duration::seconds(15));
    let wait = failed.next_try(t0() + Duration::seconds(15)).unwrap();
    assert_eq!(wait.text, "next try in under a minute (attempt 2)");
    assert_eq!(
        failed.next_try(t0() - Duration::minutes(4)).unwrap().text,
        "next try in 5m (attempt 2)"
    );
    assert_eq!(
        failed.next_try(t0() + Duration::seconds(60)).unwrap().text,
        "next try due (attempt 2)"
    );

    // An operator's retry does not wait (audited): the wait is cleared, the count kept.
    let retried = store
        .recover_job(
            JobKind::Onboarding,
            job.id,
            RecoveryAction::Resume,
            &ops(),
            Some("MAAS is back"),
        )
        .await
        .unwrap();
    assert_eq!(retried.state, JobState::Running);
    assert_eq!(
        (
            retried.retry_failures,
            retried.next_try_at,
            retried.next_try(t0())
        ),
        (1, None, None)
    );
    let audit = store
        .audit_log("onboarding", &job.id.to_string())
        .await
        .unwrap();
    assert_eq!(audit.last().unwrap().action, "onboarding.resume");

    // Failing again: the executor counts on; a failure without a wait (a kind the reconciler
    // does not retry on its own) records none.
    let again = store
        .advance_job(
            JobKind::Onboarding,
            job.id,
            &failed_waiting(2, 180, "sha256:a"),
        )
        .await
        .unwrap();
    assert_eq!(
        (again.retry_failures, again.next_try_at),
        (2, Some(t0() + Duration::seconds(180)))
    );
    store
        .advance_job(JobKind::Onboarding, job.id, &running)
        .await
        .unwrap();
    let mut plain = failed_waiting(1, 0, "");
    plain.retry = None;
    let plain = store
        .advance_job(JobKind::Onboarding, job.id, &plain)
        .await
        .unwrap();
    assert_eq!((plain.retry_failures, plain.next_try_at), (2, None));

    // Success clears the count, the wait and the spec.
    store
        .advance_job(JobKind::Onboarding, job.id, &running)
        .await
        .unwrap();
    let mut done = JobUpdate::new(JobState::Completed);
    done.node_transition = Some(NodeTransition::new(
        NodeState::Active,
        Owner::OnboardingWorkflow,
        exec(),
    ));
    let done = store
        .advance_job(JobKind::Onboarding, job.id, &done)
        .await
        .unwrap();
    assert_eq!(
        (done.retry_failures, done.next_try_at, done.retry_spec),
        (0, None, None)
    );

    // Every kind's journal has the columns.
    let decommission = store
        .create_decommission(&NewDecommission {
            node_id: node.id,
            mode: DecommissionMode::Reimage,
            erase: None,
            storage_cleanup: None,
            reason: None,
            requested_by: None,
            plan_id: None,
        })
        .await
        .unwrap();
    assert_eq!(
        (decommission.retry_failures, decommission.next_try_at),
        (0, None)
    );
}

pub async fn lease_renewal_rounds_renew_every_lease_and_report_the_lost(url: String) {
    let (store, clock) = open(&url).await;
    let ttl = Duration::seconds(30);
    let mut held = Vec::new();
    for name in ["onboarding:dc1/a", "onboarding:dc1/b", "onboarding:dc1/c"] {
        held.push(store.acquire_lease(name, "exec-a", ttl).await.unwrap());
    }
    // b lapses and is taken over; c is released by its holder.
    clock.advance(Duration::seconds(31));
    let b = store
        .acquire_lease("onboarding:dc1/b", "exec-b", ttl)
        .await
        .unwrap();
    assert!(store.release_lease(&held[2]).await.unwrap());
    clock.advance(Duration::seconds(1));
    let renewed = store.renew_leases(&held, ttl).await.unwrap();
    assert_eq!(renewed.len(), 3);
    // a expired without a takeover: renewed at its generation, until now + ttl, as stored.
    let a = renewed[0].as_ref().unwrap();
    assert_eq!((a.fencing, a.holder.as_str()), (1, "exec-a"));
    assert_eq!(a.expires_at, clock.now() + ttl);
    assert_eq!(
        store.lease("onboarding:dc1/a").await.unwrap().as_ref(),
        Some(a)
    );
    for (lost, name) in [
        (&renewed[1], "onboarding:dc1/b"),
        (&renewed[2], "onboarding:dc1/c"),
    ] {
        assert!(
            matches!(lost, Err(StoreError::LeaseLost { name: n, .. }) if n == name),
            "{lost:?}"
        );
    }
    // The round wrote nothing under the lost leases: b is still exec-b's, c nobody's.
    assert_eq!(store.lease("onboarding:dc1/b").await.unwrap(), Some(b));
    assert_eq!(store.lease("onboarding:dc1/c").await.unwrap(), None);
    assert!(store.renew_leases(&[], ttl).await.unwrap().is_empty());
}

/// One `#[tokio::test]` per case, each on a fresh store from `$make_url`.
#[macro_export]
macro_rules! store_suite_tests {
    ($make_url:path) => {
        $crate::store_suite_tests!(@cases $make_url;
            migrations_are_idempotent_and_concurrent,
            nodes_follow_the_lifecycle_rules,
            full_decommission_removes_identity_and_reonboarding_creates_a_new_node,
            onboarding_journal_records_failures_and_recovery,
            retirement_and_protection_follow_seed_004,
            protection_blocks_destructive_decommission,
            an_adopted_job_rerun_ends_completed,
            leases_fence_stale_holders,
            lease_renewal_rounds_renew_every_lease_and_report_the_lost,
            concurrent_acquirers_get_one_lease,
            agent_tasks_are_never_duplicated,
            enrollment_tokens_are_single_use_with_ttl,
            plans_applies_and_serial,
            drift_is_recorded_and_resolved,
            paused_host_and_agent_contact_are_recorded,
            deploy_targets_are_recorded_in_one_audited_write,
            concurrent_writers_move_a_node_once,
            cancel_and_restart_clean_go_through_compensation,
            failed_jobs_record_their_next_try,
            a_store_with_two_open_onboardings_of_a_node_is_not_upgraded,
        );
    };
    (@cases $make_url:path; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                store_suite::$case($make_url().await).await;
            }
        )+
    };
}
