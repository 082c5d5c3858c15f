//! BMC power access (seed 000 §4.3 CreateOrFindInMaas step 3 "IPMI PXE boot cycle + discovery
//! poll"; §4.7 `bmc_power_failure`): a trait with two implementations chosen explicitly by the
//! operator, never guessed.
//!
//! * [`IpmiTool`] drives a real BMC with `ipmitool -I lanplus`. The password travels in the
//!   child's environment (`IPMI_PASSWORD`, read by `-E`), never on its command line, where any
//!   user of the host could read it from `/proc`.
//! * [`SimBmc`] drives the simulator's IPMI stand-in (docs/contracts.md §3
//!   `POST /sim/v1/bmc/{ip}/power`).

use std::path::PathBuf;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::secrets::PowerCredentials;

/// What to do with the chassis power.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerAction {
    On,
    Off,
    /// Off and on again (on when it was off).
    Cycle,
}

impl PowerAction {
    pub fn as_str(self) -> &'static str {
        match self {
            PowerAction::On => "on",
            PowerAction::Off => "off",
            PowerAction::Cycle => "cycle",
        }
    }
}

/// The device the next boot uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootDevice {
    Pxe,
    Disk,
}

impl BootDevice {
    pub fn as_str(self) -> &'static str {
        match self {
            BootDevice::Pxe => "pxe",
            BootDevice::Disk => "disk",
        }
    }
}

/// Why a BMC did not do what it was asked. Never carries the password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BmcError {
    /// No answer (network, wrong address, BMC hung): worth a bounded retry.
    #[error("BMC {address} is unreachable: {message}")]
    Unreachable { address: String, message: String },
    /// The BMC answered and refused (bad credentials, unsupported command).
    #[error("BMC {address} refused `{command}`: {message}")]
    Refused {
        address: String,
        command: String,
        message: String,
    },
    /// The tool itself cannot run here (ipmitool not installed, simulator URL wrong).
    #[error("cannot drive BMCs: {0}")]
    Setup(String),
}

impl BmcError {
    /// Worth retrying unchanged.
    pub fn is_transient(&self) -> bool {
        matches!(self, BmcError::Unreachable { .. })
    }

    pub fn hint(&self) -> &'static str {
        match self {
            BmcError::Unreachable { .. } => {
                "check the BMC address and that the BMC network is reachable from this host"
            }
            BmcError::Refused { .. } => {
                "check the power credentials (site power.defaultCredentials or an override)"
            }
            BmcError::Setup(_) => {
                "install ipmitool (Debian package `ipmitool`), or pass --sim-control for the simulator"
            }
        }
    }
}

/// Chassis power control of one BMC.
pub trait BmcPower: Send + Sync + std::fmt::Debug {
    /// Set the next boot device (when given) and then apply `action`.
    fn power<'a>(
        &'a self,
        address: &'a str,
        credentials: &'a PowerCredentials,
        action: PowerAction,
        boot: Option<BootDevice>,
    ) -> BoxFuture<'a, Result<(), BmcError>>;

    /// A printable name (no credentials).
    fn describe(&self) -> String;
}

/// `ipmitool -I lanplus` against real BMCs.
#[derive(Debug, Clone)]
pub struct IpmiTool {
    /// The program to run (default `ipmitool` from `PATH`).
    pub program: PathBuf,
    /// Per command.
    pub timeout: Duration,
}

impl Default for IpmiTool {
    fn default() -> Self {
        Self {
            program: PathBuf::from("ipmitool"),
            timeout: Duration::from_secs(30),
        }
    }
}

