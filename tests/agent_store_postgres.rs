//! The agent-enrollment store suite on a real PostgreSQL (scripts/services/10-postgres.sh
//! starts it and exports METALFORM_TEST_POSTGRES_URL). Each case gets its own fresh database.
//! Fails, never skips, when the service is missing.
#![cfg(feature = "services")]

use crate::agent_suite;
use crate::postgres_support;

use postgres_support::fresh_database;

crate::agent_suite_tests!(fresh_database);

/// Replicas on one PostgreSQL: an enrollment recorded through one store is announced, at
/// commit, to another process's notices, naming the node (the replica running the node's
/// job wakes its wait with it, wherever the agent enrolled).
#[tokio::test]
async fn an_enrollment_is_announced_to_the_other_replicas() {
    let url = fresh_database().await;
    let (first, _) = agent_suite::open(&url).await;
    let (second, _) = agent_suite::open(&url).await;
    let mut notices = second
        .enrollment_notices()
        .await
        .unwrap()
        .expect("PostgreSQL announces enrollments");
    let o = agent_suite::onboarding(&first, "c07u46", "x7k3pa").await;
    let enrolled = first
        .enroll_agent(&agent_suite::request(&o.token, "c07u46", "x7k3pa"))
        .await;
    assert!(enrolled.is_ok(), "{:?}", enrolled.err());
    let node = tokio::time::timeout(std::time::Duration::from_secs(10), notices.next())
        .await
        .expect("announced within 10 s")
        .unwrap();
    assert_eq!(node, o.node);
    // A refused enrollment (another machine with the used token) announces nothing: the
    // notice goes with the enrollment's transaction.
    let refused = first
        .enroll_agent(&agent_suite::request(&o.token, "c07u46", "other1"))
        .await;
    assert!(refused.is_err());
    let nothing = tokio::time::timeout(std::time::Duration::from_millis(500), notices.next()).await;
    assert!(nothing.is_err(), "{nothing:?}");
}
