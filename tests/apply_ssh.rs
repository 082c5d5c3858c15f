//! The hardware-sync credential push over a real OpenSSH server (scripts/services/40-sshd.sh).
//! Fails, never skips, without the service.
#![cfg(feature = "services")]

use std::os::unix::fs::PermissionsExt;

use metalform::provider::host::{HostAccess, HostError, HostTarget, SshHost};
use metalform::secrets::Secret;

fn server() -> (String, u16, std::path::PathBuf) {
    let target = std::env::var("METALFORM_TEST_SSH")
        .expect("METALFORM_TEST_SSH is not set: run scripts/test-all, which starts sshd");
    let key = std::env::var("METALFORM_TEST_SSH_KEY").expect("METALFORM_TEST_SSH_KEY is not set");
    let (user, rest) = target.split_once('@').unwrap();
    let (_, port) = rest.rsplit_once(':').unwrap();
    (user.to_owned(), port.parse().unwrap(), key.into())
}

fn ssh(port: u16, key: std::path::PathBuf) -> SshHost {
    SshHost {
        identity: Some(key),
        port: Some(port),
        options: vec![
            "StrictHostKeyChecking=no".into(),
            "UserKnownHostsFile=/dev/null".into(),
            "LogLevel=ERROR".into(),
        ],
        // The test logs in as the user running it, who owns what it writes.
        sudo: false,
        ..SshHost::default()
    }
}

#[tokio::test]
async fn credentials_are_written_over_ssh_with_their_mode() {
    let (user, port, key) = server();
    let host = HostTarget {
        system_id: "abc123".into(),
        hostname: "c07u43".into(),
        address: "127.0.0.1".into(),
        user,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("etc/maas/maas-machine-creds.yml");
    let content = Secret::new("reporting:\n  maas:\n    token_secret: s3cr3t 'quoted'\n");
    let access = ssh(port, key.clone());
    access
        .write_file(&host, path.to_str().unwrap(), &content, 0o600)
        .await
        .unwrap_or_else(|e| panic!("ssh write failed: {e}"));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), content.expose());
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // No systemd in a test container: the remote command fails, the host was reachable.
    let err = access
        .restart_units(&host, &["metalform-hw-sync.timer"])
        .await
        .unwrap_err();
    assert!(matches!(err, HostError::Failed { .. }), "{err:?}");

    // Nobody listening: unreachable, which the stage retries until its timeout.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let err = ssh(closed_port, key)
        .write_file(&host, path.to_str().unwrap(), &content, 0o600)
        .await
        .unwrap_err();
    assert!(matches!(err, HostError::Unreachable { .. }), "{err:?}");
    assert!(!err.to_string().contains("s3cr3t"));
}
