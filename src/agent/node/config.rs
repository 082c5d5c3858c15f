//! The agent's configuration (docs/agent.md "Configuration"): `/etc/metalform/agent.env`, which
//! cloud-init writes (where to enroll, the single-use token, who this host is), and the optional
//! `/etc/metalform/agent.toml` (what the tasks may touch: workload units, scratch paths and data
//! disks, Weka client files, tenant accounts, GPU policy, where each tool is). Unknown keys are
//! errors: a misspelt scratch path must not silently fall back to a default.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::exec::Identity;

/// `"30s"`, `"10m"` (the manifests' duration syntax).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span(pub Duration);

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        crate::model::duration::parse(&text)
            .map(Span)
            .map_err(|e| serde::de::Error::custom(format!("`{text}`: {e}")))
    }
}

/// `agent.toml`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub drain: DrainConfig,
    #[serde(default)]
    pub storage: StorageConfig,
    #[serde(default)]
    pub weka: WekaConfig,
    #[serde(default)]
    pub users: UsersConfig,
    #[serde(default)]
    pub gpu: GpuConfig,
    #[serde(default)]
    pub commands: Commands,
    #[serde(default)]
    pub host: HostConfig,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// The CA bundle the agent pins (default `/etc/metalform/ca.pem` when it exists).
    pub ca_file: Option<PathBuf>,
    /// How long one task poll may wait (the server caps it at 60 s).
    pub poll_wait: Span,
    /// How long after a task (and after starting) the agent long-polls back to back; then it
    /// heartbeats at the interval the server gave (a short poll on a fresh connection), so an
    /// idle fleet holds no connections open.
    pub hot_period: Span,
    /// Back-off after a failed call: from `retry_base`, doubling, to `retry_cap`, with jitter.
    pub retry_base: Span,
    pub retry_cap: Span,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            ca_file: None,
            poll_wait: Span(Duration::from_secs(30)),
            hot_period: Span(Duration::from_secs(300)),
            retry_base: Span(Duration::from_secs(1)),
            retry_cap: Span(Duration::from_secs(60)),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DrainConfig {
    /// Workload units `node.drain` stops (e.g. `slurmd.service`).
    pub units: Vec<String>,
    /// With it, `node.drain` also runs `kubectl drain` for this node.
    pub kubeconfig: Option<PathBuf>,
    /// The node's name in Kubernetes (default: the hostname).
    pub node_name: Option<String>,
    /// How long running work may take to stop.
    pub timeout: Span,
}

impl Default for DrainConfig {
    fn default() -> Self {
        Self {
            units: Vec::new(),
            kubeconfig: None,
            node_name: None,
            timeout: Span(Duration::from_secs(600)),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Directories whose contents `scope: local` removes (never crossing into other mounts).
    pub scratch: Vec<PathBuf>,
    /// Mount points of data disks whose contents `scope: local` removes; each must be mounted
    /// and not on the boot disk.
    pub data_disks: Vec<PathBuf>,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            scratch: vec!["/tmp".into(), "/var/tmp".into()],
            data_disks: Vec::new(),
        }
    }
}

