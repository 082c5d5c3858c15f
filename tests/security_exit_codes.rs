//! Honest exit codes and bounded waits (issue 16 point 7, docs/plan.md "Exit codes",
//! docs/apply.md): an unobservable MAAS is an error naming the site and its URL, nodes that
//! need an operator change the exit code and are listed, a hung MAAS is waited for at most
//! `--timeout` with the slow site named meanwhile, and `apply` does not report success while
//! nodes wait for an operator.

use crate::onboard_support;
use crate::plan_support;

use std::time::{Duration, Instant};

use metalform::lifecycle::{FailureClass, JobState};
use onboard_support::{Bed, Setup, SiteSetup, free_port};
use plan_support::{World, failed, golden_dir, job};

fn text(out: &std::process::Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_with_an_unreachable_maas_exits_1_naming_the_site_and_its_url() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 31, 2, 0))).await;
    let url = bed.sim("dc1").maas_url.trim_end_matches('/').to_owned();
    bed.edit_fleet("sites/dc1.yaml", &url, "http://127.0.0.1:1/MAAS");
    let out = bed
        .cli_plan(&["plan", "--detailed-exitcode"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "error: 1 site(s) could not be observed, so their nodes were not planned: site dc1 (MAAS at http://127.0.0.1:1/MAAS): "
        ),
        "{stderr}"
    );
    // The plan itself is still shown, its items blocked.
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("2 blocked"),
        "{}",
        text(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_maas_is_waited_for_at_most_the_timeout_and_named_while_it_is() {
    let site = SiteSetup::generated("dc1", 32, 2, 0).faults("*:hang");
    let bed = Bed::start(Setup::one_site(site)).await;
    let started = Instant::now();
    let out = bed
        .cli_plan(&["plan", "--detailed-exitcode", "--timeout", "2s"])
        .output()
        .unwrap();
    let waited = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let url = bed.sim("dc1").maas_url.trim_end_matches('/').to_owned();
    assert!(
        stderr.contains(&format!("still waiting for MAAS of site dc1 at {url}")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("MAAS at {url} did not answer within 2s")),
        "{stderr}"
    );
    // Not the 457 s of five 90 s attempts: bounded by the timeout (generous margin for a
    // loaded machine; this is behaviour, not a benchmark).
    assert!(waited < Duration::from_secs(60), "{waited:?}");
}

/// A fixture world where every node of dc1 waits for an operator.
fn blocked_world(dir: &std::path::Path) -> std::path::PathBuf {
    let mut snapshot = World::new();
    for host in ["n01", "n02", "n03"] {
        snapshot = snapshot.job(failed(
            job(
                "dc1",
                host,
                JobState::FailedManualIntervention,
                "deploy_via_maas",
            ),
            FailureClass::DeployCloudInitFailure,
            "failed_deploy",
            "the deployment failed twice",
        ));
    }
    let path = dir.join("observed.json");
    std::fs::write(&path, snapshot.done().to_json()).unwrap();
    path
}

#[test]
fn plan_detailed_exitcode_is_3_and_lists_nodes_that_need_an_operator() {
    let dir = tempfile::tempdir().unwrap();
    let observed = blocked_world(dir.path());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_metalform"))
        .args(["plan", "--detailed-exitcode", "--site", "dc1", "--observed"])
        .arg(&observed)
        .arg("--fleet")
        .arg(golden_dir().join("fleet"))
        .env("NO_COLOR", "1")
        .env_remove("METALFORM_STATE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for host in ["n01", "n02", "n03"] {
        assert!(
            stderr.contains(&format!("blocked: dc1/{host}: ")),
            "{stderr}"
        );
    }
    assert!(
        stderr.contains("3 node(s) need an operator before the fleet can converge"),
        "{stderr}"
    );
    // Without --detailed-exitcode the plan succeeded: it says so with 0.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_metalform"))
        .args(["plan", "--site", "dc1", "--observed"])
        .arg(&observed)
        .arg("--fleet")
        .arg(golden_dir().join("fleet"))
        .env_remove("METALFORM_STATE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_does_not_exit_0_while_nodes_wait_for_an_operator() {
    let bed = Bed::start(Setup::one_site(SiteSetup::generated("dc1", 33, 2, 0))).await;
    // The site's API key is unreadable: every node is blocked, nothing can be applied.
    let key = bed.sim("dc1").api_key().expose().to_owned();
    bed.put_secret("kv/dc1/api-token", serde_json::json!({"tokn": key}));
    let out = bed
        .cli(&["apply", "--auto-approve"], free_port())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error: the fleet is not converged: 2 node(s) need an operator: dc1/"),
        "{stderr}"
    );
    assert!(bed.jobs().await.is_empty());
}
