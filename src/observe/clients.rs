//! MAAS clients per site (seed 000 §3.2, §3.5; DESIGN.md §6): the API key is read from the
//! site's secret reference each time a client is made, so a rotated key is used without a
//! restart; every client counts its requests into one shared [`MaasMetrics`].
//!
//! Observe and the executor both get their clients here.
//!
//! The clients also remember, per site, what observe reads besides the machines list and what
//! seldom changes — the MAAS version and each machine's BMC address — so that observing a
//! site where nothing changed costs one request (the list).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::model::{Site, SiteName};
use crate::provider::maas::{MaasClient, MaasClientOptions, MaasError, MaasMetrics};
use crate::secrets::{self, SecretError, SecretStore};

/// How to reach each site's MAAS.
#[derive(Debug, Clone)]
pub struct MaasClients {
    options: MaasClientOptions,
    endpoints: BTreeMap<SiteName, String>,
    memory: Arc<Mutex<HashMap<SiteName, SiteMemory>>>,
}

/// How long a site's MAAS version is taken as read.
const VERSION_KEPT: Duration = Duration::from_secs(3600);
/// How long BMC addresses read from a site are taken as read: a changed address of a machine
/// already known is seen within this; a new machine's is read when it first appears.
const POWER_KEPT: Duration = Duration::from_secs(600);

/// What observe read from a site's MAAS that a later observation may reuse.
#[derive(Debug, Default, Clone)]
pub struct SiteMemory {
    /// The version, and when it was read.
    pub version: Option<(String, Instant)>,
    /// Each machine's BMC address (`power_address`), by system id; only the address is kept,
    /// never the other (secret) power parameters.
    pub power: HashMap<String, Option<String>>,
    /// When every machine's power parameters were last read at once.
    pub power_read_at: Option<Instant>,
}

impl SiteMemory {
    /// The version, when it was read recently enough.
    pub fn version(&self, now: Instant) -> Option<&str> {
        self.version
            .as_ref()
            .filter(|(_, at)| now.duration_since(*at) < VERSION_KEPT)
            .map(|(v, _)| v.as_str())
    }

    /// Whether every machine's power parameters must be read again (never read, or too long
    /// ago).
    pub fn power_stale(&self, now: Instant) -> bool {
        self.power_read_at
            .is_none_or(|at| now.duration_since(at) >= POWER_KEPT)
    }
}

/// Why no client could be made for a site.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read the MAAS API key of site {site} ({reference}): {source}")]
    ApiKey {
        site: SiteName,
        reference: String,
        #[source]
        source: SecretError,
    },
    #[error("site {site}: {source}")]
    Maas {
        site: SiteName,
        #[source]
        source: MaasError,
    },
}

impl ClientError {
    /// Worth trying again unchanged (the secret backend was unavailable).
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::ApiKey { source, .. } => source.is_transient(),
            ClientError::Maas { source, .. } => source.is_retryable(),
        }
    }

    /// What the operator should do.
    pub fn hint(&self) -> Option<String> {
        match self {
            ClientError::ApiKey { source, .. } => source.hint().map(str::to_owned),
            ClientError::Maas { source, .. } => Some(source.hint().to_owned()),
        }
    }
}

impl MaasClients {
    /// Clients built with `options`; its `metrics` handle is the shared one.
    pub fn new(options: MaasClientOptions) -> Self {
        Self {
            options,
            endpoints: BTreeMap::new(),
            memory: Arc::default(),
        }
    }

    /// Talk to `url` for `site` instead of the URL in its manifest (the demo and tests point
    /// the sample fleet at an embedded simulator). The API key still comes from the site's
    /// secret reference.
    pub fn with_endpoint(mut self, site: SiteName, url: impl Into<String>) -> Self {
        self.endpoints.insert(site, url.into());
        self
    }

    /// The requests made by every client handed out so far.
    pub fn metrics(&self) -> &MaasMetrics {
        &self.options.metrics
    }

    /// The MAAS URL used for a site.
    /// What an earlier observation of the site left to reuse (shared by every clone).
    pub fn memory_of(&self, site: &SiteName) -> SiteMemory {
        self.memory
            .lock()
            .expect("memory lock")
            .get(site)
            .cloned()
            .unwrap_or_default()
    }

    pub fn remember(&self, site: &SiteName, memory: SiteMemory) {
        self.memory
            .lock()
            .expect("memory lock")
            .insert(site.clone(), memory);
    }

    pub fn url_of(&self, site: &Site) -> String {
        self.endpoints
            .get(&site.name)
            .cloned()
            .unwrap_or_else(|| site.maas.url.to_string())
    }

    /// A client for the site's MAAS, with the API key read now.
    pub async fn client(
        &self,
        site: &Site,
        secrets: &dyn SecretStore,
    ) -> Result<MaasClient, ClientError> {
        let reference = secrets::SecretRef::new(
            site.maas.api_key.path.clone(),
            site.maas.api_key.key.as_deref(),
        );
        let key = secrets
            .get(&reference)
            .await
            .map_err(|source| ClientError::ApiKey {
                site: site.name.clone(),
                reference: site.maas.api_key.to_string(),
                source,
            })?;
        MaasClient::new(&self.url_of(site), key, self.options.clone()).map_err(|source| {
            ClientError::Maas {
                site: site.name.clone(),
                source,
            }
        })
    }
}
