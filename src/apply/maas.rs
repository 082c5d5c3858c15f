//! Per-site MAAS access for the stages: a client per site, its API key read from the site's
//! secret reference when first needed (seed 000 §3.2: "read from Vault at execution time"), one
//! shared request counter, and the capability preflight of 000 §4.14 made once per site and run.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::model::Site;
use crate::provider::maas::{MaasClient, MaasClientOptions, MaasMetrics};
use crate::secrets::{SecretRef, SecretStore};
use crate::stages::StageFailure;
use crate::stages::onboard::{MaasAccess, SitePreflight};

#[derive(Debug)]
pub struct SiteMaas {
    secrets: Arc<dyn SecretStore>,
    options: MaasClientOptions,
    clients: tokio::sync::Mutex<BTreeMap<String, MaasClient>>,
    preflights: tokio::sync::Mutex<BTreeMap<String, SitePreflight>>,
}

impl SiteMaas {
    /// `options` is the template of every site's client (its metrics handle is shared).
    pub fn new(secrets: Arc<dyn SecretStore>, options: MaasClientOptions) -> Self {
        Self {
            secrets,
            options,
            clients: tokio::sync::Mutex::new(BTreeMap::new()),
            preflights: tokio::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// The requests made to every site so far.
    pub fn metrics(&self) -> &MaasMetrics {
        &self.options.metrics
    }
}

impl MaasAccess for SiteMaas {
    fn client<'a>(&'a self, site: &'a Site) -> BoxFuture<'a, Result<MaasClient, StageFailure>> {
        Box::pin(async move {
            let mut clients = self.clients.lock().await;
            if let Some(client) = clients.get(site.name.as_str()) {
                return Ok(client.clone());
            }
            let reference = SecretRef::new(
                site.maas.api_key.path.clone(),
                site.maas.api_key.key.as_deref(),
            );
            let key = self
                .secrets
                .get(&reference)
                .await
                .map_err(|e| StageFailure::secret(&e))?;
            let client = MaasClient::new(site.maas.url.as_str(), key, self.options.clone())
                .map_err(|e| StageFailure::maas(&e))?;
            clients.insert(site.name.to_string(), client.clone());
            Ok(client)
        })
    }

    fn preflight<'a>(
        &'a self,
        site: &'a Site,
    ) -> BoxFuture<'a, Result<SitePreflight, StageFailure>> {
        Box::pin(async move {
            let mut preflights = self.preflights.lock().await;
            if let Some(known) = preflights.get(site.name.as_str()) {
                return Ok(known.clone());
            }
            let client = self.client(site).await?;
            let version = client.version().await.map_err(|e| StageFailure::maas(&e))?;
            let whoami = client.whoami().await.map_err(|e| StageFailure::maas(&e))?;
            let preflight = SitePreflight {
                maas_version: version.version,
                user: whoami.username,
                is_admin: whoami.is_superuser,
            };
            preflights.insert(site.name.to_string(), preflight.clone());
            Ok(preflight)
        })
    }
}
