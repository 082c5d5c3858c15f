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
    // The agent channel in plain HTTP, so schemathesis reaches its listener too.
    bed.set_agent("listen = \"127.0.0.1:0\"\nplain_http = true");
    let listen = bed.listen_on_free_port();
    let base = format!("http://{listen}");
    let agent_base = format!("http://{}", agent_listen(&bed));
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

    // The admin listener serves everything but the agent channel's paths, which its own
    // listener serves: one schemathesis run against each.
    // The Redfish provisioner's routes answer 503 on a daemon without a [provisioner] table,
    // as this one is: tests/redfish_provisioning*.rs drive them on a configured controller.
    let admin = run_schemathesis(
        &bed,
        &base,
        "--exclude-path-regex",
        &format!("^/agent/|{PROVISIONER_PATHS}"),
    )
    .await;
    let agent = run_schemathesis(&bed, &agent_base, "--include-path-regex", "^/agent/").await;
    signal(&daemon, "TERM");
    let _ = daemon.wait();
    let daemon_log = tail(&std::fs::read_to_string(&log).unwrap_or_default(), 40);
    let documented = documented_operations();
    let agent_operations = operations_under("^/agent/");
    let provisioner_operations = operations_under(PROVISIONER_PATHS);
    for (run, stdout, expected) in [
        (
            &admin,
            &admin.0,
            documented - agent_operations - provisioner_operations,
        ),
        (&agent, &agent.0, agent_operations),
    ] {
        assert!(
            run.1,
            "schemathesis found the daemon and openapi.yaml disagreeing:\n{stdout}\n{}\n--- daemon log ---\n{daemon_log}",
            run.2
        );
        // Every documented operation of the listener was tested, and none failed.
        assert!(
            stdout.contains(&format!("Selected: {expected}/{documented}"))
                && stdout.contains(&format!("Tested: {expected}\n")),
            "schemathesis did not test the {expected} operations of this listener:\n{stdout}"
        );
        assert!(
            !stdout.contains("FAILURES") && !stdout.contains("Failures:"),
            "schemathesis summary:\n{stdout}"
        );
    }
    // The run's summary, for `cargo test -- --nocapture`.
    eprintln!("{}\n{}", admin.0, agent.0);
}

/// The Redfish provisioner's paths (a regular expression).
const PROVISIONER_PATHS: &str =
    "^/api/v1/jobs|^/api/v1/status-webhook/|^/media/tasks/|^/api/v1/admin/provisionings";

/// schemathesis over the operations whose path `filter` (`--include-path-regex` or
/// `--exclude-path-regex`) selects with `regex`, against `base`: (stdout, success, stderr).
async fn run_schemathesis(
    bed: &DaemonBed,
    base: &str,
    filter: &str,
    regex: &str,
) -> (String, bool, String) {
    let schemathesis = schemathesis();
    // schemathesis keeps a cache in its working directory: the test's, not the repository.
    let workdir = bed.bed.dir.path().to_path_buf();
    let (base, filter, regex) = (base.to_owned(), filter.to_owned(), regex.to_owned());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(schemathesis)
            .current_dir(workdir)
            .arg("--config-file")
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis.toml"))
            .args(["--no-color", "run"])
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("openapi.yaml"))
            .args(["--url", &base])
            .args([filter.as_str(), regex.as_str()])
            .args(["-H", &format!("Authorization: Bearer {ADMIN_TOKEN}")])
            .args(["--checks", "all", "--max-examples", "10", "--seed", "19"])
            .args(["--workers", "1", "--request-timeout", "20"])
            .output()
            .expect("schemathesis runs")
    })
    .await
    .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The agent channel's listen address, as `listen_on_free_port` wrote it into the config.
fn agent_listen(bed: &DaemonBed) -> String {
    let text = std::fs::read_to_string(&bed.config_path).unwrap();
    let agent = &text[text.find("[agent]").expect("an [agent] table")..];
    let start = agent.find("listen = \"").unwrap() + "listen = \"".len();
    agent[start..start + agent[start..].find('"').unwrap()].to_owned()
}

/// How many operations openapi.yaml documents under the paths `regex` matches.
fn operations_under(regex: &str) -> usize {
    let regex = regex::Regex::new(regex).unwrap();
    use saphyr::{LoadableYamlNode, Yaml};
    let docs = Yaml::load_from_str(metalform::api::OPENAPI_YAML).unwrap();
    let paths = docs[0]
        .as_mapping_get("paths")
        .and_then(|p| p.as_mapping())
        .unwrap();
    paths
        .iter()
        .filter(|(path, _)| path.as_str().is_some_and(|p| regex.is_match(p)))
        .map(|(_, item)| item.as_mapping().unwrap().len())
        .sum()
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
