//! Secrets at rest and who may know what (issue 16 point 8, docs/security.md "Tokens" and "At
//! rest"): owner-only files and directories, distinct admin and agent tokens, enrollment
//! refusals that do not name the node to an unauthenticated caller, and no agent contact
//! recorded for a refused call.

use crate::agent_suite;
use crate::daemon_support;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use daemon_support::{DaemonBed, one_site};
use metalform::agent::{AgentServer, AgentServerConfig, ChannelOptions, TaskTiming};
use metalform::clock::SystemClock;
use metalform::listener::TlsSetting;
use metalform::store::Store;
use serde_json::json;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test]
async fn state_directory_and_database_are_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("fleet/.metalform/state.db");
    let store = Store::open(
        &format!("sqlite://{}", state.display()),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    // The plan-signing key lives here.
    store.plan_signing_key().await.unwrap();
    store.close().await;
    assert_eq!(mode(state.parent().unwrap()), 0o700);
    assert_eq!(mode(&state), 0o600);
}

#[test]
fn demo_keep_leaves_its_secrets_file_and_database_owner_only() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_metalform"))
        .args(["demo", "--keep"])
        .env("NO_COLOR", "1")
        .env_remove("METALFORM_STATE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let workdir = stdout
        .lines()
        .find_map(|l| l.strip_prefix("workdir "))
        .and_then(|l| l.split(' ').next())
        .unwrap_or_else(|| panic!("no workdir in\n{stdout}"))
        .to_owned();
    let workdir = Path::new(&workdir);
    let modes = (
        mode(workdir),
        mode(&workdir.join("secrets.json")),
        std::fs::read_dir(workdir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".db"))
            .map(|e| mode(&e.path()))
            .collect::<Vec<_>>(),
    );
    let secrets_text = std::fs::read_to_string(workdir.join("secrets.json")).unwrap_or_default();
    std::fs::remove_dir_all(workdir).unwrap();
    assert!(out.status.success(), "{stdout}");
    assert_eq!(modes.0, 0o700, "the kept work directory");
    assert_eq!(modes.1, 0o600, "the kept secrets file");
    assert!(
        modes.2.iter().all(|m| *m == 0o600),
        "the kept state database: {:?}",
        modes.2
    );
    // The per-node deploy passwords the demo made are in it (and only there).
    assert!(
        secrets_text.contains("kv/maas-sites/dc1/deploy-nodes/"),
        "{secrets_text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_token_equal_to_the_admin_token_is_refused_at_start() {
    let d = DaemonBed::start(one_site(91, vec![0]), "").await;
    let shared = "the-same-token-for-both-0123456789";
    d.bed.put_secret(
        "kv/metalform/api-tokens",
        json!({"admin": shared, "agent": shared}),
    );
    let err = match metalform::daemon::start(d.config(), Default::default()).await {
        Ok(_) => panic!("the daemon started with one value for an admin and an agent token"),
        Err(err) => err.to_string(),
    };
    assert!(
        err.contains(
            "it has the same value as token `ops-alice` (admin role); every API token must differ"
        ),
        "{err}"
    );
    assert!(!err.contains(shared), "{err}");
}

#[tokio::test]
async fn a_conflicting_enrollment_does_not_name_the_node_to_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = agent_suite::open(&format!(
        "sqlite://{}",
        dir.path().join("state.db").display()
    ))
    .await;
    let server = AgentServer::start(
        store.clone(),
        AgentServerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), None, TlsSetting::Off),
    )
    .await
    .unwrap();
    let o = agent_suite::onboarding(&store, "c07u44", "a1b2c3").await;
    for (host, sid) in [("c07u45", "a1b2c3"), ("c07u44", "zzzzzz")] {
        let response = agent_suite::http()
            .post(server.enroll_url())
            .json(&json!({"token": o.token.expose(), "hostname": host, "system_id": sid, "agent_version": "v1"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 409);
        let body = response.text().await.unwrap();
        assert!(body.contains("\"error\":\"conflict\""), "{body}");
        assert!(
            !body.contains("c07u44"),
            "the answer names the node: {body}"
        );
        assert!(!body.contains("a1b2c3") || sid == "a1b2c3", "{body}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_refused_agent_call_is_not_agent_contact() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = agent_suite::open(&format!(
        "sqlite://{}",
        dir.path().join("state.db").display()
    ))
    .await;
    let a = agent_suite::onboarding(&store, "c07u43", "x7k3pa").await;
    let b = agent_suite::onboarding(&store, "c07u44", "x7k3pb").await;
    let token_a = store
        .enroll_agent(&agent_suite::request(&a.token, "c07u43", "x7k3pa"))
        .await
        .unwrap()
        .agent_token;
    let mut config =
        AgentServerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), None, TlsSetting::Off);
    config.channel = ChannelOptions {
        timing: TaskTiming {
            lease: Duration::from_secs(120),
            poll_step: Duration::from_millis(20),
        },
        // Contacts of a token already in use wait for a flush: none during the test, so what
        // shows was written at the call.
        contact_flush: Duration::from_secs(3600),
    };
    let server = AgentServer::start(store.clone(), config).await.unwrap();
    let addr = server.local_addr();
    let contact = |node| {
        let store = store.clone();
        async move { store.node(node).await.unwrap().last_agent_contact_at }
    };
    let before = contact(a.node).await;
    // Time moves on: a contact recorded from here on would show.
    clock.advance(chrono::Duration::seconds(30));

    // Node a's token on node b's task route: refused, and no contact for a (or b).
    let response = agent_suite::http()
        .get(format!(
            "http://{addr}/agent/v1/nodes/{}/tasks/wait?wait=0",
            b.node
        ))
        .bearer_auth(token_a.expose())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    assert_eq!(
        contact(a.node).await,
        before,
        "a refused call counted as contact"
    );
    assert_eq!(contact(b.node).await, None);

    // Asking who a token belongs to (what the admin routes do to refuse it) writes nothing.
    let serial = store.serial().await.unwrap();
    let who = store.agent_identity(&token_a).await.unwrap().unwrap();
    assert_eq!(who.node_id, a.node);
    assert_eq!(contact(a.node).await, before);
    assert_eq!(store.serial().await.unwrap(), serial);

    // Its own route is contact.
    let response = agent_suite::http()
        .get(format!(
            "http://{addr}/agent/v1/nodes/{}/tasks/wait?wait=0",
            a.node
        ))
        .bearer_auth(token_a.expose())
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    assert_ne!(contact(a.node).await, before);
    server.shutdown().await;
}
