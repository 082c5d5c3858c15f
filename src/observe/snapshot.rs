//! The observed-state snapshot (seed 000 §6.3 FetchMaasMachines + FetchGPUaaSNodes, seed 001
//! §2 "observed MAAS machine state"): what the planner reads, as a plain value that round-trips
//! through JSON (`metalform observe > FILE`, `metalform plan --observed FILE`).
//!
//! Only what planning needs is kept: per machine its identity, status, power, addresses and
//! hardware-sync fields; per inventory node its coarse state and flags; per job its state,
//! stage and failure. The fingerprint covers the fields the planner decides on and leaves out
//! what moves on its own (timestamps, power state), so an unchanged world gives the same
//! fingerprint twice and `apply PLANFILE` can tell whether anything it planned on moved.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::lifecycle::{
    DecommissionMode, FailureClass, JobKind, JobState, MaasStatus, NodeState, ProvisioningStatus,
};
use crate::model::SiteName;

use super::SiteFilter;

/// The snapshot format this metalform writes and reads.
pub const SNAPSHOT_FORMAT: u32 = 1;

/// What was observed at one moment: one MAAS machines list per site (plus the bulk power
/// parameters read for BMC addresses), the inventory rows and the jobs of those sites.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub format: u32,
    pub taken_at: DateTime<Utc>,
    /// The store serial read before the inventory and the jobs (a write after it makes a plan
    /// from this snapshot stale, never the reverse).
    pub store_serial: i64,
    /// Every site observed, readable or not.
    pub sites: BTreeMap<SiteName, SiteObservation>,
    /// Live inventory rows of the observed sites, ordered by (site, hostname).
    pub inventory: Vec<InventoryNode>,
    /// Per (site, hostname): every open job and the latest onboarding, ordered by (site,
    /// hostname, kind, requested_at).
    pub jobs: Vec<ObservedJob>,
}

/// One site's MAAS as observed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SiteObservation {
    Readable {
        /// `GET version/`, when it answered.
        maas_version: Option<String>,
        /// Ordered by hostname, then system id.
        machines: Vec<ObservedMachine>,
    },
    /// Never treated as empty: the planner blocks every node of the site.
    Unreadable {
        error: String,
        /// Worth trying again unchanged (MAAS down, timeout, 5xx); `false` for a bad key, a
        /// non-admin key, a bad URL or a missing secret.
        transient: bool,
        /// What to do about it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hint: Option<String>,
    },
}

impl SiteObservation {
    pub fn machines(&self) -> Option<&[ObservedMachine]> {
        match self {
            SiteObservation::Readable { machines, .. } => Some(machines),
            SiteObservation::Unreadable { .. } => None,
        }
    }
}

/// A MAAS machine as the planner sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedMachine {
    pub system_id: String,
    pub hostname: String,
    pub status: ObservedStatus,
    /// `on`, `off`, `unknown`, `error`.
    pub power_state: String,
    /// The BMC address from the bulk power-parameters read.
    pub power_address: Option<String>,
    /// Lower-case, colon-separated, sorted.
    pub macs: Vec<String>,
    pub ip_addresses: Vec<String>,
    pub owner: Option<String>,
    pub enable_hw_sync: Option<bool>,
    pub last_sync: Option<DateTime<Utc>>,
    pub next_sync: Option<DateTime<Utc>>,
    /// Seconds.
    pub sync_interval: Option<u64>,
}

/// A machine's status: MAAS's code and its `status_name` (kept for codes of a newer MAAS).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedStatus {
    pub code: i64,
    pub name: String,
}

impl ObservedStatus {
    /// The status, when it is one MAAS 3.x defines.
    pub fn maas(&self) -> Option<MaasStatus> {
        u8::try_from(self.code).ok().and_then(MaasStatus::from_code)
    }

    /// Allocated, Deploying, Deployed, Reserved or a rescue state: someone's workload may run
    /// there, so taking the machine over destroys it.
    pub fn in_use(&self) -> bool {
        use MaasStatus as M;
        matches!(
            self.maas(),
            Some(
                M::Allocated
                    | M::Reserved
                    | M::Deploying
                    | M::Deployed
                    | M::RescueMode
                    | M::EnteringRescueMode
                    | M::ExitingRescueMode
                    | M::FailedEnteringRescueMode
                    | M::FailedExitingRescueMode
            )
        )
    }
}

