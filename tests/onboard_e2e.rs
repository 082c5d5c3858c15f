//! The onboarding executor end to end against the simulator (seed 000 §4.3): every stage runs
//! against real HTTP, the journal lands in SQLite, the agent enrolls through the endpoint.

use crate::onboard_support;

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

/// Issue 17 "Big waves": a node waiting for its agent is woken by this process's listener
/// when the agent enrolls, not found at the next store poll. The fallback poll is an hour
/// here, so without the wake-up each node would sit in its enrollment wait until its
/// enrollment timeout (30 minutes); the agents boot a (simulated) ten minutes after their
/// deployment, so every node is in that wait before its agent calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_enrolling_agent_wakes_its_waiting_node_before_the_fallback_poll() {
    let mut site = SiteSetup::generated("dc1", 5, 3, 0);
    site.config.timings.agent_boot_secs = 600.0;
    let bed = Bed::start(Setup::one_site(site)).await;
    let signals = bed.enroll.channel().signals().clone();
    let mut env = bed.env();
    env.agent_signals = Some(signals.with_fallback(std::time::Duration::from_secs(3600)));
    let executor = metalform::apply::Executor::new(env, Bed::options(), bed.progress.clone());
    let report = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        executor.run(bed.onboard_all()),
    )
    .await
    .expect("the enrollments woke the waiting nodes (no wake-up: they wait out the fallback)");
    let lines = bed.progress_lines();
    assert!(report.all_converged(), "{report:#?}\n{lines:#?}");
    for node in ["gpu00001", "gpu00002", "gpu00003"] {
        let of_node = |needle: &str| {
            lines
                .iter()
                .position(|l| l.contains(node) && l.contains(needle))
                .unwrap_or_else(|| panic!("{node}: no `{needle}` in {lines:#?}"))
        };
        // The node waited for its agent, and that wait ended in the enrollment.
        let waited = of_node("wait_for_agent_enrollment wait waiting for the node agent to enroll");
        let enrolled = of_node("wait_for_agent_enrollment ok agent enrolled");
        assert!(waited < enrolled, "{lines:#?}");
    }
    assert_eq!(signals.waiting(), 0, "no watch is left behind");
}
