//! Observed-state snapshot (seed 000 §6.3 FetchMaasMachines / FetchGPUaaSNodes, seed 001 §2,
//! DESIGN.md §4): per site one MAAS machines list (plus one bulk power-parameters read for the
//! BMC addresses discovery matches on, 000 §4.16), the inventory rows and the current jobs.
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
use crate::provider::maas::{MaasClient, MachineFilter, MachineSummary};
use crate::secrets::SecretStore;
use crate::store::{Job, Node, SiteRows, Store, StoreError};

pub use clients::{ClientError, MaasClients};
pub(crate) use snapshot::hash_json;
pub use snapshot::{
    InventoryNode, ObservedJob, ObservedMachine, ObservedProvisioning, ObservedStatus,
    PART_INVENTORY, PART_JOBS, SNAPSHOT_FORMAT, SiteObservation, Snapshot, SnapshotError,
    fingerprint_of_parts, site_part,
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
    let read = read_store_rows(store, sites);
    observe_with_rows(fleet, sites, secrets, maas, patience, read).await
}

/// The store's part of an observation of some sites: when it was read, and what.
pub struct StoreRows {
    taken_at: chrono::DateTime<chrono::Utc>,
    view: StoreView<()>,
}

/// Reads the store's part of an observation of `sites` on its own: a command can start it
/// before it has loaded the fleet, and observe with [`observe_with_rows`] once it has. The
/// snapshot is taken when this read starts.
pub async fn read_store_rows(store: &Store, sites: &SiteFilter) -> Result<StoreRows, StoreError> {
    let taken_at = store.clock().now();
    let site_filter = single_site(sites);
    let view = read_store(store, site_filter.as_deref(), sites).await?;
    Ok(StoreRows { taken_at, view })
}

/// [`observe_within`] with the store's part from `rows` (see [`read_store_rows`]), read
/// while the sites' MAAS are.
pub async fn observe_with_rows(
    fleet: &Fleet,
    sites: &SiteFilter,
    secrets: &dyn SecretStore,
    maas: &MaasClients,
    patience: &Patience,
    rows: impl std::future::Future<Output = Result<StoreRows, StoreError>>,
) -> Result<Snapshot, ObserveError> {
    let read = async {
        let rows = rows.await?;
        Ok((rows.taken_at, rows.view))
    };
    let (snapshot, ()) = observe_reading(fleet, sites, secrets, maas, patience, read).await?;
    Ok(snapshot)
}

/// [`observe_within`], handing back as well what `keep` makes of the store rows the snapshot
/// was made from (the daemon's drift pass of the same reconcile decides on them instead of
/// reading them again). The rows are read in one transaction; `keep` runs as soon as they are,
/// so whatever it does not keep is gone before the machine lists (the bulk of an observation)
/// are decoded.
pub async fn observe_keeping<T>(
    fleet: &Fleet,
    sites: &SiteFilter,
    store: &Store,
    secrets: &dyn SecretStore,
    maas: &MaasClients,
    patience: &Patience,
    keep: impl FnOnce(SiteRows) -> T,
) -> Result<(Snapshot, T), ObserveError> {
    let site_filter = single_site(sites);
    let read = async {
        let taken_at = store.clock().now();
        let rows = store.site_rows(site_filter.as_deref()).await?;
        let inventory = inventory_of(&rows.nodes, sites);
        let jobs = observed_jobs(&rows.jobs, sites);
        Ok((taken_at, (rows.serial, inventory, jobs, keep(rows))))
    };
    observe_reading(fleet, sites, secrets, maas, patience, read).await
}

/// The one site selected, if only one is: the store reads only its rows.
fn single_site(sites: &SiteFilter) -> Option<String> {
    match sites {
        SiteFilter::Only(names) if names.len() == 1 => names.first().map(|n| n.to_string()),
        _ => None,
    }
}

/// The store serial, the inventory and the jobs of a snapshot, and what a reader kept.
type StoreView<T> = (i64, Vec<InventoryNode>, Vec<ObservedJob>, T);

