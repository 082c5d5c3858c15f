//! kill -9 of `metalform apply` at random points, then apply again (issue 5): every node
//! converges and, by the simulator's counters, every machine received exactly one deploy. The
//! simulator lives in this test process and outlives the killed applies.

use crate::onboard_support;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use metalform::lifecycle::{JobState, NodeState};
use metalform::stages::onboard::Facts;
use onboard_support::{Bed, Setup, SiteSetup, free_port};
use rand::{RngExt, SeedableRng};

const TRIALS: u64 = 20;

/// Where the killed apply left the jobs: the phases of 000 §4.6's compensation principle.
fn phases(stages: &[String]) -> BTreeSet<&'static str> {
    stages
        .iter()
        .map(|stage| match stage.as_str() {
            "deploy_via_maas" | "wait_for_deployed" => "deploying",
            "ensure_hardware_sync_configured"
            | "wait_for_hardware_sync_healthy"
            | "wait_for_agent_enrollment" => "post-deploy",
            _ => "pre-deploy",
        })
        .collect()
}

/// When to kill the first apply.
#[derive(Debug, Clone, Copy)]
enum KillAt {
    After(Duration),
    /// While a deploy call is in flight: its intent is in the journal, MAAS has not answered
    /// (the simulator delays deploy answers for this).
    DeployInFlight,
    /// Once some job reached a post-deploy stage. Random delays alone land there only when the
    /// machine runs fast enough, so the phase is also reached on purpose.
    PostDeploy,
}

/// Waits until some job recorded a deploy intent MAAS has not confirmed.
async fn deploy_in_flight(bed: &Bed) {
    for _ in 0..1500 {
        let jobs = bed.jobs().await;
        if jobs.iter().any(|j| {
            let facts = Facts::from_details(&j.stage_details);
            facts.deploy.is_some_and(|d| !d.received)
        }) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no deploy went in flight");
}

/// Waits until some running job is in a post-deploy stage.
async fn post_deploy(bed: &Bed) {
    for _ in 0..3000 {
        let jobs = bed.jobs().await;
        let stages: Vec<String> = jobs
            .into_iter()
            .filter(|j| j.state == JobState::Running)
            .map(|j| j.stage)
            .collect();
        if phases(&stages).contains("post-deploy") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no job reached a post-deploy stage");
}

async fn trial(number: u64, at: KillAt) -> BTreeSet<&'static str> {
    let mut site = SiteSetup::generated("dc1", 1000 + number, 5, 1);
    // Slower MAAS than the other tests so that kills land in every phase.
    site.config.time_scale = 200.0;
    if matches!(at, KillAt::DeployInFlight) {
        site.config.faults = "machine.deploy:latency=1500ms".into();
    }
    let bed = Bed::start(Setup::one_site(site).profile("  timeouts: {enrollment: 30s}\n")).await;
    let port = free_port();
    let log = bed.dir.path().join("apply.log");
    let log_file = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap()
    };
    let mut first = bed
        .cli(&["apply", "--auto-approve"], port)
        .stdout(Stdio::null())
        .stderr(log_file())
        .spawn()
        .unwrap();
    match at {
        KillAt::After(delay) => tokio::time::sleep(delay).await,
        KillAt::DeployInFlight => deploy_in_flight(&bed).await,
        KillAt::PostDeploy => post_deploy(&bed).await,
    }
    // SIGKILL: no cleanup, leases stay held until they expire.
    first.kill().unwrap();
    let killed = first.wait().unwrap();
    let open_stages: Vec<String> = bed
        .jobs()
        .await
        .into_iter()
        .filter(|j| j.state == JobState::Running)
        .map(|j| j.stage)
        .collect();
    let started = Instant::now();
    let mut runs = 1;
    loop {
        let out = bed
            .cli(&["apply", "--auto-approve"], port)
            .stderr(log_file())
            .output()
            .unwrap();
        runs += 1;
        if out.status.success() {
            break;
        }
        assert!(
            runs < 5 && started.elapsed() < Duration::from_secs(120),
            "trial {number}: apply keeps failing\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    let jobs = bed.jobs().await;
    assert_eq!(jobs.len(), 6, "trial {number}: one job per node");
    for job in &jobs {
        assert_eq!(
            job.state,
            JobState::Completed,
            "trial {number} (killed {at:?}, {killed}): {job:#?}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let node = bed.store.node(job.node_id.unwrap()).await.unwrap();
        assert_eq!(node.status, NodeState::Active);
    }
    let deploys = bed.deploys("dc1");
    assert!(
        deploys.values().all(|d| *d == 1),
        "trial {number} (killed {at:?}): deploys {deploys:?}"
    );
    eprintln!("trial {number:2}: killed {at:?} in {open_stages:?}, converged after {runs} applies");
    phases(&open_stages)
}

/// Trials run this many at a time: each spends most of its time waiting on its applies.
const AT_ONCE: usize = 4;

#[test]
fn kill_nine_at_random_points_then_apply_again_converges_with_one_deploy_each() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x9_1111);
    let mut trials: Vec<(u64, KillAt)> = (0..TRIALS)
        .map(|number| {
            let kill_after = Duration::from_millis(rng.random_range(150..5000));
            (number, KillAt::After(kill_after))
        })
        .collect();
    trials.extend((TRIALS..TRIALS + 3).map(|number| (number, KillAt::DeployInFlight)));
    trials.extend((TRIALS + 3..TRIALS + 5).map(|number| (number, KillAt::PostDeploy)));
    // Each trial has its own simulator, store and apply processes; a runtime per thread keeps
    // one trial's blocking waits on its apply from stalling another's simulator.
    let next = AtomicUsize::new(0);
    let seen = Mutex::new(BTreeSet::new());
    std::thread::scope(|scope| {
        for _ in 0..AT_ONCE {
            scope.spawn(|| {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap();
                while let Some(&(number, at)) = trials.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let phases = runtime.block_on(trial(number, at));
                    seen.lock().unwrap().extend(phases);
                }
            });
        }
    });
    assert_eq!(
        seen.into_inner().unwrap(),
        BTreeSet::from(["pre-deploy", "deploying", "post-deploy"]),
        "the kills landed in every phase"
    );
}