impl std::fmt::Display for ObservedStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// An inventory row (seed 001 §3) as the planner sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InventoryNode {
    pub id: Uuid,
    pub site: String,
    pub hostname: String,
    pub status: NodeState,
    pub retired: bool,
    pub retired_reason: Option<String>,
    pub protected: bool,
    pub paused: bool,
    pub ipmi_ip: Option<String>,
    /// The deployed address (000 §8.1 `host`).
    pub host: Option<String>,
    /// The node agent's last contact: set once it enrolled (docs/contracts.md §5).
    pub agent_contact_at: Option<DateTime<Utc>>,
    /// The manifest's `reimage.generation` last applied to the node; `None` when the store
    /// has none recorded (a row from before schema version 3).
    #[serde(default)]
    pub reimage_generation: Option<u64>,
    /// The release policy the manifests last gave the node (pruning decommissions with it);
    /// `None` until one is recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::model::NodePolicy>,
    /// The SKU and GPU count it was onboarded with (what a prune of it records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
}

impl InventoryNode {
    /// The node agent has enrolled (and been heard from since).
    pub fn enrolled(&self) -> bool {
        self.agent_contact_at.is_some()
    }
}

impl From<&crate::store::Node> for InventoryNode {
    fn from(node: &crate::store::Node) -> Self {
        InventoryNode {
            id: node.id,
            site: node.site.clone(),
            hostname: node.hostname.clone(),
            status: node.status,
            retired: node.retired,
            retired_reason: node.retired_reason.clone(),
            protected: node.protected,
            paused: node.paused,
            ipmi_ip: node.ipmi_ip.clone(),
            host: node.host.clone(),
            agent_contact_at: node.last_agent_contact_at,
            reimage_generation: node.reimage_generation.and_then(|g| u64::try_from(g).ok()),
            policy: node.release_policy.clone(),
            sku: node.sku.clone(),
            gpus: node.gpus.and_then(|g| u32::try_from(g).ok()),
        }
    }
}

/// A job (onboarding or decommission journal, 000 §4.2.1 / §5.7) as the planner sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedJob {
    pub id: Uuid,
    pub kind: JobKind,
    /// Decommissions only.
    pub mode: Option<DecommissionMode>,
    pub node_id: Option<Uuid>,
    pub site: String,
    pub hostname: String,
    pub maas_system_id: Option<String>,
    pub stage: String,
    pub attempt: i64,
    pub state: JobState,
    /// An adopt action was taken: success ends `reconciled`.
    pub adopted: bool,
    pub failure_class: Option<FailureClass>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    /// The plan (its id) the job was created or last run under.
    pub plan_id: Option<String>,
    pub requested_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// A `failed_retryable` job's backoff: its failures in a row, when it may be retried, and
    /// the node spec it failed under (a changed spec is retried at once).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retry_failures: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_try_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_spec: Option<String>,
    /// Redfish provisioning jobs (seed 003): the server, the seed's status and what the job
    /// came to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<ObservedProvisioning>,
    /// What the job's last first-boot payload was rendered from (no secret), when it rendered
    /// one: `plan` shows how a render now would differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<crate::cloudinit::PayloadRecord>,
}

/// What the planner reads of a Redfish provisioning job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedProvisioning {
    pub serial: String,
    pub status: ProvisioningStatus,
    pub failed_step: Option<String>,
    /// The manifest's reimage generation the job provisions; `None`: an API request.
    pub generation: Option<i64>,
    /// Complete, after the maintenance OS reported success.
    pub succeeded: bool,
}

impl ObservedProvisioning {
    fn of(job: &crate::store::Job) -> Option<Self> {
        use crate::stages::JournalFacts;
        let crate::store::JobSpec::Provisioning {
            server_serial,
            status,
            failed_step,
            generation,
            ..
        } = &job.spec
        else {
            return None;
        };
        let facts = crate::stages::provision::ProvisionFacts::from_details(&job.stage_details);
        Some(ObservedProvisioning {
            serial: server_serial.clone(),
            status: *status,
            failed_step: failed_step.clone(),
            generation: *generation,
            succeeded: *status == ProvisioningStatus::Complete
                && facts.outcome == Some(ProvisioningStatus::Succeeded),
        })
    }
}

