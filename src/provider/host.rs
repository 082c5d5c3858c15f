//! Access to a deployed host before its node agent runs (seed 000 §4.3
//! EnsureHardwareSyncConfigured step 4: "the one explicit SSH-based seed step before the node
//! agent is available"; §9.1 steps 4–5): write a file, restart units.
//!
//! * [`SshHost`] runs `ssh` in batch mode. File content goes through the child's stdin into
//!   `sudo install`, so a secret (the MAAS machine token) is never on a command line and never
//!   in a temporary file on either side.
//! * [`SimHost`] uses the simulator's SSH stand-in (docs/contracts.md §3
//!   `POST /sim/v1/machines/{system_id}/host/files`). The simulated host restarts its
//!   hardware-sync timer when the credentials file changes, so unit restarts are part of the
//!   write there.

use std::path::PathBuf;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::AsyncWriteExt;

use crate::secrets::Secret;

/// The deployed host to reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostTarget {
    pub system_id: String,
    pub hostname: String,
    /// The address to connect to (the site's SSH interface, else the first deployed IP).
    pub address: String,
    /// The site's deploy user.
    pub user: String,
}

/// Why a host could not be reached or changed. Never carries file contents.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("cannot reach {host} at {address}: {message}")]
    Unreachable {
        host: String,
        address: String,
        message: String,
    },
    #[error("{host}: `{action}` failed: {message}")]
    Failed {
        host: String,
        action: String,
        message: String,
    },
    #[error("cannot access hosts: {0}")]
    Setup(String),
}

/// Changes on a deployed host.
pub trait HostAccess: Send + Sync + std::fmt::Debug {
    /// Write `content` to `path` (root-owned, `mode`), creating parent directories.
    fn write_file<'a>(
        &'a self,
        host: &'a HostTarget,
        path: &'a str,
        content: &'a Secret,
        mode: u32,
    ) -> BoxFuture<'a, Result<(), HostError>>;

    /// Enable and (re)start systemd units.
    fn restart_units<'a>(
        &'a self,
        host: &'a HostTarget,
        units: &'a [&'a str],
    ) -> BoxFuture<'a, Result<(), HostError>>;

    fn describe(&self) -> String;
}

/// OpenSSH in batch mode (key authentication from the agent or `identity`).
#[derive(Debug, Clone)]
pub struct SshHost {
    pub program: PathBuf,
    pub identity: Option<PathBuf>,
    pub port: Option<u16>,
    /// Extra `-o` options, e.g. `StrictHostKeyChecking=accept-new`.
    pub options: Vec<String>,
    pub timeout: Duration,
    /// Prefix privileged commands with `sudo` (the site's deploy user is not root).
    pub sudo: bool,
}

impl Default for SshHost {
    fn default() -> Self {
        Self {
            program: PathBuf::from("ssh"),
            identity: None,
            port: None,
            options: vec!["StrictHostKeyChecking=accept-new".into()],
            timeout: Duration::from_secs(60),
            sudo: true,
        }
    }
}

/// `'…'` shell quoting for the remote command line (paths and unit names come from metalform,
/// but quoting keeps an odd name from being interpreted).
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

impl SshHost {
    fn privileged(&self, command: &str) -> String {
        if self.sudo {
            format!("sudo {command}")
        } else {
            command.to_owned()
        }
    }

    /// The argument vector for one remote command.
    pub fn args(&self, host: &HostTarget, remote: &str) -> Vec<String> {
        let mut args = vec![
            "-o".to_string(),
            "BatchMode=yes".to_string(),
            "-o".to_string(),
            "ConnectTimeout=10".to_string(),
        ];
        for option in &self.options {
            args.push("-o".into());
            args.push(option.clone());
        }
        if let Some(identity) = &self.identity {
            args.push("-i".into());
            args.push(identity.display().to_string());
        }
        if let Some(port) = self.port {
            args.push("-p".into());
            args.push(port.to_string());
        }
        args.push(format!("{}@{}", host.user, host.address));
        args.push("--".into());
        args.push(remote.to_string());
        args
    }

    async fn run(
        &self,
        host: &HostTarget,
        remote: &str,
        action: &str,
        stdin: Option<&Secret>,
    ) -> Result<(), HostError> {
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(self.args(host, remote))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|err| {
            HostError::Setup(format!("cannot run `{}`: {err}", self.program.display()))
        })?;
        let mut pipe = child.stdin.take();
        let work = async {
            if let Some(pipe) = pipe.as_mut()
                && let Some(content) = stdin
            {
                // A broken pipe means ssh exited early; its status says why.
                let _ = pipe.write_all(content.expose().as_bytes()).await;
            }
            drop(pipe);
            child.wait_with_output().await
        };
        let output = tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| HostError::Unreachable {
                host: host.hostname.clone(),
                address: host.address.clone(),
                message: format!("no answer in {:?}", self.timeout),
            })?
            .map_err(|err| HostError::Setup(err.to_string()))?;
        if output.status.success() {
            return Ok(());
        }
        let message: String = String::from_utf8_lossy(&output.stderr)
            .trim()
            .chars()
            .take(300)
            .collect();
        // ssh exits 255 for its own failures (connection, authentication); anything else is the
        // remote command's status.
        Err(if output.status.code() == Some(255) {
            HostError::Unreachable {
                host: host.hostname.clone(),
                address: host.address.clone(),
                message,
            }
        } else {
            HostError::Failed {
                host: host.hostname.clone(),
                action: action.to_owned(),
                message,
            }
        })
    }
}