/// The selected sites' MAAS observed while `read` reads the store (and says when the snapshot
/// was taken: before it read).
async fn observe_reading<T>(
    fleet: &Fleet,
    sites: &SiteFilter,
    secrets: &dyn SecretStore,
    maas: &MaasClients,
    patience: &Patience,
    read: impl std::future::Future<
        Output = Result<(chrono::DateTime<chrono::Utc>, StoreView<T>), StoreError>,
    >,
) -> Result<(Snapshot, T), ObserveError> {
    let selected = sites.resolve(fleet)?;
    let maas_reads = futures::future::join_all(
        selected
            .iter()
            .map(|site| observe_site_within(site, secrets, maas, patience)),
    );
    let (observations, store_view) = tokio::join!(maas_reads, read);
    let (taken_at, (store_serial, inventory, jobs, kept)) = store_view?;
    let snapshot = Snapshot {
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
    };
    Ok((snapshot, kept))
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
/// addresses discovery could not match) and, best effort, the version. The version and the
/// BMC addresses of machines seen before are taken from what `maas` remembers of the site
/// (`SiteMemory`) while fresh, so a site where nothing changed costs one request. The drift
/// pass reads a site with it when the daemon has no fresh snapshot to hand over.
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
    let now = std::time::Instant::now();
    let mut memory = maas.memory_of(&site.name);
    let known_version = memory.version(now).map(str::to_owned);
    let read_version = async {
        match &known_version {
            Some(version) => Some(version.clone()),
            None => client.version().await.ok().map(|v| v.version),
        }
    };
    // Every machine's power parameters are read with the list when none are known (or they
    // are old); otherwise only those of machines not seen before, after the list.
    let read_all_power = memory.power_stale(now);
    let read_power = async {
        if read_all_power {
            Some(client.power_addresses(&[]).await)
        } else {
            None
        }
    };
    let (version, machines, power) = tokio::join!(
        read_version,
        client.list_machine_summaries(&all),
        read_power
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
        Some(Ok(power)) => {
            memory.power_read_at = Some(now);
            memory.power.clear();
            power
        }
        Some(Err(err)) => return unreadable("read the power parameters", err),
        None => {
            let new: Vec<String> = machines
                .iter()
                .filter(|m| !memory.power.contains_key(&m.system_id))
                .map(|m| m.system_id.clone())
                .collect();
            if new.is_empty() {
                BTreeMap::new()
            } else {
                match client.power_addresses(&new).await {
                    Ok(power) => power,
                    Err(err) => return unreadable("read the power parameters", err),
                }
            }
        }
    };
    memory.power.extend(power);
    // Machines gone from MAAS are forgotten.
    let listed: std::collections::HashSet<&str> =
        machines.iter().map(|m| m.system_id.as_str()).collect();
    memory.power.retain(|id, _| listed.contains(id.as_str()));
    if let Some(version) = &version
        && known_version.is_none()
    {
        memory.version = Some((version.clone(), now));
    }
    let mut machines: Vec<ObservedMachine> = machines
        .into_iter()
        .map(|m| {
            let power_address = memory.power.get(&m.system_id).cloned().flatten();
            observed_machine(m, power_address)
        })
        .collect();
    maas.remember(&site.name, memory);
    machines.sort_by(|a, b| {
        (a.hostname.as_str(), a.system_id.as_str()).cmp(&(b.hostname.as_str(), &b.system_id))
    });
    SiteObservation::Readable {
        maas_version: version,
        machines,
    }
}

fn api_url(client: &MaasClient) -> String {
    client.api_root().to_string()
}

