//! SIGTERM in the middle of an apply, then restart (issue 6): the daemon, a real child process,
//! stops at the next stage boundary and exits 0 with jobs still open; the restarted daemon
//! resumes them, every node converges, and by the simulator's counters no machine was deployed
//! twice and no stage of a job succeeded twice. Logs are JSON lines, the drift pass's among
//! them: a machine released in MAAS shows as one `drift detected` line at ERROR and one
//! `drift action` line for its quarantine.

use crate::daemon_support;
use crate::drift_support;
use crate::onboard_support;

use std::collections::BTreeMap;
use std::process::Child;
use std::time::{Duration, Instant};

use daemon_support::{DaemonBed, signal};
use metalform::lifecycle::{JobKind, JobState, NodeState};
use metalform::stages::onboard::Facts;
use onboard_support::{Setup, SiteSetup, hostname_of};

async fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the daemon did not exit within {within:?} of SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_apply_then_restart_loses_nothing_and_runs_no_stage_twice() {
    let mut site = SiteSetup::generated("dc1", 77, 5, 0);
    // Slow enough that SIGTERM lands while deploys are under way.
    site.config.time_scale = 150.0;
    let hosts: Vec<String> = (0..5).map(|i| hostname_of(&site.config, i)).collect();
    let d = DaemonBed::start(
        Setup::one_site(site).profile("  timeouts: {enrollment: 60s}\n"),
        "",
    )
    .await;
    // A stable address: deployed hosts carry the enrollment URL across the restart.
    d.listen_on_free_port();
    let log = d.bed.dir.path().join("daemon.log");
    let mut first = d.spawn(&log);

    // Wait until some node's deploy is under way (intent journaled) and not every node is done.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let jobs = d.bed.jobs().await;
        if jobs
            .iter()
            .any(|j| Facts::from_details(&j.stage_details).deploy.is_some())
        {
            break;
        }
        assert!(Instant::now() < deadline, "no deploy started: {jobs:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal(&first, "TERM");
    let status = wait_exit(&mut first, Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0), "exit status after SIGTERM");
    let jobs = d.bed.jobs().await;
    let open: Vec<_> = jobs.iter().filter(|j| !j.state.is_terminal()).collect();
    assert!(
        !open.is_empty(),
        "SIGTERM landed after everything finished: {jobs:#?}"
    );
    for job in &open {
        // Resting where the journal says: nothing failed or was cancelled by the stop.
        assert!(
            matches!(job.state, JobState::Running | JobState::Pending),
            "{job:#?}"
        );
    }
    let log_text = std::fs::read_to_string(&log).unwrap();
    for line in log_text.lines() {
        let parsed: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(
            parsed.get("level").is_some() && parsed.get("timestamp").is_some(),
            "{line}"
        );
    }
    assert!(log_text.contains("shutting down"), "{log_text}");

    // Restart: every node converges; nothing is deployed twice.
    let mut second = d.spawn(&log);
    let pairs: Vec<(&str, &str)> = hosts.iter().map(|h| ("dc1", h.as_str())).collect();
    d.converged(&pairs, Duration::from_secs(120)).await;

    // The drift pass logs what it detects and does: release one machine out of band.
    let (released, system_id) = drift_support::node_of(&d.bed, &hosts[0]).await;
    drift_support::out_of_band(&d.bed, &system_id, "release").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while d.bed.store.node(released.id).await.unwrap().status != NodeState::Quarantined {
        assert!(Instant::now() < deadline, "not quarantined");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal(&second, "TERM");
    assert_eq!(
        wait_exit(&mut second, Duration::from_secs(30)).await.code(),
        Some(0)
    );

    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |message: &str| -> Vec<&serde_json::Value> {
        lines
            .iter()
            .filter(|l| {
                l["target"] == "metalform::drift"
                    && l["fields"]["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with(message))
                    && l["fields"]["hostname"] == hosts[0].as_str()
            })
            .collect()
    };
    let detected = of("drift detected");
    assert_eq!(detected.len(), 1, "{detected:#?}");
    assert_eq!(detected[0]["level"], "ERROR");
    assert_eq!(detected[0]["fields"]["rule"], "released_outside_workflow");
    assert_eq!(detected[0]["fields"]["severity"], "critical");
    assert_eq!(detected[0]["fields"]["system_id"], system_id.as_str());
    let actions = of("drift action");
    assert_eq!(actions.len(), 1, "{actions:#?}");
    assert_eq!(actions[0]["fields"]["action"], "quarantine");
    assert_eq!(actions[0]["fields"]["result"], "taken");
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "drift pass" && l["fields"]["site"] == "dc1"),
        "no drift pass line"
    );

    let deploys = d.bed.deploys("dc1");
    for host in &hosts {
        assert_eq!(deploys.get(host), Some(&1), "{host}: {deploys:?}");
    }
    for job in d.bed.jobs().await {
        assert_eq!(job.state, JobState::Completed, "{job:#?}");
        let events = d
            .bed
            .store
            .job_events(JobKind::Onboarding, job.id, 500)
            .await
            .unwrap();
        let mut succeeded: BTreeMap<&str, usize> = BTreeMap::new();
        for e in events.iter().filter(|e| e.status == "succeeded") {
            *succeeded.entry(e.stage.as_str()).or_default() += 1;
        }
        assert!(
            succeeded.values().all(|n| *n == 1),
            "{}: a stage succeeded twice: {succeeded:?}",
            job.hostname
        );
    }
}
