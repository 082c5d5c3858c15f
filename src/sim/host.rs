//! What a simulated deployed machine does with its user_data (docs/contracts.md §4).
//!
//! MAAS serves the stored user_data base64-decoded when it is valid base64; a `#cloud-config`
//! document's `write_files` become the host's files.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use saphyr::{LoadableYamlNode, Yaml};

/// The env file the metalform cloud-init layer writes for the node agent.
pub const AGENT_ENV_PATH: &str = "/etc/metalform/agent.env";
/// The hardware-sync credentials file (seed 000 §9.1).
pub const MAAS_CREDS_PATH: &str = "/etc/maas/maas-machine-creds.yml";

/// A booted host whose agent should enroll.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentBoot {
    pub system_id: String,
    pub hostname: String,
    /// The boot this agent belongs to (a redeploy or release makes it stale).
    pub boot: u64,
    pub url: String,
    pub token: String,
    /// Real time from boot to the first call.
    pub delay: Duration,
    /// Real time of the first retry back-off (doubles, capped).
    pub retry_base: Duration,
}

/// The units MAAS's vendor-data installs for hardware sync (metadataserver/vendor_data.py).
pub const MAAS_SYNC_TIMER: &str = "/lib/systemd/system/maas_hardware_sync.timer";
pub const MAAS_SYNC_SERVICE: &str = "/lib/systemd/system/maas_hardware_sync.service";

/// The two cloud-config keys that decide what lands on a host and what runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CloudConfig {
    /// `write_files` (`None`: the key is absent).
    pub files: Option<BTreeMap<String, String>>,
    /// `runcmd`, each command as one line (`None`: the key is absent).
    pub runcmd: Option<Vec<String>>,
}

/// The machine token a host's hardware sync posts with.
#[derive(Debug, Clone, Copy)]
pub struct SyncToken<'a> {
    pub consumer_key: &'a str,
    pub token_key: &'a str,
    pub token_secret: &'a str,
}

/// MAAS's vendor-data for a machine deployed with `enable_hw_sync`
/// (`generate_hardware_sync_systemd_configuration`): the timer and service units, the
/// credentials file with the machine's token, and the commands starting the timer.
pub fn hw_sync_vendor_data(maas_url: &str, system_id: &str, token: SyncToken<'_>) -> CloudConfig {
    let creds = format!(
        "reporting:\n  maas:\n    consumer_key: {}\n    endpoint: {maas_url}/metadata/status/{system_id}\n    token_key: {}\n    token_secret: {}\n",
        token.consumer_key, token.token_key, token.token_secret
    );
    CloudConfig {
        files: Some(BTreeMap::from([
            (
                MAAS_SYNC_TIMER.to_string(),
                "[Unit]\nDescription=Timer for periodically running MAAS hardware sync\n".to_string(),
            ),
            (
                MAAS_SYNC_SERVICE.to_string(),
                "[Service]\nType=oneshot\nExecStart=/usr/bin/maas-run-scripts report-results --config /etc/maas/maas-machine-creds.yml\n".to_string(),
            ),
            (MAAS_CREDS_PATH.to_string(), creds),
        ])),
        runcmd: Some(vec![
            "systemctl daemon-reload".to_string(),
            "systemctl start maas_hardware_sync.timer".to_string(),
            "systemctl enable maas_hardware_sync.timer".to_string(),
        ]),
    }
}

/// What cloud-init applies when MAAS serves vendor-data and user-data: the user-data's
/// cloud-config keys replace the vendor-data's (cloud-init's default merge), so user-data with
/// its own `write_files` or `runcmd` silently drops MAAS's hardware-sync setup.
pub fn merge(vendor: CloudConfig, user: CloudConfig) -> CloudConfig {
    CloudConfig {
        files: user.files.or(vendor.files),
        runcmd: user.runcmd.or(vendor.runcmd),
    }
}

/// Whether a hardware-sync timer is installed and started: a `*sync*.timer` unit file on the
/// host that a command enabled or started.
pub fn sync_timer_started(files: &BTreeMap<String, String>, runcmd: &[String]) -> bool {
    files.keys().any(|path| {
        let unit = path.rsplit('/').next().unwrap_or(path);
        unit.ends_with(".timer")
            && unit.contains("sync")
            && runcmd.iter().any(|line| {
                line.contains(unit) && (line.contains("enable") || line.contains("start"))
            })
    })
}

