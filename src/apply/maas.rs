//! Per-site MAAS access for the stages: a client per site, made by the same
//! [`MaasClients`] observe uses (its API key read from the site's secret reference when first
//! needed, seed 000 §3.2: "read from Vault at execution time"; one shared request counter),
//! and the capability preflight of 000 §4.14 made once per site and run.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::model::Site;
use crate::observe::{ClientError, MaasClients};
use crate::provider::maas::{MaasClient, MaasMetrics, MachinePolls};
use crate::secrets::SecretStore;
use crate::stages::StageFailure;
use crate::stages::onboard::{MaasAccess, SitePreflight};

#[derive(Debug)]
pub struct SiteMaas {
    secrets: Arc<dyn SecretStore>,
    maker: MaasClients,
    /// Each site's client, and the polls made through it.
    clients: tokio::sync::Mutex<BTreeMap<String, (MaasClient, MachinePolls)>>,
    preflights: tokio::sync::Mutex<BTreeMap<String, SitePreflight>>,
}

impl SiteMaas {
    /// Clients made by `maker` (whose metrics handle every client shares).
    pub fn new(secrets: Arc<dyn SecretStore>, maker: MaasClients) -> Self {
        Self {
            secrets,
            maker,
            clients: tokio::sync::Mutex::new(BTreeMap::new()),
            preflights: tokio::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// The requests made to every site so far.
    pub fn metrics(&self) -> &MaasMetrics {
        self.maker.metrics()
    }

    /// The site's client and polls, made the first time a stage asks.
    async fn site(&self, site: &Site) -> Result<(MaasClient, MachinePolls), StageFailure> {
        let mut clients = self.clients.lock().await;
        if let Some(known) = clients.get(site.name.as_str()) {
            return Ok(known.clone());
        }
        let client = self
            .maker
            .client(site, self.secrets.as_ref())
            .await
            .map_err(|e| match e {
                ClientError::ApiKey { source, .. } => StageFailure::secret(&source),
                ClientError::Maas { source, .. } => StageFailure::maas(&source),
            })?;
        let made = (client.clone(), MachinePolls::new(client));
        clients.insert(site.name.to_string(), made.clone());
        Ok(made)
    }
}

impl MaasAccess for SiteMaas {
    fn client<'a>(&'a self, site: &'a Site) -> BoxFuture<'a, Result<MaasClient, StageFailure>> {
        Box::pin(async move { Ok(self.site(site).await?.0) })
    }

    fn polls<'a>(&'a self, site: &'a Site) -> BoxFuture<'a, Result<MachinePolls, StageFailure>> {
        Box::pin(async move { Ok(self.site(site).await?.1) })
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
