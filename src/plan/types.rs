//! What a plan is (DESIGN.md §4): per node an item with its action, the reason it exists in one
//! line, whether it is destructive, and — for anything the executor will run — every value it
//! needs, resolved at plan time (seed 000 §4.3 "resolved SiteConfig", §3.2.1 power-credential
//! selection). Plans serialise both ways: a plan file is this, as JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::lifecycle::{DecommissionMode, FailureClass, JobState, NodeState, RecoveryAction};
use crate::model::{Fleet, Node, NodeId, Profile, Provenance, SecretRef, Site, SiteName};

/// The plan format this metalform writes and reads.
pub const PLAN_FORMAT: u32 = 1;

/// Serialised as the plan document of docs/plan.md (`document.rs`): targets name their site
/// and profile, which are written once under `resolved`.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// [`PLAN_FORMAT`].
    pub format: u32,
    /// `sha256:<hex>` of the plan's content (everything below): two plans with the same id
    /// say the same thing, and a plan file edited after it was written is refused.
    pub id: String,
    /// The fleet revision planned from: `commit:<40 hex>` or `sha256:<hex>` (files on disk).
    pub fleet_revision: String,
    /// The observed snapshot's fingerprint.
    pub snapshot_fingerprint: String,
    /// Its parts (`site/<name>`, `inventory`, `jobs`), so a stale plan can say what moved.
    pub snapshot_parts: BTreeMap<String, String>,
    /// The store serial the snapshot was taken at.
    pub store_serial: i64,
    /// The plan the store's most recent job was run under, when any.
    pub parent: Option<String>,
    /// Per planned site, in name order.
    pub sites: Vec<SitePlan>,
    /// Ordered by (site, hostname).
    pub items: Vec<PlanItem>,
    pub summary: Summary,
    /// `hmac-sha256:<hex>` of the id under the state store's key, written by `metalform plan
    /// --out` (not part of the content the id hashes); `apply PLANFILE` requires it.
    pub signature: Option<String>,
}

impl Plan {
    /// Whether applying the plan would do anything (onboard, resume, rerun, adopt, or a
    /// reimage, decommission or retirement).
    pub fn has_changes(&self) -> bool {
        self.summary.changes > 0
    }

    /// The names of the planned sites.
    pub fn site_names(&self) -> impl Iterator<Item = &SiteName> {
        self.sites.iter().map(|s| &s.site)
    }

    /// The sites to observe again before applying the plan ([`super::check_fresh`]).
    pub fn site_filter(&self) -> crate::observe::SiteFilter {
        crate::observe::SiteFilter::Only(self.site_names().cloned().collect())
    }

    /// Items whose action runs in the executor, in plan order.
    pub fn changes(&self) -> impl Iterator<Item = &PlanItem> {
        self.items.iter().filter(|i| i.action.is_change())
    }

    /// Blocked items the fleet cannot converge past until an operator acts
    /// ([`BlockCause::needs_operator`]), in plan order.
    pub fn needing_operator(&self) -> impl Iterator<Item = &PlanItem> {
        self.items.iter().filter(|i| match &i.action {
            Action::Blocked { cause } => cause.needs_operator(),
            _ => false,
        })
    }
}

/// One site of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SitePlan {
    pub site: SiteName,
    /// MAAS could be read.
    pub readable: bool,
    pub maas_version: Option<String>,
    /// Why MAAS could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `active` or `disabled` (a disabled site takes no new onboarding, 000 §3.5).
    pub disabled: bool,
    /// Machines MAAS listed.
    pub machines: usize,
    /// Listed machines no node of the manifests or job matches (left alone, 000 §6.4).
    pub unmanaged_machines: usize,
    /// Set when the mass-destruction guard holds for this site: nothing destructive is planned
    /// here, and this says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<String>,
    pub summary: Summary,
}

