//! The MAAS client handle and its options (API_REFERENCE §1 base URL, §2 credentials).
//!
//! `MaasClient::new("http://10.0.0.1:5240/MAAS", key, options)` talks to
//! `http://10.0.0.1:5240/MAAS/api/2.0/`. It is cheap to clone (one connection pool, shared
//! counters) and safe to use from many tasks at once. Operations live in the files of their
//! resource family (machines, power, storage, interfaces, subnets, events, hwsync, version).

use std::fmt;
use std::sync::Arc;
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
        // reqwest is built without a default TLS provider; the CLI installs ring at start, and
        // library users (tests, the daemon) get the same one here. Installing twice is a no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder();
        if let Some(path) = &options.ca_file {
            let config = |why: String| MaasError::Config {
                message: format!("the MAAS CA bundle {}: {why}", path.display()),
            };
            let pem = std::fs::read(path).map_err(|e| config(e.to_string()))?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| config(e.to_string()))?;
            if certs.is_empty() {
                return Err(config("holds no PEM certificate".into()));
            }
            builder = builder.tls_certs_merge(certs);
        }
        let http = builder
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
