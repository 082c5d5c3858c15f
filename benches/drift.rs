//! Benchmark of the drift pass (seed 000 §6.3–§6.5): one site of N active nodes, each bound to
//! a Deployed machine of a simulated MAAS, on SQLite. Every pass lists the site's machines once
//! and writes one transaction per node (its `node_maas_state` record), so its cost grows with
//! the node count; this measures how much, and how much of it is the list.
//!
//! `cargo bench --bench drift [-- --machines N --runs R]` prints, per run and as a summary: the
//! whole pass, the site's machines list alone (`observe_site`), and the per-node cost of the
//! rest. N defaults to 300 (the nodes are onboarded first, through the executor and the
//! simulator, which takes a while: ~2 minutes for 1,000). The findings are asserted (every node
//! `ok`, nothing acted on): they are behaviour; timings are printed, never asserted. Under
//! `cargo test --all-targets` it runs once on 8 nodes as a smoke test of the benchmark.

#[path = "../tests/onboard_support/mod.rs"]
mod onboard_support;

#[path = "../tests/drift_support/mod.rs"]
mod drift_support;

mod support;

use std::time::Instant;

use metalform::drift::DriftPolicy;
use metalform::model::SiteName;
use support::{Args, Samples, ms};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse((300, 5), (8, 1));
    let (nodes, runs) = (args.machines, args.runs);
    let started = Instant::now();
    let bed = drift_support::active_site(nodes, 0).await;
    println!(
        "{nodes} nodes onboarded to active in {:.1} s (setup, not measured)",
        started.elapsed().as_secs_f64()
    );
    let env = drift_support::drift_env(&bed, bed.store.clone(), DriftPolicy::default());
    let site = &bed.fleet.sites[&SiteName::new("dc1")];

    let (mut passes, mut lists) = (Samples::default(), Samples::default());
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
    println!("drift pass ({nodes} nodes): {}", passes.summary());
    println!("machines list alone:      {}", lists.summary());
}
