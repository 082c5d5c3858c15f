//! The daemon's fleet source over ssh (issue 6, DESIGN.md §6), against a real OpenSSH server
//! (scripts/services/40-sshd.sh): a deploy key, the server's host key pinned in a known_hosts
//! file. A host key that does not match and a key the server refuses are failed reads that say
//! which setting to fix. Fails, never skips, without the service.
#![cfg(feature = "services")]

use crate::daemon_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use daemon_support::{commit, git};
use metalform::daemon::config::{SourceConfig, Transport};
use metalform::daemon::{ReadOutcome, SourceReader};

struct Server {
    user: String,
    port: u16,
    key: PathBuf,
    host_key: String,
}

fn server() -> Server {
    let target = std::env::var("METALFORM_TEST_SSH")
        .expect("METALFORM_TEST_SSH is not set: run scripts/test-all, which starts sshd");
    let (user, rest) = target.split_once('@').unwrap();
    let (_, port) = rest.rsplit_once(':').unwrap();
    let host_key = std::env::var("METALFORM_TEST_SSH_HOST_KEY")
        .expect("METALFORM_TEST_SSH_HOST_KEY is not set");
    Server {
        user: user.to_owned(),
        port: port.parse().unwrap(),
        key: std::env::var("METALFORM_TEST_SSH_KEY")
            .expect("METALFORM_TEST_SSH_KEY is not set")
            .into(),
        host_key: std::fs::read_to_string(host_key).unwrap().trim().to_owned(),
    }
}

/// A fresh ed25519 key pair; the private key's path.
fn new_key(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success());
    path
}

fn known_hosts(dir: &Path, name: &str, port: u16, key: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("[127.0.0.1]:{port} {key}\n")).unwrap();
    path
}

async fn poll(config: &SourceConfig, data: &Path, seen: Option<String>) -> ReadOutcome {
    SourceReader::new(config.clone(), data, None)
        .poll(seen, None)
        .await
}

#[tokio::test]
async fn the_fleet_is_fetched_over_ssh_with_a_deploy_key_and_a_pinned_host_key() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("fleet");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart"))
        .arg(&repo)
        .status()
        .unwrap();
    assert!(copied.success());
    git(&repo, &["init", "-q", "-b", "main"]);
    commit(&repo, "the quickstart fleet");
    let url = format!(
        "ssh://{}@127.0.0.1:{}{}",
        server.user,
        server.port,
        repo.display()
    );
    let data = dir.path().join("daemon");
    let pinned = known_hosts(dir.path(), "known_hosts", server.port, &server.host_key);
    let config = SourceConfig {
        repository: url.clone(),
        transport: Transport::Ssh,
        branch: "main".into(),
        path: String::new(),
        poll_interval: Duration::from_secs(60),
        fetch_timeout: Duration::from_secs(60),
        ssh_key: Some(server.key.clone()),
        known_hosts: Some(pinned),
        token: None,
    };

    let ReadOutcome::Accepted(revision) = poll(&config, &data, None).await else {
        panic!("the fleet was not accepted over ssh");
    };
    assert!(!revision.fleet.nodes.is_empty());
    let commit_id = revision
        .revision
        .strip_prefix("commit:")
        .unwrap()
        .to_owned();
    assert!(matches!(
        poll(&config, &data, Some(commit_id)).await,
        ReadOutcome::Unchanged
    ));

    // Another host key pinned: the server is not trusted.
    let other = new_key(dir.path(), "other_host_key");
    let other = std::fs::read_to_string(other.with_extension("pub")).unwrap();
    let mut wrong_host = config.clone();
    wrong_host.known_hosts = Some(known_hosts(
        dir.path(),
        "known_hosts_other",
        server.port,
        other.trim(),
    ));
    let ReadOutcome::Failed { reason } = poll(&wrong_host, &data, None).await else {
        panic!("a host key mismatch was accepted");
    };
    assert_eq!(
        reason,
        format!(
            "fetching branch `main` of {url}: the ssh server's host key is not the one in known_hosts (or is unknown); check source.known_hosts"
        )
    );

    // A key the server does not know.
    let mut wrong_key = config.clone();
    wrong_key.ssh_key = Some(new_key(dir.path(), "not_a_deploy_key"));
    let ReadOutcome::Failed { reason } = poll(&wrong_key, &data, None).await else {
        panic!("an unknown key was let in");
    };
    assert_eq!(
        reason,
        format!(
            "fetching branch `main` of {url}: the ssh server refused the key; check source.ssh_key and the server's deploy keys"
        )
    );
}
