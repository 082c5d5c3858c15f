//! Where a fleet was read from (DESIGN.md §4: a plan file records the fleet revision).

use std::fmt;

use serde::Serialize;

/// The revision a fleet was read from: a git commit, or a directory's content at read time.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Revision {
    /// A commit read straight from the git object database.
    Commit {
        /// Full 40-hex commit id.
        id: String,
    },
    /// Files on disk. `content_hash` is `sha256:<hex>` over every manifest's relative path and
    /// bytes, so two reads of unchanged files give the same revision.
    #[serde(rename_all = "camelCase")]
    WorkingTree { content_hash: String },
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Revision::Commit { id } => write!(f, "commit {}", &id[..id.len().min(12)]),
            Revision::WorkingTree { content_hash } => {
                let short = content_hash.strip_prefix("sha256:").unwrap_or(content_hash);
                write!(f, "working tree (sha256:{})", &short[..short.len().min(12)])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_short_ids_and_serialises_tagged() {
        let commit = Revision::Commit {
            id: "0123456789abcdef0123456789abcdef01234567".into(),
        };
        assert_eq!(commit.to_string(), "commit 0123456789ab");
        assert_eq!(
            serde_json::to_value(&commit).unwrap(),
            serde_json::json!({"kind": "commit", "id": "0123456789abcdef0123456789abcdef01234567"})
        );
        let tree = Revision::WorkingTree {
            content_hash: format!("sha256:{}", "ab".repeat(32)),
        };
        assert_eq!(tree.to_string(), "working tree (sha256:abababababab)");
        assert_eq!(
            serde_json::to_value(&tree).unwrap()["kind"],
            serde_json::json!("workingTree")
        );
    }
}