impl HostAccess for SshHost {
    fn write_file<'a>(
        &'a self,
        host: &'a HostTarget,
        path: &'a str,
        content: &'a Secret,
        mode: u32,
    ) -> BoxFuture<'a, Result<(), HostError>> {
        Box::pin(async move {
            // Root-owned through sudo; a root login owns what it writes anyway.
            let owner = if self.sudo { " -o root -g root" } else { "" };
            let remote = self.privileged(&format!(
                "install -D -m {mode:04o}{owner} /dev/stdin {}",
                shell_quote(path)
            ));
            self.run(host, &remote, &format!("write {path}"), Some(content))
                .await
        })
    }

    fn restart_units<'a>(
        &'a self,
        host: &'a HostTarget,
        units: &'a [&'a str],
    ) -> BoxFuture<'a, Result<(), HostError>> {
        Box::pin(async move {
            let list: Vec<String> = units.iter().map(|u| shell_quote(u)).collect();
            let list = list.join(" ");
            let remote = format!("sudo systemctl enable {list} && sudo systemctl restart {list}");
            self.run(
                host,
                &remote,
                &format!("restart {}", units.join(", ")),
                None,
            )
            .await
        })
    }

    fn describe(&self) -> String {
        format!("ssh ({})", self.program.display())
    }
}

/// The simulator's SSH stand-in.
#[derive(Debug, Clone)]
pub struct SimHost {
    base: url::Url,
    http: reqwest::Client,
}

impl SimHost {
    pub fn new(control: &url::Url) -> Self {
        Self {
            base: super::bmc::sim_base(control),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap_or_default(),
        }
    }
}

impl HostAccess for SimHost {
    fn write_file<'a>(
        &'a self,
        host: &'a HostTarget,
        path: &'a str,
        content: &'a Secret,
        _mode: u32,
    ) -> BoxFuture<'a, Result<(), HostError>> {
        Box::pin(async move {
            let url = self
                .base
                .join(&format!("sim/v1/machines/{}/host/files", host.system_id))
                .map_err(|e| HostError::Setup(e.to_string()))?;
            let body = serde_json::json!({"path": path, "content": content.expose()});
            let response = self.http.post(url).json(&body).send().await.map_err(|e| {
                HostError::Unreachable {
                    host: host.hostname.clone(),
                    address: host.address.clone(),
                    message: e.to_string(),
                }
            })?;
            if response.status().is_success() {
                return Ok(());
            }
            let status = response.status().as_u16();
            let text = response.text().await.unwrap_or_default();
            // 409: the machine is not Deployed, so there is no host answering on the network.
            Err(if status == 409 || status == 404 {
                HostError::Unreachable {
                    host: host.hostname.clone(),
                    address: host.address.clone(),
                    message: text,
                }
            } else {
                HostError::Failed {
                    host: host.hostname.clone(),
                    action: format!("write {path}"),
                    message: text,
                }
            })
        })
    }

    fn restart_units<'a>(
        &'a self,
        _host: &'a HostTarget,
        _units: &'a [&'a str],
    ) -> BoxFuture<'a, Result<(), HostError>> {
        // The simulated host restarts its sync timer as part of the credentials write.
        Box::pin(async { Ok(()) })
    }

    fn describe(&self) -> String {
        format!("simulator hosts at {}", self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_commands_quote_paths_and_carry_no_content() {
        let ssh = SshHost {
            identity: Some(PathBuf::from("/keys/id")),
            port: Some(2222),
            ..SshHost::default()
        };
        let host = HostTarget {
            system_id: "abc".into(),
            hostname: "c07u43".into(),
            address: "10.0.0.9".into(),
            user: "hpcadmin".into(),
        };
        let args = ssh.args(&host, "sudo install /dev/stdin 'x'");
        assert_eq!(
            args.join(" "),
            "-o BatchMode=yes -o ConnectTimeout=10 -o StrictHostKeyChecking=accept-new \
             -i /keys/id -p 2222 hpcadmin@10.0.0.9 -- sudo install /dev/stdin 'x'"
        );
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    }
}
