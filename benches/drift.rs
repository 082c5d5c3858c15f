//! Benchmark of the drift pass (seed 000 §6.3–§6.5): one site of N active nodes, each bound to
//! a Deployed machine of a simulated MAAS, on SQLite. Every pass lists the site's machines once
//! and writes one transaction per node (its `node_maas_state` record), so its cost grows with
//! the node count; this measures how much, and how much of it is the list.
//!
//! `cargo bench --bench drift` prints, per run and as min/median/max: the whole pass, the site's
//! machines list alone (`observe_site`), and the per-node cost of the rest. N comes from
//! `METALFORM_BENCH_DRIFT_NODES` (default 300: the nodes are onboarded first, through the
//! executor and the simulator, which takes a while). The findings are asserted (every node
//! `ok`, nothing acted on): they are behaviour; timings are printed, never asserted. Under
//! `cargo test --all-targets` it runs once on 8 nodes as a smoke test of the benchmark.

#[path = "../tests/onboard_support/mod.rs"]
mod onboard_support;

#[path = "../tests/drift_support/mod.rs"]
mod drift_support;

use std::time::{Duration, Instant};

use metalform::drift::DriftPolicy;
use metalform::model::SiteName;

fn measuring() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn stats(mut samples: Vec<Duration>) -> String {
    samples.sort();
    format!(
        "min {:>8.1} ms  median {:>8.1} ms  max {:>8.1} ms",
        ms(samples[0]),
        ms(samples[samples.len() / 2]),
        ms(samples[samples.len() - 1])
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let nodes: usize = if measuring() {
        std::env::var("METALFORM_BENCH_DRIFT_NODES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(300)
    } else {
        8
    };
    let runs = if measuring() { 5 } else { 1 };
    let started = Instant::now();
    let bed = drift_support::active_site(nodes, 0).await;
    println!(
        "{nodes} nodes onboarded to active in {:.1} s (setup, not measured)",
        started.elapsed().as_secs_f64()
    );
    let env = drift_support::drift_env(&bed, bed.store.clone(), DriftPolicy::default());
    let site = &bed.fleet.sites[&SiteName::new("dc1")];

    let (mut passes, mut lists) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let start = Instant::now();
        let observation =
            metalform::observe::observe_site(site, bed.secrets.as_ref(), &env.maas).await;
        let list = start.elapsed();
        assert!(
            matches!(
                observation,
                metalform::observe::SiteObservation::Readable { .. }
            ),
            "the site is readable"
        );

        let start = Instant::now();
        let report = metalform::drift::reconcile_site(&env, site, None)
            .await
            .expect("drift pass");
        let pass = start.elapsed();
        assert_eq!(report.findings.len(), nodes, "one finding per node");
        assert_eq!(
            report.by_rule.get("deployed_active").copied(),
            Some(nodes),
            "every node is as MAAS says: {:?}",
            report.by_rule
        );
        assert_eq!(report.taken().count(), 0, "nothing to act on");
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        println!(
            "run {run}: pass {:>8.1} ms  (list {:>7.1} ms, the rest {:>6.0} µs per node)",
            ms(pass),
            ms(list),
            (pass.saturating_sub(list)).as_secs_f64() * 1e6 / nodes as f64
        );
        passes.push(pass);
        lists.push(list);
    }
    println!("drift pass ({nodes} nodes): {}", stats(passes));
    println!("machines list alone:      {}", stats(lists));
}
