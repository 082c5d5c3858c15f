//! OpenBao / HashiCorp Vault KV v2 through vaultrs (seed 000 §3.2: read at use time, written on
//! credential rotation). HTTP failures are classified once here: 404 → not found, 403 → denied,
//! connection errors and 5xx → unavailable (transient).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use futures::future::BoxFuture;
use vaultrs::client::{VaultClient, VaultClientSettingsBuilder};
use vaultrs::error::ClientError;

use super::{Secret, SecretData, SecretError, SecretRef, SecretStore};

pub struct VaultStore {
    client: VaultClient,
    address: String,
}

impl std::fmt::Debug for VaultStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VaultStore")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl VaultStore {
    /// A client for `address` (`https://HOST:PORT`, or `http://…`) with `token`, trusting the
    /// PEM certificates in `ca_file` besides the system's roots. Certificates are always
    /// verified (`VAULT_SKIP_VERIFY` is not honoured).
    pub fn new(
        address: &str,
        token: Secret,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Self, SecretError> {
        let invalid = |reason: String| SecretError::InvalidUrl {
            url: address.to_owned(),
            reason,
        };
        let parsed = url::Url::parse(address).map_err(|e| invalid(e.to_string()))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(invalid("expected http(s)://HOST:PORT".into()));
        }
        // reqwest is built without a bundled TLS provider; the binary installs ring, and so do
        // we here for library users (a second install is a no-op error).
        let _ = rustls::crypto::ring::default_provider().install_default();
        if let Some(path) = ca_file
            && let Err(e) = std::fs::metadata(path)
        {
            return Err(invalid(format!("the CA bundle {}: {e}", path.display())));
        }
        let settings = VaultClientSettingsBuilder::default()
            .address(address)
            .token(token.expose())
            .timeout(Some(Duration::from_secs(10)))
            .verify(true)
            .ca_certs(
                ca_file
                    .map(|p| vec![p.display().to_string()])
                    .unwrap_or_default(),
            )
            .build()
            .map_err(|e| invalid(e.to_string()))?;
        let client = VaultClient::new(settings).map_err(|e| invalid(e.to_string()))?;
        Ok(Self {
            client,
            address: address.to_owned(),
        })
    }

    fn backend(&self) -> String {
        format!("vault at {}", self.address)
    }

    fn classify(&self, path: &str, err: ClientError) -> SecretError {
        match err {
            ClientError::APIError { code: 404, .. } => SecretError::NotFound {
                path: path.to_owned(),
                backend: self.backend(),
            },
            ClientError::APIError {
                code: 401 | 403, ..
            } => SecretError::Denied {
                path: path.to_owned(),
                backend: self.backend(),
            },
            ClientError::APIError { code, errors } if code >= 500 => SecretError::Unavailable {
                backend: self.backend(),
                message: format!("HTTP {code}: {}", errors.join("; ")),
            },
            ClientError::APIError { code, errors } => SecretError::Backend {
                backend: self.backend(),
                message: format!("HTTP {code}: {}", errors.join("; ")),
            },
            ClientError::RestClientError { source } => SecretError::Unavailable {
                backend: self.backend(),
                message: error_chain(&source),
            },
            other => SecretError::Backend {
                backend: self.backend(),
                message: error_chain(&other),
            },
        }
    }
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

impl SecretStore for VaultStore {
    fn read<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<SecretData, SecretError>> {
        Box::pin(async move {
            let (mount, inner) = SecretRef::split(path)?;
            let data: HashMap<String, serde_json::Value> =
                vaultrs::kv2::read(&self.client, mount, inner)
                    .await
                    .map_err(|e| self.classify(path, e))?;
            Ok(SecretData {
                path: path.to_owned(),
                fields: data
                    .into_iter()
                    .map(|(k, v)| {
                        let value = match v {
                            serde_json::Value::String(s) => s,
                            other => other.to_string(),
                        };
                        (k, Secret::new(value))
                    })
                    .collect(),
            })
        })
    }

    fn write<'a>(
        &'a self,
        path: &'a str,
        fields: &'a BTreeMap<String, Secret>,
    ) -> BoxFuture<'a, Result<(), SecretError>> {
        Box::pin(async move {
            let (mount, inner) = SecretRef::split(path)?;
            let plain: BTreeMap<&str, &str> = fields
                .iter()
                .map(|(k, v)| (k.as_str(), v.expose()))
                .collect();
            vaultrs::kv2::set(&self.client, mount, inner, &plain)
                .await
                .map(|_| ())
                .map_err(|e| self.classify(path, e))
        })
    }

    fn describe(&self) -> String {
        self.backend()
    }
}
