//! The daemon's fleet source over the network (issue 6, DESIGN.md §6): fetched with git from a
//! smart-HTTP server (git's own http-backend) that demands a token. The daemon follows commits
//! there; a refused token, a missing branch and a server that never answers are reported as
//! failed reads that name the cause, never print the token, and leave nothing accepted.

use crate::daemon_support;
use crate::onboard_support;

use std::path::Path;
use std::time::{Duration, Instant};

use daemon_support::git_http::GitHttp;
use daemon_support::{DaemonBed, commit, git, one_site};
use metalform::daemon::config::{SourceConfig, SourceToken, TokenSource, Transport};
use metalform::daemon::{DaemonOptions, ReadOutcome, SourceReader, start};
use metalform::secrets::Secret;
use onboard_support::{Setup, hostname_of, write_fleet};

const FLEET_TOKEN: &str = "fleet-token-5ecr3t-0123456789";

fn setup(declared: Vec<usize>) -> Setup {
    one_site(71, declared)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_follows_a_fleet_served_over_http_with_a_token() {
    let d = DaemonBed::start(setup(vec![0, 1]), "").await;
    d.bed.put_secret(
        "kv/metalform/fleet-git",
        serde_json::json!({"token": FLEET_TOKEN}),
    );
    let server = GitHttp::start(
        d.bed.fleet_dir.parent().unwrap().to_path_buf(),
        Some(&format!("x-access-token:{FLEET_TOKEN}")),
    )
    .await;
    d.set_source(&format!(
        "repository = \"{}\"\ntoken = {{ vault = \"kv/metalform/fleet-git\", key = \"token\", username = \"x-access-token\" }}",
        server.url("fleet")
    ));
    let daemon = start(d.config(), DaemonOptions::default()).await.unwrap();
    let sim_config = setup(vec![]).sites[0].config.clone();
    let hosts = |n: usize| -> Vec<String> { (0..n).map(|i| hostname_of(&sim_config, i)).collect() };
    d.converged_hosts("dc1", &hosts(2), Duration::from_secs(90))
        .await;
    let first = daemon.revision().unwrap().revision.clone();

    write_fleet(&d.bed.fleet_dir, &setup(vec![0, 1, 2, 3]), &d.bed.sims);
    commit(&d.bed.fleet_dir, "fleet: two more nodes");
    d.converged_hosts("dc1", &hosts(4), Duration::from_secs(90))
        .await;
    assert_ne!(daemon.revision().unwrap().revision, first);
    assert!(
        d.bed.deploys("dc1").values().all(|n| *n == 1),
        "{:?}",
        d.bed.deploys("dc1")
    );
    assert!(server.served() >= 4, "fetched over HTTP");
    assert_eq!(server.refused(), 0, "every request carried the token");
    daemon.shutdown().await;
}

/// A repository with one commit on `main` under `root/name`.
fn repository(root: &Path, name: &str) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("README"), "fleet\n").unwrap();
    commit(&dir, "first");
}

fn source(repository: String, transport: Transport, token: bool) -> SourceConfig {
    SourceConfig {
        repository,
        transport,
        branch: "main".into(),
        path: String::new(),
        poll_interval: Duration::from_secs(60),
        fetch_timeout: Duration::from_secs(2),
        ssh_key: None,
        known_hosts: None,
        token: token.then(|| SourceToken {
            username: "x-access-token".into(),
            source: TokenSource::Env("UNUSED_HERE".into()),
        }),
    }
}

async fn failure(reader: &SourceReader) -> String {
    match reader.poll(None, None).await {
        ReadOutcome::Failed { reason } => reason,
        other => panic!("expected a failed read, got {other:?}"),
    }
}

#[tokio::test]
async fn refused_tokens_missing_branches_and_silent_servers_are_failed_reads() {
    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("served");
    repository(&served, "fleet");
    let server = GitHttp::start(served, Some(&format!("x-access-token:{FLEET_TOKEN}"))).await;
    let url = server.url("fleet");
    let data = dir.path().join("daemon");

    // A wrong token: the server's refusal, the token nowhere in the message.
    let wrong = "wrong-token-0123456789abcdef";
    let reader = SourceReader::new(
        source(url.clone(), Transport::LoopbackHttp, true),
        &data,
        Some(Secret::new(wrong)),
    );
    let reason = failure(&reader).await;
    assert_eq!(
        reason,
        format!(
            "fetching branch `main` of {url}: the server refused the credentials (HTTP 401); check [source.token]"
        )
    );
    assert!(server.refused() >= 1);
    // No token at all, where the server wants one: said so, no prompt waited for.
    let reader = SourceReader::new(
        source(url.clone(), Transport::LoopbackHttp, false),
        &data,
        None,
    );
    let reason = failure(&reader).await;
    assert_eq!(
        reason,
        format!(
            "fetching branch `main` of {url}: the server asks for credentials; set [source.token]"
        )
    );

    // The right token, a branch that is not there.
    let mut config = source(url.clone(), Transport::LoopbackHttp, true);
    config.branch = "production".into();
    let reader = SourceReader::new(config, &data, Some(Secret::new(FLEET_TOKEN)));
    assert_eq!(
        failure(&reader).await,
        format!("branch `production` does not exist in {url}")
    );

    // A server that accepts the connection and never answers: abandoned after fetch_timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}/fleet", silent.local_addr().unwrap());
    let reader = SourceReader::new(
        source(silent_url.clone(), Transport::LoopbackHttp, false),
        &data,
        None,
    );
    let started = Instant::now();
    assert_eq!(
        failure(&reader).await,
        format!(
            "fetching branch `main` of {silent_url}: no answer within 2s (source.fetch_timeout); abandoned"
        )
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    drop(silent);
}

#[tokio::test]
async fn the_daemon_does_not_start_without_its_source_token() {
    let d = DaemonBed::start(setup(vec![0]), "").await;
    d.set_source(
        "repository = \"https://git.example.invalid/fleet.git\"\ntoken = { env = \"METALFORM_TEST_FLEET_TOKEN_NEVER_SET\" }",
    );
    let err = match start(d.config(), DaemonOptions::default()).await {
        Err(err) => err,
        Ok(_) => panic!("the daemon started without its source token"),
    };
    assert_eq!(
        err.to_string(),
        "fleet source: source.token: environment variable METALFORM_TEST_FLEET_TOKEN_NEVER_SET is not set"
    );
    assert!(err.hint().unwrap().contains("[source]"));
}