impl StorageConfig {
    /// Every path in the cleanup scope: scratch directories, then data disks.
    pub fn scope(&self) -> Vec<&Path> {
        self.scratch
            .iter()
            .chain(&self.data_disks)
            .map(PathBuf::as_path)
            .collect()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WekaConfig {
    /// The tenant's Weka client configuration, removed by `scope: weka`.
    pub client_config: Vec<PathBuf>,
    /// Local Weka cache directories, emptied by `scope: weka`.
    pub cache: Vec<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsersConfig {
    /// Accounts with a uid in `tenant_uid_min..=tenant_uid_max` are tenants' …
    pub tenant_uid_min: u32,
    pub tenant_uid_max: u32,
    /// … except these (the deploy user from agent.env is always kept).
    pub keep: Vec<String>,
}

impl Default for UsersConfig {
    fn default() -> Self {
        Self {
            tenant_uid_min: 1000,
            tenant_uid_max: 59999,
            keep: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GpuConfig {
    /// A node without a GPU fails `node.gpu_scrub` ("no GPU present") unless this is false.
    pub require: bool,
    /// `node.validate_clean` calls a GPU clean when no more than this is in use (MiB, NVIDIA)
    /// or percent (AMD).
    pub memory_used_max: u64,
}

impl Default for GpuConfig {
    fn default() -> Self {
        Self {
            require: true,
            memory_used_max: 64,
        }
    }
}

/// Where each tool is: a name looked up on PATH, or a path.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Commands {
    pub paths: BTreeMap<String, String>,
    /// A command still running after this is killed.
    pub timeout: Span,
}

impl Default for Commands {
    fn default() -> Self {
        Self {
            paths: BTreeMap::new(),
            timeout: Span(Duration::from_secs(1800)),
        }
    }
}

/// Every tool a task may run.
pub const TOOLS: &[&str] = &[
    "systemctl",
    "kubectl",
    "loginctl",
    "usermod",
    "userdel",
    "pkill",
    "find",
    "umount",
    "sed",
    "rm",
    "chmod",
    "nvidia-smi",
    "rocm-smi",
];

impl Commands {
    pub fn path_of(&self, tool: &str) -> String {
        self.paths
            .get(tool)
            .cloned()
            .unwrap_or_else(|| tool.to_owned())
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostConfig {
    /// Where /etc, /proc and /sys are read (tests point it elsewhere).
    pub root: PathBuf,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self { root: "/".into() }
    }
}

/// A configuration problem: the file and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

impl NodeConfig {
    /// Read `path`; a missing file is the defaults.
    pub fn load(path: &Path) -> Result<NodeConfig, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(NodeConfig::default()),
            Err(e) => {
                return Err(ConfigError {
                    path: path.display().to_string(),
                    message: e.to_string(),
                });
            }
        };
        let config: NodeConfig = toml::from_str(&text).map_err(|e| {
            let at = e
                .span()
                .map(|s| {
                    let before = &text[..s.start.min(text.len())];
                    format!("line {}: ", before.matches('\n').count() + 1)
                })
                .unwrap_or_default();
            ConfigError {
                path: path.display().to_string(),
                message: format!("{at}{}", e.message().trim()),
            }
        })?;
        config.check().map_err(|message| ConfigError {
            path: path.display().to_string(),
            message,
        })?;
        Ok(config)
    }

    fn check(&self) -> Result<(), String> {
        for tool in self.commands.paths.keys() {
            if !TOOLS.contains(&tool.as_str()) {
                return Err(format!(
                    "[commands] paths: unknown tool `{tool}` (known: {})",
                    TOOLS.join(", ")
                ));
            }
        }
        for path in self.storage.scratch.iter().chain(&self.storage.data_disks) {
            if !path.is_absolute() {
                return Err(format!(
                    "[storage] `{}` is not an absolute path",
                    path.display()
                ));
            }
        }
        if self.users.tenant_uid_min == 0 || self.users.tenant_uid_min > self.users.tenant_uid_max {
            return Err(
                "[users] tenant_uid_min must be at least 1 and at most tenant_uid_max".into(),
            );
        }
        Ok(())
    }
}

/// `/etc/metalform/agent.env`: `KEY="value"` lines as cloud-init writes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvFile {
    pub values: BTreeMap<String, String>,
}

impl EnvFile {
    /// Read `path`; a missing file is empty.
    pub fn load(path: &Path) -> Result<EnvFile, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(EnvFile::parse(&text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(EnvFile::default()),
            Err(e) => Err(ConfigError {
                path: path.display().to_string(),
                message: e.to_string(),
            }),
        }
    }

    pub fn parse(text: &str) -> EnvFile {
        let values = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| {
                let v = v.trim();
                let v = v
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or(v);
                (k.trim().to_owned(), v.to_owned())
            })
            .collect();
        EnvFile { values }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// Who this host is.
    pub fn identity(&self) -> Identity {
        Identity {
            hostname: self
                .get("METALFORM_NODE")
                .map(str::to_owned)
                .unwrap_or_else(local_hostname),
            system_id: self
                .get("METALFORM_SYSTEM_ID")
                .unwrap_or_default()
                .to_owned(),
            deploy_user: self.get("METALFORM_DEPLOY_USER").map(str::to_owned),
        }
    }
}

fn local_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_file_is_the_defaults_and_a_bad_one_names_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let config = NodeConfig::load(&dir.path().join("agent.toml")).unwrap();
        assert_eq!(config, NodeConfig::default());
        assert_eq!(
            config.storage.scratch,
            vec![PathBuf::from("/tmp"), "/var/tmp".into()]
        );
        let path = dir.path().join("bad.toml");
        std::fs::write(
            &path,
            "[drain]\nunits = [\"slurmd.service\"]\n\n[storage]\nscrach = [\"/scratch\"]\n",
        )
        .unwrap();
        let err = NodeConfig::load(&path).unwrap_err();
        assert!(
            err.message.starts_with("line 5: unknown field `scrach`"),
            "{err}"
        );
        std::fs::write(
            &path,
            "[commands]\npaths = { nvidia_smi = \"/usr/bin/nvidia-smi\" }\n",
        )
        .unwrap();
        let err = NodeConfig::load(&path).unwrap_err();
        assert!(
            err.message
                .starts_with("[commands] paths: unknown tool `nvidia_smi`"),
            "{err}"
        );
        std::fs::write(&path, "[storage]\nscratch = [\"scratch\"]\n").unwrap();
        assert_eq!(
            NodeConfig::load(&path).unwrap_err().message,
            "[storage] `scratch` is not an absolute path"
        );
    }

    #[test]
    fn the_env_file_as_cloud_init_writes_it() {
        let env = EnvFile::parse(
            "# metalform layer b\nMETALFORM_ENROLL_URL=\"https://10.0.0.5:8741/agent/v1/enroll\"\nMETALFORM_NODE=\"c07u43\"\nMETALFORM_SYSTEM_ID=\"x7k3pa\"\nMETALFORM_DEPLOY_USER=\"hpcadmin\"\n",
        );
        assert_eq!(
            env.get("METALFORM_ENROLL_URL"),
            Some("https://10.0.0.5:8741/agent/v1/enroll")
        );
        assert_eq!(
            env.identity(),
            Identity {
                hostname: "c07u43".into(),
                system_id: "x7k3pa".into(),
                deploy_user: Some("hpcadmin".into())
            }
        );
    }
}
