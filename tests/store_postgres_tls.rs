//! The state store over TLS to a real PostgreSQL (issue 16 point 5; scripts/services/10-postgres.sh
//! starts it with `ssl=on` and a private CA, exporting METALFORM_TEST_POSTGRES_URL and
//! METALFORM_TEST_POSTGRES_CA). Fails, never skips, when the service is missing.
#![cfg(feature = "services")]

use crate::postgres_support;

use std::sync::Arc;

use metalform::clock::SystemClock;
use metalform::store::Store;
use postgres_support::fresh_database;
use sqlx::Connection as _;

fn ca() -> String {
    std::env::var("METALFORM_TEST_POSTGRES_CA")
        .expect("METALFORM_TEST_POSTGRES_CA is not set: run scripts/test-all (PostgreSQL with TLS)")
}

fn with(url: &str, query: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{query}")
}

/// Whether the session `url` opens is encrypted, as the server sees it.
async fn encrypted(url: &str) -> Result<bool, sqlx::Error> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let (ssl,): (bool,) =
        sqlx::query_as("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&mut conn)
            .await?;
    Ok(ssl)
}

#[tokio::test]
async fn the_store_opens_over_tls_with_verify_full_and_the_ca_file() {
    let url = fresh_database().await;
    let verified = with(&url, &format!("sslmode=verify-full&sslrootcert={}", ca()));
    assert!(encrypted(&verified).await.unwrap(), "the session is TLS");
    let store = Store::open(&verified, Arc::new(SystemClock)).await.unwrap();
    store.plan_signing_key().await.unwrap();
    assert!(!store.schema_versions().await.unwrap().is_empty());
    store.close().await;

    // verify-full without the CA: the server's certificate is not trusted, nothing opens.
    let unverified = with(&url, "sslmode=verify-full");
    let err = Store::open(&unverified, Arc::new(SystemClock))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot open the state store"), "{err}");
    assert!(!err.contains("hunter2"));

    // Plain text only when the URL says so.
    assert!(!encrypted(&with(&url, "sslmode=disable")).await.unwrap());
}
