//! Benchmark of a converged fleet (issue 17): a generated fleet (10,000 nodes over 20 sites by
//! default, examples/large_fleet.rs) whose machines are already Deployed in one simulated MAAS
//! per site and whose nodes the store already holds active and bound to them — the
//! simulator's converged scenario (`sim::converged`) and `Store::seed_converged` — so nothing
//! is onboarded first.
//!
//! `cargo bench --profile dev --bench converged [-- --machines N --sites S --runs R
//! --history H --reimages R]` prints, per run and as min/median/max:
//! - `plan`: observe every site with fresh clients (as `metalform plan` does) and plan, with
//!   the MAAS requests made and the heap it peaked at (a counting allocator: what the
//!   observation and the plan hold, the simulators included as they answer);
//! - a reconcile pass: for every site at once, each in a task of its own as the daemon runs
//!   them, observe the site with the daemon's long-lived clients, plan it and run its drift
//!   pass on that observation; with the MAAS requests per pass. Passes alternate between the
//!   drift pass deciding on the store rows the observation read (as the daemon's does when it
//!   dispatched nothing) and reading them again itself (the baseline);
//! - the store seeding itself;
//! - the same fleet through real processes: `metalform plan --detailed-exitcode` (wall time,
//!   the process's own peak RSS (VmHWM) and CPU; exit 0 asserts "no changes"), then a `metalform daemon`
//!   keeping it (reconcile interval 10 s), watched for `--daemon-seconds` (60) once every site
//!   was reconciled once: its RSS sampled every second, its CPU, and from its /metrics the
//!   reconcile duration per site and MAAS requests per site reconcile.
//!   `METALFORM_BENCH_PLAN_WRAPPER="heaptrack -o /tmp/plan"` runs each `plan` under a profiler,
//!   `METALFORM_BENCH_DAEMON_WRAPPER` the daemon (their figures are then the profiler's).
//!
//! `--history H` gives each node H older completed onboardings, `--reimages R` R completed
//! reimages after its current one (a fleet's finished jobs, which every read steps over).
//! Behaviour is asserted (every node settled, nothing to act on, no drift); timings are
//! printed, never asserted. Under `cargo test --all-targets` it runs once on 200 nodes over 4
//! sites as a smoke test.

#[allow(dead_code)]
#[path = "../examples/large_fleet.rs"]
mod large_fleet;

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use metalform::clock::SystemClock;
use metalform::drift::{DriftEnv, DriftPolicy};
use metalform::manifest;
use metalform::model::{Fleet, SiteName};
use metalform::observe::{self, MaasClients, SiteFilter, SiteObservation};
use metalform::plan::{self, Action, PlanOptions};
use metalform::provider::maas::{MaasClientOptions, MaasMetrics};
use metalform::secrets::{FileStore, SecretStore};
use metalform::sim::converged::{FleetMachine, converged_config, converged_nodes};
use metalform::sim::{self, SimHandle};
use metalform::source::FleetSource;
use metalform::store::Store;
use support::{Samples, benchmarking, ms};

/// The system allocator, counting the bytes in use and their peak since the last reset.
struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let now = IN_USE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes in use now, and the peak is reset to it.
fn reset_peak() -> usize {
    let now = IN_USE.load(Ordering::Relaxed);
    PEAK.store(now, Ordering::Relaxed);
    now
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The simulators' runtime: a MAAS is another server, sharing the machine's cores.
static SIM_RUNTIME: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("simulated-maas")
        .enable_all()
        .build()
        .expect("a runtime for the simulators")
});

struct Options {
    shape: large_fleet::Shape,
    runs: usize,
    history: metalform::store::ConvergedHistory,
    /// How long the daemon process is watched once every site was reconciled once.
    daemon_seconds: u64,
}

