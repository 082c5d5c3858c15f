//! MAAS client benchmark: list N machines through `MaasClient::list_machines` (issue 3,
//! "listing 2,000 machines"). Prints figures; asserts nothing about time.
//!
//! Without arguments it serves N copies of a real machine capture
//! (tests/fixtures/maas/yorc__all_test_data__machineDeployed.json, distinct system_ids and
//! hostnames) from a loopback HTTP server, so the figure is the client's own cost: transport,
//! OAuth signing and decoding MAAS's JSON into typed machines. Pointed at a MAAS (or the
//! simulator) it measures that MAAS instead:
//!
//! ```sh
//! cargo bench --bench maas_client                       # 2,000 machines, 10 runs
//! cargo bench --bench maas_client -- --machines 10000 --runs 5
//! METALFORM_BENCH_MAAS_URL=http://127.0.0.1:5240/MAAS METALFORM_BENCH_MAAS_KEY=ck:tk:ts \
//!     cargo bench --bench maas_client
//! ```

use std::time::{Duration, Instant};

use metalform::provider::maas::{MaasClient, MaasClientOptions, MachineFilter};
use metalform::secrets::Secret;

struct Args {
    machines: usize,
    runs: usize,
}

fn parse_args() -> Args {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary without it,
    // and then a small smoke run keeps the benchmark working without costing the test suite.
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    let mut args = if benchmarking {
        Args {
            machines: 2000,
            runs: 10,
        }
    } else {
        Args {
            machines: 20,
            runs: 1,
        }
    };
    let mut iter = std::env::args().skip(1);
    while let Some(arg) = iter.next() {
        let mut value = |name: &str| -> usize {
            iter.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} needs a number"))
        };
        match arg.as_str() {
            "--machines" => args.machines = value("--machines"),
            "--runs" => args.runs = value("--runs"),
            // --bench, or a name filter: nothing to do.
            _ => {}
        }
    }
    args
}

/// A JSON array of `n` machines derived from one real capture.
fn machines_document(n: usize) -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/maas/yorc__all_test_data__machineDeployed.json"
    );
    let template: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON");
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
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde::Serialize::serialize(&machines, &mut serializer).expect("serialise");
    String::from_utf8(out).expect("utf-8")
}

async fn local_maas(body: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { ([("content-type", "application/json; charset=utf-8")], body) }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    format!("http://{addr}/MAAS")
}

#[tokio::main]
async fn main() {
    let args = parse_args();
    let (base_url, key, source) = match std::env::var("METALFORM_BENCH_MAAS_URL") {
        Ok(url) => {
            let key = std::env::var("METALFORM_BENCH_MAAS_KEY")
                .expect("METALFORM_BENCH_MAAS_KEY (consumer:token:secret) with the URL");
            (url.clone(), key, url)
        }
        Err(_) => {
            let document = machines_document(args.machines);
            let size = document.len();
            let url = local_maas(document).await;
            (
                url,
                "bench:bench:bench".to_owned(),
                format!(
                    "loopback stand-in serving {} machines ({:.1} MB of JSON)",
                    args.machines,
                    size as f64 / 1e6
                ),
            )
        }
    };
    let client =
        MaasClient::new(&base_url, Secret::new(key), MaasClientOptions::default()).expect("client");

    println!("maas_client list_machines — {source}");
    let mut times: Vec<Duration> = Vec::with_capacity(args.runs);
    let mut listed = 0;
    let expected = std::env::var("METALFORM_BENCH_MAAS_URL")
        .is_err()
        .then_some(args.machines);
    for _ in 0..args.runs {
        let started = Instant::now();
        let machines = client
            .list_machines(&MachineFilter::all())
            .await
            .expect("list_machines");
        times.push(started.elapsed());
        listed = machines.len();
        if let Some(expected) = expected {
            assert_eq!(listed, expected, "every served machine is listed");
        }
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "  machines per list: {listed}\n  runs: {}\n  min {:.1} ms, median {:.1} ms, max {:.1} ms\n  \
         requests counted: {}",
        times.len(),
        ms(times[0]),
        ms(times[times.len() / 2]),
        ms(times[times.len() - 1]),
        client.metrics().total(),
    );
}