impl From<&crate::store::Job> for ObservedJob {
    fn from(job: &crate::store::Job) -> Self {
        ObservedJob {
            id: job.id,
            kind: job.kind,
            mode: job.mode(),
            node_id: job.node_id,
            site: job.site.clone(),
            hostname: job.hostname.clone(),
            maas_system_id: job.maas_system_id.clone(),
            stage: job.stage.clone(),
            attempt: job.attempt,
            state: job.state,
            adopted: job.adopted,
            failure_class: job.failure_class,
            error_code: job.error_code.clone(),
            error_message: job.error_message.clone(),
            plan_id: job.plan_id.clone(),
            requested_at: job.requested_at,
            updated_at: job.updated_at,
            retry_failures: job.retry_failures,
            next_try_at: job.next_try_at,
            retry_spec: job.retry_spec.clone(),
            provisioning: ObservedProvisioning::of(job),
            payload: job
                .stage_details
                .get("cloud_init")
                .and_then(|facts| facts.get("payload"))
                .and_then(|record| serde_json::from_value(record.clone()).ok()),
        }
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// A snapshot file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("line {line}, column {column}: {message}")]
    Json {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("snapshot format {found} is not the format this metalform reads ({SNAPSHOT_FORMAT})")]
    Format { found: u32 },
}

/// The key of the inventory's part of the fingerprint.
pub const PART_INVENTORY: &str = "inventory";
/// The key of the jobs' part of the fingerprint.
pub const PART_JOBS: &str = "jobs";

/// The key of one site's part of the fingerprint: `site/<name>`.
pub fn site_part(site: &SiteName) -> String {
    format!("site/{site}")
}

impl Snapshot {
    /// Pretty JSON, as `metalform observe` prints it.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a snapshot serialises");
        text.push('\n');
        text
    }

    /// Read a snapshot written by [`Snapshot::to_json`] (an older or newer format is refused).
    pub fn from_json(text: &str) -> Result<Snapshot, SnapshotError> {
        #[derive(Deserialize)]
        struct Header {
            format: u32,
        }
        let json_error = |err: serde_json::Error| SnapshotError::Json {
            line: err.line(),
            column: err.column(),
            message: err.to_string(),
        };
        let header: Header = serde_json::from_str(text).map_err(json_error)?;
        if header.format != SNAPSHOT_FORMAT {
            return Err(SnapshotError::Format {
                found: header.format,
            });
        }
        serde_json::from_str(text).map_err(json_error)
    }

    /// A stable hash of everything the planner decides on (`sha256:<hex>`): the same world
    /// observed twice gives the same fingerprint. Built from [`Snapshot::fingerprint_parts`].
    pub fn fingerprint(&self) -> String {
        fingerprint_of_parts(&self.fingerprint_parts())
    }

    /// The fingerprint per part: `site/<name>` for each site's MAAS, `inventory`, `jobs`.
    /// Plans keep them so a stale plan can say which part moved.
    pub fn fingerprint_parts(&self) -> BTreeMap<String, String> {
        self.fingerprint_parts_of(&SiteFilter::All)
    }

