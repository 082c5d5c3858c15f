//! `metalform sim` as a user runs it: it prints its MAAS URL and API key and serves MAAS;
//! bad flags are argument errors with hints.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// Kills the simulator even when an assertion fails.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn sim_prints_its_url_and_key_and_serves_maas() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut child = Command::new(env!("CARGO_BIN_EXE_metalform"))
        .args([
            "sim",
            "--listen",
            "127.0.0.1:0",
            "--machines",
            "2",
            "--api-key",
            "a:b:c",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _running = Running(child);
    let mut lines = BufReader::new(stdout).lines();
    let url_line = lines.next().unwrap().unwrap();
    let key_line = lines.next().unwrap().unwrap();
    let url = url_line
        .strip_prefix("MAAS URL: ")
        .expect(&url_line)
        .to_string();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/MAAS/"),
        "{url}"
    );
    assert_eq!(key_line, "API key:  a:b:c");
    let version = reqwest::get(format!("{url}api/2.0/version/"))
        .await
        .unwrap();
    assert_eq!(version.status().as_u16(), 200);
    let auth = metalform::sim::auth::sign_header("a:b:c", "n1", chrono::Utc::now().timestamp());
    let machines: serde_json::Value = reqwest::Client::new()
        .get(format!("{url}api/2.0/machines/"))
        .header("Authorization", auth)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(machines.as_array().unwrap().len(), 2);
}

#[test]
fn bad_flags_are_argument_errors() {
    let out = Command::new(env!("CARGO_BIN_EXE_metalform"))
        .args([
            "sim",
            "--faults",
            "deploy:status=200",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim_end(),
        "error: invalid fault spec item `deploy:status=200`: status `200` is not an HTTP error code\n\
         hint: see docs/simulator.md for the fault grammar and options"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_metalform"))
        .args(["sim", "--machine-state", "asleep"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("error: unknown --machine-state `asleep`")
    );
}