fn options() -> Options {
    let mut options = if benchmarking() {
        Options {
            shape: large_fleet::Shape {
                nodes: 10_000,
                sites: 20,
                groups: 200,
            },
            runs: 5,
            history: metalform::store::ConvergedHistory {
                onboardings: 2,
                reimages: 0,
            },
            daemon_seconds: 60,
        }
    } else {
        Options {
            shape: large_fleet::Shape {
                nodes: 200,
                sites: 4,
                groups: 8,
            },
            runs: 2,
            history: metalform::store::ConvergedHistory {
                onboardings: 1,
                reimages: 1,
            },
            daemon_seconds: 2,
        }
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> usize {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} needs a number"))
        };
        match arg.as_str() {
            "--machines" => options.shape.nodes = number("--machines"),
            "--sites" => options.shape.sites = number("--sites"),
            "--runs" => options.runs = number("--runs").max(1),
            "--history" => options.history.onboardings = number("--history"),
            "--reimages" => options.history.reimages = number("--reimages"),
            "--daemon-seconds" => options.daemon_seconds = number("--daemon-seconds") as u64,
            _ => {}
        }
    }
    options.shape.groups = options.shape.groups.max(options.shape.sites);
    options
}

async fn start_regions(fleet: &Fleet) -> BTreeMap<SiteName, SimHandle> {
    let mut regions = BTreeMap::new();
    for (index, site) in fleet.sites.keys().enumerate() {
        let nodes: Vec<FleetMachine> = fleet
            .nodes_of_site(site)
            .map(|node| FleetMachine {
                hostname: node.id.hostname.to_string(),
                bmc_ip: node.bmc.ipmi_ip.to_string(),
            })
            .collect();
        let config = converged_config(index as u64 + 1, &nodes);
        let handle = SIM_RUNTIME
            .spawn(sim::start(config))
            .await
            .expect("the simulator task runs")
            .expect("the simulator starts");
        regions.insert(site.clone(), handle);
    }
    regions
}

fn clients(regions: &BTreeMap<SiteName, SimHandle>, metrics: &MaasMetrics) -> MaasClients {
    let mut clients = MaasClients::new(MaasClientOptions {
        metrics: metrics.clone(),
        ..MaasClientOptions::default()
    });
    for (name, region) in regions {
        clients = clients.with_endpoint(name.clone(), region.maas_url.clone());
    }
    clients
}

