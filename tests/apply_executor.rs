//! Executor properties against the simulator: per-(site, profile) concurrency, leases held by
//! another executor, and two executors racing over the same nodes on one store.

mod onboard_support;

use metalform::apply::{NodeOutcome, ProgressStatus, onboarding_lease_name};
use onboard_support::{Bed, Setup, SiteSetup};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_most_max_parallel_nodes_of_a_profile_run_at_once() {
    let mut setup = Setup::one_site(SiteSetup::generated("dc1", 41, 6, 0));
    setup.max_parallel = 2;
    let bed = Bed::start(setup).await;
    let report = bed.executor().run(bed.onboard_all()).await;
    assert!(report.all_converged(), "{report:#?}");
    let events = bed.progress.events.lock().unwrap().clone();
    let mut running = 0usize;
    let mut most = 0usize;
    for event in &events {
        match event.status {
            ProgressStatus::Begin => running += 1,
            ProgressStatus::Converged | ProgressStatus::Failed | ProgressStatus::Left => {
                running -= 1
            }
            _ => {}
        }
        most = most.max(running);
    }
    assert_eq!(
        most, 2,
        "concurrency.maxParallel bounds the nodes in flight"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_whose_lease_another_executor_holds_is_left_alone() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 42, 2, 0))).await;
    let name = onboarding_lease_name("dc1", "gpu00001");
    let held = bed
        .store
        .acquire_lease(
            &name,
            "apply@elsewhere:1:live",
            chrono::Duration::seconds(60),
        )
        .await
        .unwrap();
    let report = bed.executor().run(bed.onboard_all()).await;
    let left = report.result("dc1/gpu00001").unwrap();
    match &left.outcome {
        NodeOutcome::Left { reason } => assert!(
            reason.starts_with("another executor (apply@elsewhere:1:live) is working on this node"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        report.result("dc1/gpu00002").unwrap().outcome,
        NodeOutcome::Converged { .. }
    ));
    // Nothing happened to the leased node: no job, no MAAS change.
    assert!(bed.jobs().await.iter().all(|j| j.hostname != "gpu00001"));
    assert_eq!(bed.deploys("dc1")["gpu00001"], 0);
    bed.store.release_lease(&held).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_executors_racing_over_the_same_nodes_onboard_each_once() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 43, 5, 1))).await;
    onboard_support::race_two_executors(&bed).await;
}
