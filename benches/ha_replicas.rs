//! Benchmark of daemon replicas sharing a fleet (issue 17: "two replicas: onboarding wall time
//! no worse than one, CPU per replica about half"). One onboarding wave of N machines over four
//! simulated sites is run twice, each time on a fresh store: by one `metalform daemon` process,
//! then by two sharing the store. The replicas start on a fleet of sites without nodes and
//! share the sites; the wave is the commit that adds the nodes. Printed per pass: the wall time
//! from that commit until every node is active, and each replica's CPU time over the same span
//! (user + system, from /proc).
//!
//! The two-replica pass runs twice. In the first, each replica is given its share of the
//! machine's cores: its async runtime gets half the worker threads (`TOKIO_WORKER_THREADS`, at
//! least one), as it would see on a host or in a container of its own with half the cores;
//! the target describes replicas that each bring their own cores. In the second, each sizes
//! its runtime for the whole machine, as a replica does by default, so two of them run twice
//! the worker threads on the cores the one replica had to itself.
//!
//! `METALFORM_TEST_POSTGRES_URL=… cargo bench --bench ha_replicas [-- --machines N]` (PostgreSQL,
//! as scripts/services/10-postgres.sh starts it); without that variable the replicas share a
//! SQLite file. Converged and deployed-once are asserted (behaviour); times are printed, never
//! asserted. Under `cargo test --all-targets` it runs once on 8 machines as a smoke test.

#[path = "../tests/onboard_support/mod.rs"]
mod onboard_support;

#[path = "../tests/daemon_support/mod.rs"]
mod daemon_support;

#[path = "../tests/postgres_support/mod.rs"]
mod postgres_support;

mod support;

use std::time::{Duration, Instant};

use daemon_support::{DaemonBed, DaemonProcess, signal};
use onboard_support::{Setup, SiteSetup};
use support::Args;

const SITES: usize = 4;

/// A fresh PostgreSQL database when the test server is there, else `None` (SQLite).
async fn fresh_state() -> Option<String> {
    std::env::var_os("METALFORM_TEST_POSTGRES_URL")?;
    Some(postgres_support::fresh_database().await)
}

