//! Benchmark of observe + plan at scale (issue 5): a generated fleet of 10,000 nodes over 5
//! sites (examples/large_fleet.rs) against simulated MAAS regions holding 10,000 machines that
//! match it (`SimConfig::generated`, bound to the fleet's hostnames and BMCs) — one region per
//! site, 2,000 machines each, as production has one MAAS per site. Goals: observe + plan under
//! 1 s; at most one machines list per site.
//!
//! A simulated region keeps each machine's rendering between lists (docs/simulator.md), so
//! every figure is measured twice: with every machine rendered anew for the list (the first
//! list, or after every machine changed) and with the renderings kept. The goal must hold for
//! both medians.
//!
//! `cargo bench --bench plan` prints, per run and as min/median/max:
//! - observe (5 sites concurrently: version, machines list, bulk power parameters; SQLite
//!   inventory and jobs), plan, and their sum, with the MAAS requests made by operation;
//! - the list calls per site from each simulator's own log;
//! - what the simulated regions alone take to answer all lists at once, and what decoding them
//!   costs in one thread;
//! - rendering the text plan and writing the plan file (size).
//!
//! Figures are printed, never asserted as timings; the request counts are asserted (they are
//! behaviour). Under `cargo test --all-targets` (no `--bench`) it runs once on a 500-node fleet
//! as a smoke test of the benchmark itself.

#[allow(dead_code)]
#[path = "../examples/large_fleet.rs"]
mod large_fleet;

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use metalform::clock::SystemClock;
use metalform::manifest;
use metalform::model::Fleet;
use metalform::observe::{self, MaasClients, SiteFilter, SiteObservation};
use metalform::plan::{self, PlanOptions, render};
use metalform::provider::maas::{MaasClientOptions, MaasMetrics, MachineSummary};
use metalform::secrets::{FileStore, SecretStore};
use metalform::sim::{self, FleetOptions, InitialState, SimConfig, SimHandle};
use metalform::source::FleetSource;
use metalform::store::Store;
use support::{Samples, benchmarking, ms};

/// One simulated MAAS per site whose machines are the site's nodes: the generator's hardware,
/// renamed to the fleet's hostnames and BMC addresses. They run on their own runtime (as a MAAS
/// is another server), sharing the machine's cores with what is measured.
async fn start_regions(fleet: &Fleet) -> BTreeMap<String, SimHandle> {
    let mut regions = BTreeMap::new();
    for (index, site) in fleet.sites.keys().enumerate() {
        let nodes: Vec<_> = fleet.nodes_of_site(site).collect();
        let mut config = SimConfig::generated(
            index as u64 + 1,
            &FleetOptions {
                machines: nodes.len(),
                initial: InitialState::Ready,
                no_boss_every: 0,
                unknown: 0,
            },
        );
        for (machine, node) in config.machines.iter_mut().zip(&nodes) {
            machine.hostname = Some(node.id.hostname.to_string());
            machine.bmc_ip = Some(node.bmc.ipmi_ip.to_string());
        }
        let handle = SIM_RUNTIME
            .spawn(sim::start(config))
            .await
            .expect("the simulator task runs")
            .expect("the simulator starts");
        regions.insert(site.to_string(), handle);
    }
    regions
}

/// The simulators' runtime.
static SIM_RUNTIME: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("simulated-maas")
        .enable_all()
        .build()
        .expect("a runtime for the simulators")
});

/// What the simulated regions alone take to serve every site's machines list at once (render
/// and send, no parsing): the part of observe that a real MAAS does on its own hardware.
async fn serving_floor(regions: &BTreeMap<String, SimHandle>) -> (Duration, Vec<bytes::Bytes>) {
    // OAuth nonces must never repeat within a timestamp (the simulator refuses a replay).
    static NONCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let http = reqwest::Client::new();
    let start = Instant::now();
    let bodies = futures::future::join_all(regions.values().enumerate().map(|(i, region)| {
        let http = http.clone();
        async move {
            let auth = sim::auth::sign_header(
                region.api_key().expose(),
                &format!(
                    "floor-{i}-{}",
                    NONCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                ),
                chrono::Utc::now().timestamp(),
            );
            let response = http
                .get(format!("{}api/2.0/machines/", region.maas_url))
                .header("Authorization", auth)
                .send()
                .await
                .expect("the simulator answers");
            assert_eq!(response.status(), 200);
            response.bytes().await.expect("a body")
        }
    }))
    .await;
    (start.elapsed(), bodies)
}

