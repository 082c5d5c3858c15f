//! The Redfish provisioner's tables on SQLite (hermetic): a fresh database file per case.

use crate::provisioning_store_suite;

async fn sqlite_url() -> String {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    format!("sqlite://{}", dir.join("state.db").display())
}

crate::provisioning_store_tests!(sqlite_url);
