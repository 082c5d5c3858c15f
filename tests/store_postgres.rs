//! The store suite on a real PostgreSQL (scripts/services/10-postgres.sh starts it and exports
//! METALFORM_TEST_POSTGRES_URL). Each case gets its own fresh database. Fails, never skips,
//! when the service is missing.
#![cfg(feature = "services")]

use crate::postgres_support;
use crate::store_suite;

use metalform::store::{Actor, EnsureOutcome, StoreError};
use postgres_support::fresh_database;
use sqlx::{Connection, PgConnection};

crate::store_suite_tests!(fresh_database);

/// Two concurrent opens of a fresh database from two separate pools: the advisory lock makes
/// the second wait, and both see one applied schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_opens_migrate_once() {
    let url = fresh_database().await;
    let opens: Vec<_> = (0..6)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { store_suite::open(&url).await.0 })
        })
        .collect();
    for open in opens {
        let store = open.await.unwrap();
        assert_eq!(
            store.schema_versions().await.unwrap(),
            metalform::store::migration_versions()
        );
        assert_eq!(store.backend(), metalform::store::Backend::Postgres);
    }
}

/// Two writers create the same node at once, as two replicas do when one resumes a job the
/// other held while it was stopped: the second cannot see the first's uncommitted row, so its
/// insert waits on the unique index and is refused when the first commits. That refusal is the
/// same duplicate as a row seen before the insert, so the caller recovers the node the first
/// writer made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_created_by_a_concurrent_writer_is_a_duplicate() {
    let url = fresh_database().await;
    let (store, _clock) = store_suite::open(&url).await;
    let (theirs, (store, created)) = racing_an_uncommitted_insert(
        &url,
        "INSERT INTO nodes (id, site, hostname, status, provider, generation, created_at,
            updated_at)
         VALUES ($1, 'dc1', 'gpu00003', 'enrolling', 'maas', 1,
             '2026-03-01T08:00:00.000000Z', '2026-03-01T08:00:00.000000Z')",
        async move {
            let created = store
                .create_node(
                    &store_suite::new_node("dc1", "gpu00003"),
                    &Actor::system("apply"),
                )
                .await;
            (store, created)
        },
    )
    .await;
    match created {
        Err(StoreError::DuplicateNode { site, hostname }) => {
            assert_eq!((site.as_str(), hostname.as_str()), ("dc1", "gpu00003"));
        }
        other => panic!("expected a duplicate node, got {other:?}"),
    }
    let found = store.find_node("dc1", "gpu00003").await.unwrap().unwrap();
    assert_eq!(found.id.to_string(), theirs);
}

/// Two writers create a node's first onboarding at once (a replica paused after it looked for
/// one, while another took the node up): no node row exists to hold, so the second insert waits
/// on the unique index over open onboardings and is refused, naming the first writer's job,
/// when that one commits. One open onboarding remains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_onboarding_created_by_a_concurrent_writer_is_refused_as_open() {
    let url = fresh_database().await;
    let (store, _clock) = store_suite::open(&url).await;
    let (theirs, (store, created)) = racing_an_uncommitted_insert(
        &url,
        "INSERT INTO onboardings (id, site, hostname, current_stage, status, requested_at,
            updated_at)
         VALUES ($1, 'dc1', 'gpu00005', 'create_or_find_in_maas', 'pending',
             '2026-03-01T08:00:00.000000Z', '2026-03-01T08:00:00.000000Z')",
        async move {
            let created = store
                .create_onboarding(&metalform::store::NewOnboarding {
                    site: "dc1".into(),
                    hostname: "gpu00005".into(),
                    ..Default::default()
                })
                .await;
            (store, created)
        },
    )
    .await;
    match created {
        Err(err @ StoreError::JobOpen { .. }) => assert_eq!(
            err.to_string(),
            format!("node dc1/gpu00005 already has an open onboarding ({theirs}, pending)")
        ),
        other => panic!("expected the open onboarding, got {other:?}"),
    }
    let open_jobs = store
        .list_jobs(
            metalform::lifecycle::JobKind::Onboarding,
            &metalform::store::JobFilter {
                open_only: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        open_jobs
            .iter()
            .map(|j| j.id.to_string())
            .collect::<Vec<_>>(),
        vec![theirs]
    );
}

/// Two writers ensure the same agent task at once (a replica that resumes a decommission the
/// other held while it was stopped): the second waits for the first on the node's row, then
/// finds its task queued instead of queueing another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_task_ensured_by_a_concurrent_writer_is_not_queued_twice() {
    let url = fresh_database().await;
    let (store, _clock) = store_suite::open(&url).await;
    let node = store
        .create_node(
            &store_suite::new_node("dc1", "gpu00004"),
            &Actor::system("apply"),
        )
        .await
        .unwrap();
    // The first writer, as `ensure_task` writes: the node's row taken, the task inserted, not
    // yet committed.
    let mut first = PgConnection::connect(&url).await.unwrap();
    let mut open = first.begin().await.unwrap();
    sqlx::query("UPDATE nodes SET generation = generation WHERE id = $1")
        .bind(node.id.to_string())
        .execute(&mut *open)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO agent_tasks (id, node_id, task_type, params, status, created_at,
            updated_at)
         VALUES ($1, $2, 'node_uninstall', '{}', 'queued', '2026-03-01T08:00:00.000000Z',
             '2026-03-01T08:00:00.000000Z')",
    )
    .bind(uuid::Uuid::new_v4().to_string())
    .bind(node.id.to_string())
    .execute(&mut *open)
    .await
    .unwrap();

    let ours = tokio::spawn(async move {
        let ensured = store
            .ensure_task(node.id, "node_uninstall", &serde_json::json!({}), None)
            .await;
        (store, ensured)
    });
    wait_for_a_lock_wait(&url).await;
    open.commit().await.unwrap();

    let (store, ensured) = ours.await.unwrap();
    let (_, outcome) = ensured.unwrap();
    assert_eq!(outcome, EnsureOutcome::AlreadyQueued);
    let tasks = store.tasks_for_node(node.id).await.unwrap();
    assert_eq!(tasks.len(), 1, "{tasks:?}");
}

/// Run `ours` while another connection holds `insert` (its `$1` a fresh id, returned) in an
/// uncommitted transaction, and commit it only once `ours` waits on it: the race two replicas
/// meet when neither can see the other's row yet.
async fn racing_an_uncommitted_insert<T: Send + 'static>(
    url: &str,
    insert: &'static str,
    ours: impl std::future::Future<Output = T> + Send + 'static,
) -> (String, T) {
    let mut first = PgConnection::connect(url).await.unwrap();
    let mut open = first.begin().await.unwrap();
    let theirs = uuid::Uuid::new_v4().to_string();
    sqlx::query(insert)
        .bind(&theirs)
        .execute(&mut *open)
        .await
        .unwrap();
    let ours = tokio::spawn(ours);
    wait_for_a_lock_wait(url).await;
    open.commit().await.unwrap();
    (theirs, ours.await.unwrap())
}

/// Until a statement of the test's database waits on a lock another transaction holds.
async fn wait_for_a_lock_wait(url: &str) {
    let mut watcher = PgConnection::connect(url).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut watcher)
        .await
        .unwrap();
        if waiting > 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the second writer never waited on the first"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
