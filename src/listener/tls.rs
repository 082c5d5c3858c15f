//! TLS for the listeners (rustls): the operator's certificate and key, or a development CA the
//! server makes on its first start and keeps in a directory (docs/agent.md "TLS"). Plain HTTP
//! exists only as an explicit choice ([`TlsSetting::Off`]).
//!
//! The development CA is an ECDSA P-256 key kept as `ca-key.pem` (0600) beside `ca.pem`; its
//! name is derived from its key, so the same key always yields the same issuer and the server
//! certificate (issued afresh for the listener's names at each start, 825 days) chains to the
//! `ca.pem` hosts were given at deploy time. Deployed hosts pin that CA (cloud-init layer b
//! writes it to /etc/metalform/ca.pem).

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

/// A calendar day as rcgen wants it.
macro_rules! date {
    ($day:expr) => {{
        use chrono::Datelike;
        let day = $day;
        rcgen::date_time_ymd(day.year(), day.month() as u8, day.day() as u8)
    }};
}

/// How a listener speaks TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsSetting {
    /// Plain HTTP, only when the operator asks for it (a lab, or TLS ended in front).
    Off,
    /// The operator's PEM certificate chain and private key. `client_ca` is the CA bundle
    /// deployed hosts are given to pin; without it they use their system roots.
    Files {
        cert: PathBuf,
        key: PathBuf,
        client_ca: Option<PathBuf>,
    },
    /// A development CA kept in `dir` (made on first start); the server certificate names
    /// `names` (host names and addresses the clients use).
    DevCa { dir: PathBuf, names: Vec<String> },
}

impl TlsSetting {
    /// A development CA in `dir`, the server certificate naming only the local addresses.
    pub fn dev_ca(dir: impl Into<PathBuf>) -> TlsSetting {
        TlsSetting::DevCa {
            dir: dir.into(),
            names: Vec::new(),
        }
    }

