//! openapi.yaml against the running daemon (issue 19): schemathesis from PyPI
//! (scripts/services/53-schemathesis.sh exports METALFORM_SCHEMATHESIS) drives every documented
//! operation of a `metalform daemon` process — two nodes converged on the simulator, so jobs,
//! nodes, a plan and audit rows exist — with every check and 10 examples per operation, and
//! validates each answer (status code, content type, headers, body schema) against the
//! document. The document's links let it follow a list to the items it names.
#![cfg(feature = "services")]

mod daemon_support;
mod onboard_support;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use daemon_support::{ADMIN_TOKEN, DaemonBed, call, one_site, signal};
use onboard_support::hostname_of;

fn schemathesis() -> PathBuf {
    PathBuf::from(std::env::var("METALFORM_SCHEMATHESIS").expect(
        "METALFORM_SCHEMATHESIS is not set: run scripts/test-all, or source scripts/services/53-schemathesis.sh",
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_operation_answers_as_the_document_says() {
    let setup = one_site(73, vec![0, 1]);
    let config = setup.sites[0].config.clone();
    let bed = DaemonBed::start(setup, "").await;
    let listen = bed.listen_on_free_port();
    let base = format!("http://{listen}");
    let log = bed.bed.dir.path().join("daemon.log");
    let mut daemon = bed.spawn(&log);
    let hosts: Vec<String> = (0..2).map(|i| hostname_of(&config, i)).collect();
    bed.converged_hosts("dc1", &hosts, Duration::from_secs(120))
        .await;
    // A node list with ids to follow, a plan, and audit rows to query.
    let (status, nodes) = call(
        reqwest::Method::GET,
        format!("{base}/api/v1/admin/nodes?site=dc1"),
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    assert_eq!(status, 200, "{nodes}");
    assert_eq!(nodes["nodes"].as_array().unwrap().len(), 2, "{nodes}");
    // A decommission (a soft reset between tenants), so its routes have a job to act on.
    let node = nodes["nodes"][1]["node_id"].as_str().unwrap();
    let (status, body) = call(
        reqwest::Method::POST,
        format!("{base}/api/v1/admin/nodes/{node}/soft-reset"),
        Some(ADMIN_TOKEN),
        Some(serde_json::json!({"reason": "tenant turnover before the contract run"})),
    )
    .await;
    assert_eq!(status, 202, "{body}");

    let schemathesis = schemathesis();
    // schemathesis keeps a cache in its working directory: the test's, not the repository.
    let workdir = bed.bed.dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(schemathesis)
            .current_dir(workdir)
            .arg("--config-file")
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis.toml"))
            .args(["--no-color", "run"])
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("openapi.yaml"))
            .args(["--url", &base])
            .args(["-H", &format!("Authorization: Bearer {ADMIN_TOKEN}")])
            .args(["--checks", "all", "--max-examples", "10", "--seed", "19"])
            .args(["--workers", "1", "--request-timeout", "20"])
            .output()
            .expect("schemathesis runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    signal(&daemon, "TERM");
    let _ = daemon.wait();
    assert!(
        out.status.success(),
        "schemathesis found the daemon and openapi.yaml disagreeing:\n{stdout}\n{}\n--- daemon log ---\n{}",
        String::from_utf8_lossy(&out.stderr),
        tail(&std::fs::read_to_string(&log).unwrap_or_default(), 40)
    );
    // Every documented operation was tested, and none failed.
    let documented = documented_operations();
    assert!(
        stdout.contains(&format!("Selected: {documented}/{documented}"))
            && stdout.contains(&format!("Tested: {documented}\n")),
        "schemathesis did not test all {documented} operations:\n{stdout}"
    );
    assert!(
        !stdout.contains("FAILURES") && !stdout.contains("Failures:"),
        "schemathesis summary:\n{stdout}"
    );
    // The run's summary, for `cargo test -- --nocapture`.
    eprintln!("{stdout}");
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// How many operations openapi.yaml documents (methods under its paths).
fn documented_operations() -> usize {
    use saphyr::{LoadableYamlNode, Yaml};
    let docs = Yaml::load_from_str(metalform::api::OPENAPI_YAML).unwrap();
    docs[0]
        .as_mapping_get("paths")
        .and_then(|p| p.as_mapping())
        .unwrap()
        .values()
        .map(|item| item.as_mapping().unwrap().len())
        .sum()
}
