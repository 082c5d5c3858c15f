//! Benchmark of an onboarding wave (issue 17 "Big waves"): N Ready machines over S simulated
//! MAAS regions, onboarded by one `metalform apply` process at `maxParallel` P per site.
//!
//! Both sides are real processes, so each one's figures are its own: one `metalform sim
//! --regions S --machines N/S --time-scale T --jitter 0` (every simulated duration exact), and
//! one `metalform apply --auto-approve` over a generated fleet of those machines (SQLite
//! store, dev secrets, its own agent channel over TLS with the development CA that the
//! simulated agents pin). Printed: wall time of the apply (plan included), the simulated
//! minimum and the ratio, the apply's peak RSS (its own VmHWM, read while it runs)
//! and CPU (user + system), the simulator's CPU, the MAAS requests it answered, and nodes
//! converged. Asserted (behaviour only, never times): every node active, every machine
//! deployed exactly once, and never more machines of a site commissioning, testing or
//! deploying at once than `maxParallel` (from the simulator's log of status changes, read
//! through its MAAS API).
//!
//! The simulated minimum. A Ready machine's onboarding waits on the simulator twice: the
//! deployment (`Timings::deploying_secs`, 600 s) and the deployed OS booting its agent until
//! it calls the enrollment URL (`agent_boot_secs`, 30 s). Everything else on the path is
//! requests (hardware sync is seeded by a push that makes the host sync at once, so it never
//! waits on `hw_sync_interval_secs`). A site runs at most P nodes at once, so
//!
//! ```text
//! minimum = max over sites of ceil(n_site / P) × (deploying_secs + agent_boot_secs) / T
//! ```
//!
//! (1,000 nodes over 4 sites at P 25 and T 600: 10 rounds × 1.05 s = 10.5 s.)
//!
//! `cargo bench --profile dev --bench wave [-- --machines N --sites S --parallel P
//! --time-scale T --poll-ms MS]` (`METALFORM_WAVE_BIN=…` runs another build of `metalform`;
//! `METALFORM_WAVE_KEEP=DIR` keeps the run's state store and logs in DIR); defaults 1,000
//! machines, 4 sites, P 25, T 600, and a poll interval of 15 simulated seconds (25 ms at T 600).
//! Under `cargo test --all-targets` it runs 8 machines over 2 sites as a smoke test.

#[path = "../tests/onboard_support/mod.rs"]
mod onboard_support;

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use metalform::lifecycle::NodeState;
use metalform::sim::Timings;
use metalform::store::Store;
use onboard_support::{Setup, SiteSetup};
use support::{Args, cpu_seconds, number_option};

/// The first region's seed; region i has SEED + i (as `metalform sim --regions` draws them).
const SEED: u64 = 40;

/// The `metalform` binary both processes run: this build's, or `METALFORM_WAVE_BIN` (another
/// build of the same benchmark's code, to measure before and after in one session).
fn metalform() -> Command {
    Command::new(
        std::env::var_os("METALFORM_WAVE_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_metalform").into()),
    )
}

/// One region of the simulator process, as it printed it.
struct Region {
    maas_url: String,
    api_key: String,
    control: String,
}

/// The most machines of a region commissioning, testing or deploying at once, from MAAS's
/// own log of status changes (`Node changed status` events, read in id order through the MAAS
/// API), so no moment between two samples is missed.
async fn most_booting_at_once(region: &Region) -> usize {
    use metalform::provider::maas::{EventLevel, EventsQuery, MaasClient, MaasClientOptions};
    let maas = MaasClient::new(
        &region.maas_url,
        metalform::secrets::Secret::new(region.api_key.clone()),
        MaasClientOptions::default(),
    )
    .expect("a MAAS client of the simulator");
    let (mut after, mut count) = (0i64, onboard_support::BootingAtOnce::default());
    loop {
        let page = maas
            .query_events(&EventsQuery {
                level: Some(EventLevel::Debug),
                limit: Some(1000),
                after: Some(after),
                ..EventsQuery::default()
            })
            .await
            .expect("the simulator's events");
        let Some(newest) = page.newest_id() else {
            break;
        };
        // Newest first on the page: walk it oldest first.
        for event in page.events.iter().rev() {
            count.see(&event.event_type, &event.description);
        }
        after = newest;
    }
    count.most
}

