//! The agent-enrollment store suite on SQLite (hermetic): a fresh database file per case.

use crate::agent_suite;

async fn sqlite_url() -> String {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    format!("sqlite://{}", dir.join("state.db").display())
}

crate::agent_suite_tests!(sqlite_url);

/// Neither the enrollment token nor the agent token is ever written to the database file.
#[tokio::test]
async fn agent_tokens_are_stored_hashed() {
    let url = sqlite_url().await;
    let (store, _) = agent_suite::open(&url).await;
    let o = agent_suite::onboarding(&store, "c07u43", "x7k3pa").await;
    let enrolled = store
        .enroll_agent(&agent_suite::request(&o.token, "c07u43", "x7k3pa"))
        .await
        .unwrap();
    store.close().await;
    let path = url.strip_prefix("sqlite://").unwrap();
    let bytes = std::fs::read(path).unwrap();
    let wal = std::fs::read(format!("{path}-wal")).unwrap_or_default();
    let haystack = [bytes, wal].concat();
    let contains = |needle: &[u8]| haystack.windows(needle.len()).any(|w| w == needle);
    for secret in [&o.token, &enrolled.agent_token] {
        assert!(
            !contains(secret.expose().as_bytes()),
            "a plain token is in the database"
        );
        assert!(contains(metalform::store::token_hash(secret).as_bytes()));
    }
}