    /// The fingerprint parts of the selected sites only: their MAAS, and the inventory rows
    /// and jobs of those sites. A plan of some sites compares only what it planned on.
    pub fn fingerprint_parts_of(&self, sites: &SiteFilter) -> BTreeMap<String, String> {
        let selected = |site: &str| sites.contains(&SiteName::new(site));
        let jobs: Vec<JobView<'_>> = self
            .jobs
            .iter()
            .filter(|j| selected(&j.site))
            .map(JobView::of)
            .collect();
        // The parts are independent: a large snapshot hashes its jobs on a second thread while
        // this one hashes the machines and the inventory (the same bytes either way).
        std::thread::scope(|scope| {
            let jobs_part = (jobs.len() >= PARALLEL_JOBS).then(|| scope.spawn(|| hash_json(&jobs)));
            let mut parts = BTreeMap::new();
            for (site, observation) in self.sites.iter().filter(|(s, _)| sites.contains(s)) {
                parts.insert(site_part(site), hash_json(&SiteView::of(observation)));
            }
            let inventory: Vec<InventoryView<'_>> = self
                .inventory
                .iter()
                .filter(|n| selected(&n.site))
                .map(InventoryView::of)
                .collect();
            parts.insert(PART_INVENTORY.to_owned(), hash_json(&inventory));
            let jobs_part = match jobs_part {
                Some(thread) => thread
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                None => hash_json(&jobs),
            };
            parts.insert(PART_JOBS.to_owned(), jobs_part);
            parts
        })
    }
}

/// From this many jobs on, their part of the fingerprint is hashed on a thread of its own.
const PARALLEL_JOBS: usize = 2_000;

/// The whole-snapshot fingerprint from its parts.
pub fn fingerprint_of_parts(parts: &BTreeMap<String, String>) -> String {
    hash_json(parts)
}

/// `sha256:<hex>` of a value's compact JSON, streamed into the hasher. The JSON comes in
/// pieces of a few bytes (a key, a quote, a value): they are gathered into blocks first, so the
/// hasher is called once per block rather than once per piece. `ring`'s SHA-256, not `sha2`'s:
/// on a CPU without SHA extensions it hashes 1.5–2x as fast, and a converged fleet's
/// `plan` hashes megabytes of views here (docs/performance.md).
pub(crate) fn hash_json<T: Serialize + ?Sized>(value: &T) -> String {
    struct HashWriter(ring::digest::Context);
    impl std::io::Write for HashWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut writer = std::io::BufWriter::with_capacity(
        16 * 1024,
        HashWriter(ring::digest::Context::new(&ring::digest::SHA256)),
    );
    serde_json::to_writer(&mut writer, value).expect("plain data serialises");
    let hasher = writer
        .into_inner()
        .unwrap_or_else(|_| unreachable!("hashing never fails"));
    format!("sha256:{}", hex::encode(hasher.0.finish()))
}

/// The planning-relevant fields of one site's observation. An unreadable site is just
/// "unreadable": its error text may differ from one attempt to the next.
#[derive(Serialize)]
struct SiteView<'a> {
    readable: bool,
    machines: Vec<MachineView<'a>>,
}

impl<'a> SiteView<'a> {
    fn of(observation: &'a SiteObservation) -> Self {
        match observation {
            SiteObservation::Readable { machines, .. } => {
                let mut machines: Vec<MachineView<'a>> =
                    machines.iter().map(MachineView::of).collect();
                machines.sort_by(|a, b| a.system_id.cmp(b.system_id));
                SiteView {
                    readable: true,
                    machines,
                }
            }
            SiteObservation::Unreadable { .. } => SiteView {
                readable: false,
                machines: Vec::new(),
            },
        }
    }
}

/// Power state and sync times move on their own; they are left out.
#[derive(Serialize)]
struct MachineView<'a> {
    system_id: &'a str,
    hostname: &'a str,
    status: i64,
    power_address: Option<&'a str>,
    macs: Vec<&'a str>,
    ip_addresses: Vec<&'a str>,
    owner: Option<&'a str>,
    enable_hw_sync: Option<bool>,
    sync_interval: Option<u64>,
}

impl<'a> MachineView<'a> {
    fn of(m: &'a ObservedMachine) -> Self {
        let sorted = |values: &'a [String]| {
            let mut values: Vec<&str> = values.iter().map(String::as_str).collect();
            values.sort_unstable();
            values
        };
        MachineView {
            system_id: &m.system_id,
            hostname: &m.hostname,
            status: m.status.code,
            power_address: m.power_address.as_deref(),
            macs: sorted(&m.macs),
            ip_addresses: sorted(&m.ip_addresses),
            owner: m.owner.as_deref(),
            enable_hw_sync: m.enable_hw_sync,
            sync_interval: m.sync_interval,
        }
    }
}

