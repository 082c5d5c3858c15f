//! MAAS client benchmark: list N machines through `MaasClient::list_machines` (issue 3,
//! "listing 2,000 machines from the simulator through the client"). Prints figures; asserts
//! nothing about time.
//!
//! Two targets, both on loopback:
//! * `sim` — metalform's embedded MAAS simulator with N generated machines: the whole path a
//!   reconcile pays (simulator rendering MAAS's JSON, HTTP, OAuth, the client decoding it into
//!   typed machines);
//! * `stand-in` — a bare HTTP server serving N copies of a real machine capture
//!   (tests/fixtures/maas/yorc__all_test_data__machineDeployed.json), so the figure is the
//!   client's own cost; then the same capture alone, read as one machine (`read_machine`) whole
//!   and as a summary, as the stages re-read their machine.
//!
//! Pointed at a MAAS with `METALFORM_BENCH_MAAS_URL` and `METALFORM_BENCH_MAAS_KEY`, it
//! measures that MAAS instead.
//!
//! ```sh
//! cargo bench --bench maas_client                          # both targets, 2,000 machines
//! cargo bench --bench maas_client -- --against sim --machines 10000 --runs 5
//! METALFORM_BENCH_MAAS_URL=https://10.0.0.1:5443/MAAS METALFORM_BENCH_MAAS_KEY=CONSUMER:TOKEN_KEY:TOKEN_SECRET \
//!     cargo bench --bench maas_client
//! ```

mod support;

use metalform::provider::maas::{MaasClient, MaasClientOptions, MachineFilter};
use metalform::secrets::Secret;
use metalform::sim::{self, FleetOptions, InitialState, SimConfig};
use support::{Args, Samples, ms, timed};

/// The real machine capture the stand-in serves.
fn captured_machine() -> serde_json::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/maas/yorc__all_test_data__machineDeployed.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON")
}

/// A JSON array of `n` machines derived from one real capture.
fn machines_document(n: usize) -> String {
    let template = captured_machine();
    let machines: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            let mut machine = template.clone();
            machine["system_id"] = format!("m{i:05}").into();
            machine["hostname"] = format!("gpu-{i:05}").into();
            machine["fqdn"] = format!("gpu-{i:05}.maas").into();
            machine
        })
        .collect();
    // MAAS (piston) pretty-prints with indent=4; so does this stand-in.
    String::from_utf8(sim::reply::to_piston_json(&machines)).expect("utf-8")
}

/// A client of a loopback stand-in that answers every request with `body`.
async fn stand_in(body: String) -> MaasClient {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { ([("content-type", "application/json; charset=utf-8")], body) }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    MaasClient::new(
        &format!("http://{addr}/MAAS"),
        Secret::new("bench-consumer:bench-token-key:bench-token-secret"),
        MaasClientOptions::default(),
    )
    .expect("client")
}

/// Lists every machine `runs` times after one warm-up call and prints the figures.
async fn measure(label: &str, client: &MaasClient, runs: usize, expected: Option<usize>) {
    let list = || async {
        client
            .list_machines(&MachineFilter::all())
            .await
            .expect("list_machines")
            .len()
    };
    let (first, _) = timed(list()).await;
    let (samples, listed) = Samples::measure(runs, list).await;
    if let Some(expected) = expected {
        assert_eq!(listed, expected, "every machine is listed");
    }
    println!(
        "{label}: {listed} machines per list | first call {:.1} ms | {} | {:.0} machines/s (median) | {} requests",
        ms(first),
        samples.summary(),
        listed as f64 / samples.median().as_secs_f64(),
        client.metrics().total(),
    );
}

/// One machine read (`GET machines/{id}/`) as a stage reads it: whole, or as a summary (its
/// interfaces' links, disks and the rest skipped while parsing), from a stand-in answering
/// every request with the same real capture. Each sample is 200 reads one after the other.
async fn single_reads(runs: usize) {
    let machine = captured_machine();
    let system_id = machine["system_id"].as_str().expect("system_id").to_owned();
    let body = String::from_utf8(sim::reply::to_piston_json(&machine)).expect("utf-8");
    let size = body.len();
    let client = stand_in(body).await;
    const READS: usize = 200;
    let (full, _) = Samples::measure(runs, || async {
        for _ in 0..READS {
            let read = client.read_machine(&system_id).await.expect("read_machine");
            assert_eq!(read.system_id, system_id);
        }
    })
    .await;
    let (summary, _) = Samples::measure(runs, || async {
        for _ in 0..READS {
            let read = client
                .read_machine_summary(&system_id)
                .await
                .expect("read_machine_summary");
            assert_eq!(read.system_id, system_id);
        }
    })
    .await;
    let per_read = |s: &Samples| s.median().as_secs_f64() * 1e6 / READS as f64;
    println!(
        "maas_client read_machine — loopback stand-in ({:.1} KB of captured JSON), {READS} reads per \
         sample | whole: {} ({:.0} µs per read, median) | summary: {} ({:.0} µs per read, median)",
        size as f64 / 1e3,
        full.summary(),
        per_read(&full),
        summary.summary(),
        per_read(&summary),
    );
}

#[tokio::main]
async fn main() {
    let args = Args::parse((2000, 10), (20, 1));
    if let Ok(url) = std::env::var("METALFORM_BENCH_MAAS_URL") {
        let key = std::env::var("METALFORM_BENCH_MAAS_KEY")
            .expect("METALFORM_BENCH_MAAS_KEY (consumer:token:secret) with the URL");
        let client =
            MaasClient::new(&url, Secret::new(key), MaasClientOptions::default()).expect("client");
        measure(
            &format!("maas_client list_machines — {url}"),
            &client,
            args.runs,
            None,
        )
        .await;
        return;
    }
    let against = args.against.as_deref().unwrap_or("both");
    if matches!(against, "sim" | "both") {
        let config = SimConfig::generated(
            1,
            &FleetOptions {
                machines: args.machines,
                initial: InitialState::Ready,
                no_boss_every: 0,
                unknown: 0,
            },
        );
        let (startup, handle) = timed(sim::start(config)).await;
        let handle = handle.expect("simulator starts");
        let client = MaasClient::new(
            &handle.maas_url,
            handle.api_key().clone(),
            MaasClientOptions::default(),
        )
        .expect("client");
        println!(
            "simulator with {} Ready machines started in {:.1} ms",
            args.machines,
            ms(startup)
        );
        measure(
            "maas_client list_machines — embedded simulator",
            &client,
            args.runs,
            Some(args.machines),
        )
        .await;
        handle.shutdown();
    }
    if matches!(against, "stand-in" | "both") {
        let document = machines_document(args.machines);
        let size = document.len();
        let client = stand_in(document).await;
        measure(
            &format!(
                "maas_client list_machines — loopback stand-in ({:.1} MB of captured JSON)",
                size as f64 / 1e6
            ),
            &client,
            args.runs,
            Some(args.machines),
        )
        .await;
        single_reads(args.runs).await;
    }
    if !matches!(against, "sim" | "stand-in" | "both") {
        panic!("--against takes sim, stand-in or both, not {against:?}");
    }
}
