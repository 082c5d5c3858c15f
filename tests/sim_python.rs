//! python-libmaas (PyPI, unmodified) against the simulator: connect, list, read, deploy to
//! Deployed, release with erase to Ready, start commissioning (tests/python/libmaas_lifecycle.py).
//! Needs `METALFORM_LIBMAAS_PYTHON` (set by scripts/services/20-python-libmaas.sh); fails
//! without it.
#![cfg(feature = "services")]

mod sim_support;

use std::process::Command;

use reqwest::Method;
use sim_support::fleet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_libmaas_drives_the_simulator_through_a_lifecycle() {
    let python = std::env::var("METALFORM_LIBMAAS_PYTHON").expect(
        "METALFORM_LIBMAAS_PYTHON is not set: run scripts/test-all (it sources scripts/services/20-python-libmaas.sh)",
    );
    let mut config = fleet(3);
    // Deployment ~0.6 s, quick erase ~0.06 s: the script polls every 0.2 s.
    config.time_scale = 1000.0;
    let handle = metalform::sim::start(config)
        .await
        .expect("simulator starts");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/libmaas_lifecycle.py");
    let url = handle.maas_url.clone();
    let key = handle.api_key().expose().to_string();
    // Bounded: python-libmaas' wait loops poll until a status changes.
    let output = tokio::task::spawn_blocking(move || {
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
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python-libmaas script failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("libmaas lifecycle: ok"), "{stdout}");

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
    let ops: serde_json::Value = http
        .get(format!("{}/sim/v1/ops", handle.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ops = ops.as_array().unwrap();
    assert!(ops.iter().any(|o| o["action"] == "describe.read"));
    assert!(
        ops.iter().all(|o| o["status"].as_u64().unwrap() < 400),
        "{ops:?}"
    );
}