/// The agent's contact time moves with every heartbeat; whether it ever enrolled does not.
#[derive(Serialize)]
struct InventoryView<'a> {
    id: Uuid,
    site: &'a str,
    hostname: &'a str,
    status: NodeState,
    retired: bool,
    protected: bool,
    paused: bool,
    enrolled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reimage_generation: Option<u64>,
}

impl<'a> InventoryView<'a> {
    fn of(n: &'a InventoryNode) -> Self {
        InventoryView {
            id: n.id,
            site: &n.site,
            hostname: &n.hostname,
            status: n.status,
            retired: n.retired,
            protected: n.protected,
            paused: n.paused,
            enrolled: n.enrolled(),
            reimage_generation: n.reimage_generation,
        }
    }
}

#[derive(Serialize)]
struct JobView<'a> {
    id: Uuid,
    kind: JobKind,
    mode: Option<DecommissionMode>,
    node_id: Option<Uuid>,
    site: &'a str,
    hostname: &'a str,
    maas_system_id: Option<&'a str>,
    stage: &'a str,
    state: JobState,
    adopted: bool,
    failure_class: Option<FailureClass>,
    plan_id: Option<&'a str>,
    /// A retry wait decides whether a failed job is retried now (left out when there is none,
    /// so fingerprints of jobs without one read as before).
    #[serde(skip_serializing_if = "Option::is_none")]
    next_try_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_spec: Option<&'a str>,
}

impl<'a> JobView<'a> {
    fn of(j: &'a ObservedJob) -> Self {
        JobView {
            id: j.id,
            kind: j.kind,
            mode: j.mode,
            node_id: j.node_id,
            site: &j.site,
            hostname: &j.hostname,
            maas_system_id: j.maas_system_id.as_deref(),
            stage: &j.stage,
            state: j.state,
            adopted: j.adopted,
            failure_class: j.failure_class,
            plan_id: j.plan_id.as_deref(),
            next_try_at: j.next_try_at,
            retry_spec: j.retry_spec.as_deref(),
        }
    }
}

