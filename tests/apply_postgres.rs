//! The executor on a real PostgreSQL store (scripts/services/10-postgres.sh), as daemon
//! replicas would share it: two executors racing over the same nodes onboard each node once,
//! and the CLI applies through a `postgres://` state URL. Fails, never skips, without the
//! service.
#![cfg(feature = "services")]

use crate::onboard_support;
use crate::postgres_support;

use metalform::lifecycle::JobState;
use onboard_support::{Bed, Setup, SiteSetup, free_port};
use postgres_support::fresh_database;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_executors_on_one_postgres_store_onboard_each_node_once() {
    let url = fresh_database().await;
    let bed = Bed::start_with_state(
        Setup::one_site(SiteSetup::generated("dc1", 61, 5, 1)),
        Some(url),
    )
    .await;
    onboard_support::race_two_executors(&bed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_through_a_postgres_state_url() {
    let url = fresh_database().await;
    let bed = Bed::start_with_state(
        Setup::one_site(SiteSetup::generated("dc1", 62, 3, 0)),
        Some(url),
    )
    .await;
    let out = bed
        .cli(&["apply", "--auto-approve"], free_port())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("Apply: 3 converged, 0 failed, 0 not run."),
        "{stdout}"
    );
    assert!(
        bed.jobs()
            .await
            .iter()
            .all(|j| j.state == JobState::Completed)
    );
}