/// Wait until every site is held and the `replicas` hold even shares (a replica that joins
/// gets its share over a few rounds: a wave committed before that would be run partly by a
/// replica holding more than its share), failing at once if a replica exits.
async fn wait_for_shares(d: &DaemonBed, children: &mut [DaemonProcess], replicas: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        exited(d, children);
        let leases = d.bed.store.live_leases("site:").await.unwrap();
        let mut shares: std::collections::BTreeMap<&str, usize> = Default::default();
        for lease in &leases {
            *shares.entry(lease.holder.as_str()).or_default() += 1;
        }
        let even = shares.len() == replicas
            && shares.values().max().unwrap_or(&0) - shares.values().min().unwrap_or(&0) <= 1;
        if leases.len() == SITES && even {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the sites were not shared in 2 minutes: {leases:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A replica that exited (a refused configuration) ends the pass, not a 20-minute wait.
fn exited(d: &DaemonBed, children: &mut [DaemonProcess]) {
    for (n, child) in children.iter_mut().enumerate() {
        if let Some(status) = child.try_wait().unwrap() {
            let log = d.bed.dir.path().join(format!("r{n}.log"));
            panic!(
                "replica {n} exited ({status}):\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
    }
}

struct Pass {
    replicas: usize,
    /// The worker threads each replica's runtime was given, when not its default.
    threads: Option<usize>,
    wall: Duration,
    /// Per replica, its own CPU seconds over the wave.
    cpu: Vec<f64>,
    /// Per replica, the CPU seconds of its children (`git` fetches) over the wave.
    git_cpu: Vec<f64>,
    /// Per replica, its own and its children's CPU seconds in a quiet second before the wave.
    idle_rate: Vec<(f64, f64)>,
    /// Per replica, seconds from the commit until the last of its nodes completed.
    last_done: Vec<f64>,
}

async fn pass(machines: usize, replicas: usize, threads: Option<usize>) -> Pass {
    let per_site = machines.div_ceil(SITES);
    let sites: Vec<SiteSetup> = (0..SITES)
        .map(|i| SiteSetup::generated(&format!("dc{}", i + 1), 40 + i as u64, per_site, 0))
        .collect();
    let hosts: Vec<(String, String)> = sites
        .iter()
        .flat_map(|s| {
            (0..per_site).map(move |i| (s.name.clone(), onboard_support::hostname_of(&s.config, i)))
        })
        .collect();
    let setup = Setup {
        sites,
        profile_spec: "  timeouts: {enrollment: 120s}\n".into(),
        site_spec: String::new(),
        max_parallel: 8,
    };
    let d = DaemonBed::start_with_state(setup, "", fresh_state().await).await;
    // The replicas start on the sites alone and share them; the wave is the commit that adds
    // the nodes, as it reaches replicas that are up already.
    let fleet = &d.bed.fleet_dir;
    daemon_support::git(fleet, &["rm", "-q", "-r", "nodes"]);
    daemon_support::commit(fleet, "fleet: the sites, no nodes yet");
    let port = onboard_support::free_port();
    // The agent channel in plain HTTP: each replica would otherwise make its own development
    // CA, and hosts pin one.
    let base = std::fs::read_to_string(&d.config_path).unwrap().replace(
        "[agent]\nlisten = \"127.0.0.1:0\"",
        &format!(
            "[agent]\nlisten = \"127.0.0.1:AGENT\"\nplain_http = true\npublic_url = \"http://127.0.0.1:{port}/\""
        ),
    );
    let mut children = Vec::new();
    for n in 0..replicas {
        // The first replica's agent channel is at the public URL (the agents enroll there).
        let agent = if n == 0 {
            port
        } else {
            onboard_support::free_port()
        };
        let text = base
            .replace("127.0.0.1:AGENT", &format!("127.0.0.1:{agent}"))
            .replace(
                &format!("data_dir = \"{}", d.bed.dir.path().join("daemon").display()),
                &format!(
                    "data_dir = \"{}",
                    d.bed.dir.path().join(format!("r{n}")).display()
                ),
            );
        let path = d.bed.dir.path().join(format!("r{n}.toml"));
        std::fs::write(&path, text).unwrap();
        let mut daemon =
            daemon_support::daemon_command(&path, &d.bed.dir.path().join(format!("r{n}.log")));
        if let Some(threads) = threads {
            daemon.env("TOKIO_WORKER_THREADS", threads.to_string());
        }
        children.push(DaemonProcess(daemon.spawn().unwrap()));
    }
    wait_for_shares(&d, &mut children, replicas).await;
    daemon_support::git(fleet, &["checkout", "-q", "HEAD~1", "--", "nodes"]);
    // What a replica costs with nothing to do (its loops, rounds and source polls): the CPU
    // of a quiet second before the wave, its own and its `git` children's.
    let cpu_now = |children: &[DaemonProcess]| -> Vec<(f64, f64)> {
        children
            .iter()
            .map(|c| {
                (
                    support::cpu_seconds(c.id()),
                    support::children_cpu_seconds(c.id()),
                )
            })
            .collect()
    };
    let quiet = cpu_now(&children);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = cpu_now(&children);
    let idle_rate = before
        .iter()
        .zip(&quiet)
        .map(|(b, q)| (b.0 - q.0, b.1 - q.1))
        .collect();
    let holders: std::collections::BTreeMap<String, String> = d
        .bed
        .store
        .live_leases("site:")
        .await
        .unwrap()
        .into_iter()
        .map(|l| (l.name.trim_start_matches("site:").to_owned(), l.holder))
        .collect();
    daemon_support::commit(fleet, "fleet: the nodes of the wave");
    let started = Instant::now();
    let committed_at = chrono::Utc::now();
    let pairs: Vec<(&str, &str)> = hosts
        .iter()
        .map(|(s, h)| (s.as_str(), h.as_str()))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(1200);
    loop {
        let missing = d.not_active(&pairs).await;
        if missing.is_empty() {
            break;
        }
        exited(&d, &mut children);
        assert!(Instant::now() < deadline, "not converged: {missing:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let wall = started.elapsed();
    // When each replica's last node completed, from the jobs' own times: with the sites split,
    // the wave waits for the later of the two.
    let jobs = d
        .bed
        .store
        .list_jobs(
            metalform::lifecycle::JobKind::Onboarding,
            &metalform::store::JobFilter::default(),
        )
        .await
        .unwrap();
    let mut last_done: std::collections::BTreeMap<&str, f64> = Default::default();
    for job in &jobs {
        let (Some(holder), Some(done)) = (holders.get(&job.site), job.completed_at) else {
            continue;
        };
        let after = (done - committed_at).num_milliseconds() as f64 / 1000.0;
        let last = last_done.entry(holder.as_str()).or_default();
        *last = last.max(after);
    }
    let last_done: Vec<f64> = last_done.into_values().collect();
    let (cpu, git_cpu) = cpu_now(&children)
        .iter()
        .zip(&before)
        .map(|(now, before)| (now.0 - before.0, now.1 - before.1))
        .unzip();
    for child in &children {
        signal(child, "TERM");
    }
    for mut child in children {
        let _ = child.wait();
    }
    for i in 0..SITES {
        let site = format!("dc{}", i + 1);
        for (host, n) in d.bed.deploys(&site) {
            assert!(n <= 1, "{site}/{host} deployed {n} times");
        }
    }
    Pass {
        replicas,
        threads,
        wall,
        cpu,
        git_cpu,
        idle_rate,
        last_done,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse((200, 1), (8, 1));
    let store = if std::env::var("METALFORM_TEST_POSTGRES_URL").is_ok() {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    println!(
        "ha_replicas: {} machines over {SITES} sites, maxParallel 8, time scale {}, store {store}",
        args.machines,
        onboard_support::TIME_SCALE
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let one = pass(args.machines, 1, None).await;
    let shared = pass(args.machines, 2, Some((cores / 2).max(1))).await;
    let two = pass(args.machines, 2, None).await;
    let seconds = |values: &[f64]| -> String {
        let shown: Vec<String> = values.iter().map(|c| format!("{c:.2} s")).collect();
        shown.join(", ")
    };
    for p in [&one, &shared, &two] {
        let idle: Vec<String> = p
            .idle_rate
            .iter()
            .map(|(own, git)| format!("{:.0}+{:.0} ms/s", own * 1000.0, git * 1000.0))
            .collect();
        let runtime = match p.threads {
            Some(threads) => format!(" ({threads} worker thread(s) each)"),
            None => String::new(),
        };
        println!(
            "  {} replica(s){runtime}: wall {:.2} s, CPU per replica [{}], total {:.2} s; their \
             git fetches [{}]; idle before the wave, own+git [{}]; last node done [{}]",
            p.replicas,
            p.wall.as_secs_f64(),
            seconds(&p.cpu),
            p.cpu.iter().sum::<f64>(),
            seconds(&p.git_cpu),
            idle.join(", "),
            seconds(&p.last_done)
        );
    }
    for (two, how) in [
        (&shared, "each with its share of the cores"),
        (&two, "each sized for the whole machine"),
    ] {
        // The wall time is seen at the bench's 200 ms polls; the jobs' completion times are not.
        let done = |p: &Pass| p.last_done.iter().copied().fold(0.0, f64::max).max(0.001);
        println!(
            "  two vs one, {how}: wall x{:.2} (by the last job's completion x{:.2}), CPU per \
             replica x{:.2} (mean of the two vs the one)",
            two.wall.as_secs_f64() / one.wall.as_secs_f64(),
            done(two) / done(&one),
            (two.cpu.iter().sum::<f64>() / 2.0) / one.cpu[0].max(0.01)
        );
    }
}