/// Counts of items by what they do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub onboard: usize,
    pub resume: usize,
    pub rerun: usize,
    pub adopt: usize,
    pub noop: usize,
    pub blocked: usize,
    /// Items that destroy something when applied (they need `--allow-destructive`).
    pub destructive: usize,
    /// Items applying would run: every item but noop and blocked ones.
    pub changes: usize,
    /// New reimages (000 §5.3). The counts below are written only when not zero, so plans
    /// without decommissions read and hash as before.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reimage: usize,
    /// New full decommissions (000 §5.4).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub decommission: usize,
    /// New retirements.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retire: usize,
    /// New Redfish provisionings (seed 003).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub provision: usize,
    /// Retired nodes the manifests bring back into service.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reactivate: usize,
    /// Nodes removed from the manifests, decommissioned because pruning is on.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prune: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Summary {
    pub fn count(&mut self, item: &PlanItem) {
        match &item.action {
            Action::Onboard => self.onboard += 1,
            Action::Resume { .. } | Action::ResumeDecommission { .. } => self.resume += 1,
            Action::Rerun { .. } => self.rerun += 1,
            Action::Adopt { .. } => self.adopt += 1,
            Action::Reimage { .. } => self.reimage += 1,
            Action::Decommission => self.decommission += 1,
            Action::Retire => self.retire += 1,
            Action::Provision { .. } => self.provision += 1,
            Action::Reactivate => self.reactivate += 1,
            Action::Prune => self.prune += 1,
            Action::Noop => self.noop += 1,
            Action::Blocked { .. } => self.blocked += 1,
        }
        if item.action.is_change() {
            self.changes += 1;
        }
        if item.destructive {
            self.destructive += 1;
        }
    }

    pub fn of<'a>(items: impl IntoIterator<Item = &'a PlanItem>) -> Summary {
        let mut summary = Summary::default();
        for item in items {
            summary.count(item);
        }
        summary
    }
}

/// What the plan does about one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanItem {
    pub node: NodeId,
    /// The node is in the manifests (`false`: only the inventory or an open job knows it).
    pub in_manifests: bool,
    pub action: Action,
    /// Why, in one line an operator understands.
    pub reason: String,
    /// Applying it destroys something (a workload on a machine metalform did not deploy, the
    /// OS of a reimaged node, a node taken out of the fleet); `apply` needs
    /// `--allow-destructive`.
    pub destructive: bool,
    /// The node is in service as the manifests want it, with nothing to report: text output
    /// counts such items instead of listing them.
    #[serde(default)]
    pub settled: bool,
    /// Observed state that disagrees with the inventory, reported but not acted on here
    /// (000 §6.4: drift rules own it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<String>,
    /// The maintenance window this disruptive item would have waited for, had the operator not
    /// overridden the windows (`--ignore-windows`); `apply` audits the override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_ignored: Option<String>,
    /// The node's first-boot user-data as a deploy would render it now, where it differs from
    /// the payload last rendered for the node (secrets redacted). A review aid: the executor
    /// renders its own payload when it deploys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<UserDataChange>,
    /// Everything the executor needs; `None` for noop and blocked items. Boxed: a target is
    /// about 1.5 KB and most items of a converged fleet have none, so a 10,000-item plan holds
    /// a vector of 3.6 MB instead of 18 MB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Box<NodeTarget>>,
}

/// A node's user-data: what it was last rendered as and what a render now gives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserDataChange {
    /// Digest of the payload last rendered for the node; `None`: none was (a new onboarding).
    pub before: Option<String>,
    /// Digest of the payload a render now gives.
    pub after: String,
    /// When the new payload reaches the host: with this item's deploy, or with the node's next
    /// deploy (a reimage) when this item deploys nothing.
    pub applies: UserDataApplies,
    /// The layers that differ, each as `<order> <name> v<version>: <what it does>` (all the
    /// included layers of a new payload).
    pub layers: Vec<String>,
    /// A unified diff (two lines of context) of the redacted documents; empty for a new
    /// payload, whose layers say what it holds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diff: Vec<String>,
}

/// When a changed user-data reaches the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UserDataApplies {
    /// The item deploys the node (onboard, rerun, reimage, reactivate).
    ThisDeploy,
    /// The node is deployed; its next reimage carries the new payload.
    NextDeploy,
}