/// The observed form of a listed machine, its strings moved rather than copied (a site lists
/// thousands).
fn observed_machine(m: MachineSummary, power_address: Option<String>) -> ObservedMachine {
    let status = ObservedStatus {
        code: m.status.code(),
        name: m.status_label(),
    };
    let mut macs: Vec<String> = m
        .interface_set
        .into_iter()
        .filter_map(|interface| interface.mac_address)
        .map(|mut mac| {
            mac.make_ascii_lowercase();
            mac
        })
        .collect();
    macs.sort();
    macs.dedup();
    let mut ip_addresses = m.ip_addresses;
    ip_addresses.sort();
    ObservedMachine {
        system_id: m.system_id,
        hostname: m.hostname,
        status,
        power_state: m.power_state.to_string(),
        power_address,
        macs,
        ip_addresses,
        owner: m.owner.filter(|o| !o.is_empty()),
        enable_hw_sync: m.enable_hw_sync,
        last_sync: m.last_sync,
        next_sync: m.next_sync,
        sync_interval: m.sync_interval,
    }
}

/// The store serial first, then the rows, in one read: a write in between cannot make the
/// snapshot look newer than it is. Each part becomes the snapshot's before the next is read, so
/// that the inventory rows are gone before the jobs are read (a plan keeps no rows).
async fn read_store(
    store: &Store,
    site: Option<&str>,
    sites: &SiteFilter,
) -> Result<StoreView<()>, StoreError> {
    let (of_nodes, of_jobs) = (sites.clone(), sites.clone());
    let (serial, inventory, jobs) = store
        .site_rows_into(
            site,
            move |nodes| inventory_of(&nodes, &of_nodes),
            move |current| observed_jobs(&current, &of_jobs),
        )
        .await?;
    Ok((serial, inventory, jobs, ()))
}

/// The live inventory rows of the selected sites, ordered by (site, hostname).
fn inventory_of(nodes: &[Node], sites: &SiteFilter) -> Vec<InventoryNode> {
    let mut inventory: Vec<InventoryNode> = nodes
        .iter()
        .filter(|n| sites.contains(&SiteName::new(n.site.as_str())))
        .map(InventoryNode::from)
        .collect();
    inventory.sort_by(|a, b| (&a.site, &a.hostname).cmp(&(&b.site, &b.hostname)));
    inventory
}

