//! The drift store suite on SQLite (hermetic): a fresh database file per case.

use crate::drift_store_suite;

async fn sqlite_url() -> String {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    format!("sqlite://{}", dir.join("state.db").display())
}

crate::drift_store_suite_tests!(sqlite_url);
