//! What every stage family shares (DESIGN.md §4, §8): the environment of a run ([`StageEnv`]:
//! store, secrets, MAAS, BMC and host access, clock), what one node's executor keeps in memory
//! only ([`NodeMemory`]), and the journal's contract with the executor — the facts a kind keeps
//! between stages ([`JournalFacts`], with the stage attempt's [`StageClock`]) and the
//! mid-stage [`Checkpoint`] that persists them.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::StageFailure;
use crate::agent::AgentSignals;
use crate::clock::Clock;
use crate::model::Site;
use crate::provider::bmc::BmcPower;
use crate::provider::host::HostAccess;
use crate::provider::maas::{MaasClient, MachinePolls};
use crate::secrets::{PowerCredentials, Secret, SecretStore};
use crate::store::{Actor, Observed, Store, StoreError};

/// What a site's MAAS answered to the preflight of 000 §4.14 (reachable, token valid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SitePreflight {
    pub maas_version: String,
    pub user: String,
    pub is_admin: bool,
}

/// How stages reach a site's MAAS (the API key is read from the site's secret reference when
/// the client is first needed).
pub trait MaasAccess: Send + Sync + std::fmt::Debug {
    fn client<'a>(&'a self, site: &'a Site) -> BoxFuture<'a, Result<MaasClient, StageFailure>>;

    /// The site's machine status polls, shared by every node of the site, so polls made at
    /// once go together.
    fn polls<'a>(&'a self, site: &'a Site) -> BoxFuture<'a, Result<MachinePolls, StageFailure>>;

    /// The preflight (`version/` + `whoami`), made once per site and run.
    fn preflight<'a>(
        &'a self,
        site: &'a Site,
    ) -> BoxFuture<'a, Result<SitePreflight, StageFailure>>;
}

/// Persist the journal facts in the middle of a stage (a deploy, release or power-off intent,
/// written before the call).
pub trait Checkpoint<F>: Send + Sync {
    fn checkpoint<'a>(&'a self, facts: &'a F) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// How a site's BMCs and deployed hosts are reached: production tools, or a simulator's
/// stand-ins (one simulator per site, as one MAAS region per site).
#[derive(Debug, Clone)]
pub struct SitePeers {
    pub bmc: Arc<dyn BmcPower>,
    pub host: Arc<dyn HostAccess>,
}

/// The peers of every site: a default, and per-site exceptions.
#[derive(Debug, Clone)]
pub struct Peers {
    pub default: SitePeers,
    pub per_site: std::collections::BTreeMap<String, SitePeers>,
}

impl Peers {
    pub fn uniform(bmc: Arc<dyn BmcPower>, host: Arc<dyn HostAccess>) -> Peers {
        Peers {
            default: SitePeers { bmc, host },
            per_site: Default::default(),
        }
    }

    pub fn for_site(&self, site: &str) -> &SitePeers {
        self.per_site.get(site).unwrap_or(&self.default)
    }
}

/// Everything the stages share for a run.
#[derive(Clone)]
pub struct StageEnv {
    pub store: Store,
    pub secrets: Arc<dyn SecretStore>,
    pub maas: Arc<dyn MaasAccess>,
    pub peers: Peers,
    pub clock: Arc<dyn Clock>,
    /// What cloud-init tells the node agent to call (docs/contracts.md §5).
    pub enroll_url: String,
    /// The agent binary and the CA cloud-init installs with it (docs/agent.md).
    pub agent_install: crate::cloudinit::AgentInstall,
    /// Who the journal writes are made by.
    pub actor: Actor,
    /// The executor's poll interval (waits inside stages are derived from it).
    pub poll_interval: Duration,
    /// The agent listener of this process, when it runs one: a stage waiting for a node's
    /// agent to enroll is woken by it and reads the store only at its slow fallback. `None`:
    /// nothing in this process records enrollments, so such a wait polls at `poll_interval`.
    pub agent_signals: Option<AgentSignals>,
}

impl std::fmt::Debug for StageEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageEnv")
            .field("store", &self.store)
            .field("enroll_url", &self.enroll_url)
            .finish_non_exhaustive()
    }
}

/// What one node's executor keeps in memory only: the rendered payload holds a fresh
/// enrollment token, the BMC login a password (000 §3.2: read at use time, never stored).
#[derive(Debug, Default)]
pub struct NodeMemory {
    pub user_data: Option<Secret>,
    pub power: Option<PowerCredentials>,
    /// The last machine seen, for the job's diagnostics (000 §4.12).
    pub observed: Option<Observed>,
    /// Why the current stage last waited (a timeout reports it).
    pub last_wait: Option<String>,
    /// The node's place among its group's `maxParallel` slots.
    pub slot: SlotStanding,
}

/// Where a node's run stands with its group's `maxParallel` slots (the executor takes one
/// before the stages that need it; a stage about to boot the machine outside those asks).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum SlotStanding {
    /// No slot held yet.
    #[default]
    Without,
    /// A stage asked for one (and waits): the executor takes one, then passes again.
    Wanted,
    /// Held until the node's run ends (or the node has no limit).
    Held,
}

impl NodeMemory {
    /// Whether the run may boot the machine now; if not, the slot is asked for and the stage
    /// should wait.
    pub fn boot_allowed(&mut self) -> bool {
        if self.slot == SlotStanding::Held {
            return true;
        }
        self.slot = SlotStanding::Wanted;
        false
    }
}

/// The stage attempt the journal is in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageClock {
    pub stage: String,
    pub attempt: i64,
    pub started_at: DateTime<Utc>,
    /// The attempt is under way (a `started` event was written and no end yet).
    pub open: bool,
}

impl StageClock {
    /// How long the attempt of `clock` has been running at `now` (zero without a clock).
    pub fn elapsed(clock: Option<&StageClock>, now: DateTime<Utc>) -> Duration {
        clock
            .and_then(|c| (now - c.started_at).to_std().ok())
            .unwrap_or_default()
    }
}

/// Persist `facts` mid-stage through `journal`; a store error is the stage's failure.
pub async fn checkpoint<F: Sync>(
    journal: &dyn Checkpoint<F>,
    facts: &F,
) -> Result<(), StageFailure> {
    journal
        .checkpoint(facts)
        .await
        .map_err(|e| StageFailure::store(&e))
}

/// The facts a job kind keeps in its journal (the job's `stage_details`), as the executor sees
/// them: the stage attempt's clock and retry count, and the node and machine they learnt.
pub trait JournalFacts: Default + Clone + PartialEq + Send + Sync + 'static {
    /// Read from a job's `stage_details`; an empty or foreign document starts afresh.
    fn from_details(details: &serde_json::Value) -> Self;
    fn to_details(&self) -> serde_json::Value;
    /// When the current stage attempt began (timeouts run from here, across restarts).
    fn clock(&mut self) -> &mut Option<StageClock>;
    /// Automatic retries of the current stage so far.
    fn retries(&mut self) -> &mut u32;
    /// An operator moved the job (retry, resume, rerun): the bounded counters start again;
    /// `from_top`: it starts again at the kind's first stage.
    fn operator_moved(&mut self, from_top: bool);
    /// The node record the job learnt (an onboarding learns it at render_cloud_init).
    fn node_id(&self) -> Option<Uuid>;
    /// The machine the job works on.
    fn system_id(&self) -> Option<String>;
}
