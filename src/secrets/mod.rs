//! Secrets (seed 000 §3.2, §3.2.1, §3.5; DESIGN.md §6; docs/contracts.md §2): values never
//! stored in the state store, never printed.
//!
//! `Secret` is the one type secret material travels in. Its `Debug` and `Display` print
//! `<redacted>`; the value is reachable only through `expose()`, which is easy to grep for.
//! A [`SecretStore`] reads a secret (a map of fields) at the moment it is used, so a rotated
//! value is picked up without a restart: OpenBao/Vault KV v2 (`vault://HOST:PORT`) or a local
//! JSON file for development and the demo (`file://PATH`). Errors name the path and field,
//! never the value.

mod file;
mod power;
mod reference;
mod value;
mod vault;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;

pub use file::FileStore;
pub use power::PowerCredentials;
pub use reference::SecretRef;
pub use value::Secret;
pub use vault::VaultStore;

/// The fields of one secret, e.g. `{user, pass}` or `{token}`.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SecretData {
    pub path: String,
    pub fields: BTreeMap<String, Secret>,
}

impl std::fmt::Debug for SecretData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Field names are not secret; values are.
        f.debug_struct("SecretData")
            .field("path", &self.path)
            .field("fields", &self.fields.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl SecretData {
    /// One field, or a typed error naming the path and the field.
    pub fn field(&self, key: &str) -> Result<&Secret, SecretError> {
        self.fields.get(key).ok_or_else(|| SecretError::MissingKey {
            path: self.path.clone(),
            key: key.to_owned(),
            available: self.fields.keys().cloned().collect::<Vec<_>>().join(", "),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("invalid secrets URL `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("invalid secret reference `{reference}`: {reason}")]
    InvalidReference { reference: String, reason: String },
    #[error("secret `{path}` not found in {backend}")]
    NotFound { path: String, backend: String },
    #[error("secret `{path}` has no field `{key}` (fields: {available})")]
    MissingKey {
        path: String,
        key: String,
        available: String,
    },
    #[error("access to secret `{path}` denied by {backend} (check the token's policy)")]
    Denied { path: String, backend: String },
    #[error("secret backend {backend} unavailable: {message}")]
    Unavailable { backend: String, message: String },
    #[error("secret backend {backend}: {message}")]
    Backend { backend: String, message: String },
}

impl SecretError {
    /// Worth retrying later (server down, timeout, 5xx); the executor classifies it as
    /// `upstream_transient` (000 §4.7).
    pub fn is_transient(&self) -> bool {
        matches!(self, SecretError::Unavailable { .. })
    }

    /// What the operator should do, for the CLI's `hint:` line.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            SecretError::NotFound { .. } | SecretError::MissingKey { .. } => Some(
                "write the secret (e.g. `bao kv put -mount=<mount> <path> key=value`) or fix the reference in the manifest",
            ),
            SecretError::Denied { .. } => {
                Some("set VAULT_TOKEN to a token whose policy can read this path")
            }
            SecretError::Unavailable { .. } => {
                Some("check that the Vault/OpenBao server is up and reachable, then retry")
            }
            SecretError::InvalidUrl { .. } => Some(
                "use --secrets vault://HOST:PORT (https; token from VAULT_TOKEN, CA from VAULT_CACERT), vault+http://HOST:PORT for plain http, or file://PATH",
            ),
            _ => None,
        }
    }
}

/// Where secrets are read from and written to.
pub trait SecretStore: Send + Sync + std::fmt::Debug {
    /// Read the whole secret at `path` (`<mount>/<path>`), now.
    fn read<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<SecretData, SecretError>>;

    /// Write (replace) the secret at `path` — credential rotation (000 §3.5).
    fn write<'a>(
        &'a self,
        path: &'a str,
        fields: &'a BTreeMap<String, Secret>,
    ) -> BoxFuture<'a, Result<(), SecretError>>;

    /// A printable name of the backend (no credentials).
    fn describe(&self) -> String;
}

impl dyn SecretStore + '_ {
    /// Resolve a manifest reference to one value; a reference without `key` must name a secret
    /// with exactly one field.
    pub async fn get(&self, reference: &SecretRef) -> Result<Secret, SecretError> {
        let data = self.read(&reference.path).await?;
        match &reference.key {
            Some(key) => data.field(key).cloned(),
            None if data.fields.len() == 1 => {
                Ok(data.fields.values().next().cloned().expect("one field"))
            }
            None => Err(SecretError::InvalidReference {
                reference: reference.path.clone(),
                reason: "the secret has several fields; name one with `key`".into(),
            }),
        }
    }

    /// Read power credentials `{user, pass}` (000 §3.2).
    pub async fn power_credentials(
        &self,
        reference: &SecretRef,
    ) -> Result<PowerCredentials, SecretError> {
        let data = self.read(&reference.path).await?;
        Ok(PowerCredentials {
            user: data.field("user")?.expose().to_owned(),
            pass: data.field("pass")?.clone(),
        })
    }
}

/// Write a file only its owner can read or write (0600), atomically: for anything that holds
/// a secret (a dev secrets file, the state database's directory holds the plan-signing key).
pub fn write_private_file(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir)?;
    // A NamedTempFile is created 0600 and renamed into place.
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut file, bytes)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Create a directory, and any missing parents, that only its owner can enter (0700).
pub fn create_private_dir(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

/// Open a secret store from a URL: `vault://HOST:PORT` (https; `vault+https://` says the
/// same), `vault+http://HOST:PORT` (plain http, only because the operator wrote it) — token from
/// `VAULT_TOKEN`, extra CA certificates from `VAULT_CACERT` — or `file://PATH`.
pub fn open(url: &str) -> Result<Arc<dyn SecretStore>, SecretError> {
    if let Some(path) = url.strip_prefix("file://") {
        if path.is_empty() {
            return Err(SecretError::InvalidUrl {
                url: url.into(),
                reason: "no path after file://".into(),
            });
        }
        return Ok(Arc::new(FileStore::new(path)));
    }
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("vault+https://") {
        ("https", rest)
    } else if let Some(rest) = url.strip_prefix("vault+http://") {
        ("http", rest)
    } else if let Some(rest) = url.strip_prefix("vault://") {
        ("https", rest)
    } else {
        return Err(SecretError::InvalidUrl {
            url: url.into(),
            reason: "expected vault://HOST:PORT (https), vault+http://HOST:PORT (plain http) or file://PATH".into(),
        });
    };
    let token = std::env::var("VAULT_TOKEN").map_err(|_| SecretError::InvalidUrl {
        url: url.into(),
        reason: "VAULT_TOKEN is not set".into(),
    })?;
    let ca_file = std::env::var_os("VAULT_CACERT").map(std::path::PathBuf::from);
    Ok(Arc::new(VaultStore::new(
        &format!("{scheme}://{}", rest.trim_end_matches('/')),
        Secret::new(token),
        ca_file.as_deref(),
    )?))
}