/// What the simulated regions have when a list comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renderings {
    /// None: every machine is rendered for the list (as after every machine changed, or on
    /// the first list after start-up).
    Anew,
    /// Each machine's rendering kept from the previous list (nothing changed since).
    Kept,
}

impl Renderings {
    fn describe(self) -> &'static str {
        match self {
            Renderings::Anew => "every machine rendered anew",
            Renderings::Kept => "renderings kept",
        }
    }

    fn prepare(self, regions: &BTreeMap<String, SimHandle>) {
        if self == Renderings::Anew {
            for region in regions.values() {
                region.with_world(|world| world.machines.forget_renderings());
            }
        }
    }
}

fn list_calls(region: &SimHandle) -> usize {
    region
        .ops()
        .iter()
        .filter(|op| op.action.as_deref() == Some("machines.read"))
        .count()
}

async fn run(shape: large_fleet::Shape, runs: usize) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = dir.path().join("fleet");
    large_fleet::generate(&root, shape).expect("the fleet is generated");
    let fleet = manifest::load_fleet(&FleetSource::Directory(root))
        .expect("the generated fleet is valid")
        .fleet;

    let started = Instant::now();
    let regions = start_regions(&fleet).await;
    println!(
        "fleet: {} nodes over {} sites; {} simulated MAAS regions with {} machines in all (started in {:.0} ms)",
        fleet.nodes.len(),
        fleet.sites.len(),
        regions.len(),
        fleet.nodes.len(),
        ms(started.elapsed())
    );

    // The fleet's MAAS URLs are production addresses: point each site at its simulator, and
    // give every site's API-key reference the simulator's key.
    let mut secrets: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (name, site) in &fleet.sites {
        let region = &regions[name.as_str()];
        secrets.insert(
            site.maas.api_key.path.clone(),
            BTreeMap::from([(
                site.maas.api_key.key.clone().unwrap_or_default(),
                region.api_key().expose().to_owned(),
            )]),
        );
    }
    let secrets_path = dir.path().join("secrets.json");
    std::fs::write(&secrets_path, serde_json::to_string(&secrets).unwrap()).unwrap();
    let secrets = FileStore::new(&secrets_path);
    let store = Store::open(
        &format!("sqlite://{}", dir.path().join("state.db").display()),
        Arc::new(SystemClock),
    )
    .await
    .expect("the store opens");

    let mut medians = Vec::new();
    let mut last = None;
    for renderings in [Renderings::Anew, Renderings::Kept] {
        println!("observe + plan, {runs} run(s), {}:", renderings.describe());
        let (mut observe_times, mut plan_times, mut totals) = (Vec::new(), Vec::new(), Vec::new());
        let mut requests = BTreeMap::new();
        for run in 0..runs {
            renderings.prepare(&regions);
            let metrics = MaasMetrics::new();
            let mut clients = MaasClients::new(MaasClientOptions {
                metrics: metrics.clone(),
                ..MaasClientOptions::default()
            });
            for name in fleet.sites.keys() {
                clients =
                    clients.with_endpoint(name.clone(), regions[name.as_str()].maas_url.clone());
            }
            let lists_before: Vec<usize> = regions.values().map(list_calls).collect();

            let start = Instant::now();
            let snapshot = observe::observe(
                &fleet,
                &SiteFilter::All,
                &store,
                &secrets as &dyn SecretStore,
                &clients,
            )
            .await
            .expect("observed");
            let observed = start.elapsed();
            let plan = plan::plan(&fleet, &snapshot, &PlanOptions::default());
            let total = start.elapsed();

            // Behaviour, asserted: every site read, every node onboarded, one list per site.
            for (site, observation) in &snapshot.sites {
                assert!(
                    matches!(observation, SiteObservation::Readable { .. }),
                    "{site}: {observation:?}"
                );
            }
            assert_eq!(
                plan.summary.onboard,
                fleet.nodes.len(),
                "{:?}",
                plan.summary
            );
            for (region, before) in regions.values().zip(lists_before) {
                assert_eq!(list_calls(region) - before, 1, "one machines list per site");
            }
            assert_eq!(
                metrics.operation_total("list_machines"),
                fleet.sites.len() as u64
            );
            println!(
                "  run {}: observe {:>7.1} ms + plan {:>6.1} ms = {:>7.1} ms; {} MAAS requests",
                run + 1,
                ms(observed),
                ms(total - observed),
                ms(total),
                metrics.total()
            );
            observe_times.push(observed);
            plan_times.push(total - observed);
            totals.push(total);
            requests = metrics
                .snapshot()
                .into_iter()
                .map(|((op, status), n)| (format!("{op} {status}"), n))
                .collect();
            last = Some(plan);
        }
        println!(
            "  observe         {}",
            Samples::from(observe_times).summary()
        );
        println!("  plan            {}", Samples::from(plan_times).summary());
        println!(
            "  observe + plan  {}",
            Samples::from(totals.clone()).summary()
        );
        println!(
            "  MAAS requests per observe: {} in all ({})",
            requests.values().sum::<u64>(),
            requests
                .iter()
                .map(|(k, n)| format!("{k}: {n}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        totals.sort();
        medians.push((renderings, totals[totals.len() / 2]));
    }
    let plan = last.expect("at least one run");
    let per_site: Vec<String> = regions
        .iter()
        .map(|(site, region)| format!("{site} {}", list_calls(region) / (2 * runs)))
        .collect();
    println!(
        "machines lists per site and observe: {}",
        per_site.join(", ")
    );

    for renderings in [Renderings::Anew, Renderings::Kept] {
        let (mut floors, mut parses) = (Vec::new(), Vec::new());
        let mut bytes = 0;
        for _ in 0..runs {
            renderings.prepare(&regions);
            let (floor, bodies) = serving_floor(&regions).await;
            floors.push(floor);
            bytes = bodies.iter().map(|b| b.len()).sum::<usize>();
            // The client's share of the same lists: decoding them as machine summaries, one
            // thread, from whole bodies.
            let start = Instant::now();
            for body in &bodies {
                let machines: Vec<MachineSummary> =
                    serde_json::from_slice(body).expect("a machines list");
                assert!(!machines.is_empty());
            }
            parses.push(start.elapsed());
        }
        println!(
            "simulated MAAS alone, all sites' lists at once ({}; send, no decoding; {:.0} MB): {}",
            renderings.describe(),
            bytes as f64 / 1e6,
            Samples::from(floors).summary()
        );
        if renderings == Renderings::Kept {
            println!(
                "decoding those lists as machine summaries (one thread): {}",
                Samples::from(parses).summary()
            );
        }
    }

    let start = Instant::now();
    let text = render::render_text(&plan, render::TextOptions::default());
    let rendered = start.elapsed();
    let path = dir.path().join("plan.json");
    let start = Instant::now();
    plan::save(&plan, &path).expect("the plan file is written");
    let saved = start.elapsed();
    let start = Instant::now();
    let back = plan::load(&path).expect("the plan file reads back");
    let loaded = start.elapsed();
    assert_eq!(back.id, plan.id);
    println!(
        "render text {:.1} ms ({:.1} MB); plan file: write {:.1} ms, read + verify {:.1} ms, {:.1} MB",
        ms(rendered),
        text.len() as f64 / 1e6,
        ms(saved),
        ms(loaded),
        std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) as f64 / 1e6
    );
    if benchmarking() {
        let met = medians.iter().all(|(_, m)| *m < Duration::from_secs(1));
        println!(
            "goals: observe + plan < 1 s: {} (median {}); at most one machines list per site: yes",
            if met { "met" } else { "NOT met" },
            medians
                .iter()
                .map(|(r, m)| format!("{:.0} ms with {}", ms(*m), r.describe()))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    store.close().await;
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("metalform")
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        if benchmarking() {
            run(large_fleet::Shape::default(), 5).await;
        } else {
            println!("smoke run (cargo test): a small fleet, one run; figures are not meaningful");
            run(
                large_fleet::Shape {
                    nodes: 500,
                    sites: 5,
                    groups: 10,
                },
                1,
            )
            .await;
        }
    });
}