/// Whether a credentials file holds this token (a stale one, of an earlier ownership, is
/// refused by MAAS's metadata API).
pub fn creds_valid(content: &str, token: SyncToken<'_>) -> bool {
    content.contains(token.token_key) && content.contains(token.token_secret)
}

/// Decodes base64 the way Python's `b64decode` does by default: whitespace and other
/// non-alphabet bytes are skipped (python-libmaas sends `encodebytes` output with newlines).
pub fn lenient_base64(text: &str) -> Option<Vec<u8>> {
    let cleaned: String = text
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '='))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(cleaned)
        .ok()
}

/// The user_data as cloud-init receives it: decoded if it is valid base64, else as stored.
pub fn served_user_data(stored: &str) -> String {
    match lenient_base64(stored).and_then(|b| String::from_utf8(b).ok()) {
        Some(text) if !stored.trim().is_empty() => text,
        _ => stored.to_string(),
    }
}

/// The files a `#cloud-config` user_data writes (`write_files`, `encoding: b64` honoured).
pub fn files_from_user_data(stored: &str) -> BTreeMap<String, String> {
    cloud_config(stored).files.unwrap_or_default()
}

/// The `write_files` and `runcmd` of a `#cloud-config` user_data (nothing for other kinds).
pub fn cloud_config(stored: &str) -> CloudConfig {
    let text = served_user_data(stored);
    if !text.trim_start().starts_with("#cloud-config") {
        return CloudConfig::default();
    }
    let Ok(docs) = Yaml::load_from_str(&text) else {
        return CloudConfig::default();
    };
    let Some(doc) = docs.first() else {
        return CloudConfig::default();
    };
    let runcmd = doc
        .as_mapping_get("runcmd")
        .and_then(|r| r.as_sequence())
        .map(|commands| {
            commands
                .iter()
                .map(|c| match c.as_sequence() {
                    Some(argv) => argv
                        .iter()
                        .filter_map(|a| a.as_str())
                        .collect::<Vec<_>>()
                        .join(" "),
                    None => c.as_str().unwrap_or("").to_string(),
                })
                .collect()
        });
    let files = doc
        .as_mapping_get("write_files")
        .and_then(|w| w.as_sequence())
        .map(|entries| write_files(entries));
    CloudConfig { files, runcmd }
}

fn write_files(entries: &[Yaml<'_>]) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for entry in entries {
        let Some(path) = entry.as_mapping_get("path").and_then(|p| p.as_str()) else {
            continue;
        };
        let content = entry
            .as_mapping_get("content")
            .and_then(|c| c.as_str())
            .unwrap_or("");
        let encoding = entry
            .as_mapping_get("encoding")
            .and_then(|e| e.as_str())
            .unwrap_or("");
        let content = if matches!(encoding, "b64" | "base64") {
            lenient_base64(content)
                .and_then(|b| String::from_utf8(b).ok())
                .unwrap_or_default()
        } else {
            content.to_string()
        };
        files.insert(path.to_string(), content);
    }
    files
}

/// A shell env file: `KEY=value` lines, optional quotes, `#` comments, `export ` prefix.
pub fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let l = l.strip_prefix("export ").unwrap_or(l);
            let (k, v) = l.split_once('=')?;
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(v);
            Some((k.trim().to_string(), v.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_write_files_from_base64_cloud_config() {
        let doc = "#cloud-config\nwrite_files:\n  - path: /etc/metalform/agent.env\n    content: |\n      METALFORM_ENROLL_URL=http://127.0.0.1:9/enroll\n      METALFORM_ENROLL_TOKEN=\"tok-1\"\n  - path: /etc/x\n    encoding: b64\n    content: aGVsbG8=\n";
        let b64 = base64::engine::general_purpose::STANDARD.encode(doc);
        // python-libmaas' encodebytes adds a newline every 76 characters.
        let wrapped: String = b64
            .as_bytes()
            .chunks(76)
            .map(|c| format!("{}\n", String::from_utf8_lossy(c)))
            .collect();
        let files = files_from_user_data(&wrapped);
        assert_eq!(files["/etc/x"], "hello");
        let env = parse_env(&files[AGENT_ENV_PATH]);
        assert_eq!(env["METALFORM_ENROLL_URL"], "http://127.0.0.1:9/enroll");
        assert_eq!(env["METALFORM_ENROLL_TOKEN"], "tok-1");
        assert!(
            files_from_user_data("IyEvYmluL3NoCg==").is_empty(),
            "a shell script has no files"
        );
    }
}
