//! The replica suite on SQLite (hermetic): two or three replicas in one process sharing one
//! store file.

use crate::ha_suite;

async fn sqlite_url() -> String {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    format!("sqlite://{}", dir.join("state.db").display())
}

crate::ha_suite_tests!(sqlite_url);
