//! The daemon's retry backoff end to end (issue 17 item 5): on a real git repository and the
//! simulator, a node whose every deployment fails ends `failed_retryable`; reconcile passes
//! before its next try start nothing (the simulator counts no deployment), the first pass after
//! it retries, the wait doubles with the count, a commit that changes the node's manifests
//! retries at once and starts the count again, and an operator's retry does not wait. `status`
//! and the API say when the next try is.

use crate::daemon_support;
use crate::onboard_support;

use std::time::{Duration, Instant};

use chrono::Utc;
use daemon_support::{ADMIN_TOKEN, DaemonBed, call, commit};
use metalform::apply::ExecutorOptions;
use metalform::daemon::{DaemonOptions, start};
use metalform::lifecycle::{FailureClass, JobState, NodeState};
use metalform::store::Job;
use onboard_support::{Bed, Setup, SiteSetup, hostname_of};
use reqwest::Method;

/// The daemon's failed-job backoff: 8 s after the first failure (with jitter: 4–8 s), 16 s
/// after the second (8–16 s), never more.
const BACKOFF: &str = "[executor]\nfailed_retry_base = \"8s\"\nfailed_retry_cap = \"16s\"\n";

fn setup() -> Setup {
    let site = SiteSetup::generated("dc1", 67, 2, 0);
    let failing = hostname_of(&site.config, 0);
    let site = site.faults(&format!("deploy_fails:machines={failing}"));
    Setup::one_site(site).profile("  timeouts: {enrollment: 30s}\n")
}

