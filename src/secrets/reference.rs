//! Secret references in manifests (DESIGN.md §2, docs/contracts.md §2):
//! `{vault: <mount>/<path>, key: <field>}`; the first path segment is the KV v2 mount.

use serde::{Deserialize, Serialize};

use super::SecretError;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SecretRef {
    /// `<mount>/<path>`, e.g. `kv/maas-sites/dc1/api-token`.
    #[serde(rename = "vault")]
    pub path: String,
    /// The field; `None` names the whole secret (e.g. power credentials `{user, pass}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl SecretRef {
    pub fn new(path: impl Into<String>, key: Option<&str>) -> Self {
        Self {
            path: path.into(),
            key: key.map(str::to_owned),
        }
    }

    /// Split into (mount, path within the mount), refusing empty or malformed paths.
    pub fn split(path: &str) -> Result<(&str, &str), SecretError> {
        let invalid = |reason: &str| SecretError::InvalidReference {
            reference: path.to_owned(),
            reason: reason.to_owned(),
        };
        let trimmed = path.trim_matches('/');
        let (mount, rest) = trimmed
            .split_once('/')
            .ok_or_else(|| invalid("expected <mount>/<path>, e.g. kv/maas-sites/dc1/api-token"))?;
        if mount.is_empty() || rest.is_empty() || rest.split('/').any(str::is_empty) {
            return Err(invalid("empty path segment"));
        }
        // `.` and `..` would walk the backend's URL (or the file store's keys) to a secret the
        // reference does not name; other characters have no place in a KV path either.
        for segment in trimmed.split('/') {
            if segment.starts_with('.') {
                return Err(invalid("a path segment starts with `.` (no `.` or `..`)"));
            }
            if !segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            {
                return Err(invalid(
                    "only letters, digits, `_`, `-` and `.` may appear in a path segment",
                ));
            }
        }
        Ok((mount, rest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_segment_is_the_mount() {
        assert_eq!(
            SecretRef::split("kv/maas-sites/dc1/api-token").unwrap(),
            ("kv", "maas-sites/dc1/api-token")
        );
        assert_eq!(
            SecretRef::split("kv").unwrap_err().to_string(),
            "invalid secret reference `kv`: expected <mount>/<path>, e.g. kv/maas-sites/dc1/api-token"
        );
        assert!(SecretRef::split("kv//x").is_err());
        for traversal in [
            "kv/../sys/x",
            "kv/a/../../b",
            "kv/./a",
            "../kv/a",
            "kv/a%2F..",
            "kv/a?x",
        ] {
            assert!(SecretRef::split(traversal).is_err(), "{traversal}");
        }
        let r: SecretRef = serde_json::from_str(r#"{"vault": "kv/a/b", "key": "token"}"#).unwrap();
        assert_eq!(r, SecretRef::new("kv/a/b", Some("token")));
    }
}
