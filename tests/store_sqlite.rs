//! The store suite on SQLite (hermetic): a fresh database file per case.

use crate::store_suite;

use std::sync::Arc;

use metalform::clock::SystemClock;
use metalform::store::{Store, default_url};

async fn sqlite_url() -> String {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    // A nested path: opening must create the directory.
    format!("sqlite://{}", dir.join("nested/dir/state.db").display())
}

crate::store_suite_tests!(sqlite_url);

#[tokio::test]
async fn default_url_lives_under_the_fleet() {
    let fleet = tempfile::tempdir().unwrap();
    let url = default_url(fleet.path());
    assert_eq!(
        url,
        format!("sqlite://{}/.metalform/state.db", fleet.path().display())
    );
    let store = Store::open(&url, Arc::new(SystemClock)).await.unwrap();
    assert!(fleet.path().join(".metalform/state.db").exists());
    assert_eq!(
        store.schema_versions().await.unwrap(),
        metalform::store::migration_versions()
    );
}

#[tokio::test]
async fn bad_urls_are_typed_errors() {
    let err = Store::open("mysql://x", Arc::new(SystemClock))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid state URL `mysql://x`: expected sqlite://PATH or postgres://…"
    );
    let err = Store::open("sqlite://", Arc::new(SystemClock))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid state URL `sqlite://`: no path after sqlite://"
    );
    assert_eq!(
        metalform::store::redact_url("postgres://u:hunter2@db:5432/m"),
        "postgres://***@db:5432/m"
    );
}

#[tokio::test]
async fn tokens_are_stored_hashed() {
    let url = sqlite_url().await;
    let (store, _) = store_suite::open(&url).await;
    let node = store
        .create_node(
            &store_suite::new_node("dc1", "h1"),
            &metalform::store::Actor::system("t"),
        )
        .await
        .unwrap();
    let (token, _) = store
        .issue_enrollment_token(node.id, None, chrono::Duration::hours(1))
        .await
        .unwrap();
    store.close().await;
    let path = url.strip_prefix("sqlite://").unwrap();
    let bytes = std::fs::read(path).unwrap();
    let wal = std::fs::read(format!("{path}-wal")).unwrap_or_default();
    let haystack = [bytes, wal].concat();
    let contains = |needle: &[u8]| haystack.windows(needle.len()).any(|w| w == needle);
    assert!(
        !contains(token.expose().as_bytes()),
        "plain token found in the database"
    );
    assert!(contains(metalform::store::token_hash(&token).as_bytes()));
}

#[tokio::test]
async fn unreachable_postgres_is_a_typed_transient_error() {
    let err = Store::open(
        "postgres://metalform:hunter2@127.0.0.1:1/metalform",
        Arc::new(SystemClock),
    )
    .await
    .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with("cannot open the state store at postgres://***@127.0.0.1:1/metalform: "),
        "{text}"
    );
    assert!(!text.contains("hunter2"));
}

#[tokio::test]
async fn a_store_from_a_newer_metalform_is_refused() {
    let url = sqlite_url().await;
    store_suite::sqlite_from_a_newer_metalform(&url).await;
    let err = Store::open(&url, Arc::new(SystemClock)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "the state store has schema version 99, newer than this metalform ({})",
            metalform::store::SCHEMA_VERSION
        )
    );
}

/// A command on a store the upgrade cannot carry over says why and what to do, and changes
/// nothing: the same command fails the same way again.
#[tokio::test]
async fn a_store_that_cannot_be_upgraded_is_refused_with_what_to_do() {
    let url = sqlite_url().await;
    let first = store_suite::store_with_two_open_onboardings_of_a_node(&url).await;
    let fleet = tempfile::tempdir().unwrap();
    for _ in 0..2 {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_metalform"))
            .args(["onboardings", "list", "--state", &url, "--fleet"])
            .arg(fleet.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "error: the state store cannot be upgraded to schema version 16: more than one \
                 open onboarding of the same node (dc1/c07u50: {first} (pending), {} \
                 (failed_manual_intervention)); this version allows one per node\n\
                 hint: with the metalform version that wrote this store, cancel the onboardings \
                 you do not want (`metalform onboardings cancel JOB --reason TEXT`), then run \
                 this version again\n",
                store_suite::SECOND_OPEN_ONBOARDING
            )
        );
    }
}
