//! Benchmark: listing machines from the simulator with a raw HTTP client (issue 3 "listing
//! 2,000 machines is fast"), plus start-up and lookups in a 10,000-machine region.
//!
//! `cargo bench --bench sim_list` prints the figures. Under `cargo test --all-targets` (no
//! `--bench` argument) it runs a small smoke pass so the suite stays fast.

use std::time::{Duration, Instant};

use metalform::sim::{self, FleetOptions, InitialState, SimConfig};

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
    nonce: u64,
}

impl Client {
    async fn get(&mut self, url: &str) -> (u16, usize) {
        self.nonce += 1;
        let auth = sim::auth::sign_header(
            &self.key,
            &format!("b{}", self.nonce),
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

fn summary(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    let p = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (p(0.0), p(0.5), p(0.95))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn list(machines: usize, iterations: usize) {
    let started = Instant::now();
    let handle = sim::start(config(machines)).await.unwrap();
    let startup = started.elapsed();
    let mut client = Client {
        http: reqwest::Client::new(),
        key: handle.api_key().expose().to_string(),
        nonce: 0,
    };
    let url = format!("{}api/2.0/machines/", handle.maas_url);
    let (_, warm) = client.get(&url).await;
    let mut samples = Vec::new();
    let mut bytes = 0;
    for _ in 0..iterations {
        let t = Instant::now();
        let (status, len) = client.get(&url).await;
        samples.push(t.elapsed());
        assert_eq!(status, 200);
        bytes = len;
    }
    assert_eq!(bytes, warm);
    let (min, median, p95) = summary(samples);
    println!(
        "list {machines:>6} machines: start-up {:>7.1} ms | GET machines/ min {:>7.1} ms, median {:>7.1} ms, p95 {:>7.1} ms | {:.1} MiB/answer, {:.0} MiB/s",
        ms(startup),
        ms(min),
        ms(median),
        ms(p95),
        bytes as f64 / 1048576.0,
        bytes as f64 / 1048576.0 / median.as_secs_f64()
    );
    let one = format!("{url}?hostname=gpu{:05}", machines / 2);
    let mut samples = Vec::new();
    for _ in 0..iterations {
        let t = Instant::now();
        let (status, _) = client.get(&one).await;
        assert_eq!(status, 200);
        samples.push(t.elapsed());
    }
    let (_, median, p95) = summary(samples);
    println!(
        "             filter hostname=… (1 of {machines}): median {:>6.2} ms, p95 {:>6.2} ms",
        ms(median),
        ms(p95)
    );
    handle.shutdown();
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        if bench {
            list(2_000, 20).await;
            list(10_000, 5).await;
        } else {
            list(50, 2).await;
        }
    });
}