fn requests(metrics: &MaasMetrics) -> String {
    metrics
        .snapshot()
        .into_iter()
        .map(|((op, status), n)| format!("{op} {status}: {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every node of the plan settled: nothing to do and no drift.
fn assert_converged(plan: &plan::Plan, nodes: usize) {
    let items: Vec<_> = plan.items.iter().collect();
    assert_eq!(items.len(), nodes, "one item per node");
    for item in items {
        assert_eq!(item.action, Action::Noop, "{item:?}");
        assert!(item.drift.is_none(), "{item:?}");
    }
}

async fn run(options: Options) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = dir.path().join("fleet");
    large_fleet::generate(&root, options.shape).expect("the fleet is generated");
    let fleet = manifest::load_fleet(&FleetSource::Directory(root))
        .expect("the generated fleet is valid")
        .fleet;
    let nodes = fleet.nodes.len();
    let started = Instant::now();
    let regions = start_regions(&fleet).await;

    let mut secrets: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (name, site) in &fleet.sites {
        secrets.insert(
            site.maas.api_key.path.clone(),
            BTreeMap::from([(
                site.maas.api_key.key.clone().unwrap_or_default(),
                regions[name].api_key().expose().to_owned(),
            )]),
        );
    }
    let secrets_path = dir.path().join("secrets.json");
    std::fs::write(&secrets_path, serde_json::to_string(&secrets).unwrap()).unwrap();
    let secrets: Arc<dyn SecretStore> = Arc::new(FileStore::new(&secrets_path));
    let store = Store::open(
        &format!("sqlite://{}", dir.path().join("state.db").display()),
        Arc::new(SystemClock),
    )
    .await
    .expect("the store opens");
    let simulated = started.elapsed();

    let seeding = Instant::now();
    for (name, region) in &regions {
        let mut rows = converged_nodes(region, name.as_str());
        for row in &mut rows {
            let node = fleet
                .nodes_of_site(name)
                .find(|n| n.id.hostname.as_str() == row.hostname)
                .expect("every machine is a node of the site");
            row.sku = Some(node.sku.to_string());
            row.gpus = Some(i64::from(node.gpus));
        }
        store
            .seed_converged(&rows, options.history)
            .await
            .expect("the store is seeded");
    }
    println!(
        "fleet: {nodes} nodes over {} sites, converged; {} simulated regions started in {:.1} s; store seeded in {:.1} s ({} older onboardings and {} reimages per node)",
        fleet.sites.len(),
        regions.len(),
        simulated.as_secs_f64(),
        seeding.elapsed().as_secs_f64(),
        options.history.onboardings,
        options.history.reimages
    );
    println!(
        "process RSS after set-up: {:.0} MiB",
        support::memory_mib(std::process::id()).rss
    );

    // `plan`: fresh clients every time, every site at once.
    let (mut times, mut peaks) = (Vec::new(), Vec::new());
    let mut last = String::new();
    for run in 0..options.runs {
        let metrics = MaasMetrics::new();
        let clients = clients(&regions, &metrics);
        let base = reset_peak();
        let start = Instant::now();
        let snapshot =
            observe::observe(&fleet, &SiteFilter::All, &store, secrets.as_ref(), &clients)
                .await
                .expect("observed");
        let observed = start.elapsed();
        let plan = plan::plan(&fleet, &snapshot, &PlanOptions::default());
        let total = start.elapsed();
        let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
        assert_converged(&plan, nodes);
        drop((plan, snapshot));
        println!(
            "  plan run {}: observe {:>7.1} ms + plan {:>6.1} ms = {:>7.1} ms; heap peak +{:.0} MiB; {} MAAS requests",
            run + 1,
            ms(observed),
            ms(total - observed),
            ms(total),
            mib(peak),
            metrics.total()
        );
        last = requests(&metrics);
        times.push(total);
        peaks.push(peak);
    }
    peaks.sort();
    println!(
        "plan (observe + plan, {nodes} nodes): {}; heap peak median +{:.0} MiB ({:.1} KiB per node); requests: {last}",
        Samples::from(times).summary(),
        mib(peaks[peaks.len() / 2]),
        peaks[peaks.len() / 2] as f64 / 1024.0 / nodes as f64,
    );

    // Reconcile passes: the daemon's long-lived clients, every site at once.
    let metrics = MaasMetrics::new();
    let daemon_clients = clients(&regions, &metrics);
    let env = DriftEnv::new(
        store.clone(),
        secrets.clone(),
        daemon_clients.clone(),
        DriftPolicy::default(),
    );
    // Alternately: the drift pass deciding on the observation's store rows (as the daemon's
    // does when the reconcile dispatched nothing), and reading them again itself (as every
    // pass did before): the same run's baseline for that change.
    let mut passes: BTreeMap<bool, Vec<Duration>> = BTreeMap::new();
    let shared_fleet = Arc::new(fleet.clone());
    for run in 0..options.runs + 1 {
        for shared in [true, false] {
            let before = metrics.total();
            let start = Instant::now();
            // One task per site, as the daemon spawns its site reconciles.
            let tasks = shared_fleet.sites.keys().map(|name| {
                let (fleet, store, secrets, clients, env) = (
                    shared_fleet.clone(),
                    store.clone(),
                    secrets.clone(),
                    daemon_clients.clone(),
                    env.clone(),
                );
                let name = name.clone();
                tokio::spawn(async move {
                    let site = &fleet.sites[&name];
                    let filter = SiteFilter::Only([name.clone()].into());
                    let (mut snapshot, inventory) = observe::observe_keeping(
                        &fleet,
                        &filter,
                        &store,
                        secrets.as_ref(),
                        &clients,
                        &observe::Patience::default(),
                        metalform::drift::InventoryView::from,
                    )
                    .await
                    .expect("observed");
                    let plan = plan::plan(
                        &fleet,
                        &snapshot,
                        &PlanOptions {
                            sites: filter,
                            ..PlanOptions::default()
                        },
                    );
                    let observation = snapshot.sites.remove(&name).expect("observed");
                    assert!(matches!(observation, SiteObservation::Readable { .. }));
                    let inventory = shared.then_some(inventory);
                    let report = metalform::drift::reconcile_observed_site(
                        &env,
                        site,
                        observation,
                        inventory,
                    )
                    .await
                    .expect("drift pass");
                    (plan, report)
                })
            });
            let reports: Vec<_> = futures::future::join_all(tasks)
                .await
                .into_iter()
                .map(|joined| joined.expect("a site's reconcile"))
                .collect();
            let took = start.elapsed();
            let mut settled = 0;
            for (plan, report) in &reports {
                settled += plan.items.len();
                assert!(report.errors.is_empty(), "{:?}", report.errors);
                assert_eq!(report.taken().count(), 0, "nothing to act on");
                assert_eq!(
                    report.by_rule.get("deployed_active").copied().unwrap_or(0),
                    report.findings.len(),
                    "{:?}",
                    report.by_rule
                );
            }
            assert_eq!(settled, nodes);
            let made = metrics.total() - before;
            println!(
                "  reconcile pass {}{} ({}): {:>7.1} ms; {made} MAAS requests ({:.1} per site)",
                run + 1,
                if run == 0 {
                    " (first: clients new)"
                } else {
                    ""
                },
                if shared {
                    "store rows shared"
                } else {
                    "drift pass reads the store again"
                },
                ms(took),
                made as f64 / fleet.sites.len() as f64
            );
            if run > 0 {
                passes.entry(shared).or_default().push(took);
            }
        }
    }
    for (shared, times) in passes.into_iter().rev() {
        println!(
            "reconcile pass ({nodes} nodes, {} sites, after the first; {}): {}",
            fleet.sites.len(),
            if shared {
                "store rows shared, as the daemon"
            } else {
                "drift pass reads the store again"
            },
            Samples::from(times).summary(),
        );
    }
    println!("requests in all: {}", requests(&metrics));
    println!(
        "process RSS at the end: {:.0} MiB",
        support::memory_mib(std::process::id()).rss
    );

    let state_url = format!("sqlite://{}", dir.path().join("state.db").display());
    let bed = ProcessBed {
        dir: dir.path(),
        fleet: &dir.path().join("fleet"),
        state_url: &state_url,
        secrets: &secrets_path,
    };
    bed.point_sites_at(&regions);
    bed.plan_processes(options.runs, nodes);
    bed.daemon_process(&fleet, options.daemon_seconds).await;
    store.close().await;
}

/// The same fleet, store and secrets run by real `metalform` processes, each with its own
/// resident set: what an operator's `plan` and a replica's daemon cost.
struct ProcessBed<'a> {
    dir: &'a std::path::Path,
    fleet: &'a std::path::Path,
    state_url: &'a str,
    secrets: &'a std::path::Path,
}

impl ProcessBed<'_> {
    /// The generated sites name documentation addresses; the processes talk to the simulators.
    fn point_sites_at(&self, regions: &BTreeMap<SiteName, SimHandle>) {
        for (name, region) in regions {
            let path = self.fleet.join(format!("sites/{name}.yaml"));
            let text = std::fs::read_to_string(&path).expect("the site manifest");
            let start = text.find("url: \"").expect("the site's MAAS url") + "url: \"".len();
            let end = start + text[start..].find('"').expect("a quoted url");
            let text = format!(
                "{}{}{}",
                &text[..start],
                region.maas_url.trim_end_matches('/'),
                &text[end..]
            );
            std::fs::write(&path, text).expect("the site manifest is written");
        }
    }

    /// `metalform ARGS`, run by `wrapper` if one is given (e.g. `heaptrack -o /tmp/plan`, to
    /// profile; its figures are then what is measured).
    fn metalform(&self, wrapper: Option<&str>, args: &[&str]) -> std::process::Command {
        let mut words = wrapper.unwrap_or_default().split_whitespace();
        let mut command = match words.next() {
            Some(program) => {
                let mut command = std::process::Command::new(program);
                command.args(words).arg(env!("CARGO_BIN_EXE_metalform"));
                command
            }
            None => std::process::Command::new(env!("CARGO_BIN_EXE_metalform")),
        };
        command
            .args(args)
            .env_remove("METALFORM_STATE")
            .env_remove("METALFORM_SECRETS")
            .env_remove("METALFORM_LOG")
            .env("NO_COLOR", "1");
        command
    }

    /// `metalform plan --detailed-exitcode` over the whole fleet: exit 0 is "no changes".
    fn plan_processes(&self, runs: usize, nodes: usize) {
        let secrets = format!("file://{}", self.secrets.display());
        let (mut times, mut peaks) = (Vec::new(), Vec::new());
        for run in 0..runs {
            let log = self.dir.join(format!("plan-{run}.log"));
            let wrapper = std::env::var("METALFORM_BENCH_PLAN_WRAPPER").ok();
            let mut command = self.metalform(wrapper.as_deref(), &["plan", "--detailed-exitcode"]);
            command.arg("--fleet").arg(self.fleet).args([
                "--state",
                self.state_url,
                "--secrets",
                &secrets,
            ]);
            let finished = support::run_measured(&mut command, &log);
            assert!(
                finished.success,
                "`metalform plan` found changes or failed: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            println!(
                "  `metalform plan` process {}: {:>7.1} ms, peak RSS {:.0} MiB, CPU {:.2} s",
                run + 1,
                ms(finished.wall),
                finished.peak_rss_mib,
                finished.cpu_seconds
            );
            times.push(finished.wall);
            peaks.push(finished.peak_rss_mib);
        }
        peaks.sort_by(f64::total_cmp);
        println!(
            "`metalform plan` process ({nodes} nodes, no changes): {}; peak RSS median {:.0} MiB, max {:.0} MiB",
            Samples::from(times).summary(),
            peaks[peaks.len() / 2],
            peaks[peaks.len() - 1]
        );
    }

    /// A `metalform daemon` keeping the converged fleet: its resident set sampled every
    /// second once every site was reconciled once, its reconcile durations and MAAS requests
    /// from its own /metrics.
    async fn daemon_process(&self, fleet: &Fleet, seconds: u64) {
        git(self.fleet, &["init", "-q", "-b", "main"]);
        git(self.fleet, &["add", "-A"]);
        git(self.fleet, &["commit", "-q", "-m", "fleet"]);
        let (admin, agent) = (free_port(), free_port());
        let config = self.dir.join("daemon.toml");
        std::fs::write(
            &config,
            format!(
                "[source]\nrepository = \"{repo}\"\nbranch = \"main\"\npoll_interval = \"60s\"\n\n\
                 [state]\nurl = \"{state}\"\ndata_dir = \"{data}\"\n\n\
                 [secrets]\nurl = \"file://{secrets}\"\n\n\
                 [reconcile]\ninterval = \"10s\"\n\n\
                 [api]\nlisten = \"127.0.0.1:{admin}\"\nplain_http = true\n\n\
                 [agent]\nlisten = \"127.0.0.1:{agent}\"\n",
                repo = self.fleet.display(),
                state = self.state_url,
                data = self.dir.join("daemon").display(),
                secrets = self.secrets.display(),
            ),
        )
        .expect("the daemon configuration");
        let log = std::fs::File::create(self.dir.join("daemon.log")).expect("the daemon log");
        let mut daemon = self
            .metalform(
                std::env::var("METALFORM_BENCH_DAEMON_WRAPPER")
                    .ok()
                    .as_deref(),
                &["daemon", "--config"],
            )
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(log)
            // Its own process group: a wrapper's children are stopped with it.
            .process_group(0)
            .spawn()
            .expect("the daemon starts");
        let pid = daemon.id();
        let metrics_url = format!("http://127.0.0.1:{admin}/metrics");
        let http = reqwest::Client::new();
        let read = || async {
            let text = http
                .get(&metrics_url)
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            Some(DaemonFigures::parse(&text))
        };
        let sites = fleet.sites.len() as f64;
        let started = Instant::now();
        // Warm-up: every site reconciled once (the first pass reads everything anew).
        let warm = loop {
            assert!(
                daemon.try_wait().expect("the daemon's status").is_none(),
                "the daemon exited: {}",
                std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
            );
            if let Some(figures) = read().await.filter(|f| f.passes >= sites) {
                break figures;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(600),
                "the daemon reconciled no site in 10 minutes"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        };
        println!(
            "  daemon: every site reconciled once {:.1} s after start; RSS {:.0} MiB",
            started.elapsed().as_secs_f64(),
            support::memory_mib(pid).rss
        );
        let (cpu0, at0) = (support::cpu_seconds(pid), Instant::now());
        let mut samples = Vec::new();
        while at0.elapsed().as_secs() < seconds {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            samples.push(support::memory_mib(pid).rss);
        }
        let cpu = (support::cpu_seconds(pid) - cpu0) / at0.elapsed().as_secs_f64();
        let end = read().await.expect("the daemon's metrics");
        let memory = support::memory_mib(pid);
        let passes = end.passes - warm.passes;
        samples.sort_by(f64::total_cmp);
        println!(
            "daemon, steady ({seconds} s after the warm-up): RSS median {:.0} MiB, max {:.0} MiB, peak since start {:.0} MiB; CPU {:.1}% of one core; {passes} site reconciles, {:.0} ms each on average; {:.1} MAAS requests per site reconcile",
            samples
                .get(samples.len() / 2)
                .copied()
                .unwrap_or(memory.rss),
            samples.last().copied().unwrap_or(memory.rss),
            memory.peak,
            cpu * 100.0,
            if passes > 0.0 {
                (end.seconds - warm.seconds) / passes * 1000.0
            } else {
                f64::NAN
            },
            if passes > 0.0 {
                (end.maas_requests - warm.maas_requests) / passes
            } else {
                f64::NAN
            },
        );
        // SAFETY: kill has no memory preconditions; the group is the daemon's own.
        unsafe { libc::kill(-(pid as i32), libc::SIGTERM) };
        daemon.wait().expect("the daemon is reaped");
    }
}

/// What the daemon's /metrics says about its reconciles, summed over sites.
#[derive(Debug, Default)]
struct DaemonFigures {
    passes: f64,
    seconds: f64,
    maas_requests: f64,
}

impl DaemonFigures {
    fn parse(text: &str) -> DaemonFigures {
        let mut figures = DaemonFigures::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let value: f64 = value.parse().unwrap_or(0.0);
            let metric = name.split('{').next().unwrap_or(name);
            match metric {
                "metalform_reconcile_duration_seconds_count" => figures.passes += value,
                "metalform_reconcile_duration_seconds_sum" => figures.seconds += value,
                "metalform_maas_requests_total" => figures.maas_requests += value,
                _ => {}
            }
        }
        figures
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn git(dir: &std::path::Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=Bench",
            "-c",
            "user.email=bench@example.invalid",
        ])
        .args(args)
        .current_dir(dir)
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

fn main() {
    let options = options();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("metalform")
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(options));
}
