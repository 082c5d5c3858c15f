//! Two daemon replicas on one PostgreSQL (issue 17; docs/ha.md): two real `metalform daemon`
//! processes, the simulated MAAS sites, and a small load balancer in front of the replicas
//! whose address is the fleet-wide enrollment URL. During one onboarding wave one replica is
//! killed with SIGKILL (and a replacement started), later the other is stopped with SIGSTOP
//! past its lease TTL and continued. By the simulator's counters and the store: every machine
//! deployed exactly once, no stage of any job succeeded twice, every job completed, every
//! event delivered to the sink once and in order, and no site ever had more machines in a
//! MAAS operation at once than the profile's maxParallel.
#![cfg(feature = "services")]

use crate::daemon_support;
use crate::onboard_support;
use crate::postgres_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use daemon_support::{DaemonBed, DaemonProcess, signal};
use metalform::lifecycle::{JobKind, JobState};
use metalform::sim::status::Status;
use metalform::stages::onboard::Facts;
use onboard_support::{Setup, SiteSetup, hostname_of};

const SITES: [&str; 2] = ["dc1", "dc2"];
const PER_SITE: usize = 6;
const MAX_PARALLEL: u32 = 2;

/// A TCP load balancer: each connection goes to the first replica (round robin) that accepts.
async fn load_balancer(backends: Arc<Mutex<Vec<String>>>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let next = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                return;
            };
            let backends = backends.lock().unwrap().clone();
            let start = next.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                for i in 0..backends.len() {
                    let addr = &backends[(start + i) % backends.len()];
                    if let Ok(mut server) = tokio::net::TcpStream::connect(addr).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        return;
                    }
                }
            });
        }
    });
    port
}