impl IpmiTool {
    /// The argument vector of one `ipmitool` call: the password is never part of it.
    pub fn args(address: &str, user: &str, command: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = ["-I", "lanplus", "-H", address, "-U", user, "-E"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(command.iter().map(|s| s.to_string()));
        args
    }

    async fn run(
        &self,
        address: &str,
        credentials: &PowerCredentials,
        command: &[&str],
    ) -> Result<(), BmcError> {
        let mut child = tokio::process::Command::new(&self.program);
        child
            .args(Self::args(address, &credentials.user, command))
            .env("IPMI_PASSWORD", credentials.pass.expose())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let shown = command.join(" ");
        let output = match tokio::time::timeout(self.timeout, child.output()).await {
            Err(_) => {
                return Err(BmcError::Unreachable {
                    address: address.to_owned(),
                    message: format!("`{shown}` did not finish in {:?}", self.timeout),
                });
            }
            Ok(Err(err)) if err.kind() == std::io::ErrorKind::NotFound => {
                return Err(BmcError::Setup(format!(
                    "`{}` not found",
                    self.program.display()
                )));
            }
            Ok(Err(err)) => return Err(BmcError::Setup(err.to_string())),
            Ok(Ok(output)) => output,
        };
        if output.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let message: String = stderr.trim().chars().take(300).collect();
        // ipmitool's session errors: the BMC did not answer at all.
        let unreachable = ["Unable to establish", "Connection timed out", "no response"]
            .iter()
            .any(|needle| stderr.contains(needle));
        Err(if unreachable {
            BmcError::Unreachable {
                address: address.to_owned(),
                message,
            }
        } else {
            BmcError::Refused {
                address: address.to_owned(),
                command: shown,
                message,
            }
        })
    }
}

impl BmcPower for IpmiTool {
    fn power<'a>(
        &'a self,
        address: &'a str,
        credentials: &'a PowerCredentials,
        action: PowerAction,
        boot: Option<BootDevice>,
    ) -> BoxFuture<'a, Result<(), BmcError>> {
        Box::pin(async move {
            if let Some(boot) = boot {
                self.run(address, credentials, &["chassis", "bootdev", boot.as_str()])
                    .await?;
            }
            match self
                .run(address, credentials, &["chassis", "power", action.as_str()])
                .await
            {
                // A BMC refuses to cycle a chassis that is off; turning it on boots it too.
                Err(BmcError::Refused { message, .. })
                    if action == PowerAction::Cycle
                        && message.contains("not supported in present state") =>
                {
                    self.run(address, credentials, &["chassis", "power", "on"])
                        .await
                }
                other => other,
            }
        })
    }

    fn describe(&self) -> String {
        format!("ipmitool ({})", self.program.display())
    }
}

/// The simulator's IPMI stand-in.
#[derive(Debug, Clone)]
pub struct SimBmc {
    base: url::Url,
    http: reqwest::Client,
}

impl SimBmc {
    /// `control` is the simulator's base URL (`http://127.0.0.1:5240`, with or without
    /// `/sim/v1/`).
    pub fn new(control: &url::Url) -> Self {
        Self {
            base: sim_base(control),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap_or_default(),
        }
    }
}

/// `http://host:port/` from any URL of the simulator (the control API lives at `/sim/v1/`).
pub(crate) fn sim_base(control: &url::Url) -> url::Url {
    let mut base = control.clone();
    base.set_path("/");
    base.set_query(None);
    base
}

impl BmcPower for SimBmc {
    fn power<'a>(
        &'a self,
        address: &'a str,
        _credentials: &'a PowerCredentials,
        action: PowerAction,
        boot: Option<BootDevice>,
    ) -> BoxFuture<'a, Result<(), BmcError>> {
        Box::pin(async move {
            let url = self
                .base
                .join(&format!("sim/v1/bmc/{address}/power"))
                .map_err(|e| BmcError::Setup(e.to_string()))?;
            let body = serde_json::json!({
                "action": action.as_str(),
                "boot": boot.unwrap_or(BootDevice::Disk).as_str(),
            });
            let response = self.http.post(url).json(&body).send().await.map_err(|e| {
                BmcError::Unreachable {
                    address: address.to_owned(),
                    message: e.to_string(),
                }
            })?;
            let status = response.status();
            if status.is_success() {
                return Ok(());
            }
            let text = response.text().await.unwrap_or_default();
            // The simulator answers 404 for an address with no BMC behind it: from the
            // network's point of view, nobody answered.
            Err(if status.as_u16() == 404 {
                BmcError::Unreachable {
                    address: address.to_owned(),
                    message: text,
                }
            } else {
                BmcError::Refused {
                    address: address.to_owned(),
                    command: format!("power {}", action.as_str()),
                    message: text,
                }
            })
        })
    }

    fn describe(&self) -> String {
        format!("simulator BMCs at {}", self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_never_an_argument() {
        let args = IpmiTool::args("10.0.0.5", "root", &["chassis", "power", "cycle"]);
        assert_eq!(
            args.join(" "),
            "-I lanplus -H 10.0.0.5 -U root -E chassis power cycle"
        );
    }

    #[test]
    fn sim_base_drops_the_path() {
        let url = url::Url::parse("http://127.0.0.1:5240/sim/v1/").unwrap();
        assert_eq!(sim_base(&url).as_str(), "http://127.0.0.1:5240/");
    }
}