/// The node's onboarding once `check` holds for it, or fail with what it is.
async fn job_when(bed: &Bed, hostname: &str, what: &str, check: impl Fn(&Job) -> bool) -> Job {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let jobs = bed.jobs().await;
        let job = jobs.iter().find(|j| j.hostname == hostname);
        if let Some(job) = job.filter(|j| check(j)) {
            return job.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{hostname} never {what}: {job:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Seconds from the failure's write to the next try it recorded.
fn wait_secs(job: &Job) -> f64 {
    (job.next_try_at.unwrap() - job.updated_at).as_seconds_f64()
}

/// The wait the daemon's seeded jitter gives the node's `failures`th failure in a row. The
/// recorded one is read against the failure's write, a clock read a moment apart from the
/// executor's: equal within a few milliseconds.
fn assert_wait(d: &DaemonBed, job: &Job, failures: u32) {
    let config = d.config();
    let options = ExecutorOptions {
        failed_retry: config.executor.failed_retry,
        seed: config.executor.seed.unwrap(),
        ..ExecutorOptions::default()
    };
    let node = format!("{}/{}", job.site, job.hostname);
    let want = options.failed_retry_wait(&node, failures).as_secs_f64();
    let got = wait_secs(job);
    assert!(
        (got - want).abs() < 0.25,
        "failure {failures}: waited {got}s, not {want}s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_retryable_work_backs_off_resets_on_a_spec_change_and_yields_to_an_operator() {
    // A failed deployment is rerun from the top: the daemon may do that on its own here. The
    // bed's own `[executor]` table gets the backoff keys.
    let d = DaemonBed::start(setup(), "[self_heal]\nrerun = true\n").await;
    let text = std::fs::read_to_string(&d.config_path).unwrap();
    std::fs::write(&d.config_path, text.replace("[executor]\n", BACKOFF)).unwrap();
    let config = setup().sites[0].config.clone();
    let (failing, healthy) = (hostname_of(&config, 0), hostname_of(&config, 1));
    let daemon = start(d.config(), DaemonOptions::default()).await.unwrap();
    let base = format!("http://{}", daemon.local_addr());
    d.converged(&[("dc1", healthy.as_str())], Duration::from_secs(90))
        .await;

    // The first failure: failed_retryable, one failure, the next try 4–8 s away.
    let first = job_when(&d.bed, &failing, "failed", |j| {
        j.state == JobState::FailedRetryable && j.retry_failures == 1
    })
    .await;
    assert_eq!(
        (first.failure_class, first.error_code.as_deref()),
        (
            Some(FailureClass::DeployCloudInitFailure),
            Some("deploy_failed")
        )
    );
    let waited = wait_secs(&first);
    assert!((4.0..8.0).contains(&waited), "first wait {waited}s");
    assert_wait(&d, &first, 1);
    let next_try = first.next_try_at.unwrap();
    let deploys = d.bed.deploys("dc1")[&failing];
    assert!(deploys >= 1);

    // While it waits, `status` and the API say when the next try is.
    let out = d.bed.cli_store(&["status"]).output().unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{table}");
    let row = table.lines().find(|l| l.contains(&failing)).unwrap();
    assert!(
        row.ends_with("next try in under a minute (attempt 2)"),
        "{table}"
    );
    assert!(table.lines().next().unwrap().ends_with("RETRY"), "{table}");
    let node_id = first.node_id.expect("bound to its node by then");
    let (status, detail) = call(
        Method::GET,
        format!("{base}/api/v1/admin/nodes/{node_id}"),
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["next_try"]["attempt"], 2, "{detail}");
    assert_eq!(
        detail["next_try"]["text"],
        "next try in under a minute (attempt 2)"
    );
    assert_eq!(detail["jobs"][0]["job"]["retry_failures"], 1);

    // Passes before the next try (one a second) start nothing: no deployment, the job stays
    // failed, and the daemon's plan says why.
    let mut saw_wait_in_plan = false;
    while Utc::now() + chrono::TimeDelta::milliseconds(300) < next_try {
        assert_eq!(d.bed.deploys("dc1")[&failing], deploys, "retried early");
        let job = d.bed.job_of("dc1", &failing).await;
        assert_eq!(
            (job.state, job.retry_failures),
            (JobState::FailedRetryable, 1)
        );
        let (_, plan) = call(
            Method::GET,
            format!("{base}/api/v1/admin/plan"),
            Some(ADMIN_TOKEN),
            None,
        )
        .await;
        let items = plan["sites"][0]["plan"]["items"].as_array().cloned();
        saw_wait_in_plan |= items.iter().flatten().any(|i| {
            i["reason"].as_str().is_some_and(|r| {
                r.starts_with("retry waits: next try in under a minute (attempt 2); would rerun")
            })
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(saw_wait_in_plan, "the plan never said the retry waits");

    // After it, a pass retries (the simulator deploys again), which fails again: two in a
    // row, the wait doubled (8–16 s).
    let second = job_when(&d.bed, &failing, "failed twice", |j| {
        j.state == JobState::FailedRetryable && j.retry_failures == 2
    })
    .await;
    assert!(d.bed.deploys("dc1")[&failing] > deploys);
    let waited = wait_secs(&second);
    assert!((8.0..16.0).contains(&waited), "second wait {waited}s");
    assert_wait(&d, &second, 2);

    // A commit that changes the node's manifests retries at once — well before the next try —
    // and the count starts again.
    let deploys = d.bed.deploys("dc1")[&failing];
    d.bed.edit_fleet(
        "nodes/dc1.yaml",
        "address: 172.30.0.1/31",
        "address: 172.30.9.1/31",
    );
    let revision = daemon.revision().unwrap().revision.clone();
    commit(&d.bed.fleet_dir, "fleet: fix the node's RoCE address");
    let deadline = Instant::now() + Duration::from_secs(30);
    while daemon.revision().unwrap().revision == revision {
        assert!(
            Instant::now() < deadline,
            "the daemon never took the commit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reset = job_when(&d.bed, &failing, "failed after the change", |j| {
        j.state == JobState::FailedRetryable && j.retry_spec != second.retry_spec
    })
    .await;
    assert!(
        reset.updated_at < second.next_try_at.unwrap(),
        "retried at once, not at the next try"
    );
    assert_eq!(reset.retry_failures, 1, "the count starts again");
    assert!(d.bed.deploys("dc1")[&failing] > deploys);
    let waited = wait_secs(&reset);
    assert!(
        (4.0..8.0).contains(&waited),
        "wait after the reset {waited}s"
    );
    assert_wait(&d, &reset, 1);

    // The machine is repaired and an operator retries now (audited): no wait, and the
    // success clears the count.
    d.bed.sim("dc1").set_faults("").unwrap();
    let (status, body) = call(
        Method::POST,
        format!("{base}/api/v1/admin/onboardings/{}/rerun", reset.id),
        Some(ADMIN_TOKEN),
        Some(serde_json::json!({"reason": "machine repaired"})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let moved = d.bed.job_of("dc1", &failing).await;
    assert_ne!(
        moved.state,
        JobState::FailedRetryable,
        "the operator's rerun does not wait"
    );
    assert!(Utc::now() < reset.next_try_at.unwrap());
    assert_eq!(moved.next_try_at, None);
    d.converged(&[("dc1", failing.as_str())], Duration::from_secs(90))
        .await;
    let done = d.bed.job_of("dc1", &failing).await;
    assert_eq!(done.state, JobState::Completed);
    assert_eq!((done.retry_failures, done.next_try_at), (0, None));
    let audit = d.bed.audit_of(done.id).await;
    assert!(
        audit.iter().any(|a| a.action == "onboarding.rerun"
            && a.actor == "ops-alice"
            && a.reason.as_deref() == Some("machine repaired")),
        "{audit:#?}"
    );
    let node = d
        .bed
        .store
        .find_node("dc1", &failing)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(node.status, NodeState::Active);
    daemon.shutdown().await;
}