    pub fn is_off(&self) -> bool {
        matches!(self, TlsSetting::Off)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds no {what} in PEM form")]
    NoPem { what: &'static str, path: PathBuf },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the development CA in {dir}: {message}")]
    DevCa { dir: PathBuf, message: String },
    #[error("the certificate and key do not make a TLS configuration: {0}")]
    Config(String),
}

impl TlsError {
    pub fn hint(&self) -> &'static str {
        match self {
            TlsError::Read { .. } | TlsError::NoPem { .. } => {
                "give PEM files: the certificate chain (leaf first) and its private key"
            }
            TlsError::Write { .. } | TlsError::DevCa { .. } => {
                "the directory must be writable by metalform; delete a damaged ca.pem/ca-key.pem pair to make a new CA (hosts deployed with the old one must then be given the new ca.pem)"
            }
            TlsError::Config(_) => {
                "check that the key belongs to the first certificate of the chain"
            }
        }
    }
}

/// A listener's TLS, ready to accept.
#[derive(Clone)]
pub struct ServerTls {
    pub(super) acceptor: tokio_rustls::TlsAcceptor,
    /// The PEM bundle deployed hosts pin (the development CA, or the operator's `client_ca`).
    pub client_ca: Option<String>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("client_ca", &self.client_ca.is_some())
            .finish_non_exhaustive()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(what: &'static str, path: &Path) -> Result<String, TlsError> {
    std::fs::read_to_string(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

fn certificates(pem: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(TlsError::NoPem {
            what: "certificate",
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<ServerConfig, TlsError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Agents that heartbeat reconnect every time (they do not hold idle connections): a
    // resumed session (a stateless ticket, rotated every 6 hours) skips the certificate and its
    // signature, so a reconnect costs a key exchange only.
    config.ticketer = rustls::crypto::ring::Ticketer::new()
        .map_err(|e| TlsError::Config(format!("session tickets: {e}")))?;
    config.send_tls13_tickets = 1;
    config.session_storage = rustls::server::ServerSessionMemoryCache::new(4096);
    Ok(config)
}

impl ServerTls {
    /// The TLS of `setting`; `None` for plain HTTP.
    pub fn load(setting: &TlsSetting) -> Result<Option<ServerTls>, TlsError> {
        match setting {
            TlsSetting::Off => Ok(None),
            TlsSetting::Files {
                cert,
                key,
                client_ca,
            } => {
                let chain = certificates(&read("certificate", cert)?, cert)?;
                let key_pem = read("private key", key)?;
                let private = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|_| {
                    TlsError::NoPem {
                        what: "private key",
                        path: key.clone(),
                    }
                })?;
                let client_ca = match client_ca {
                    Some(path) => {
                        let pem = read("CA bundle", path)?;
                        certificates(&pem, path)?;
                        Some(pem)
                    }
                    None => None,
                };
                Ok(Some(ServerTls {
                    acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server_config(
                        chain, private,
                    )?)),
                    client_ca,
                }))
            }
            TlsSetting::DevCa { dir, names } => {
                let ca = DevCa::open_or_create(dir)?;
                let (chain, key) = ca.issue_server(names)?;
                Ok(Some(ServerTls {
                    acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server_config(chain, key)?)),
                    client_ca: Some(ca.cert_pem),
                }))
            }
        }
    }
}

/// A development CA on disk.
pub struct DevCa {
    dir: PathBuf,
    key: rcgen::KeyPair,
    /// What deployed hosts pin.
    pub cert_pem: String,
}

const CA_CERT: &str = "ca.pem";
const CA_KEY: &str = "ca-key.pem";

impl DevCa {
    /// The CA in `dir`, made (with the directory, 0700) when it does not exist yet.
    pub fn open_or_create(dir: &Path) -> Result<DevCa, TlsError> {
        let dev = |message: String| TlsError::DevCa {
            dir: dir.to_owned(),
            message,
        };
        let cert_path = dir.join(CA_CERT);
        let key_path = dir.join(CA_KEY);
        match (cert_path.exists(), key_path.exists()) {
            (true, true) => {
                let key = rcgen::KeyPair::from_pem(&read("CA key", &key_path)?)
                    .map_err(|e| dev(format!("{CA_KEY} is not a private key: {e}")))?;
                let cert_pem = read("CA certificate", &cert_path)?;
                certificates(&cert_pem, &cert_path)?;
                Ok(DevCa {
                    dir: dir.to_owned(),
                    key,
                    cert_pem,
                })
            }
            (false, false) => {
                std::fs::create_dir_all(dir).map_err(|source| TlsError::Write {
                    path: dir.to_owned(),
                    source,
                })?;
                let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
                let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
                    .map_err(|e| dev(e.to_string()))?;
                let cert = ca_params(&key)
                    .self_signed(&key)
                    .map_err(|e| dev(e.to_string()))?;
                write_private(&key_path, &key.serialize_pem())?;
                write_public(&cert_path, &cert.pem())?;
                tracing::warn!(dir = %dir.display(), "created a development CA: hosts deployed from now on pin its ca.pem; use an operator certificate in production");
                Ok(DevCa {
                    dir: dir.to_owned(),
                    key,
                    cert_pem: cert.pem(),
                })
            }
            _ => Err(dev(format!(
                "only one of {CA_CERT} and {CA_KEY} exists; refusing to make a new CA over it"
            ))),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A server certificate for `names` (DNS names or IP addresses), signed by this CA: the
    /// chain (leaf, CA) and the leaf's key.
    pub fn issue_server(
        &self,
        names: &[String],
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
        let dev = |message: String| TlsError::DevCa {
            dir: self.dir.clone(),
            message,
        };
        let mut names: Vec<String> = names.to_vec();
        for local in ["localhost", "127.0.0.1", "::1"] {
            if !names.iter().any(|n| n == local) {
                names.push(local.to_owned());
            }
        }
        let mut params = rcgen::CertificateParams::new(names).map_err(|e| dev(e.to_string()))?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "metalform listener");
        let today = chrono::Utc::now().date_naive();
        params.not_before = date!(today - chrono::Days::new(1));
        params.not_after = date!(today + chrono::Days::new(825));
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let leaf_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| dev(e.to_string()))?;
        let issuer = rcgen::Issuer::new(ca_params(&self.key), &self.key);
        let leaf = params
            .signed_by(&leaf_key, &issuer)
            .map_err(|e| dev(e.to_string()))?;
        let ca = certificates(&self.cert_pem, &self.dir.join(CA_CERT))?;
        let mut chain = vec![leaf.der().clone()];
        chain.extend(ca);
        let key = PrivateKeyDer::try_from(leaf_key.serialize_der())
            .map_err(|e| dev(format!("the new key: {e}")))?;
        Ok((chain, key))
    }
}

/// The CA's parameters, a function of its key only: issuing again after a restart produces
/// the same issuer name and key identifier as the certificate hosts pinned.
fn ca_params(key: &rcgen::KeyPair) -> rcgen::CertificateParams {
    let id = hex::encode(&Sha256::digest(key.public_key_raw())[..6]);
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("metalform development CA {id}"),
    );
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "metalform");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let today = chrono::Utc::now().date_naive();
    params.not_before = date!(today - chrono::Days::new(1));
    params.not_after = date!(today + chrono::Days::new(3650));
    params
}

fn write_private(path: &Path, text: &str) -> Result<(), TlsError> {
    let err = |source| TlsError::Write {
        path: path.to_owned(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    file.write_all(text.as_bytes()).map_err(err)?;
    file.sync_all().map_err(err)
}

fn write_public(path: &Path, text: &str) -> Result<(), TlsError> {
    std::fs::write(path, text).map_err(|source| TlsError::Write {
        path: path.to_owned(),
        source,
    })
}