/// The snapshot's jobs of the selected sites, from the current jobs of each kind: per (site,
/// hostname, kind), every open job and the latest one whatever its state (and a Redfish node's
/// latest successful provisioning), oldest request first.
fn observed_jobs(current: &[(JobKind, Vec<Job>)], sites: &SiteFilter) -> Vec<ObservedJob> {
    let rows: Vec<&Job> = current
        .iter()
        .flat_map(|(_, rows)| rows)
        .filter(|j| sites.contains(&SiteName::new(j.site.as_str())))
        .collect();
    fn key(job: &Job) -> (&str, &str, JobKind) {
        (job.site.as_str(), job.hostname.as_str(), job.kind)
    }
    // Rows come newest request first, and the sort is stable: the first row of a key is its
    // latest job. Only the rows' indexes move, and only the jobs kept are converted.
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&a, &b| key(rows[a]).cmp(&key(rows[b])));
    let mut jobs: Vec<ObservedJob> = Vec::with_capacity(rows.len());
    let mut group = 0;
    for (i, &row) in order.iter().enumerate() {
        let job = rows[row];
        let first = i == 0 || key(rows[order[i - 1]]) != key(job);
        if first {
            jobs[group..].sort_by_key(|a| (a.requested_at, a.id));
            group = jobs.len();
        }
        if first || job.state.is_open() {
            jobs.push(ObservedJob::from(job));
        } else if job.kind == JobKind::Provisioning {
            // A Redfish node's latest successful provisioning says which generation it has.
            let succeeded = |j: &ObservedJob| j.provisioning.as_ref().is_some_and(|p| p.succeeded);
            let observed = ObservedJob::from(job);
            if succeeded(&observed) && !jobs[group..].iter().any(succeeded) {
                jobs.push(observed);
            }
        }
    }
    jobs[group..].sort_by_key(|a| (a.requested_at, a.id));
    jobs
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use serde_json::json;

    use super::*;
    use crate::lifecycle::{JobState, ProvisioningStatus};
    use crate::store::JobSpec;

    fn job(n: u8, kind: JobKind, site: &str, host: &str, state: JobState) -> Job {
        let spec = match kind {
            JobKind::Onboarding => JobSpec::Onboarding {
                batch_id: None,
                ipmi_ip: None,
                pxe_mac: None,
            },
            JobKind::Decommission => JobSpec::Decommission {
                mode: crate::lifecycle::DecommissionMode::Retire,
                erase: None,
                storage_cleanup: None,
                reason: None,
            },
            JobKind::Provisioning => JobSpec::Provisioning {
                server_serial: format!("S-{host}"),
                status: ProvisioningStatus::Failed,
                failed_step: None,
                maintenance_iso_url: String::new(),
                task_iso_path: None,
                picked_at: None,
                worker_id: None,
                lease_expires_at: None,
                idempotency_key: None,
                generation: None,
                webhook_at: None,
            },
        };
        let at = Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap()
            + chrono::Duration::minutes(n.into());
        Job {
            id: uuid::Uuid::from_u128(n.into()),
            kind,
            node_id: None,
            site: site.into(),
            hostname: host.into(),
            maas_system_id: None,
            requested_by: None,
            stage: "done".into(),
            attempt: 1,
            state,
            failure_class: None,
            error_code: None,
            error_message: None,
            error_details: json!({}),
            recommended_action: None,
            last_maas_status: None,
            last_maas_power_state: None,
            last_maas_ips: Vec::new(),
            stage_details: json!({}),
            adopted: false,
            ends_reconciled: false,
            plan_id: None,
            requested_at: at,
            started_at: None,
            completed_at: None,
            updated_at: at,
            retry_failures: 0,
            next_try_at: None,
            retry_spec: None,
            spec,
        }
    }

    /// A provisioning that came to `status`, succeeded or not.
    fn provisioning(n: u8, host: &str, succeeded: bool) -> Job {
        let mut job = job(n, JobKind::Provisioning, "a", host, JobState::Completed);
        let outcome = if succeeded { "succeeded" } else { "failed" };
        job.stage_details = json!({ "outcome": outcome });
        if let JobSpec::Provisioning { status, .. } = &mut job.spec {
            *status = ProvisioningStatus::Complete;
        }
        job
    }

    #[test]
    fn a_snapshot_keeps_each_nodes_open_and_latest_jobs_of_the_sites_asked_for() {
        use JobState::*;
        // Per kind, newest request first, as the store reads them.
        let onboardings = vec![
            job(9, JobKind::Onboarding, "b", "h1", Running),
            job(8, JobKind::Onboarding, "a", "h2", Completed),
            job(5, JobKind::Onboarding, "a", "h1", Completed),
            job(4, JobKind::Onboarding, "a", "h1", FailedRetryable),
            job(3, JobKind::Onboarding, "a", "h2", Cancelled),
            job(1, JobKind::Onboarding, "a", "h1", Completed),
        ];
        let decommissions = vec![job(7, JobKind::Decommission, "a", "h1", Completed)];
        let provisionings = vec![
            provisioning(14, "h3", false),
            provisioning(13, "h3", true),
            provisioning(12, "h3", true),
            provisioning(11, "h3", false),
        ];
        let current = vec![
            (JobKind::Onboarding, onboardings),
            (JobKind::Decommission, decommissions),
            (JobKind::Provisioning, provisionings),
        ];
        let kept: Vec<(u128, JobKind)> = observed_jobs(&current, &SiteFilter::from_names(["a"]))
            .iter()
            .map(|j| (j.id.as_u128(), j.kind))
            .collect();
        assert_eq!(
            kept,
            vec![
                // a/h1: the open retryable one and the latest, oldest first; then its decommission.
                (4, JobKind::Onboarding),
                (5, JobKind::Onboarding),
                (7, JobKind::Decommission),
                // a/h2: the latest only.
                (8, JobKind::Onboarding),
                // a/h3: the latest successful provisioning and the latest.
                (13, JobKind::Provisioning),
                (14, JobKind::Provisioning),
            ]
        );
    }
}
