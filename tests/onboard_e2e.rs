//! The onboarding executor end to end against the simulator (seed 000 §4.3): every stage runs
//! against real HTTP, the journal lands in SQLite, the agent enrolls through the endpoint.

mod onboard_support;

use metalform::lifecycle::{JobState, NodeState};
use onboard_support::{Bed, Setup, SiteSetup};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_known_and_one_discovered_machine_converge_to_active() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 3, 3, 1))).await;
    let report = bed.executor().run(bed.onboard_all()).await;
    for line in bed.progress_lines() {
        eprintln!("{line}");
    }
    assert!(report.all_converged(), "{report:#?}");
    for job in bed.jobs().await {
        assert_eq!(job.state, JobState::Completed, "{job:#?}");
        let node = bed.store.node(job.node_id.unwrap()).await.unwrap();
        assert_eq!(node.status, NodeState::Active);
    }
    let deploys = bed.deploys("dc1");
    assert_eq!(deploys.len(), 4);
    assert!(deploys.values().all(|d| *d == 1), "{deploys:?}");
}
