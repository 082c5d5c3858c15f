//! The Redfish provisioner's tables (seed 003 "Persistence Model", "Leasing", "Concurrency
//! Controls", "Idempotency and Duplicate Requests"), run on SQLite
//! (tests/provisioning_store.rs, hermetic) and on a real PostgreSQL
//! (tests/provisioning_store_postgres.rs, `--features services`). Each case takes the URL of an
//! empty store.

#![allow(dead_code)]

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use metalform::clock::ManualClock;
use metalform::lifecycle::{JobKind, ProvisioningStatus, WebhookReport};
use metalform::secrets::SecretRef;
use metalform::store::{
    Created, LeaseTarget, NewProvisioning, ProvisioningFilter, Server, Store, StoreError,
    WebhookOutcome,
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

/// Run one statement on the store's database outside metalform (what another program, or a
/// bug, could do): the database's own constraints must hold.
pub async fn raw(url: &str, sql: &str) -> Result<u64, String> {
    use sqlx::{AssertSqlSafe, Connection};
    if let Some(path) = url.strip_prefix("sqlite://") {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .foreign_keys(true);
        let mut conn = sqlx::SqliteConnection::connect_with(&options)
            .await
            .map_err(|e| e.to_string())?;
        sqlx::query(AssertSqlSafe(sql.to_owned()))
            .execute(&mut conn)
            .await
            .map(|r| r.rows_affected())
            .map_err(|e| e.to_string())
    } else {
        let mut conn = sqlx::PgConnection::connect(url)
            .await
            .map_err(|e| e.to_string())?;
        sqlx::query(AssertSqlSafe(sql.to_owned()))
            .execute(&mut conn)
            .await
            .map(|r| r.rows_affected())
            .map_err(|e| e.to_string())
    }
}

pub fn server(serial: &str) -> Server {
    Server {
        serial: serial.into(),
        bmc_address: "https://10.176.16.131".into(),
        credentials: SecretRef::new("kv/sites/dc1/bmc", None),
        vendor: Some("dell".into()),
        last_seen: None,
        site: "dc1".into(),
        hostname: format!("rf-{}", serial.to_lowercase()),
    }
}

pub fn recipe() -> serde_json::Value {
    json!({"task_target": "install-linux.target", "target_disk": "/dev/sda"})
}

pub fn request(serial: &str, key: Option<&str>) -> NewProvisioning {
    NewProvisioning {
        serial: serial.into(),
        recipe: recipe(),
        maintenance_iso_url: "http://10.0.0.1/maintenance.iso".into(),
        idempotency_key: key.map(str::to_owned),
        requested_by: Some("ops".into()),
        plan_id: None,
        generation: None,
    }
}

async fn status_of(store: &Store, id: uuid::Uuid) -> ProvisioningStatus {
    store
        .job(JobKind::Provisioning, id)
        .await
        .unwrap()
        .provisioning_status()
        .unwrap()
}

async fn event_messages(store: &Store, id: uuid::Uuid) -> Vec<String> {
    store
        .provisioning_events(id, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| format!("{} {}", e.level, e.message))
        .collect()
}

pub async fn servers_hold_references_not_passwords(url: String) {
    let (store, _) = open(&url).await;
    assert!(store.schema_versions().await.unwrap().contains(&8));
    store.upsert_servers(&[server("XF-1")]).await.unwrap();
    let mut changed = server("XF-1");
    changed.bmc_address = "https://10.176.16.132".into();
    store.upsert_servers(&[changed.clone()]).await.unwrap();
    assert_eq!(store.server("XF-1").await.unwrap(), changed);
    assert!(matches!(
        store.server("XF-9").await,
        Err(StoreError::NotFound { kind: "server", .. })
    ));
    // The database itself refuses a password where a reference belongs.
    let err = raw(
        &url,
        "INSERT INTO servers (serial, bmc_address, bmc_username, bmc_password, site, hostname,
            updated_at) VALUES ('XF-2', '10.0.0.2', 'root', 'calvin', 'dc1', 'x', 'now')",
    )
    .await
    .unwrap_err();
    assert!(err.to_lowercase().contains("check"), "{err}");
    assert_eq!(store.servers().await.unwrap().len(), 1);
}

