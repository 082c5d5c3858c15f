//! `metalform apply` as a process: plan, refuse without confirmation, apply with progress on
//! stderr and the result table on stdout; a second apply has nothing to do.

mod onboard_support;

use metalform::lifecycle::{JobState, NodeState};
use onboard_support::{Bed, Setup, SiteSetup, free_port};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_onboards_the_fleet_and_a_second_apply_has_nothing_to_do() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 5, 3, 1))).await;
    let port = free_port();

    // Without a terminal and without --auto-approve, nothing happens.
    let refused = bed.cli(&["apply"], port).output().unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("error: refusing to apply without confirmation: stdin is not a terminal\nhint: review the plan above and pass --auto-approve"),
        "{stderr}"
    );
    assert!(
        bed.jobs().await.is_empty(),
        "a refused apply changes nothing"
    );

    let out = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("+ dc1/gpu00001  not onboarded yet"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Plan: 4 to apply, 0 unchanged, 0 blocked."),
        "{stdout}"
    );
    assert!(
        stdout.contains("Apply: 4 converged, 0 failed, 0 not run."),
        "{stdout}"
    );
    // A line per stage transition on stderr.
    assert!(
        stderr.lines().any(|l| l.contains("dc1/new00004")
            && l.contains("create_or_find_in_maas")
            && l.contains("found")),
        "{stderr}"
    );
    for job in bed.jobs().await {
        assert_eq!(job.state, JobState::Completed);
        assert_eq!(
            bed.store.node(job.node_id.unwrap()).await.unwrap().status,
            NodeState::Active
        );
    }

    let again = bed
        .cli(&["apply", "--auto-approve"], port)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success(), "{stdout}");
    assert!(
        stdout.contains("Plan: 0 to apply, 4 unchanged, 0 blocked.\nNo changes."),
        "{stdout}"
    );
    assert!(bed.deploys("dc1").values().all(|d| *d == 1));
}
