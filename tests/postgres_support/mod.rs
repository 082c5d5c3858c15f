//! The test PostgreSQL (scripts/services/10-postgres.sh starts it and exports
//! METALFORM_TEST_POSTGRES_URL): each caller gets a fresh database of its own. Fails, never
//! skips, when the service is missing or unreachable.

#![allow(dead_code)]

use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// Create a fresh database on the test server and return its URL.
pub async fn fresh_database() -> String {
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
