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
    let text = served_user_data(stored);
    let mut files = BTreeMap::new();
    if !text.trim_start().starts_with("#cloud-config") {
        return files;
    }
    let Ok(docs) = Yaml::load_from_str(&text) else {
        return files;
    };
    let Some(entries) = docs
        .first()
        .and_then(|d| d.as_mapping_get("write_files"))
        .and_then(|w| w.as_sequence())
    else {
        return files;
    };
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
