//! The store suite on a real PostgreSQL (scripts/services/10-postgres.sh starts it and exports
//! METALFORM_TEST_POSTGRES_URL). Each case gets its own fresh database. Fails, never skips,
//! when the service is missing.
#![cfg(feature = "services")]

mod store_suite;

use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// Create a fresh database on the test server and return its URL.
async fn pg_url() -> String {
    let admin = std::env::var("METALFORM_TEST_POSTGRES_URL").expect(
        "METALFORM_TEST_POSTGRES_URL is not set: run scripts/test-all, which starts PostgreSQL",
    );
    let mut conn = PgConnection::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {admin} is unreachable: {e}"));
    let name = format!("mf_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .expect("create test database");
    let mut url = url::Url::parse(&admin).expect("METALFORM_TEST_POSTGRES_URL is a URL");
    url.set_path(&name);
    url.to_string()
}

store_suite_tests!(pg_url);

/// Two concurrent opens of a fresh database from two separate pools: the advisory lock makes
/// the second wait, and both see one applied schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_opens_migrate_once() {
    let url = pg_url().await;
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
            (1..=metalform::store::SCHEMA_VERSION).collect::<Vec<_>>()
        );
        assert_eq!(store.backend(), metalform::store::Backend::Postgres);
    }
}
