//! python-libmaas (PyPI, unmodified) against the simulator: connect, list, read, deploy to
//! Deployed, release with erase to Ready, start commissioning (tests/python/libmaas_lifecycle.py);
//! and the operator endpoints (tests/python/libmaas_operator.py).
//! Needs `METALFORM_LIBMAAS_PYTHON` (set by scripts/services/20-python-libmaas.sh); fails
//! without it.
#![cfg(feature = "services")]

use crate::sim_support;

use std::process::Command;

use reqwest::Method;
use sim_support::fleet;

/// Runs `tests/python/<script>` with python-libmaas against the simulator at `url`, bounded
/// (python-libmaas' wait loops poll until a status changes); returns its stdout.
async fn run_script(script: &str, url: &str, key: &str) -> std::process::Output {
    let python = std::env::var("METALFORM_LIBMAAS_PYTHON").expect(
        "METALFORM_LIBMAAS_PYTHON is not set: run scripts/test-all (it sources scripts/services/20-python-libmaas.sh)",
    );
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let (url, key) = (url.to_owned(), key.to_owned());
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(&python)
            .arg(&script)
            .arg(&url)
            .arg(&key)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("python runs");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while child.try_wait().expect("python is waitable").is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        child.wait_with_output().expect("python output")
    })
    .await
    .unwrap()
}

/// The simulator's request log.
async fn ops_of(handle: &metalform::sim::SimHandle) -> Vec<serde_json::Value> {
    let ops: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/sim/v1/ops", handle.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    ops.as_array().unwrap().clone()
}

/// A simulator of three Ready machines (deployment ~0.6 s, quick erase ~0.06 s: the scripts
/// poll every 0.2 s) driven by `script` to its end (`done` on stdout). Returns the simulator
/// and the script's stdout.
async fn drive(script: &str, done: &str) -> (metalform::sim::SimHandle, String) {
    let mut config = fleet(3);
    config.time_scale = 1000.0;
    let handle = metalform::sim::start(config)
        .await
        .expect("simulator starts");
    let output = run_script(script, &handle.maas_url, handle.api_key().expose()).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python-libmaas script failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains(done), "{stdout}");
    (handle, stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_libmaas_drives_the_simulator_through_a_lifecycle() {
    let (handle, stdout) = drive("libmaas_lifecycle.py", "libmaas lifecycle: ok").await;

    // What the simulator saw: exactly one deploy, one release with erase, one commission, all
    // on the machine the script picked, and every request signed (no 401s).
    let system_id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("step: read "))
        .and_then(|l| l.split_whitespace().next())
        .expect("script names the machine")
        .to_string();
    let http = reqwest::Client::new();
    let counters: serde_json::Value = http
        .request(
            Method::GET,
            format!("{}/sim/v1/machines/{system_id}/counters", handle.base_url()),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(counters["deploy"], 1);
    assert_eq!(counters["release"], 1);
    assert_eq!(counters["erase"], 1);
    assert_eq!(counters["commission"], 1);
    let ops = ops_of(&handle).await;
    assert!(ops.iter().any(|o| o["action"] == "describe.read"));
    assert!(
        ops.iter().all(|o| o["status"].as_u64().unwrap() < 400),
        "{ops:?}"
    );
}

/// What operators do besides the lifecycle (tests/python/libmaas_operator.py): fabrics and
/// VLANs, a subnet and STATIC link on a RoCE port's VLAN, a port moved, tags, zones, pools,
/// LVM layout, owner data, power parameters, events — python-libmaas' own requests, each
/// answered as MAAS answers it (no 4xx/5xx).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_libmaas_drives_the_operator_endpoints() {
    let (handle, _) = drive("libmaas_operator.py", "libmaas operator: ok").await;
    let ops = ops_of(&handle).await;
    let failed: Vec<&serde_json::Value> = ops
        .iter()
        .filter(|o| o["status"].as_u64().unwrap() >= 400)
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    for action in [
        "fabrics.read",
        "vlan.update",
        "subnets.create",
        "interface.link_subnet",
        "interface.update",
        "tags.create",
        "tag.update_nodes",
        "zones.create",
        "resourcepools.create",
        "machine.set_storage_layout",
        "machines.allocate",
        "machine.set_owner_data",
        "machine.power_parameters",
        "machines.power_parameters",
        "events.query",
    ] {
        assert!(
            ops.iter().any(|o| o["action"] == action),
            "python-libmaas never called {action}"
        );
    }
}
