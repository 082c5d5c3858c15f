//! openapi.yaml against the running daemon (issue 19): schemathesis from PyPI
//! (scripts/services/53-schemathesis.sh exports METALFORM_SCHEMATHESIS) drives every documented
//! operation of a `metalform daemon` process — two nodes converged on the simulator, so jobs,
//! nodes, a plan and audit rows exist — with every check and 10 examples per operation, and
//! validates each answer (status code, content type, headers, body schema) against the
//! document. The document's links let it follow a list to the items it names. The daemon runs
//! the Redfish provisioner too (`[provisioner]`), with one server on a simulated BMC provisioned
//! through the jobs API to `complete` before the run, so the jobs API, the status webhook and
//! the task ISO route are driven like every other operation: across the two runs, every
//! documented operation is tested.
#![cfg(feature = "services")]

use crate::daemon_support;
use crate::onboard_support;
use crate::provisioning_support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use daemon_support::{ADMIN_TOKEN, DaemonBed, call, one_site, signal};
use metalform::secrets::{Secret, SecretRef};
use metalform::sim::redfish::{self as rsim, RedfishSimConfig, RedfishSimHandle, WebhookTarget};
use metalform::store::Server;
use onboard_support::hostname_of;
use provisioning_support::{MEDIA_KEY, WEBHOOK_SECRET, serve_maintenance_image};

