//! The drift store suite on SQLite (hermetic): a fresh database file per case.

mod agent_suite;
mod drift_store_suite;

async fn sqlite_url() -> String {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    format!("sqlite://{}", dir.join("state.db").display())
}

drift_store_suite_tests!(sqlite_url);
