//! Benchmark: listing machines from the simulator with a raw HTTP client (issue 3 "listing
//! 2,000 machines is fast"), plus start-up and lookups in a 10,000-machine region. Lists are
//! measured with every machine rendered anew and from the renderings the region keeps.
//!
//! `cargo bench --bench sim_list [-- --machines N --runs R]` prints the figures. Under
//! `cargo test --all-targets` (no `--bench` argument) it runs a small smoke pass so the suite
//! stays fast. The MAAS client's view of the same listing is `benches/maas_client.rs`.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};

use metalform::sim::{self, FleetOptions, InitialState, SimConfig};
use support::{Args, Samples, ms, timed};

fn config(machines: usize) -> SimConfig {
    SimConfig::generated(
        1,
        &FleetOptions {
            machines,
            initial: InitialState::Ready,
            no_boss_every: 0,
            unknown: 0,
        },
    )
}

struct Client {
    http: reqwest::Client,
    key: String,
    nonce: AtomicU64,
}

impl Client {
    async fn get(&self, url: &str) -> (u16, usize) {
        let nonce = self.nonce.fetch_add(1, Ordering::Relaxed);
        let auth = sim::auth::sign_header(
            &self.key,
            &format!("b{nonce}"),
            chrono::Utc::now().timestamp(),
        );
        let response = self
            .http
            .get(url)
            .header("Authorization", auth)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body = response.bytes().await.unwrap();
        (status, body.len())
    }
}

async fn list(machines: usize, runs: usize) {
    let (startup, handle) = timed(sim::start(config(machines))).await;
    let handle = handle.unwrap();
    let client = Client {
        http: reqwest::Client::new(),
        key: handle.api_key().expose().to_string(),
        nonce: AtomicU64::new(0),
    };
    let url = format!("{}api/2.0/machines/", handle.maas_url);
    let (first, (_, warm)) = timed(client.get(&url)).await;
    // The region keeps each machine's rendering between lists: measure lists that render
    // every machine anew (as after every machine changed) and lists from kept renderings.
    let (anew, _) = Samples::measure(runs, || {
        handle.with_world(|w| w.machines.forget_renderings());
        client.get(&url)
    })
    .await;
    let (samples, (status, bytes)) = Samples::measure(runs, || client.get(&url)).await;
    assert_eq!(status, 200);
    assert_eq!(bytes, warm);
    println!(
        "list {machines:>6} machines: start-up {:>7.1} ms | first GET machines/ {:.1} ms | {:.1} MiB/answer",
        ms(startup),
        ms(first),
        bytes as f64 / 1048576.0,
    );
    println!(
        "             every machine rendered anew: {} | {:.0} MiB/s",
        anew.summary(),
        bytes as f64 / 1048576.0 / anew.median().as_secs_f64()
    );
    println!(
        "             renderings kept:             {} | {:.0} MiB/s",
        samples.summary(),
        bytes as f64 / 1048576.0 / samples.median().as_secs_f64()
    );
    let one = format!("{url}?hostname=gpu{:05}", machines / 2);
    let (samples, (status, _)) = Samples::measure(runs, || client.get(&one)).await;
    assert_eq!(status, 200);
    println!(
        "             filter hostname=… (1 of {machines}): {}",
        samples.summary()
    );
    handle.shutdown();
}

fn main() {
    // Full run: 2,000 then 10,000 machines; `--machines N` measures one size.
    let args = Args::parse((2_000, 20), (50, 2));
    let explicit = std::env::args().any(|a| a == "--machines");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        list(args.machines, args.runs).await;
        if args.benchmarking && !explicit {
            list(10_000, 5).await;
        }
    });
}