/// The action of an item. New actions (quarantine, update-host, release-retired) join this
/// enum; consumers match it exhaustively.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Action {
    /// Start a new onboarding job (000 §4.3).
    Onboard,
    /// Continue an open job at its recorded stage: an interrupted apply (`running`/`pending`),
    /// an interrupted compensation, or a `failed_retryable` job whose recommended recovery is
    /// resume or retry_stage (000 §4.9).
    Resume { job_id: Uuid, stage: String },
    /// Re-enter a failed job from the top with status-aware adoption (000 §4.9 rerun).
    Rerun { job_id: Uuid },
    /// The machine is Deployed and its agent enrolled: accept the observed state and finish the
    /// job as `reconciled` (000 §4.13 late success, 001 §4.3).
    Adopt {
        job_id: Option<Uuid>,
        system_id: String,
    },
    /// Reinstall the OS of an in-service node, keeping its node id (000 §5.3): the manifest's
    /// `reimage.generation` is above the one last applied to it.
    Reimage { generation: u64, applied: u64 },
    /// `lifecycle: decommissioned`: remove the node from the fleet (000 §5.4) — released,
    /// powered off, its record deleted.
    Decommission,
    /// `lifecycle: retired`: take the node out of service for good but keep its identity —
    /// drained, released, powered off, `retired`.
    Retire,
    /// `lifecycle: active` on a node flagged retired (seed 004; 001 §3.2 retired -> active):
    /// clear the flag, clean the machine, redeploy it with the same node id.
    Reactivate,
    /// The node left the manifests and pruning is on for its site (DESIGN.md §4): a full
    /// decommission with the release policy recorded for it (000 §5.4).
    Prune,
    /// Continue an open decommission (pending, or left running or compensating by a stopped
    /// executor) at its recorded stage: nothing new is started for the node meanwhile.
    ResumeDecommission {
        job_id: Uuid,
        mode: Option<DecommissionMode>,
        stage: String,
    },
    /// Install the node with metalform's Redfish provisioner (seed 003): a provisioning job
    /// for its server, at the manifest's `reimage.generation`.
    Provision { serial: String, generation: u64 },
    /// Nothing to do.
    Noop,
    /// Something an operator must resolve first.
    Blocked { cause: BlockCause },
}

impl Action {
    /// The action's name as shown and counted.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Onboard => "onboard",
            Action::Resume { .. } => "resume",
            Action::Rerun { .. } => "rerun",
            Action::Adopt { .. } => "adopt",
            Action::Reimage { .. } => "reimage",
            Action::Decommission => "decommission",
            Action::Retire => "retire",
            Action::Reactivate => "reactivate",
            Action::Prune => "prune",
            Action::ResumeDecommission { .. } => "resume",
            Action::Provision { .. } => "provision",
            Action::Noop => "noop",
            Action::Blocked { .. } => "blocked",
        }
    }

    /// The executor runs it.
    pub fn is_change(&self) -> bool {
        !matches!(self, Action::Noop | Action::Blocked { .. })
    }

    /// A reimage, decommission, retirement, reactivation or prune, new or resumed (run by the
    /// decommission executor).
    pub fn is_decommission(&self) -> bool {
        matches!(
            self,
            Action::Reimage { .. }
                | Action::Decommission
                | Action::Retire
                | Action::Reactivate
                | Action::Prune
                | Action::ResumeDecommission { .. }
        )
    }

    /// The job an action continues, if any.
    pub fn job_id(&self) -> Option<Uuid> {
        match self {
            Action::Resume { job_id, .. }
            | Action::Rerun { job_id }
            | Action::ResumeDecommission { job_id, .. } => Some(*job_id),
            Action::Adopt { job_id, .. } => *job_id,
            _ => None,
        }
    }
}