pub async fn one_active_job_per_server_by_the_database(url: String) {
    let (store, _) = open(&url).await;
    store
        .upsert_servers(&[server("XF-1"), server("XF-2")])
        .await
        .unwrap();
    let Created::New(first) = store
        .create_provisioning(&request("XF-1", None))
        .await
        .unwrap()
    else {
        panic!("a new job");
    };
    assert_eq!(
        status_of(&store, first.id).await,
        ProvisioningStatus::Queued
    );
    let busy = store
        .create_provisioning(&request("XF-1", None))
        .await
        .unwrap_err();
    assert_eq!(
        busy.to_string(),
        format!(
            "server XF-1 already has an active provisioning job ({}, queued)",
            first.id
        )
    );
    // Not only metalform's check: the partial unique index refuses a second active row.
    let insert = |id: &str, status: &str| {
        format!(
            "INSERT INTO provisioning_jobs (id, server_serial, status, recipe_json, created_at,
                updated_at, maintenance_iso_url, site, hostname, current_stage, job_state)
             VALUES ('{id}', 'XF-1', '{status}', '{{}}', 'now', 'now', 'u', 'dc1', 'h',
                'build_task_iso', 'pending')"
        )
    };
    let err = raw(
        &url,
        &insert("00000000-0000-4000-8000-000000000001", "provisioning"),
    )
    .await
    .unwrap_err();
    assert!(err.to_lowercase().contains("unique"), "{err}");
    // A complete job does not count; an unknown status is refused by its CHECK.
    raw(
        &url,
        &insert("00000000-0000-4000-8000-000000000002", "complete"),
    )
    .await
    .unwrap();
    let err = raw(
        &url,
        &insert("00000000-0000-4000-8000-000000000003", "done"),
    )
    .await
    .unwrap_err();
    assert!(err.to_lowercase().contains("check"), "{err}");
    // Another server is free; an unknown one is not a server.
    assert!(
        store
            .create_provisioning(&request("XF-2", None))
            .await
            .is_ok()
    );
    assert!(matches!(
        store.create_provisioning(&request("XF-9", None)).await,
        Err(StoreError::NotFound { kind: "server", .. })
    ));
    // Once the job is complete the server takes a new one.
    raw(
        &url,
        &format!(
            "UPDATE provisioning_jobs SET status = 'complete', job_state = 'completed' WHERE id = '{}'",
            first.id
        ),
    )
    .await
    .unwrap();
    assert!(
        store
            .create_provisioning(&request("XF-1", None))
            .await
            .is_ok()
    );
}

