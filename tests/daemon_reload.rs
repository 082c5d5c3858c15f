//! SIGHUP reloads the daemon's credentials (docs/daemon.md "Rotating credentials"): a rotated
//! API token works and the old one stops at once, without a restart; a reload that cannot read
//! every token changes nothing, so a mistake in the secret store locks nobody out.

use crate::daemon_support;

use std::time::{Duration, Instant};

use daemon_support::{ADMIN_TOKEN, AGENT_TOKEN, DaemonBed, call, one_site, signal};
use reqwest::Method;

const ROTATED: &str = "admin-token-rotated-0123456789";

/// The status of an admin read with `token`, once the daemon answers 401 or 200 to it as
/// `expected` (or the deadline passes).
async fn status_becomes(url: &str, token: &str, expected: u16) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = reqwest::Client::new()
            .get(url)
            .bearer_auth(token)
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        if status == expected || Instant::now() > deadline {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rotates_api_tokens_and_a_failed_reload_keeps_the_old_ones() {
    let d = DaemonBed::start(one_site(81, vec![0]), "").await;
    let listen = d.listen_on_free_port();
    let log = d.bed.dir.path().join("daemon.log");
    let mut daemon = d.spawn(&log);
    let url = format!("http://{listen}/api/v1/admin/maas-sites");
    let logged = || std::fs::read_to_string(&log).unwrap_or_default();

    assert_eq!(
        status_becomes(&url, ADMIN_TOKEN, 200).await,
        200,
        "{}",
        logged()
    );

    // Rotated in the secret store: nothing changes until SIGHUP.
    d.bed.put_secret(
        "kv/metalform/api-tokens",
        serde_json::json!({"admin": ROTATED, "agent": AGENT_TOKEN}),
    );
    let (status, _) = call(Method::GET, url.clone(), Some(ROTATED), None).await;
    assert_eq!(status, 401);
    signal(&daemon, "HUP");
    assert_eq!(
        status_becomes(&url, ROTATED, 200).await,
        200,
        "{}",
        logged()
    );
    let (status, _) = call(Method::GET, url.clone(), Some(ADMIN_TOKEN), None).await;
    assert_eq!(status, 401, "the old token stopped working");

    // A store that lost the agent token: the reload fails whole and the rotated admin token
    // stays in force.
    d.bed.put_secret(
        "kv/metalform/api-tokens",
        serde_json::json!({"admin": "admin-token-never-taken-0123"}),
    );
    signal(&daemon, "HUP");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !logged().contains("credentials not reloaded") {
        assert!(
            Instant::now() < deadline,
            "no reload error logged:\n{}",
            logged()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let line = logged()
        .lines()
        .find(|l| l.contains("credentials not reloaded"))
        .unwrap()
        .to_owned();
    assert!(line.contains("API token `agents`"), "{line}");
    assert!(!line.contains("admin-token-never-taken"), "{line}");
    let (status, _) = call(Method::GET, url.clone(), Some(ROTATED), None).await;
    assert_eq!(status, 200);
    let (status, _) = call(
        Method::GET,
        url.clone(),
        Some("admin-token-never-taken-0123"),
        None,
    )
    .await;
    assert_eq!(status, 401);

    signal(&daemon, "TERM");
    let deadline = Instant::now() + Duration::from_secs(30);
    while daemon.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the daemon did not stop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