/// Why an item is blocked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BlockCause {
    /// The node's job is `failed_manual_intervention` (000 §4.11).
    ManualIntervention {
        job_id: Uuid,
        stage: String,
        failure_class: Option<FailureClass>,
        error_code: Option<String>,
        error: Option<String>,
        /// The recovery action to take (000 §4.9), when one applies.
        recommended_action: Option<RecoveryAction>,
        /// What to check or fix, then what to run (001 §9.2).
        recommendation: String,
    },
    /// The site is disabled: no new onboarding (000 §3.5).
    SiteDisabled,
    /// The site's MAAS could not be read: nothing is planned for its nodes.
    SiteUnreadable { error: String, transient: bool },
    /// More than one MAAS machine could be this node, or one machine could be several nodes
    /// (000 §4.16: fail closed).
    DiscoveryAmbiguity { candidates: Vec<Candidate> },
    /// `paused` in the manifest or the inventory; `would` names the action held back.
    Paused { source: PauseSource, would: String },
    /// The inventory holds the node in a state onboarding must not touch (quarantined,
    /// draining, retired, removing, or flagged retired).
    InventoryState {
        node_id: Uuid,
        state: NodeState,
        retired: bool,
    },
    /// A decommission of the node is open.
    DecommissionInProgress {
        job_id: Uuid,
        mode: Option<DecommissionMode>,
        state: JobState,
    },
    /// The mass-destruction guard holds for the site (DESIGN.md §4).
    DestructionGuard { guard: String },
    /// `protected: true` in the manifest or the inventory blocks reimage, decommission and
    /// release (seed 004); `would` names the action held back.
    Protected { source: PauseSource, would: String },
    /// The manifests retire or decommission the node while an onboarding of it is open: it is
    /// cancelled (or ends) first.
    OnboardingInProgress { job_id: Uuid, state: JobState },
    /// A disruptive action waits until a maintenance window of the node's site or NodeGroup
    /// opens (`opens_at`: when the soonest one opens next).
    MaintenanceWindow {
        window: String,
        opens_at: Option<chrono::DateTime<chrono::Utc>>,
        would: String,
    },
    /// Pruning this pass would remove more of the site than `reconcile.maxPrunePercent`
    /// allows: nothing is pruned, and an operator looks at why so many nodes left the
    /// manifests.
    PruneLimit {
        candidates: usize,
        allowed: usize,
        nodes: usize,
        max_percent: u8,
    },
    /// The node left the manifests, but no release policy was recorded for it: pruning does
    /// not guess an erase mode.
    NoReleasePolicy,
    /// The node's job failed retryably `failures` times in a row and backs off: it is tried
    /// again (`would`) at `next_try_at`, or at once when the node's manifests change.
    RetryBackoff {
        job_id: Uuid,
        failures: u32,
        next_try_at: chrono::DateTime<chrono::Utc>,
        would: String,
    },
}

impl BlockCause {
    /// Whether the node stays where it is until an operator acts: a job needing manual
    /// intervention, an ambiguous match, an unreadable MAAS, the mass-destruction guard, an
    /// inventory state the manifests contradict. Not what the operator asked for (paused,
    /// protected, a disabled site) nor work already under way.
    pub fn needs_operator(&self) -> bool {
        match self {
            BlockCause::ManualIntervention { .. }
            | BlockCause::DiscoveryAmbiguity { .. }
            | BlockCause::SiteUnreadable { .. }
            | BlockCause::DestructionGuard { .. }
            | BlockCause::PruneLimit { .. }
            | BlockCause::NoReleasePolicy => true,
            BlockCause::InventoryState { state, retired, .. } => {
                *retired || matches!(state, NodeState::Quarantined | NodeState::Retired)
            }
            BlockCause::SiteDisabled
            | BlockCause::Paused { .. }
            | BlockCause::Protected { .. }
            | BlockCause::DecommissionInProgress { .. }
            | BlockCause::OnboardingInProgress { .. }
            | BlockCause::MaintenanceWindow { .. }
            | BlockCause::RetryBackoff { .. } => false,
        }
    }
}

/// Where a `paused` or `protected` flag was set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseSource {
    Manifest,
    Inventory,
}

/// A MAAS machine that matched a node, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidate {
    pub system_id: String,
    pub hostname: String,
    pub status: String,
    pub matched_by: Vec<MatchKey>,
}

/// How a machine matched a node (000 §4.16 order: hostname, BMC address, PXE MAC), or that
/// another node claims it too.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum MatchKey {
    Hostname,
    BmcAddress,
    PxeMac,
    /// The node's open job is bound to this machine.
    Job,
    /// The machine also matches another node of the manifests.
    AlsoMatches {
        node: NodeId,
    },
}

impl std::fmt::Display for MatchKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MatchKey::Hostname => f.write_str("hostname"),
            MatchKey::BmcAddress => f.write_str("BMC address"),
            MatchKey::PxeMac => f.write_str("PXE MAC"),
            MatchKey::Job => f.write_str("open job"),
            MatchKey::AlsoMatches { node } => write!(f, "also matches {node}"),
        }
    }
}

