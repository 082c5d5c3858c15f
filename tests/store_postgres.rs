//! The store suite on a real PostgreSQL (scripts/services/10-postgres.sh starts it and exports
//! METALFORM_TEST_POSTGRES_URL). Each case gets its own fresh database. Fails, never skips,
//! when the service is missing.
#![cfg(feature = "services")]

use crate::postgres_support;
use crate::store_suite;

use postgres_support::fresh_database;

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
