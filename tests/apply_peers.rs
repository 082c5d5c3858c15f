//! The production BMC and host access against stand-in programs: what `ipmitool` and `ssh` are
//! run with (never a password or a token on a command line), and how their failures are
//! classified.

use std::path::{Path, PathBuf};

use metalform::provider::bmc::{BmcError, BmcPower, BootDevice, IpmiTool, PowerAction};
use metalform::provider::host::{HostAccess, HostError, HostTarget, SshHost};
use metalform::secrets::{PowerCredentials, Secret};

/// A shell script standing in for a tool: it logs its arguments (and whatever `extra` adds)
/// to `log`, then runs `tail`.
fn tool(dir: &Path, name: &str, log: &Path, extra: &str, tail: &str) -> PathBuf {
    let source = dir.join(format!("{name}.src"));
    std::fs::write(
        &source,
        format!(
            "#!/bin/sh\nprintf 'args:%s\\n' \"$*\" >> '{}'\n{extra}\n{tail}\n",
            log.display()
        ),
    )
    .unwrap();
    // The executable is written by `install`, never through a descriptor of this process: a
    // test thread forking at that moment would carry the descriptor into its child, and
    // running the tool would fail with ETXTBSY ("Text file busy").
    let path = dir.join(name);
    let installed = std::process::Command::new("install")
        .args(["-m", "755"])
        .arg(&source)
        .arg(&path)
        .status()
        .unwrap();
    assert!(installed.success());
    path
}

fn login() -> PowerCredentials {
    PowerCredentials {
        user: "root".into(),
        pass: Secret::new("bmc-s3cr3t"),
    }
}

#[tokio::test]
async fn ipmitool_gets_the_password_in_its_environment_only() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let program = tool(
        dir.path(),
        "ipmitool",
        &log,
        &format!(
            "printf 'env:%s\\n' \"$IPMI_PASSWORD\" >> '{}'",
            log.display()
        ),
        "exit 0",
    );
    let ipmi = IpmiTool {
        program,
        ..IpmiTool::default()
    };
    ipmi.power(
        "10.176.16.128",
        &login(),
        PowerAction::Cycle,
        Some(BootDevice::Pxe),
    )
    .await
    .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text,
        "args:-I lanplus -H 10.176.16.128 -U root -E chassis bootdev pxe\nenv:bmc-s3cr3t\n\
         args:-I lanplus -H 10.176.16.128 -U root -E chassis power cycle\nenv:bmc-s3cr3t\n"
    );
}

#[tokio::test]
async fn a_chassis_that_is_off_is_powered_on_instead_of_cycled() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let program = tool(
        dir.path(),
        "ipmitool",
        &log,
        "",
        "case \"$*\" in *'power cycle'*) echo 'Chassis Power Control: Cycle failed: Command not supported in present state' >&2; exit 1;; esac\nexit 0",
    );
    let ipmi = IpmiTool {
        program,
        ..IpmiTool::default()
    };
    ipmi.power("10.0.0.9", &login(), PowerAction::Cycle, None)
        .await
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.ends_with(
            "chassis power cycle\nargs:-I lanplus -H 10.0.0.9 -U root -E chassis power on\n"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn ipmitool_failures_are_classified() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let unreachable = IpmiTool {
        program: tool(
            dir.path(),
            "down",
            &log,
            "",
            "echo 'Error: Unable to establish IPMI v2 / RMCP+ session' >&2; exit 1",
        ),
        ..IpmiTool::default()
    };
    let err = unreachable
        .power("10.0.0.9", &login(), PowerAction::On, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, BmcError::Unreachable { .. }) && err.is_transient(),
        "{err:?}"
    );
    let refused = IpmiTool {
        program: tool(
            dir.path(),
            "refuse",
            &log,
            "",
            "echo 'Invalid user name' >&2; exit 1",
        ),
        ..IpmiTool::default()
    };
    let err = refused
        .power("10.0.0.9", &login(), PowerAction::On, None)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "BMC 10.0.0.9 refused `chassis power on`: Invalid user name"
    );
    assert!(!err.is_transient());
    let missing = IpmiTool {
        program: dir.path().join("no-such-ipmitool"),
        ..IpmiTool::default()
    };
    let err = missing
        .power("10.0.0.9", &login(), PowerAction::On, None)
        .await
        .unwrap_err();
    assert!(matches!(err, BmcError::Setup(_)), "{err:?}");
    assert!(!err.to_string().contains("bmc-s3cr3t"));
}

fn host() -> HostTarget {
    HostTarget {
        system_id: "abc123".into(),
        hostname: "c07u43".into(),
        address: "10.176.46.21".into(),
        user: "hpcadmin".into(),
    }
}

#[tokio::test]
async fn ssh_pushes_the_file_through_stdin_and_never_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let stdin = dir.path().join("stdin");
    let ssh = SshHost {
        program: tool(
            dir.path(),
            "ssh",
            &log,
            &format!("cat >> '{}'", stdin.display()),
            "exit 0",
        ),
        ..SshHost::default()
    };
    let content = Secret::new("reporting:\n  maas:\n    token_secret: machine-s3cr3t\n");
    ssh.write_file(&host(), "/etc/maas/maas-machine-creds.yml", &content, 0o600)
        .await
        .unwrap();
    ssh.restart_units(
        &host(),
        &["metalform-hw-sync.timer", "metalform-hw-sync.service"],
    )
    .await
    .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text,
        "args:-o BatchMode=yes -o ConnectTimeout=10 -o StrictHostKeyChecking=accept-new \
         hpcadmin@10.176.46.21 -- sudo install -D -m 0600 -o root -g root /dev/stdin \
         '/etc/maas/maas-machine-creds.yml'\n\
         args:-o BatchMode=yes -o ConnectTimeout=10 -o StrictHostKeyChecking=accept-new \
         hpcadmin@10.176.46.21 -- sudo systemctl enable 'metalform-hw-sync.timer' \
         'metalform-hw-sync.service' && sudo systemctl restart 'metalform-hw-sync.timer' \
         'metalform-hw-sync.service'\n"
    );
    assert_eq!(std::fs::read_to_string(&stdin).unwrap(), content.expose());
}

#[tokio::test]
async fn ssh_failures_are_classified() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let unreachable = SshHost {
        program: tool(
            dir.path(),
            "ssh255",
            &log,
            "",
            "echo 'ssh: connect to host 10.176.46.21 port 22: No route to host' >&2; exit 255",
        ),
        ..SshHost::default()
    };
    let err = unreachable
        .write_file(&host(), "/x", &Secret::new("s"), 0o600)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        HostError::Unreachable {
            host: "c07u43".into(),
            address: "10.176.46.21".into(),
            message: "ssh: connect to host 10.176.46.21 port 22: No route to host".into(),
        }
    );
    let failed = SshHost {
        program: tool(
            dir.path(),
            "ssh1",
            &log,
            "",
            "echo 'Failed to restart metalform-hw-sync.timer: Unit not found.' >&2; exit 5",
        ),
        ..SshHost::default()
    };
    let err = failed
        .restart_units(&host(), &["metalform-hw-sync.timer"])
        .await
        .unwrap_err();
    assert!(matches!(err, HostError::Failed { .. }), "{err:?}");
}
