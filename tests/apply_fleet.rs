//! Fleet-sized applies through the CLI: 50 nodes over 2 sites converge to active, after which
//! `metalform plan --detailed-exitcode` finds nothing to do (exit 0) and a second apply has
//! nothing to do; with 10% transient MAAS faults everything still converges.

use crate::onboard_support;

use metalform::lifecycle::{JobState, NodeState};
use metalform::store::NodeFilter;
use onboard_support::{Bed, Setup, SiteSetup, free_port};

fn stdout_of(out: &std::process::Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_nodes_over_two_sites_converge_and_a_second_plan_is_empty() {
    let setup = Setup {
        sites: vec![
            SiteSetup::generated("dc1", 51, 23, 2),
            SiteSetup::generated("dc2", 52, 23, 2),
        ],
        profile_spec: String::new(),
        site_spec: String::new(),
        max_parallel: 10,
    };
    let bed = Bed::start(setup).await;
    let port = free_port();
    let out = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Plan: 50 to onboard; 0 unchanged."), "{text}");
    assert!(
        text.contains("Apply: 50 converged, 0 failed, 0 not run."),
        "{text}"
    );

    let nodes = bed.store.list_nodes(&NodeFilter::default()).await.unwrap();
    assert_eq!(nodes.len(), 50);
    assert!(nodes.iter().all(|n| n.status == NodeState::Active));
    let jobs = bed.jobs().await;
    assert_eq!(jobs.len(), 50);
    assert!(jobs.iter().all(|j| j.state == JobState::Completed));
    for site in ["dc1", "dc2"] {
        let deploys = bed.deploys(site);
        assert_eq!(deploys.len(), 25);
        assert!(deploys.values().all(|d| *d == 1), "{site}: {deploys:?}");
    }

    // DESIGN.md §4: after a successful apply, a fresh plan is empty.
    let plan = bed
        .cli_plan(&["plan", "--detailed-exitcode"])
        .output()
        .unwrap();
    let text = stdout_of(&plan);
    assert_eq!(plan.status.code(), Some(0), "{text}");
    assert!(text.contains("Plan: no changes; 50 unchanged."), "{text}");

    let again = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    let text = stdout_of(&again);
    assert!(again.status.success(), "{text}");
    assert!(
        text.contains("Plan: no changes; 50 unchanged.\nNo changes."),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_percent_transient_maas_faults_still_converge_with_no_failed_node() {
    // 10% of every MAAS request: 503 and 409 with Retry-After (MAAS's "retry later"), and 500s
    // without it, whose outcome is unknown for non-idempotent requests.
    let site = SiteSetup::generated("dc1", 77, 10, 2).faults(
        "*:status=503,retry_after=1,rate=0.05; *:status=409,retry_after=5,rate=0.03; \
         *:status=500,rate=0.02",
    );
    let bed = Bed::start(Setup::one_site(site)).await;
    let port = free_port();
    let out = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("Apply: 12 converged, 0 failed, 0 not run."),
        "{text}"
    );
    // With the faults still on, a fresh plan is empty.
    let plan = bed
        .cli_plan(&["plan", "--detailed-exitcode"])
        .output()
        .unwrap();
    assert_eq!(plan.status.code(), Some(0), "{}", stdout_of(&plan));
    assert!(
        bed.jobs()
            .await
            .iter()
            .all(|j| j.state == JobState::Completed)
    );
    assert!(bed.deploys("dc1").values().all(|d| *d == 1));
    // The faults did fire, and some stages were retried.
    let faulted = bed
        .sim("dc1")
        .ops()
        .iter()
        .filter(|op| op.fault.is_some())
        .count();
    let total = bed.sim("dc1").ops().len();
    assert!(
        faulted * 100 >= total * 5,
        "{faulted} of {total} requests were faulted"
    );
    eprintln!("{faulted} of {total} MAAS requests were faulted");
}