/// Start `metalform sim` with `regions` regions and read the address of each.
fn start_sim(args: &[String], regions: usize, log: &Path) -> (Child, Vec<Region>) {
    let mut child = metalform()
        .arg("sim")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("metalform sim starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut found = Vec::new();
    let (mut url, mut key) = (None, None);
    while found.len() < regions {
        let line = lines
            .next()
            .unwrap_or_else(|| {
                panic!(
                    "metalform sim stopped: {}",
                    std::fs::read_to_string(log).unwrap_or_default()
                )
            })
            .unwrap();
        if let Some(v) = line.strip_prefix("MAAS URL: ") {
            url = Some(v.trim().to_owned());
        } else if let Some(v) = line.strip_prefix("API key:  ") {
            key = Some(v.trim().to_owned());
        } else if let Some(v) = line.strip_prefix("control:  ") {
            found.push(Region {
                maas_url: url.take().expect("URL before control"),
                api_key: key.take().expect("key before control"),
                control: v.trim().trim_end_matches("/sim/v1/").to_owned(),
            });
        }
    }
    // Keep reading its stdout so the simulator never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (child, found)
}

/// The simulated minimum of the wave (see the module doc), in real seconds.
fn simulated_minimum(per_site: usize, parallel: usize, time_scale: f64) -> f64 {
    let timings = Timings::default();
    let one_node = (timings.deploying_secs + timings.agent_boot_secs) / time_scale;
    per_site.div_ceil(parallel) as f64 * one_node
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse((1000, 1), (8, 1));
    let sites: usize = number_option("--sites", if args.benchmarking { 4 } else { 2 });
    let parallel: usize = number_option("--parallel", if args.benchmarking { 25 } else { 2 });
    let time_scale: f64 = number_option("--time-scale", 600.0);
    let poll_ms: u64 = number_option("--poll-ms", ((15_000.0 / time_scale) as u64).max(20));
    let per_site = args.machines.div_ceil(sites);
    let machines = per_site * sites;
    let minimum = simulated_minimum(per_site, parallel, time_scale);
    println!(
        "wave: {machines} machines over {sites} sites ({per_site} each), maxParallel {parallel} \
         per site, time scale {time_scale}, no jitter, apply poll interval {poll_ms} ms; \
         simulated minimum {minimum:.2} s"
    );

    println!("  load average at the start: {}", load_average());
    let dir = tempfile::tempdir().unwrap();
    let (mut sim, regions) = start_sim(
        &[
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--regions".into(),
            sites.to_string(),
            "--machines".into(),
            per_site.to_string(),
            "--seed".into(),
            SEED.to_string(),
            "--time-scale".into(),
            time_scale.to_string(),
            "--jitter".into(),
            "0".into(),
        ],
        sites,
        &dir.path().join("sim.log"),
    );
    let names: Vec<String> = (1..=sites).map(|i| format!("dc{i}")).collect();
    let setup = Setup {
        sites: names
            .iter()
            .enumerate()
            .map(|(i, name)| SiteSetup::generated(name, SEED + i as u64, per_site, 0))
            .collect(),
        profile_spec: String::new(),
        site_spec: String::new(),
        max_parallel: parallel as u32,
    };
    let fleet_dir = dir.path().join("fleet");
    let pair = |f: fn(&Region) -> &String| -> Vec<(String, String)> {
        names
            .iter()
            .cloned()
            .zip(regions.iter().map(|r| f(r).clone()))
            .collect()
    };
    onboard_support::write_fleet_at(&fleet_dir, &setup, &pair(|r| &r.maas_url));
    let secrets = dir.path().join("secrets.json");
    onboard_support::write_secrets_for(&secrets, &pair(|r| &r.api_key));
    let state = format!("sqlite://{}", dir.path().join("state.db").display());
    let control: Vec<String> = pair(|r| &r.control)
        .iter()
        .map(|(name, url)| format!("{name}={url}"))
        .collect();
    let sim_cpu_before = cpu_seconds(sim.id());

    let apply_log = dir.path().join("apply.log");
    let started = Instant::now();
    let started_at = chrono::Utc::now();
    let mut apply = metalform();
    apply
        .args(["apply", "--auto-approve", "--fleet"])
        .arg(&fleet_dir)
        .args(["--state", &state, "--secrets"])
        .arg(format!("file://{}", secrets.display()))
        .args(["--sim-control", &control.join(",")])
        .args([
            "--agent-listen",
            &format!("127.0.0.1:{}", onboard_support::free_port()),
        ])
        .args(["--poll-interval", &format!("{poll_ms}ms")])
        .env_remove("METALFORM_STATE")
        .env_remove("METALFORM_SECRETS")
        .env("NO_COLOR", "1");
    let log = apply_log.clone();
    let finished = tokio::task::spawn_blocking(move || support::run_measured(&mut apply, &log))
        .await
        .unwrap();
    let wall = started.elapsed().as_secs_f64();
    let sim_cpu = cpu_seconds(sim.id()) - sim_cpu_before;
    let stdout = std::fs::read_to_string(&apply_log).unwrap_or_default();
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("Apply:"))
        .unwrap_or("")
        .to_owned();
    assert!(
        finished.success,
        "apply failed: {summary}\n{}",
        tail(&std::fs::read_to_string(&apply_log).unwrap_or_default(), 40)
    );

    // What the simulator saw: requests answered, deploys per machine.
    let http = reqwest::Client::new();
    let sim_state = async |region: &Region, what: &str| -> serde_json::Value {
        let url = format!("{}/sim/v1/{what}", region.control);
        http.get(url).send().await.unwrap().json().await.unwrap()
    };
    let mut requests = 0;
    let mut most_booting = Vec::new();
    // Requests by what MAAS did with them (`<handler>.<action>`).
    let mut by_action: std::collections::BTreeMap<String, usize> = Default::default();
    for (name, region) in names.iter().zip(&regions) {
        let ops = sim_state(region, "ops").await;
        for op in ops.as_array().into_iter().flatten() {
            requests += 1;
            let action = op["action"].as_str().unwrap_or("other");
            *by_action.entry(action.to_owned()).or_default() += 1;
        }
        let counters = sim_state(region, "counters").await;
        let counters = counters.as_object().cloned().unwrap_or_default();
        let deployed: Vec<u64> = counters
            .values()
            .map(|c| c["deploy"].as_u64().unwrap_or(0))
            .collect();
        assert_eq!(
            deployed.len(),
            per_site,
            "{name}: every machine has counters"
        );
        assert!(
            deployed.iter().all(|n| *n == 1),
            "{name}: each machine deployed exactly once: {deployed:?}"
        );
        let booting = most_booting_at_once(region).await;
        assert!(
            booting <= parallel,
            "{name}: {booting} machines booting at once, against maxParallel {parallel}"
        );
        most_booting.push(booting);
    }
    println!("  most machines booting at once per site (maxParallel {parallel}): {most_booting:?}");
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(sim.id() as libc::pid_t, libc::SIGINT) };
    let _ = sim.wait();

    let store = Store::open(&state, Arc::new(metalform::clock::SystemClock))
        .await
        .unwrap();
    let nodes = store
        .list_nodes(&metalform::store::NodeFilter::default())
        .await
        .unwrap();
    let active = nodes
        .iter()
        .filter(|n| n.status == NodeState::Active)
        .count();
    assert_eq!(active, machines, "every node active ({summary})");

    println!("  {summary}");
    println!(
        "  wall {wall:.2} s; simulated minimum {minimum:.2} s; ratio {:.2}",
        wall / minimum
    );
    println!(
        "  apply: peak RSS {:.1} MiB, CPU {:.2} s (user + system); simulator CPU {sim_cpu:.2} s",
        finished.peak_rss_mib, finished.cpu_seconds
    );
    println!(
        "  MAAS requests {requests} ({:.1} per node); nodes converged {active}/{machines}",
        requests as f64 / machines as f64
    );
    let mix: Vec<String> = by_action
        .iter()
        .map(|(action, n)| format!("{action} {:.2}", *n as f64 / machines as f64))
        .collect();
    println!("  per node: {}", mix.join(", "));
    println!("  load average at the end: {}", load_average());
    if let Some(keep) = std::env::var_os("METALFORM_WAVE_KEEP") {
        // The run's state and logs, for reading its journal afterwards (every stage's start
        // and end are in the job events); the apply started at the time printed.
        let keep = Path::new(&keep);
        std::fs::create_dir_all(keep).unwrap();
        for file in ["state.db", "apply.log", "sim.log"] {
            std::fs::copy(dir.path().join(file), keep.join(file)).unwrap();
        }
        println!(
            "  kept in {}: the apply started at {}",
            keep.display(),
            started_at.to_rfc3339()
        );
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.trim().to_owned())
        .unwrap_or_default()
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
