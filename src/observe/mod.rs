//! Observed-state snapshot (seed 000 §6.3 FetchMaasMachines / FetchGPUaaSNodes, seed 001 §2,
//! DESIGN.md §4): per site one MAAS machines list (plus one bulk power-parameters read for the
//! BMC addresses discovery matches on, 000 §4.16), the inventory rows and the jobs.
//!
//! [`observe`] is the I/O edge in front of the pure planner: it reads, it never decides. A site
//! whose MAAS cannot be read (unreachable, bad or non-admin key, missing secret) is recorded as
//! [`SiteObservation::Unreadable`] — never as an empty site — and the planner blocks every node
//! of it. Per-machine detail (block devices, events, tokens) is not read here: the executor
//! refreshes a machine right before it acts on it (000 §4.13).

mod clients;
mod snapshot;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::lifecycle::JobKind;
use crate::model::{Fleet, Site, SiteName};
use crate::provider::maas::{MaasClient, MachineFilter, MachinePowerParameters, MachineSummary};
use crate::secrets::SecretStore;
use crate::store::{JobFilter, NodeFilter, Store, StoreError};

pub use clients::{ClientError, MaasClients};
pub(crate) use snapshot::hash_json;
pub use snapshot::{
    InventoryNode, ObservedJob, ObservedMachine, ObservedStatus, PART_INVENTORY, PART_JOBS,
    SNAPSHOT_FORMAT, SiteObservation, Snapshot, SnapshotError, fingerprint_of_parts, site_part,
};

/// Which sites to observe or plan (`--site S`, repeatable; none = every site of the fleet).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SiteFilter {
    #[default]
    All,
    Only(BTreeSet<SiteName>),
}

/// A site name that the fleet does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("site `{site}` is not in the fleet (sites: {known})")]
pub struct UnknownSite {
    pub site: SiteName,
    pub known: String,
}