#[cfg(test)]
impl ObservedMachine {
    /// A Ready, powered-off machine with nothing else known (tests).
    pub(crate) fn ready(system_id: &str, hostname: &str) -> Self {
        ObservedMachine {
            system_id: system_id.into(),
            hostname: hostname.into(),
            status: ObservedStatus {
                code: 4,
                name: "Ready".into(),
            },
            power_state: "off".into(),
            power_address: None,
            macs: Vec::new(),
            ip_addresses: Vec::new(),
            owner: None,
            enable_hw_sync: None,
            last_sync: None,
            next_sync: None,
            sync_interval: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(system_id: &str, hostname: &str) -> ObservedMachine {
        ObservedMachine {
            power_address: Some("10.0.0.1".into()),
            macs: vec!["aa:bb:cc:dd:ee:01".into()],
            enable_hw_sync: Some(false),
            ..ObservedMachine::ready(system_id, hostname)
        }
    }

    fn snapshot(machines: Vec<ObservedMachine>) -> Snapshot {
        Snapshot {
            format: SNAPSHOT_FORMAT,
            taken_at: DateTime::parse_from_rfc3339("2026-03-01T12:00:00Z")
                .unwrap()
                .with_timezone(&Utc),
            store_serial: 3,
            sites: BTreeMap::from([(
                SiteName::new("dc1"),
                SiteObservation::Readable {
                    maas_version: Some("3.6.1".into()),
                    machines,
                },
            )]),
            inventory: vec![],
            jobs: vec![],
        }
    }

    /// A plan file carries fingerprints and an id made by an earlier run: the hash must stay
    /// SHA-256 of the compact JSON, whichever implementation computes it (the value is
    /// Python's `hashlib.sha256` of the same bytes).
    #[test]
    fn hash_json_is_sha256_of_the_compact_json() {
        let parts = BTreeMap::from([
            ("site:dc1".to_owned(), "sha256:11".to_owned()),
            ("inventory".to_owned(), "sha256:00".to_owned()),
        ]);
        assert_eq!(
            fingerprint_of_parts(&parts),
            "sha256:10949e4e18950446fda1eda1d186a9d960a0e76b32fc16f2debee80c4bbb8123"
        );
    }

    #[test]
    fn fingerprint_ignores_what_moves_on_its_own_and_sees_what_matters() {
        let base = snapshot(vec![machine("a1", "n1"), machine("b2", "n2")]);
        let mut later = base.clone();
        later.taken_at += chrono::Duration::minutes(5);
        let m = &mut later.sites.get_mut(&SiteName::new("dc1")).unwrap();
        if let SiteObservation::Readable {
            machines,
            maas_version,
        } = m
        {
            machines.reverse();
            machines[0].power_state = "on".into();
            machines[0].last_sync = Some(later.taken_at);
            *maas_version = None;
        }
        assert_eq!(base.fingerprint(), later.fingerprint());

        let mut moved = base.clone();
        if let SiteObservation::Readable { machines, .. } =
            moved.sites.get_mut(&SiteName::new("dc1")).unwrap()
        {
            machines[1].status = ObservedStatus {
                code: 6,
                name: "Deployed".into(),
            };
        }
        assert_ne!(base.fingerprint(), moved.fingerprint());
        let (a, b) = (base.fingerprint_parts(), moved.fingerprint_parts());
        assert_ne!(a["site/dc1"], b["site/dc1"]);
        assert_eq!(a[PART_INVENTORY], b[PART_INVENTORY]);
        assert!(base.fingerprint().starts_with("sha256:"));
    }

    #[test]
    fn many_jobs_are_hashed_on_a_second_thread_to_the_same_part() {
        let at = DateTime::parse_from_rfc3339("2026-03-01T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let job = |n: usize| ObservedJob {
            id: Uuid::from_u128(n as u128),
            kind: JobKind::Onboarding,
            mode: None,
            node_id: Some(Uuid::from_u128(1_000_000 + n as u128)),
            site: "dc1".into(),
            hostname: format!("n{n}"),
            maas_system_id: Some(format!("m{n}")),
            stage: "done".into(),
            attempt: 1,
            state: JobState::Completed,
            adopted: false,
            failure_class: None,
            error_code: None,
            error_message: None,
            plan_id: None,
            requested_at: at,
            updated_at: at,
            retry_failures: 0,
            next_try_at: None,
            retry_spec: None,
            provisioning: None,
            payload: None,
        };
        let mut many = snapshot(vec![machine("a1", "n1")]);
        many.jobs = (0..PARALLEL_JOBS + 1).map(job).collect();
        let parts = many.fingerprint_parts();
        let views: Vec<JobView<'_>> = many.jobs.iter().map(JobView::of).collect();
        assert_eq!(parts[PART_JOBS], hash_json(&views));
        let few = snapshot(vec![machine("a1", "n1")]);
        assert_eq!(parts["site/dc1"], few.fingerprint_parts()["site/dc1"]);

        many.jobs[PARALLEL_JOBS / 2].stage = "deploy".into();
        assert_ne!(many.fingerprint_parts()[PART_JOBS], parts[PART_JOBS]);
    }

    #[test]
    fn snapshots_round_trip_and_refuse_other_formats() {
        let base = snapshot(vec![machine("a1", "n1")]);
        let back = Snapshot::from_json(&base.to_json()).unwrap();
        assert_eq!(back, base);
        let newer = base.to_json().replacen("\"format\": 1", "\"format\": 2", 1);
        assert_eq!(
            Snapshot::from_json(&newer).unwrap_err().to_string(),
            "snapshot format 2 is not the format this metalform reads (1)"
        );
        let broken = Snapshot::from_json("{\"format\": 1,\n \"sites\": [}").unwrap_err();
        assert!(broken.to_string().starts_with("line 2, column"), "{broken}");
    }

    #[test]
    fn in_use_statuses_are_the_ones_with_a_workload() {
        let status = |code| ObservedStatus {
            code,
            name: String::new(),
        };
        assert!(status(6).in_use(), "Deployed");
        assert!(status(9).in_use(), "Deploying");
        assert!(status(10).in_use(), "Allocated");
        assert!(!status(4).in_use(), "Ready");
        assert!(!status(11).in_use(), "Failed deployment");
        assert!(!status(99).in_use(), "unknown");
    }
}
