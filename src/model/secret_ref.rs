//! Secret references (seed 000 §3.2, docs/contracts.md §2): the model names where a secret lives
//! in Vault KV v2, never the secret itself.

use std::fmt;

use serde::{Deserialize, Serialize};

/// `{vault: <mount>/<path>, key: <field>}` from a manifest. The first path segment is the KV v2
/// mount (`kv/maas-sites/dc1/api-token` = mount `kv`, path `maas-sites/dc1/api-token`). Without
/// `key` the reference names the whole secret (power credentials `{user, pass}`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SecretRef {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl SecretRef {
    pub fn new(path: impl Into<String>, key: Option<&str>) -> Self {
        Self {
            path: path.into(),
            key: key.map(str::to_string),
        }
    }

    /// The KV v2 mount: the first segment of the path.
    pub fn mount(&self) -> &str {
        self.path
            .split_once('/')
            .map_or(&self.path, |(mount, _)| mount)
    }

    /// The path inside the mount.
    pub fn path_in_mount(&self) -> &str {
        self.path.split_once('/').map_or("", |(_, rest)| rest)
    }
}

/// `kv/maas-sites/dc1/deploy#password`, or just the path for a whole-secret reference. This is
/// how references appear in diffs and messages: paths only.
impl fmt::Display for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(f, "{}#{key}", self.path),
            None => f.write_str(&self.path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_mount_and_shows_path_only() {
        let r = SecretRef::new("kv/maas-sites/dc1/api-token", Some("token"));
        assert_eq!(r.mount(), "kv");
        assert_eq!(r.path_in_mount(), "maas-sites/dc1/api-token");
        assert_eq!(r.to_string(), "kv/maas-sites/dc1/api-token#token");
        assert_eq!(
            SecretRef::new("kv/p/default", None).to_string(),
            "kv/p/default"
        );
    }
}