/// Everything the executor needs for one node, resolved at plan time. Secrets appear only as
/// references; their values are read when a stage uses them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeTarget {
    pub site: Site,
    pub profile: Profile,
    pub node: Node,
    /// The BMC credentials after the override order of 000 §3.2.1.
    pub power_credentials: SecretRef,
    /// The MAAS machine, when it is already known (matched or bound to the job).
    pub system_id: Option<String>,
    /// The inventory row, when there is one.
    pub node_id: Option<Uuid>,
    /// The job the action continues.
    pub job_id: Option<Uuid>,
}

impl NodeTarget {
    /// A node of `fleet` with its site, profile and power credentials (override order of
    /// 000 §3.2.1) resolved, as a plan file carries them: without where in the manifests they
    /// were written, so a plan and the same plan read back from its file are equal. No machine,
    /// inventory row or job yet. `None` when the fleet does not resolve the node's site or
    /// profile (a fleet built by `crate::manifest` always does).
    pub fn resolve(fleet: &Fleet, node: &Node) -> Option<NodeTarget> {
        let site = fleet.site_of(node)?;
        let profile = fleet.profile_of(node)?;
        Some(NodeTarget {
            site: Site {
                provenance: Provenance::default(),
                ..site.clone()
            },
            profile: Profile {
                provenance: Provenance::default(),
                ..profile.clone()
            },
            node: Node {
                provenance: Provenance::default(),
                ..node.clone()
            },
            power_credentials: fleet.power_credentials_of(node)?.clone(),
            system_id: None,
            node_id: None,
            job_id: None,
        })
    }

    /// The node's spec as a retry backoff remembers it (`sha256:<hex>`): what the node is
    /// planned from — its site, profile and node as resolved, and its power credentials'
    /// reference — and not what was found for it (machine, inventory row, job). A failed job
    /// whose spec changed since it failed is retried at once.
    pub fn spec_hash(&self) -> String {
        spec_hash(
            &self.site,
            &self.profile,
            &self.node,
            &self.power_credentials,
        )
    }

    /// `site/hostname`.
    pub fn label(&self) -> String {
        self.node.id.to_string()
    }

    pub fn hostname(&self) -> &str {
        self.node.id.hostname.as_str()
    }

    pub fn site_name(&self) -> &str {
        self.node.id.site.as_str()
    }
}

/// [`NodeTarget::spec_hash`] of a node of `fleet`; `None` when the fleet does not resolve it.
pub fn node_spec_hash(fleet: &Fleet, node: &Node) -> Option<String> {
    Some(spec_hash(
        fleet.site_of(node)?,
        fleet.profile_of(node)?,
        node,
        fleet.power_credentials_of(node)?,
    ))
}

fn spec_hash(site: &Site, profile: &Profile, node: &Node, credentials: &SecretRef) -> String {
    // Where in the manifests things were written (provenance) is not serialised: moving a
    // document between files changes no spec.
    #[derive(Serialize)]
    struct Spec<'a> {
        site: &'a Site,
        profile: &'a Profile,
        node: &'a Node,
        power_credentials: &'a SecretRef,
    }
    crate::observe::hash_json(&Spec {
        site,
        profile,
        node,
        power_credentials: credentials,
    })
}

/// What the planner is asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanOptions {
    /// The sites to plan; each must be in the fleet (see `observe::SiteFilter::resolve`).
    pub sites: crate::observe::SiteFilter,
    /// Prune every site, whatever its `reconcile.prune` says (the daemon's `[reconcile]
    /// prune`).
    pub prune: bool,
    /// Do not hold disruptive items for maintenance windows (`--ignore-windows`); the items
    /// that would have waited say which window, and `apply` audits it.
    pub ignore_windows: bool,
    /// The clock maintenance windows are read against; `None`: the snapshot's `taken_at` (the
    /// moment the world was observed), so a plan stays a pure function of its inputs.
    pub now: Option<chrono::DateTime<chrono::Utc>>,
    /// How deployed hosts reach the agent channel and install the agent (the daemon's
    /// `[agent]`, `plan --agent-…`): with it, a new onboarding shows the user-data it deploys
    /// and a node's recorded payload is compared with this agent install; without it, a
    /// node's payload is rendered with the agent install it was last rendered with.
    pub payload: Option<PayloadSettings>,
}

/// The parts of a payload that come from the server, not the manifests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PayloadSettings {
    /// What hosts POST their enrollment to (`None`: unknown here; a node keeps its recorded one).
    pub enroll_url: Option<String>,
    pub agent: crate::cloudinit::AgentInstall,
}