pub async fn idempotency_keys_return_the_active_job(url: String) {
    let (store, _) = open(&url).await;
    store.upsert_servers(&[server("XF-1")]).await.unwrap();
    let first = store
        .create_provisioning(&request("XF-1", Some("k-1")))
        .await
        .unwrap();
    let again = store
        .create_provisioning(&request("XF-1", Some("k-1")))
        .await
        .unwrap();
    assert!(matches!(first, Created::New(_)));
    assert!(matches!(again, Created::Existing(_)));
    assert_eq!(first.job().id, again.job().id);
    let mut other = request("XF-1", Some("k-1"));
    other.recipe = json!({"task_target": "install-windows.target", "target_disk": "/dev/sdb"});
    assert!(matches!(
        store.create_provisioning(&other).await,
        Err(StoreError::IdempotencyConflict { .. })
    ));
    // Another key while the job is active: busy.
    assert!(matches!(
        store
            .create_provisioning(&request("XF-1", Some("k-2")))
            .await,
        Err(StoreError::ServerBusy { .. })
    ));
    let jobs = store
        .list_provisioning(&ProvisioningFilter {
            serial: Some("XF-1".into()),
            ..ProvisioningFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(jobs.len(), 1);
}

pub async fn leases_follow_the_seed_statements(url: String) {
    let (store, clock) = open(&url).await;
    store.upsert_servers(&[server("XF-1")]).await.unwrap();
    let job = store
        .create_provisioning(&request("XF-1", None))
        .await
        .unwrap()
        .job()
        .clone();
    let target = LeaseTarget::ProvisioningJob(job.id);
    let ttl = Duration::seconds(30);
    assert_eq!(
        store
            .claimable_provisioning(10)
            .await
            .unwrap()
            .iter()
            .map(|j| j.id)
            .collect::<Vec<_>>(),
        [job.id]
    );
    // Acquire: queued → provisioning, worker, picked_at and expiry in one statement.
    let a = store.take_lease(&target, "worker-a", ttl).await.unwrap();
    let taken = store.job(JobKind::Provisioning, job.id).await.unwrap();
    let metalform::store::JobSpec::Provisioning {
        status,
        worker_id,
        picked_at,
        lease_expires_at,
        ..
    } = &taken.spec
    else {
        panic!("a provisioning job");
    };
    assert_eq!(*status, ProvisioningStatus::Provisioning);
    assert_eq!(worker_id.as_deref(), Some("worker-a"));
    assert_eq!(*picked_at, Some(t0()));
    assert_eq!(*lease_expires_at, Some(t0() + ttl));
    assert!(store.claimable_provisioning(10).await.unwrap().is_empty());
    // A live lease is another worker's.
    assert!(matches!(
        store.take_lease(&target, "worker-b", ttl).await,
        Err(StoreError::LeaseHeld { ref holder, .. }) if holder == "worker-a"
    ));
    // Heartbeat.
    clock.advance(Duration::seconds(20));
    let a = store.renew_lease(&a, ttl).await.unwrap();
    assert_eq!(a.expires_at, t0() + Duration::seconds(50));
    // The worker dies: after expiry another steals it, with a higher fencing generation.
    clock.advance(Duration::seconds(31));
    assert_eq!(store.claimable_provisioning(10).await.unwrap().len(), 1);
    let b = store.take_lease(&target, "worker-b", ttl).await.unwrap();
    assert!(b.fencing > a.fencing);
    assert_eq!(
        status_of(&store, job.id).await,
        ProvisioningStatus::Provisioning
    );
    // The old holder can neither renew nor write.
    assert!(matches!(
        store.renew_lease(&a, ttl).await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert!(matches!(
        store
            .fail_provisioning(job.id, "mount_task", "stale", &a.fence())
            .await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert_eq!(
        status_of(&store, job.id).await,
        ProvisioningStatus::Provisioning
    );
    // The holder can.
    assert!(
        store
            .fail_provisioning(
                job.id,
                "mount_task",
                "the BMC refused the image",
                &b.fence()
            )
            .await
            .unwrap()
    );
    assert_eq!(status_of(&store, job.id).await, ProvisioningStatus::Failed);
    // Failed once is failed: a second failure does not move it.
    assert!(
        !store
            .fail_provisioning(job.id, "reset_host", "again", &b.fence())
            .await
            .unwrap()
    );
    // Released, the job is claimable at once (cleanup is due).
    assert!(store.release_lease(&b).await.unwrap());
    assert_eq!(store.claimable_provisioning(10).await.unwrap().len(), 1);
    let messages = event_messages(&store, job.id).await;
    assert_eq!(
        messages,
        [
            "info queued by ops".to_owned(),
            "info picked by worker worker-a".into(),
            "info taken over by worker worker-b: the lease of worker-a expired".into(),
            "error failed: the BMC refused the image".into(),
        ]
    );
}

pub async fn concurrent_takes_give_one_holder(url: String) {
    let (store, _) = open(&url).await;
    store.upsert_servers(&[server("XF-1")]).await.unwrap();
    let job = store
        .create_provisioning(&request("XF-1", None))
        .await
        .unwrap()
        .job()
        .clone();
    let takes: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .take_lease(
                        &LeaseTarget::ProvisioningJob(job.id),
                        &format!("worker-{i}"),
                        Duration::seconds(30),
                    )
                    .await
            })
        })
        .collect();
    let mut won = 0;
    for take in takes {
        match take.await.unwrap() {
            Ok(_) => won += 1,
            Err(StoreError::LeaseHeld { .. }) => {}
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(won, 1);
    let picks = event_messages(&store, job.id)
        .await
        .into_iter()
        .filter(|m| m.contains("picked by"))
        .count();
    assert_eq!(picks, 1);
}

pub async fn webhooks_move_once_and_duplicates_change_nothing(url: String) {
    let (store, _) = open(&url).await;
    store
        .upsert_servers(&[server("XF-1"), server("XF-2")])
        .await
        .unwrap();
    let job = store
        .create_provisioning(&request("XF-1", None))
        .await
        .unwrap()
        .job()
        .clone();
    // Queued, not provisioning: no job of the server takes a report yet.
    assert_eq!(
        store
            .report_webhook("XF-1", &WebhookReport::Success)
            .await
            .unwrap(),
        WebhookOutcome::NoActiveJob
    );
    store
        .take_lease(
            &LeaseTarget::ProvisioningJob(job.id),
            "worker-a",
            Duration::seconds(30),
        )
        .await
        .unwrap();
    let failed = WebhookReport::Failed {
        step: Some("bootloader-linux.service".into()),
    };
    let WebhookOutcome::Moved(moved) = store.report_webhook("XF-1", &failed).await.unwrap() else {
        panic!("moved");
    };
    assert_eq!(
        moved.provisioning_status(),
        Some(ProvisioningStatus::Failed)
    );
    let serial_before = store.serial().await.unwrap();
    let events_before = event_messages(&store, job.id).await;
    // A duplicate (even a contradicting one) is answered and changes nothing.
    for again in [failed.clone(), WebhookReport::Success] {
        assert!(matches!(
            store.report_webhook("XF-1", &again).await.unwrap(),
            WebhookOutcome::Duplicate(_)
        ));
    }
    assert_eq!(store.serial().await.unwrap(), serial_before);
    assert_eq!(event_messages(&store, job.id).await, events_before);
    let job = store.job(JobKind::Provisioning, job.id).await.unwrap();
    let metalform::store::JobSpec::Provisioning { failed_step, .. } = &job.spec else {
        panic!();
    };
    assert_eq!(failed_step.as_deref(), Some("bootloader-linux.service"));
    assert_eq!(
        store
            .report_webhook("XF-2", &WebhookReport::Success)
            .await
            .unwrap(),
        WebhookOutcome::NoActiveJob
    );
    assert_eq!(
        store
            .report_webhook("NOPE", &WebhookReport::Success)
            .await
            .unwrap(),
        WebhookOutcome::NoActiveJob
    );
    assert!(
        events_before
            .iter()
            .any(|m| m == "error the maintenance OS reported a failure at bootloader-linux.service")
    );
}

#[macro_export]
macro_rules! provisioning_store_tests {
    ($make_url:path) => {
        $crate::provisioning_store_tests!(@cases $make_url;
            servers_hold_references_not_passwords,
            one_active_job_per_server_by_the_database,
            idempotency_keys_return_the_active_job,
            leases_follow_the_seed_statements,
            concurrent_takes_give_one_holder,
            webhooks_move_once_and_duplicates_change_nothing,
        );
    };
    (@cases $make_url:path; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                provisioning_store_suite::$case($make_url().await).await;
            }
        )+
    };
}
