//! The MAAS client handle and its options (API_REFERENCE §1 base URL, §2 credentials).
//!
//! `MaasClient::new("http://10.0.0.1:5240/MAAS", key, options)` talks to
//! `http://10.0.0.1:5240/MAAS/api/2.0/`. It is cheap to clone (one connection pool, shared
//! counters) and safe to use from many tasks at once. Operations live in the files of their
//! resource family (machines, power, storage, interfaces, subnets, events, hwsync, version).

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use url::Url;

use crate::clock::{Clock, SystemClock};
use crate::secrets::Secret;

use super::auth::ApiKey;
use super::error::MaasError;
use super::metrics::MaasMetrics;
use super::retry::{Jitter, RetryPolicy, SeededJitter, Sleeper, TokioSleeper};
use super::transport::Transport;

/// How a [`MaasClient`] behaves. `Default` is what production uses.
#[derive(Debug, Clone)]
pub struct MaasClientOptions {
    /// Whole-request timeout (connect, send, complete body). Listing thousands of machines
    /// takes real MAAS tens of seconds, hence the generous default of 90 s.
    pub timeout: Duration,
    /// TCP/TLS connect timeout (default 10 s).
    pub connect_timeout: Duration,
    pub retry: RetryPolicy,
    /// Where requests are counted; pass a shared handle to aggregate several clients.
    pub metrics: MaasMetrics,
    /// Source of OAuth timestamps (and of "now" for HTTP-date `Retry-After`).
    pub clock: Arc<dyn Clock>,
    /// Source of retry jitter.
    pub jitter: Arc<dyn Jitter>,
    /// How the client waits between attempts.
    pub sleeper: Arc<dyn Sleeper>,
    /// PEM certificates (a CA bundle) trusted for https MAAS URLs besides the system's roots:
    /// a MAAS whose certificate an internal CA signed. Default: `METALFORM_MAAS_CA_FILE`.
    pub ca_file: Option<std::path::PathBuf>,
}

/// The environment variable naming a CA bundle for https MAAS URLs.
pub const MAAS_CA_FILE_ENV: &str = "METALFORM_MAAS_CA_FILE";

impl Default for MaasClientOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(90),
            connect_timeout: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            metrics: MaasMetrics::new(),
            clock: Arc::new(SystemClock),
            jitter: Arc::new(SeededJitter::from_os()),
            sleeper: Arc::new(TokioSleeper),
            ca_file: std::env::var_os(MAAS_CA_FILE_ENV).map(std::path::PathBuf::from),
        }
    }
}

/// A MAAS API 2.0 client. See the module docs of `provider::maas` for the wire rules.
#[derive(Clone)]
pub struct MaasClient {
    transport: Arc<Transport>,
}

impl MaasClient {
    /// A client for the MAAS at `base_url` (like `http://10.0.0.1:5240/MAAS`; a URL already
    /// ending in `/api/2.0` is taken as is). Makes no request.
    pub fn new(
        base_url: &str,
        api_key: Secret,
        options: MaasClientOptions,
    ) -> Result<Self, MaasError> {
        let api_root = api_root(base_url)?;
        let key = ApiKey::parse(&api_key)?;
        let ca_pem = match &options.ca_file {
            Some(path) => Some(std::fs::read(path).map_err(|e| ca_error(path, e.to_string()))?),
            None => None,
        };
        // A client of an http:// MAAS never makes a TLS connection (redirects are not
        // followed), so it does not load the system's roots.
        let tls = if api_root.scheme() == "http" && ca_pem.is_none() {
            Ok(tls_config_without_roots())
        } else {
            shared_tls_config(ca_pem.as_deref())
        }
        .map_err(|why| match &options.ca_file {
            Some(path) => ca_error(path, why),
            None => MaasError::Config {
                message: format!("cannot build the HTTP client: {why}"),
            },
        })?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .connect_timeout(options.connect_timeout)
            .user_agent(concat!("metalform/", env!("CARGO_PKG_VERSION")))
            // MAAS answers API clients directly; a redirect would be a misconfigured URL and
            // following it could replay a POST somewhere else.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|err| MaasError::Config {
                message: format!("cannot build the HTTP client: {err}"),
            })?;
        Ok(Self {
            transport: Arc::new(Transport {
                http,
                api_root,
                key,
                timeout: options.timeout,
                retry: options.retry,
                metrics: options.metrics,
                clock: options.clock,
                jitter: options.jitter,
                sleeper: options.sleeper,
            }),
        })
    }

    /// `…/MAAS/api/2.0/`, the root every path is relative to.
    pub fn api_root(&self) -> &Url {
        &self.transport.api_root
    }

    /// The request counters this client adds to.
    pub fn metrics(&self) -> &MaasMetrics {
        &self.transport.metrics
    }

    pub(crate) fn transport(&self) -> &Transport {
        &self.transport
    }
}