fn schemathesis() -> PathBuf {
    PathBuf::from(std::env::var("METALFORM_SCHEMATHESIS").expect(
        "METALFORM_SCHEMATHESIS is not set: run scripts/test-all, or source scripts/services/53-schemathesis.sh",
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_operation_answers_as_the_document_says() {
    let setup = one_site(73, vec![0, 1]);
    let config = setup.sites[0].config.clone();
    let maintenance = serve_maintenance_image().await;
    let bed = DaemonBed::start(setup, &provisioner_table(&maintenance)).await;
    // The agent channel in plain HTTP, so schemathesis reaches its listener too.
    bed.set_agent("listen = \"127.0.0.1:0\"\nplain_http = true");
    let listen = bed.listen_on_free_port();
    let base = format!("http://{listen}");
    let agent_base = format!("http://{}", agent_listen(&bed));
    let log = bed.bed.dir.path().join("daemon.log");
    let bmcs = redfish_server(&bed, &base).await;
    let mut daemon = bed.spawn(&log);
    serving(&mut daemon, &base, &log).await;
    let hosts: Vec<String> = (0..2).map(|i| hostname_of(&config, i)).collect();
    bed.converged_hosts("dc1", &hosts, Duration::from_secs(120))
        .await;
    // A Redfish server's job, run by the daemon's workers to the end: a job to read, and its
    // task ISO on the admin listener.
    let job = provisioned(&base, &bmcs.bmcs[0].serial, &log).await;
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
    let node = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["hostname"] == hosts[1].as_str())
        .and_then(|n| n["node_id"].as_str())
        .unwrap_or_else(|| panic!("no {} in {nodes}", hosts[1]));
    let (status, body) = call(
        reqwest::Method::POST,
        format!("{base}/api/v1/admin/nodes/{node}/soft-reset"),
        Some(ADMIN_TOKEN),
        Some(serde_json::json!({"reason": "tenant turnover before the contract run"})),
    )
    .await;
    assert_eq!(status, 202, "{body}");

    // The admin listener serves everything but the agent channel's paths, which its own
    // listener serves: one schemathesis run against each, together every operation.
    let admin = run_schemathesis(&bed, &base, "--exclude-path-regex", "^/agent/").await;
    let agent = run_schemathesis(&bed, &agent_base, "--include-path-regex", "^/agent/").await;
    // The provisioner's job is still there and still complete: no generated request moved it.
    let (status, view) = call(
        reqwest::Method::GET,
        format!("{base}/api/v1/jobs/{job}"),
        Some(ADMIN_TOKEN),
        None,
    )
    .await;
    signal(&daemon, "TERM");
    let _ = daemon.wait();
    let daemon_log = tail(&std::fs::read_to_string(&log).unwrap_or_default(), 40);
    assert_eq!(
        (status, view["status"].as_str()),
        (200, Some("complete")),
        "{view}"
    );
    let documented = documented_operations();
    let agent_operations = operations_under("^/agent/");
    assert!(
        operations_under(PROVISIONER_PATHS) >= 7,
        "the provisioner's operations are documented"
    );
    for (run, stdout, expected) in [
        (&admin, &admin.0, documented - agent_operations),
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

/// The admin token's name in the daemon's configuration (its Basic auth user).
const ADMIN_TOKEN_NAME: &str = "ops-alice";

/// Where the BMC logins and the provisioner's secrets live in the dev secret file.
const BMC_CREDENTIALS: &str = "kv/contract/redfish-bmc";
const PROVISIONER_SECRETS: &str = "kv/contract/provisioner";

/// The daemon's `[provisioner]` table: CD1 at `maintenance`, the built-in ISO writer, timings
/// for BMCs simulated 100x faster than real ones, secrets by reference.
fn provisioner_table(maintenance: &str) -> String {
    format!(
        r#"
[provisioner]
maintenance_iso_url = "{maintenance}"
iso_builder = "builtin"
job_poll_interval = "50ms"
job_lease_ttl = "5s"
job_stuck_timeout = "2m"
job_cleanup_timeout = "30s"
redfish_timeout = "5s"
redfish_retries = 8
redfish_reset_grace = "5s"
redfish_settle_after_reset = "0"
webhook_secret = {{ vault = "{PROVISIONER_SECRETS}", key = "webhook_secret" }}
media_url_key = {{ vault = "{PROVISIONER_SECRETS}", key = "media_url_key" }}
"#
    )
}

/// One simulated BMC whose maintenance OS reports to the daemon at `base`, recorded as a
/// server of the provisioner, its login and the provisioner's secrets in the secret file.
async fn redfish_server(bed: &DaemonBed, base: &str) -> RedfishSimHandle {
    let mut config = RedfishSimConfig::generated(1, None);
    config.time_scale = 100.0;
    config.webhook = Some(WebhookTarget {
        base: url::Url::parse(&format!("{base}/")).unwrap(),
        secret: Secret::new(WEBHOOK_SECRET),
    });
    let sims = rsim::start(config).await.unwrap();
    bed.bed.put_secret(
        BMC_CREDENTIALS,
        serde_json::json!({"user": rsim::DEFAULT_USER, "pass": rsim::DEFAULT_PASSWORD}),
    );
    bed.bed.put_secret(
        PROVISIONER_SECRETS,
        serde_json::json!({"webhook_secret": WEBHOOK_SECRET, "media_url_key": MEDIA_KEY}),
    );
    let bmc = &sims.bmcs[0];
    bed.bed
        .store
        .upsert_servers(&[Server {
            serial: bmc.serial.clone(),
            bmc_address: bmc.url.clone(),
            credentials: SecretRef::new(BMC_CREDENTIALS, None),
            vendor: Some(bmc.vendor.as_str().into()),
            last_seen: None,
            site: "dc1".into(),
            hostname: "rf01".into(),
        }])
        .await
        .unwrap();
    sims
}

/// Provision `serial` through the jobs API (Basic auth: the admin token's name and value) and
/// wait until the daemon's workers have run the job to `complete`; its id.
async fn provisioned(base: &str, serial: &str, log: &std::path::Path) -> String {
    let recipe = serde_json::json!({
        "task_target": "install-linux.target",
        "target_disk": "/dev/sda",
        "oci_url": "registry.contract.internal/os-images/ubuntu-rootfs:22.04",
    });
    let answer = reqwest::Client::new()
        .post(format!("{base}/api/v1/jobs"))
        .basic_auth(ADMIN_TOKEN_NAME, Some(ADMIN_TOKEN))
        .json(&serde_json::json!({"server_serial": serial, "recipe": recipe}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 202);
    let job: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(job["status"], "queued", "{job}");
    let id = job["job_id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (status, body) = call(
            reqwest::Method::GET,
            format!("{base}/api/v1/jobs/{id}"),
            Some(ADMIN_TOKEN),
            None,
        )
        .await;
        if status == 200 && body["status"] == "complete" {
            assert_eq!(body["failed_step"], serde_json::Value::Null, "{body}");
            return id;
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            panic!(
                "job {id} is not complete: {status} {body}\n{}",
                tail(&log, 40)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Wait until the daemon answers on `base` (or fail with its log when it exited).
async fn serving(daemon: &mut std::process::Child, base: &str, log: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = daemon.try_wait().unwrap() {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            panic!("the daemon exited ({status}):\n{}", tail(&log, 40));
        }
        let answer = reqwest::get(format!("{base}/healthz")).await;
        if answer.is_ok_and(|a| a.status().is_success()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon does not answer on {base}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

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
            .args(["-H", &format!("X-Webhook-Secret: {WEBHOOK_SECRET}")])
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
