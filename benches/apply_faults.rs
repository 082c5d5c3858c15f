//! Benchmark of an apply pass under MAAS faults (issue 16 point 7): N nodes of one simulated
//! site onboarded by the executor while about one MAAS request in ten fails transiently (503)
//! and a few requests hang (never answered). What a hang costs is the attempt timeout of the
//! request that hung; this compares, in one run:
//!
//! * `fault-free`: the same fleet without faults (the floor);
//! * `faults, one timeout`: every attempt timed like a listing (the client's 90 s whole-request
//!   timeout) — how the client timed every request before per-operation timeouts;
//! * `faults, per operation`: reads of one object abandoned after `read_timeout` and retried,
//!   writes after `write_timeout`, listings after the whole-request timeout (the default).
//!
//! `cargo bench --bench apply_faults [-- --machines N --against SPEC]` prints the wall time of
//! each pass, how many nodes converged and whether any machine was deployed twice. Converged
//! and duplicated are asserted (they are behaviour); times are printed, never asserted. Under
//! `cargo test --all-targets` it runs once on 4 nodes, without hangs, as a smoke test.

#[path = "../tests/onboard_support/mod.rs"]
mod onboard_support;

mod support;

use std::sync::Arc;
use std::time::Duration;

use metalform::apply::{Executor, SiteMaas};
use metalform::observe::MaasClients;
use metalform::provider::maas::{MaasClientOptions, RetryPolicy};
use onboard_support::{Bed, Setup, SiteSetup};
use support::{Args, timed};

/// ~10% of requests answer 503 without Retry-After; four requests never answer.
const FAULTS: &str = "*:status=503,rate=0.1; *:hang,count=4";
/// The smoke run: no hangs (each would cost a real timeout).
const SMOKE_FAULTS: &str = "*:status=503,rate=0.1";

struct Pass {
    name: &'static str,
    elapsed: Duration,
    converged: usize,
    nodes: usize,
    deployed_twice: usize,
}

async fn pass(name: &'static str, nodes: usize, faults: &str, policy: RetryPolicy) -> Pass {
    let site = SiteSetup::generated("dc1", 42, nodes, 0).faults(faults);
    let mut setup = Setup::one_site(site);
    setup.max_parallel = 10;
    let bed = Bed::start(setup).await;
    let mut env = bed.env();
    let options = MaasClientOptions {
        metrics: bed.metrics.clone(),
        retry: policy,
        ..MaasClientOptions::default()
    };
    env.maas = Arc::new(SiteMaas::new(
        bed.secrets.clone(),
        MaasClients::new(options),
    ));
    let executor = Executor::new(env, Bed::options(), bed.progress.clone());
    let (elapsed, report) = timed(executor.run(bed.onboard_all())).await;
    let deployed_twice = bed.deploys("dc1").values().filter(|d| **d > 1).count();
    Pass {
        name,
        elapsed,
        converged: report.converged(),
        nodes,
        deployed_twice,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse((50, 1), (4, 1));
    let faults = args.against.clone().unwrap_or_else(|| {
        if args.benchmarking {
            FAULTS.to_owned()
        } else {
            SMOKE_FAULTS.to_owned()
        }
    });
    // The executor's own pacing is the test bed's; only the MAAS client's policy differs.
    let fast = RetryPolicy {
        base_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(500),
        ..RetryPolicy::default()
    };
    let whole = MaasClientOptions::default().timeout;
    let one_timeout = RetryPolicy {
        read_timeout: whole,
        write_timeout: whole,
        ..fast
    };
    println!(
        "apply pass of {} nodes (one site, 10 in parallel); faults: {faults}",
        args.machines
    );
    let mut passes = vec![pass("fault-free", args.machines, "", fast).await];
    if args.benchmarking {
        passes.push(pass("faults, one timeout", args.machines, &faults, one_timeout).await);
    }
    passes.push(pass("faults, per operation", args.machines, &faults, fast).await);
    for p in &passes {
        println!(
            "{:<24} {:>7.1} s   {}/{} converged, {} deployed twice",
            p.name,
            p.elapsed.as_secs_f64(),
            p.converged,
            p.nodes,
            p.deployed_twice
        );
    }
    for p in &passes {
        assert_eq!(p.converged, p.nodes, "{}: every node converges", p.name);
        assert_eq!(p.deployed_twice, 0, "{}: no machine deployed twice", p.name);
    }
}