impl SiteFilter {
    /// `--site` values; an empty list means every site.
    pub fn from_names<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: BTreeSet<SiteName> =
            names.into_iter().map(|n| SiteName::new(n.into())).collect();
        if names.is_empty() {
            SiteFilter::All
        } else {
            SiteFilter::Only(names)
        }
    }

    pub fn contains(&self, site: &SiteName) -> bool {
        match self {
            SiteFilter::All => true,
            SiteFilter::Only(names) => names.contains(site),
        }
    }

    /// The fleet's sites this filter selects, in name order; an unknown name is an error.
    pub fn resolve<'f>(&self, fleet: &'f Fleet) -> Result<Vec<&'f Site>, UnknownSite> {
        if let SiteFilter::Only(names) = self
            && let Some(missing) = names.iter().find(|n| !fleet.sites.contains_key(*n))
        {
            return Err(UnknownSite {
                site: missing.clone(),
                known: fleet
                    .sites
                    .keys()
                    .map(SiteName::as_str)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        Ok(fleet
            .sites
            .values()
            .filter(|s| self.contains(&s.name))
            .collect())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error(transparent)]
    UnknownSite(#[from] UnknownSite),
    #[error("cannot read the inventory: {0}")]
    Store(#[from] StoreError),
}

/// Observe the selected sites: their MAAS machines (concurrently, one list per site), and the
/// inventory rows and jobs of those sites from the store. MAAS trouble is recorded per site;
/// only a store failure or an unknown site fails the whole observation.
pub async fn observe(
    fleet: &Fleet,
    sites: &SiteFilter,
    store: &Store,
    secrets: &dyn SecretStore,
    maas: &MaasClients,
) -> Result<Snapshot, ObserveError> {
    observe_within(fleet, sites, store, secrets, maas, &Patience::default()).await
}

/// Called while a site's MAAS has not answered yet: the site, its MAAS URL (credentials
/// masked) and how long it has been waited for.
pub type SlowSite = Arc<dyn Fn(&SiteName, &str, Duration) + Send + Sync>;

/// How long an observation waits for each site's MAAS, and who hears about a slow one.
#[derive(Clone)]
pub struct Patience {
    /// A site whose MAAS has not answered by then is recorded unreadable (transient), naming
    /// the URL and the limit; `None`: as long as the client's own timeouts and retries take.
    pub deadline: Option<Duration>,
    /// Told every `report_every` about each site still being waited for.
    pub slow: Option<SlowSite>,
    pub report_every: Duration,
}

impl Default for Patience {
    fn default() -> Self {
        Self {
            deadline: None,
            slow: None,
            report_every: Duration::from_secs(10),
        }
    }
}

/// [`observe`], each site's MAAS waited for with `patience`.
pub async fn observe_within(
    fleet: &Fleet,
    sites: &SiteFilter,
    store: &Store,
    secrets: &dyn SecretStore,
    maas: &MaasClients,
    patience: &Patience,
) -> Result<Snapshot, ObserveError> {
    let selected = sites.resolve(fleet)?;
    let taken_at = store.clock().now();
    let maas_reads = futures::future::join_all(
        selected
            .iter()
            .map(|site| observe_site_within(site, secrets, maas, patience)),
    );
    let (observations, store_view) = tokio::join!(maas_reads, read_store(store, sites));
    let (store_serial, inventory, jobs) = store_view?;
    Ok(Snapshot {
        format: SNAPSHOT_FORMAT,
        taken_at,
        store_serial,
        sites: selected
            .iter()
            .map(|s| s.name.clone())
            .zip(observations)
            .collect(),
        inventory,
        jobs,
    })
}

/// [`observe_site`] under `patience`: a site that takes too long is reported while it does, and
/// recorded unreadable at the deadline.
async fn observe_site_within(
    site: &Site,
    secrets: &dyn SecretStore,
    maas: &MaasClients,
    patience: &Patience,
) -> SiteObservation {
    if patience.deadline.is_none() && patience.slow.is_none() {
        return observe_site(site, secrets, maas).await;
    }
    let url = crate::sanitize::redact::url(&maas.url_of(site));
    let started = tokio::time::Instant::now();
    let work = observe_site(site, secrets, maas);
    tokio::pin!(work);
    let deadline = async {
        match patience.deadline {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let every = patience.report_every.max(Duration::from_millis(100));
    let mut ticks = tokio::time::interval_at(started + every, every);
    loop {
        tokio::select! {
            observation = &mut work => return observation,
            () = &mut deadline => {
                let limit = patience.deadline.unwrap_or_default();
                return SiteObservation::Unreadable {
                    error: format!(
                        "MAAS at {url} did not answer within {}",
                        crate::model::duration::format(limit)
                    ),
                    transient: true,
                    hint: Some(
                        "check that MAAS is up and reachable from here; a large site may need a longer --timeout"
                            .into(),
                    ),
                };
            }
            _ = ticks.tick() => {
                if let Some(slow) = &patience.slow {
                    slow(&site.name, &url, started.elapsed());
                }
            }
        }
    }
}

/// One site's MAAS: the machines list, the power parameters (both needed: without BMC
/// addresses discovery could not match) and, best effort, the version. The drift pass reads a
/// site with it when the daemon has no fresh snapshot to hand over.
pub async fn observe_site(
    site: &Site,
    secrets: &dyn SecretStore,
    maas: &MaasClients,
) -> SiteObservation {
    let client = match maas.client(site, secrets).await {
        Ok(client) => client,
        Err(err) => {
            return SiteObservation::Unreadable {
                error: err.to_string(),
                transient: err.is_transient(),
                hint: err.hint(),
            };
        }
    };
    let all = MachineFilter::all();
    let (version, machines, power) = tokio::join!(
        client.version(),
        client.list_machine_summaries(&all),
        client.power_parameters(&[]),
    );
    let unreadable =
        |what: &str, err: crate::provider::maas::MaasError| SiteObservation::Unreadable {
            error: format!("cannot {what} from MAAS at {}: {err}", api_url(&client)),
            transient: err.is_retryable(),
            hint: Some(err.hint().to_owned()),
        };
    let machines = match machines {
        Ok(machines) => machines,
        Err(err) => return unreadable("list the machines", err),
    };
    let power = match power {
        Ok(power) => power,
        Err(err) => return unreadable("read the power parameters", err),
    };
    let mut machines: Vec<ObservedMachine> = machines
        .iter()
        .map(|m| observed_machine(m, power.get(&m.system_id)))
        .collect();
    machines.sort_by(|a, b| {
        (a.hostname.as_str(), a.system_id.as_str()).cmp(&(b.hostname.as_str(), &b.system_id))
    });
    SiteObservation::Readable {
        maas_version: version.ok().map(|v| v.version),
        machines,
    }
}

fn api_url(client: &MaasClient) -> String {
    client.api_root().to_string()
}

fn observed_machine(m: &MachineSummary, power: Option<&MachinePowerParameters>) -> ObservedMachine {
    let mut macs: Vec<String> = m.mac_addresses().map(str::to_ascii_lowercase).collect();
    macs.sort();
    macs.dedup();
    let mut ip_addresses = m.ip_addresses.clone();
    ip_addresses.sort();
    ObservedMachine {
        system_id: m.system_id.clone(),
        hostname: m.hostname.clone(),
        status: ObservedStatus {
            code: m.status.code(),
            name: m.status_label(),
        },
        power_state: m.power_state.to_string(),
        power_address: power.and_then(|p| p.power_address.clone()),
        macs,
        ip_addresses,
        owner: m.owner.clone().filter(|o| !o.is_empty()),
        enable_hw_sync: m.enable_hw_sync,
        last_sync: m.last_sync,
        next_sync: m.next_sync,
        sync_interval: m.sync_interval,
    }
}

/// The store serial first, then the rows: a write in between makes the snapshot look older
/// than it is (a plan from it is refused as stale), never newer.
async fn read_store(
    store: &Store,
    sites: &SiteFilter,
) -> Result<(i64, Vec<InventoryNode>, Vec<ObservedJob>), StoreError> {
    let serial = store.serial().await?;
    let site_filter = match sites {
        SiteFilter::Only(names) if names.len() == 1 => names.first().map(|n| n.to_string()),
        _ => None,
    };
    let mut inventory: Vec<InventoryNode> = store
        .list_nodes(&NodeFilter {
            site: site_filter.clone(),
            ..NodeFilter::default()
        })
        .await?
        .iter()
        .filter(|n| sites.contains(&SiteName::new(n.site.as_str())))
        .map(InventoryNode::from)
        .collect();
    inventory.sort_by(|a, b| (&a.site, &a.hostname).cmp(&(&b.site, &b.hostname)));

    // Per (site, hostname, kind): every open job, and the latest one whatever its state.
    let mut jobs: BTreeMap<(String, String, JobKind), Vec<ObservedJob>> = BTreeMap::new();
    for kind in JobKind::ALL {
        let rows = store
            .list_jobs(
                *kind,
                &JobFilter {
                    site: site_filter.clone(),
                    ..JobFilter::default()
                },
            )
            .await?;
        // Newest request first: the first row of a key is its latest job.
        for job in rows
            .iter()
            .filter(|j| sites.contains(&SiteName::new(j.site.as_str())))
        {
            let entry = jobs
                .entry((job.site.clone(), job.hostname.clone(), *kind))
                .or_default();
            if entry.is_empty() || job.state.is_open() {
                entry.push(ObservedJob::from(job));
            }
        }
    }
    let jobs = jobs
        .into_values()
        .flat_map(|mut list| {
            list.sort_by_key(|a| (a.requested_at, a.id));
            list
        })
        .collect();
    Ok((serial, inventory, jobs))
}