/// The most machines of each site seen in a MAAS operation at once, sampled until `stop`,
/// with the first sample that saw that many (hostname and status of each).
fn watch_parallel(
    d: Arc<DaemonBed>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<BTreeMap<String, Vec<String>>> {
    tokio::spawn(async move {
        let mut most: BTreeMap<String, Vec<String>> = BTreeMap::new();
        while !stop.load(Ordering::SeqCst) {
            for (site, sim) in &d.bed.sims {
                let busy: Vec<String> = sim.with_world(|w| {
                    w.machines
                        .values()
                        .filter(|m| {
                            matches!(
                                m.status,
                                Status::Commissioning | Status::Deploying | Status::Testing
                            )
                        })
                        .map(|m| format!("{} {}", m.hostname, m.status.name()))
                        .collect()
                });
                let entry = most.entry(site.clone()).or_default();
                if busy.len() > entry.len() {
                    *entry = busy;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        most
    })
}

/// On failure, the replicas' logs are copied out of the test's directory (which goes away).
struct KeepLogs {
    from: std::path::PathBuf,
    to: std::path::PathBuf,
}

impl Drop for KeepLogs {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = std::fs::create_dir_all(&self.to);
            for name in ["a", "b", "a2"] {
                let log = format!("{name}.log");
                let _ = std::fs::copy(self.from.join(&log), self.to.join(&log));
            }
            eprintln!("replica logs kept in {}", self.to.display());
        }
    }
}

async fn wait_for(what: &str, within: Duration, mut ready: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ready().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Deploys journaled so far (intent recorded).
async fn deploys_started(d: &DaemonBed) -> usize {
    d.bed
        .jobs()
        .await
        .iter()
        .filter(|j| Facts::from_details(&j.stage_details).deploy.is_some())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_the_fleet_and_survive_kill_and_stop() {
    let sites: Vec<SiteSetup> = SITES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut site = SiteSetup::generated(name, 170 + i as u64, PER_SITE, 0);
            site.config.time_scale = 300.0;
            site
        })
        .collect();
    let hosts: Vec<(String, String)> = sites
        .iter()
        .flat_map(|s| (0..PER_SITE).map(move |i| (s.name.clone(), hostname_of(&s.config, i))))
        .collect();
    let setup = Setup {
        sites,
        profile_spec: String::new(),
        site_spec: String::new(),
        max_parallel: MAX_PARALLEL,
    };
    let setup = setup.profile("  timeouts: {enrollment: 60s}\n");
    let state = postgres_support::fresh_database().await;
    let backends = Arc::new(Mutex::new(Vec::new()));
    let lb = load_balancer(backends.clone()).await;
    let d = Arc::new(DaemonBed::start_with_state(setup, "", Some(state)).await);
    // Both replicas: one configuration but for the listener and the data directory.
    let base = std::fs::read_to_string(&d.config_path)
        .unwrap()
        .replace("poll_interval = \"40ms\"", "poll_interval = \"100ms\"")
        // The agent channel (where hosts enroll) behind the load balancer, in plain HTTP: each
        // replica would otherwise make its own development CA, and hosts pin one.
        .replace(
            "[agent]\nlisten = \"127.0.0.1:0\"",
            &format!(
                "[agent]\nlisten = \"127.0.0.1:AGENT\"\nplain_http = true\npublic_url = \"http://127.0.0.1:{lb}/\""
            ),
        );
    let replica_config = |name: &str| {
        let port = onboard_support::free_port();
        let agent_port = onboard_support::free_port();
        let text = base
            .replace("127.0.0.1:0", &format!("127.0.0.1:{port}"))
            .replace("127.0.0.1:AGENT", &format!("127.0.0.1:{agent_port}"))
            .replace(
                &format!("data_dir = \"{}", d.bed.dir.path().join("daemon").display()),
                &format!("data_dir = \"{}", d.bed.dir.path().join(name).display()),
            );
        let path = d.bed.dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        backends
            .lock()
            .unwrap()
            .push(format!("127.0.0.1:{agent_port}"));
        path
    };
    let spawn = |config: &std::path::Path, name: &str| -> DaemonProcess {
        daemon_support::spawn_daemon(config, &d.bed.dir.path().join(format!("{name}.log")))
    };
    let keep = KeepLogs {
        from: d.bed.dir.path().to_path_buf(),
        to: std::env::temp_dir().join(format!("ha_two_replicas-{}", std::process::id())),
    };
    let stop_watching = Arc::new(AtomicBool::new(false));
    let watcher = watch_parallel(d.clone(), stop_watching.clone());
    let config_a = replica_config("a");
    let config_b = replica_config("b");
    let mut a = spawn(&config_a, "a");
    let mut b = spawn(&config_b, "b");

    // Both replicas hold a site each before the wave gets going.
    let store = d.bed.store.clone();
    wait_for(
        "both replicas to hold a site",
        Duration::from_secs(30),
        async || {
            let holders: BTreeSet<String> = store
                .live_leases("site:")
                .await
                .unwrap()
                .into_iter()
                .map(|l| l.holder)
                .collect();
            holders.len() == 2
        },
    )
    .await;

    // SIGKILL of A during the wave, a replacement A' started at once.
    wait_for("a deploy under way", Duration::from_secs(60), async || {
        deploys_started(&d).await >= 1
    })
    .await;
    let open_at_kill = d
        .bed
        .jobs()
        .await
        .iter()
        .filter(|j| !j.state.is_terminal())
        .count();
    assert!(open_at_kill > 0, "the kill landed after the wave");
    a.kill().unwrap();
    a.wait().unwrap();
    let config_a2 = replica_config("a2");
    let mut a2 = spawn(&config_a2, "a2");

    // SIGSTOP of B past its lease TTL (3 s) while the wave still runs, then SIGCONT.
    let started = deploys_started(&d).await;
    wait_for(
        "another deploy under way",
        Duration::from_secs(90),
        async || deploys_started(&d).await > started,
    )
    .await;
    let open_at_stop = d
        .bed
        .jobs()
        .await
        .iter()
        .filter(|j| !j.state.is_terminal())
        .count();
    assert!(open_at_stop > 0, "the stop landed after the wave");
    let b_sites: Vec<String> = store
        .live_leases("site:")
        .await
        .unwrap()
        .into_iter()
        .filter(|l| l.holder.contains(&format!(":{}:", b.id())))
        .map(|l| l.name.trim_start_matches("site:").to_owned())
        .collect();
    signal(&b, "STOP");
    tokio::time::sleep(Duration::from_secs(8)).await;
    // Within the stop, past one lease TTL, the other replica took B's sites.
    let holders: Vec<(String, String)> = store
        .live_leases("site:")
        .await
        .unwrap()
        .into_iter()
        .map(|l| (l.name, l.holder))
        .collect();
    for site in &b_sites {
        assert!(
            holders
                .iter()
                .any(|(name, holder)| name == &format!("site:{site}")
                    && !holder.contains(&format!(":{}:", b.id()))),
            "{site} not taken over from the stopped replica: {holders:?}\n{}",
            ["a2", "b"]
                .iter()
                .map(
                    |n| std::fs::read_to_string(d.bed.dir.path().join(format!("{n}.log")))
                        .unwrap_or_default()
                        .lines()
                        .filter(|l| l.contains("metalform::ha")
                            || l.contains("ERROR")
                            || l.contains("WARN"))
                        .map(|l| format!("{n}: {l}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                )
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    signal(&b, "CONT");

    let pairs: Vec<(&str, &str)> = hosts
        .iter()
        .map(|(s, h)| (s.as_str(), h.as_str()))
        .collect();
    d.converged(&pairs, Duration::from_secs(240)).await;
    // Let the outbox catch up, then stop both replicas gracefully.
    tokio::time::sleep(Duration::from_secs(3)).await;
    signal(&a2, "TERM");
    signal(&b, "TERM");
    for child in [&mut a2, &mut b] {
        let status = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    return status;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("a replica exits after SIGTERM");
        assert_eq!(status.code(), Some(0));
    }
    stop_watching.store(true, Ordering::SeqCst);
    let most = watcher.await.unwrap();

    // Every machine deployed exactly once.
    for site in SITES {
        let deploys = d.bed.deploys(site);
        for (s, host) in &hosts {
            if s == site {
                assert_eq!(deploys.get(host), Some(&1), "{site}/{host}: {deploys:?}");
            }
        }
    }
    // Nothing else was run twice in MAAS either: one commissioning, no release, no erase.
    for (site, sim) in &d.bed.sims {
        for (system_id, counters) in sim.counters() {
            assert!(
                counters.commission <= 1 && counters.release == 0 && counters.erase == 0,
                "{site}/{system_id}: {counters:?}"
            );
        }
    }
    // Every job completed, no stage succeeded twice.
    let jobs = d.bed.jobs().await;
    assert_eq!(jobs.len(), hosts.len(), "{jobs:#?}");
    for job in &jobs {
        assert_eq!(job.state, JobState::Completed, "{job:#?}");
        let events = store
            .job_events(JobKind::Onboarding, job.id, 500)
            .await
            .unwrap();
        // One designed repeat: a replica killed between rendering the payload and deploying
        // it took the payload (and its token) with it, so the next holder jumps back and
        // renders a fresh one; MAAS still gets one deploy (checked above).
        let rerendered = events.iter().any(|e| {
            e.message
                .as_deref()
                .is_some_and(|m| m.starts_with("no rendered payload in memory"))
        });
        let mut succeeded: BTreeMap<&str, usize> = BTreeMap::new();
        for e in events.iter().filter(|e| e.status == "succeeded") {
            let repeatable =
                rerendered && matches!(e.stage.as_str(), "render_cloud_init" | "deploy_via_maas");
            if !repeatable {
                *succeeded.entry(e.stage.as_str()).or_default() += 1;
            }
        }
        assert!(
            succeeded.values().all(|n| *n == 1),
            "{}: a stage succeeded twice: {succeeded:?}\n{}\nlogs kept in {}",
            job.hostname,
            events
                .iter()
                .map(|e| format!(
                    "{} {} #{} {} {:?}",
                    e.occurred_at, e.stage, e.attempt, e.status, e.message
                ))
                .collect::<Vec<_>>()
                .join("\n"),
            keep.to.display()
        );
    }
    // Limits: never more machines of a site in a MAAS operation than maxParallel.
    for site in SITES {
        let seen = most.get(site).map_or(0, Vec::len);
        assert!(seen >= 1, "{site}: no operation observed: {most:?}");
        assert!(
            seen <= MAX_PARALLEL as usize,
            "{site}: {seen} at once: {most:?}\nlogs kept in {}",
            keep.to.display()
        );
    }
    // Events: every outbox event once, in order, and each job's start and completion.
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&d.events_path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<i64> = lines.iter().map(|l| l["id"].as_i64().unwrap()).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "once each, in order: {ids:?}"
    );
    let completed: BTreeSet<&str> = lines
        .iter()
        .filter(|l| l["type"] == "node.onboarding.completed")
        .map(|l| l["subject"].as_str().unwrap())
        .collect();
    assert_eq!(completed.len(), jobs.len(), "{lines:#?}");
    assert!(store.pending_events(10).await.unwrap().is_empty());
    // Both replicas of the end shared the sites; the killed one's leases were cleared.
    let log_a2 = std::fs::read_to_string(d.bed.dir.path().join("a2.log")).unwrap();
    let log_b = std::fs::read_to_string(d.bed.dir.path().join("b.log")).unwrap();
    assert!(log_a2.contains("site taken"), "{log_a2}");
    assert!(
        log_a2.contains("its leases are cleared") || log_b.contains("its leases are cleared"),
        "no replica cleared the killed one's leases"
    );
}