impl fmt::Debug for MaasClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaasClient")
            .field("api_root", &self.transport.api_root.as_str())
            .field("key", &self.transport.key)
            .finish_non_exhaustive()
    }
}

fn ca_error(path: &std::path::Path, why: String) -> MaasError {
    MaasError::Config {
        message: format!("the MAAS CA bundle {}: {why}", path.display()),
    }
}

/// The TLS settings of every MAAS client of this process with the same CA bundle (`None`: the
/// system's roots only). Loading the system's roots reads and parses every certificate under
/// /etc/ssl: a fleet of 20 sites paid it 20 times per `plan`. They are loaded once per process
/// and bundle instead (a changed system store is seen by the next process, a changed bundle
/// by the next client). What reqwest would build itself: the platform verifier, TLS 1.2 and
/// 1.3, and h2 or http/1.1 by ALPN.
fn shared_tls_config(ca_pem: Option<&[u8]>) -> Result<rustls::ClientConfig, String> {
    static CONFIGS: Mutex<Vec<(Option<Vec<u8>>, rustls::ClientConfig)>> = Mutex::new(Vec::new());
    let mut configs = CONFIGS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, config)) = configs.iter().find(|(pem, _)| pem.as_deref() == ca_pem) {
        return Ok(config.clone());
    }
    let provider = crypto_provider();
    let verifier = match ca_pem {
        None => rustls_platform_verifier::Verifier::new(provider.clone()),
        Some(pem) => {
            use rustls::pki_types::{CertificateDer, pem::PemObject as _};
            let certs = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            if certs.is_empty() {
                return Err("holds no PEM certificate".into());
            }
            rustls_platform_verifier::Verifier::new_with_extra_roots(certs, provider.clone())
        }
    }
    .map_err(|e| e.to_string())?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    configs.push((ca_pem.map(<[u8]>::to_vec), config.clone()));
    Ok(config)
}

/// TLS settings that trust no certificate, for a client that only speaks plain HTTP.
fn tls_config_without_roots() -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default protocol versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
}

/// reqwest is built without a default TLS provider; the CLI installs ring at start, and
/// library users (tests, the daemon) get the same one here. Installing twice is a no-op.
fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// `http://host:5240/MAAS` → `http://host:5240/MAAS/api/2.0/`.
fn api_root(base_url: &str) -> Result<Url, MaasError> {
    let config = |message: String| MaasError::Config { message };
    let mut url = Url::parse(base_url.trim())
        .map_err(|err| config(format!("the MAAS URL {base_url:?} is not a URL: {err}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(config(format!(
            "the MAAS URL must be http or https, not {:?}",
            url.scheme()
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        // Credentials travel in the OAuth header only; a URL is logged and shown in errors.
        return Err(config(
            "the MAAS URL must not contain a user or password; the API key authenticates"
                .to_owned(),
        ));
    }
    url.set_query(None);
    url.set_fragment(None);
    let path = url.path().trim_end_matches('/').to_owned();
    let path = if path.ends_with("/api/2.0") {
        format!("{path}/")
    } else {
        format!("{path}/api/2.0/")
    };
    url.set_path(&path);
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_root_is_derived_from_the_maas_url() {
        for base in [
            "http://10.0.0.1:5240/MAAS",
            "http://10.0.0.1:5240/MAAS/",
            "http://10.0.0.1:5240/MAAS/api/2.0",
            "http://10.0.0.1:5240/MAAS/api/2.0/",
            " http://10.0.0.1:5240/MAAS?x=1#y ",
        ] {
            assert_eq!(
                api_root(base).unwrap().as_str(),
                "http://10.0.0.1:5240/MAAS/api/2.0/",
                "{base}"
            );
        }
        assert_eq!(
            api_root("https://maas.example").unwrap().as_str(),
            "https://maas.example/api/2.0/"
        );
    }

    #[test]
    fn unusable_urls_are_configuration_errors() {
        assert_eq!(
            api_root("ftp://x/MAAS").unwrap_err().to_string(),
            "MAAS client configuration: the MAAS URL must be http or https, not \"ftp\""
        );
        assert!(
            api_root("http://admin:pw@x/MAAS")
                .unwrap_err()
                .to_string()
                .contains("must not contain a user or password")
        );
        assert!(
            api_root("10.0.0.1:5240")
                .unwrap_err()
                .to_string()
                .starts_with(
                    "MAAS client configuration: the MAAS URL \"10.0.0.1:5240\" is not a URL"
                )
        );
    }

    #[test]
    fn debug_never_shows_the_api_key_secret() {
        let client = MaasClient::new(
            "http://127.0.0.1:5240/MAAS",
            Secret::new("consumer:tokenkey:tokensecret"),
            MaasClientOptions::default(),
        )
        .unwrap();
        let debug = format!("{client:?}");
        assert!(debug.contains("http://127.0.0.1:5240/MAAS/api/2.0/"));
        assert!(!debug.contains("tokensecret") && !debug.contains("tokenkey"));
    }
}
