//! The planner (DESIGN.md §4; seed 000 §4.3, §4.8–§4.11, §4.13, §4.16, §3.5; seed 001 §4.3,
//! §6.2): model × snapshot → plan. Pure: no I/O, no clock, no randomness; the same inputs give
//! the same plan, byte for byte.
//!
//! Per node of the manifests, in this order: an open decommission is resumed (or, failed, blocks
//! the node until an operator recovers it); a node the manifests retire or decommission is
//! retired or decommissioned when it is in the inventory (000 §5.4), and not onboarded
//! otherwise; an inventory state onboarding must not touch blocks it; an open onboarding job
//! decides (resume, rerun, adopt a late enrollment, or blocked for manual intervention — the
//! recovery 000 §4.9 recommends for its state and failure class); an active node is reimaged
//! when its manifest's `reimage.generation` is above the one last applied (000 §5.3), else left
//! alone (drift is reported); otherwise the node is matched to its MAAS machine (fail closed on
//! ambiguity) and onboarded — destructively when the machine runs a workload metalform did not
//! put there — or adopted when it is Deployed: a fleet that already runs is taken as it is
//! (no redeploy, the agent enrollment follows) unless `reimage.generation` asks for one. Then, per node and site:
//! `paused` holds back any change, a retry of a failed job waits for its next try unless the
//! node's manifests changed since (`retry`), `protected` any reimage, decommission or retirement, a
//! disabled site takes no new onboarding, and the mass-destruction guard turns destructive
//! items into blocked ones. A node the Redfish provisioner installs (seed 003) needs no MAAS:
//! its provisioning jobs decide (`redfish_decision`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};

use uuid::Uuid;

use crate::lifecycle::recommend;
use crate::lifecycle::{
    DecommissionMode, FailureClass, JobKind, JobState, MaasStatus, NodeState, RecoveryAction,
};
use crate::model::{Fleet, Lifecycle, Node, NodeId, Site, SiteStatus};
use crate::observe::{
    InventoryNode, ObservedJob, ObservedMachine, SiteFilter, SiteObservation, Snapshot,
};

use super::fresh::revision_id;
use super::guard;
use super::matching::{Match, match_site};
use super::types::{
    Action, BlockCause, Candidate, NodeTarget, PLAN_FORMAT, PauseSource, Plan, PlanItem,
    PlanOptions, SitePlan, Summary,
};

/// Plan the selected sites of `fleet` against `snapshot`.
pub fn plan(fleet: &Fleet, snapshot: &Snapshot, options: &PlanOptions) -> Plan {
    let view = StoreView::new(snapshot);
    let clock = Clock {
        now: options.now.unwrap_or(snapshot.taken_at),
        ignore_windows: options.ignore_windows,
    };
    let selected: Vec<&Site> = fleet
        .sites
        .values()
        .filter(|site| options.sites.contains(&site.name))
        .collect();
    let planned = SiteFilter::Only(selected.iter().map(|site| site.name.clone()).collect());
    // The fingerprint reads only the snapshot: it is hashed on a thread of its own while two
    // more plan the sites, each taking the next site not yet taken (a site is planned on its
    // own; on a large fleet each part takes tens of milliseconds). The sites' plans are put
    // back in the fleet's order: the threads change nothing in the plan.
    let next = AtomicUsize::new(0);
    let (sites, mut items, parts) = std::thread::scope(|scope| {
        let parts = scope.spawn(|| snapshot.fingerprint_parts_of(&planned));
        let plan_sites = || {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(site) = selected.get(i) else {
                    break done;
                };
                done.push((i, plan_site(fleet, site, snapshot, &view, options, &clock)));
            }
        };
        let helper = scope.spawn(plan_sites);
        let mut planned_sites = plan_sites();
        planned_sites.extend(joined(helper));
        planned_sites.sort_by_key(|(i, _)| *i);
        let mut sites = Vec::with_capacity(planned_sites.len());
        let mut items = Vec::with_capacity(planned_sites.iter().map(|(_, (_, i))| i.len()).sum());
        for (_, (site_plan, site_items)) in planned_sites {
            sites.push(site_plan);
            items.extend(site_items);
        }
        (sites, items, joined(parts))
    });
    super::payload::attach(fleet, snapshot, options, &mut items);
    let mut plan = Plan {
        format: PLAN_FORMAT,
        id: String::new(),
        fleet_revision: revision_id(&fleet.revision),
        snapshot_fingerprint: crate::observe::fingerprint_of_parts(&parts),
        snapshot_parts: parts,
        store_serial: snapshot.store_serial,
        parent: view.parent(),
        summary: Summary::of(&items),
        sites,
        items,
        signature: None,
    };
    plan.id = super::document::content_id(&plan);
    plan
}

/// What a scoped thread returned; its panic goes on in the caller.
fn joined<T>(thread: std::thread::ScopedJoinHandle<'_, T>) -> T {
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The plan the most recently updated job of `snapshot` ran under: a plan's parent.
pub(crate) fn parent_of(snapshot: &Snapshot) -> Option<String> {
    snapshot
        .jobs
        .iter()
        .filter(|j| j.plan_id.is_some())
        .max_by(|a, b| (a.updated_at, a.id).cmp(&(b.updated_at, b.id)))
        .and_then(|j| j.plan_id.clone())
}

/// The inventory and jobs of the snapshot, indexed by (site, hostname).
pub(super) struct StoreView<'s> {
    pub(super) inventory: HashMap<(&'s str, &'s str), &'s InventoryNode>,
    pub(super) open_onboarding: HashMap<(&'s str, &'s str), &'s ObservedJob>,
    pub(super) latest_onboarding: HashMap<(&'s str, &'s str), &'s ObservedJob>,
    pub(super) open_decommission: HashMap<(&'s str, &'s str), &'s ObservedJob>,
    /// Redfish provisioning jobs (the open one, the latest, the latest that succeeded).
    pub(super) provisioning: HashMap<(&'s str, &'s str), Vec<&'s ObservedJob>>,
    pub(super) snapshot: &'s Snapshot,
}

impl<'s> StoreView<'s> {
    fn new(snapshot: &'s Snapshot) -> Self {
        let mut view = StoreView {
            inventory: HashMap::new(),
            open_onboarding: HashMap::new(),
            latest_onboarding: HashMap::new(),
            open_decommission: HashMap::new(),
            provisioning: HashMap::new(),
            snapshot,
        };
        for node in &snapshot.inventory {
            view.inventory
                .insert((node.site.as_str(), node.hostname.as_str()), node);
        }
        for job in &snapshot.jobs {
            let key = (job.site.as_str(), job.hostname.as_str());
            match job.kind {
                JobKind::Onboarding => {
                    if job.state.is_open() {
                        view.open_onboarding.insert(key, job);
                    }
                    let newer = view
                        .latest_onboarding
                        .get(&key)
                        .is_none_or(|l| (job.requested_at, job.id) > (l.requested_at, l.id));
                    if newer {
                        view.latest_onboarding.insert(key, job);
                    }
                }
                JobKind::Decommission => {
                    if job.state.is_open() {
                        view.open_decommission.insert(key, job);
                    }
                }
                JobKind::Provisioning => {
                    view.provisioning.entry(key).or_default().push(job);
                }
            }
        }
        view
    }

    /// The plan the most recently updated job ran under.
    fn parent(&self) -> Option<String> {
        parent_of(self.snapshot)
    }

    fn key(id: &NodeId) -> (&str, &str) {
        (id.site.as_str(), id.hostname.as_str())
    }
}

/// The moment maintenance windows are read at, and whether the operator overrides them.
pub(super) struct Clock {
    pub(super) now: chrono::DateTime<chrono::Utc>,
    pub(super) ignore_windows: bool,
}

/// What the planner decided for one node before the per-site rules.
pub(super) struct Decision {
    pub(super) action: Action,
    pub(super) reason: String,
    pub(super) destructive: bool,
    pub(super) settled: bool,
    pub(super) drift: Option<String>,
    pub(super) window_ignored: Option<String>,
    pub(super) system_id: Option<String>,
    pub(super) node_id: Option<Uuid>,
    pub(super) job_id: Option<Uuid>,
}

impl Decision {
    pub(super) fn new(action: Action, reason: String) -> Self {
        Decision {
            action,
            reason,
            destructive: false,
            settled: false,
            drift: None,
            window_ignored: None,
            system_id: None,
            node_id: None,
            job_id: None,
        }
    }

    pub(super) fn blocked(cause: BlockCause, reason: String) -> Self {
        Decision::new(Action::Blocked { cause }, reason)
    }
}

/// The first 8 characters of an id, as reasons show it.
pub(super) fn short(id: &Uuid) -> String {
    id.to_string()[..8].to_owned()
}

fn plan_site<'f>(
    fleet: &'f Fleet,
    site: &'f Site,
    snapshot: &Snapshot,
    view: &StoreView<'_>,
    options: &PlanOptions,
    clock: &Clock,
) -> (SitePlan, Vec<PlanItem>) {
    let not_observed = SiteObservation::Unreadable {
        error: "the snapshot has no observation of this site".to_owned(),
        transient: false,
        hint: None,
    };
    let observation = snapshot.sites.get(&site.name).unwrap_or(&not_observed);
    let nodes: Vec<&Node> = fleet.nodes_of_site(&site.name).collect();
    // Redfish-provisioned nodes are not in MAAS: no machine is matched to them.
    let maas_nodes: Vec<&Node> = nodes
        .iter()
        .copied()
        .filter(|n| n.provisioner.redfish().is_none())
        .collect();

    // Open jobs bound to a machine name it for their node.
    let bound: HashMap<&NodeId, &str> = maas_nodes
        .iter()
        .filter_map(|n| {
            let job = view.open_onboarding.get(&StoreView::key(&n.id))?;
            Some((&n.id, job.maas_system_id.as_deref()?))
        })
        .collect();
    let empty = Vec::new();
    let (machines, matches, unmanaged) = match observation {
        SiteObservation::Readable { machines, .. } => {
            let (matches, unmanaged) = match_site(machines, &maas_nodes, &bound);
            (machines, matches, unmanaged)
        }
        SiteObservation::Unreadable { .. } => (&empty, BTreeMap::new(), 0),
    };

    let mut items: Vec<PlanItem> = Vec::with_capacity(nodes.len());
    for node in &nodes {
        let facts = Facts {
            node,
            site,
            observation,
            inventory: view.inventory.get(&StoreView::key(&node.id)).copied(),
            open: view.open_onboarding.get(&StoreView::key(&node.id)).copied(),
            latest: view
                .latest_onboarding
                .get(&StoreView::key(&node.id))
                .copied(),
            decommission: view
                .open_decommission
                .get(&StoreView::key(&node.id))
                .copied(),
            matched: matches.get(&node.id).unwrap_or(&Match::None),
            provisioning: view
                .provisioning
                .get(&StoreView::key(&node.id))
                .map(Vec::as_slice)
                .unwrap_or_default(),
        };
        let decision = hold_back(&facts, decide(&facts));
        let decision = super::retry::gate(fleet, node, facts.open, decision, clock);
        let decision = super::windows::gate(fleet.windows_of(node), decision, clock);
        items.push(item(fleet, node, decision));
    }
    items.extend(super::prune::orphans(fleet, site, view, options, clock));
    items.sort_by(|a, b| a.node.cmp(&b.node));
    super::prune::limit(site, &mut items, view);

    let guard = guard::site_guard(site, observation, &nodes, machines, view.snapshot);
    if let Some(note) = &guard {
        guard::hold(&mut items, note);
    }
    let (readable, maas_version, error) = match observation {
        SiteObservation::Readable { maas_version, .. } => (true, maas_version.clone(), None),
        SiteObservation::Unreadable { error, .. } => (false, None, Some(error.clone())),
    };
    let site_plan = SitePlan {
        site: site.name.clone(),
        readable,
        maas_version,
        error,
        disabled: site.status == SiteStatus::Disabled,
        machines: machines.len(),
        unmanaged_machines: unmanaged,
        guard,
        summary: Summary::of(&items),
    };
    (site_plan, items)
}

/// Everything known about one node of the manifests.
pub(super) struct Facts<'a> {
    pub(super) node: &'a Node,
    pub(super) site: &'a Site,
    pub(super) observation: &'a SiteObservation,
    pub(super) inventory: Option<&'a InventoryNode>,
    pub(super) open: Option<&'a ObservedJob>,
    pub(super) latest: Option<&'a ObservedJob>,
    pub(super) decommission: Option<&'a ObservedJob>,
    pub(super) matched: &'a Match<'a>,
    /// The node's Redfish provisioning jobs (open, latest, latest successful).
    pub(super) provisioning: &'a [&'a ObservedJob],
}

impl Facts<'_> {
    /// The machine matched to the node, if exactly one.
    pub(super) fn machine(&self) -> Option<&ObservedMachine> {
        match self.matched {
            Match::One { machine, .. } => Some(machine),
            _ => None,
        }
    }

    /// `Deployed in MAAS (abc123)`, or that no machine matched.
    pub(super) fn machine_text(&self) -> String {
        match self.machine() {
            Some(m) => format!("{} in MAAS ({})", m.status, m.system_id),
            None => "not matched to a MAAS machine".to_owned(),
        }
    }

    fn machine_status(&self) -> Option<MaasStatus> {
        self.machine().and_then(|m| m.status.maas())
    }

    fn enrolled(&self) -> bool {
        self.inventory.is_some_and(InventoryNode::enrolled)
    }
}

fn decide(f: &Facts<'_>) -> Decision {
    // A Redfish-provisioned node needs no MAAS: its provisioning jobs decide.
    if let Some(redfish) = f.node.provisioner.redfish() {
        return redfish_decision(f, redfish);
    }
    if let SiteObservation::Unreadable {
        error, transient, ..
    } = f.observation
    {
        return Decision::blocked(
            BlockCause::SiteUnreadable {
                error: error.clone(),
                transient: *transient,
            },
            format!(
                "MAAS of site {} could not be read (see the site): nothing is planned for this node",
                f.site.name
            ),
        );
    }
    if let Some(job) = f.decommission {
        return with_ids(f, open_decommission(job), Some(job));
    }
    if f.node.lifecycle != Lifecycle::Active {
        return with_ids(f, leaving(f), None);
    }
    if let Some(inv) = f.inventory
        && let Some(decision) = super::exits::out_of_service(f, inv)
    {
        return with_ids(f, decision, None);
    }
    if let Some(job) = f.open {
        return with_ids(f, job_decision(f, job), Some(job));
    }
    if let Some(inv) = f.inventory
        && matches!(inv.status, NodeState::Active | NodeState::Offline)
    {
        return with_ids(f, reimage_or_in_service(f, inv), None);
    }
    with_ids(f, new_onboarding(f), None)
}

/// A node the Redfish provisioner installs (seed 003): provisioned once per
/// `reimage.generation`. An open job is the provisioning workers' (nothing to apply); a job
/// that completed successfully at the wanted generation or later settles the node; one that
/// failed at the wanted generation waits for an operator (fix the cause, bump the generation);
/// otherwise a new job is planned — destructive when the node was provisioned before (the
/// recipe rewrites its disk).
fn redfish_decision(f: &Facts<'_>, redfish: &crate::model::RedfishProvisioner) -> Decision {
    let wanted = f.node.reimage.generation;
    let serial = redfish.serial.as_str();
    let jobs: Vec<(&ObservedJob, &crate::observe::ObservedProvisioning)> = f
        .provisioning
        .iter()
        .filter_map(|j| Some((*j, j.provisioning.as_ref()?)))
        .filter(|(_, p)| p.serial == serial)
        .collect();
    if let Some((job, p)) = jobs.iter().find(|(j, _)| j.state.is_open()) {
        let mut decision = Decision::new(
            Action::Noop,
            format!(
                "provisioning job {} of server {serial} is {} at {}: the provisioning workers run it",
                short(&job.id),
                p.status,
                job.stage
            ),
        );
        decision.job_id = Some(job.id);
        return decision;
    }
    let provisioned = jobs
        .iter()
        .filter(|(_, p)| p.succeeded)
        .filter_map(|(job, p)| Some((*job, u64::try_from(p.generation?).ok()?)))
        .max_by_key(|(_, generation)| *generation);
    if let Some((job, generation)) = provisioned
        && generation >= wanted
    {
        let mut decision = Decision::new(
            Action::Noop,
            format!(
                "provisioned over Redfish by job {} (generation {generation}); server {serial}",
                short(&job.id)
            ),
        );
        decision.settled = true;
        return decision;
    }
    let latest = jobs.iter().max_by_key(|(j, _)| (j.requested_at, j.id));
    if let Some((job, p)) = latest
        && !p.succeeded
        && p.generation == Some(wanted as i64)
    {
        let step = p.failed_step.as_deref().unwrap_or("an unnamed step");
        return Decision::blocked(
            BlockCause::ManualIntervention {
                job_id: job.id,
                stage: job.stage.clone(),
                failure_class: None,
                error_code: Some("provisioning_failed".into()),
                error: Some(format!("failed at {step}")),
                recommended_action: None,
                recommendation: "read the job's events (GET /api/v1/jobs/ID), fix the cause, then bump reimage.generation".into(),
            },
            format!(
                "provisioning job {} of server {serial} failed at {step}: fix the cause, then bump reimage.generation to provision again",
                short(&job.id)
            ),
        );
    }
    let reason = match provisioned {
        Some((_, generation)) => format!(
            "reimage.generation {wanted} is above the provisioned generation {generation}: provision server {serial} again over Redfish (its disk is rewritten)"
        ),
        None => format!(
            "not provisioned yet: provision server {serial} over Redfish virtual media ({})",
            redfish.redfish_url
        ),
    };
    let mut decision = Decision::new(
        Action::Provision {
            serial: serial.to_owned(),
            generation: wanted,
        },
        reason,
    );
    decision.destructive = provisioned.is_some();
    decision
}

/// Fill in the ids every decision about this node carries.
fn with_ids(f: &Facts<'_>, mut decision: Decision, job: Option<&ObservedJob>) -> Decision {
    decision.node_id = f.inventory.map(|n| n.id).or(job.and_then(|j| j.node_id));
    decision.job_id = job.map(|j| j.id);
    if decision.system_id.is_none() {
        decision.system_id = f
            .machine()
            .map(|m| m.system_id.clone())
            .or_else(|| job.and_then(|j| j.maas_system_id.clone()));
    }
    decision
}

/// An open onboarding job decides (000 §4.8, §4.9; 001 §4.3).
fn job_decision(f: &Facts<'_>, job: &ObservedJob) -> Decision {
    let id = short(&job.id);
    let gone = match (&job.maas_system_id, f.machine()) {
        (Some(system_id), None) => {
            format!(" (its machine {system_id} is no longer listed in MAAS)")
        }
        _ => String::new(),
    };
    let resume = |reason: String| {
        Decision::new(
            Action::Resume {
                job_id: job.id,
                stage: job.stage.clone(),
            },
            reason,
        )
    };
    match job.state {
        JobState::Pending => {
            return resume(format!(
                "onboarding {id} was accepted but never started: start it{gone}"
            ));
        }
        JobState::Running => {
            return resume(format!(
                "onboarding {id} was left running at {} (an apply stopped, or is still at work): resume there{gone}",
                job.stage
            ));
        }
        JobState::Compensating => {
            return resume(format!(
                "onboarding {id} stopped while compensating at {}: finish the compensation{gone}",
                job.stage
            ));
        }
        JobState::FailedRetryable | JobState::FailedManualIntervention => {}
        // Terminal jobs are not open; nothing else reaches here.
        JobState::Completed | JobState::Cancelled | JobState::Reconciled => {
            return new_onboarding(f);
        }
    }

    let failure = describe_failure(job);
    // A late enrollment after the enrollment wait gave up (000 §4.6, §4.13): adopt it.
    if job.failure_class == Some(FailureClass::AgentEnrollmentFailure)
        && f.machine_status() == Some(MaasStatus::Deployed)
        && f.enrolled()
        && let Some(machine) = f.machine()
    {
        let mut decision = Decision::new(
            Action::Adopt {
                job_id: Some(job.id),
                system_id: machine.system_id.clone(),
            },
            format!(
                "onboarding {id} {failure}, but the machine is Deployed ({}) and its agent has enrolled since: adopt it",
                machine.system_id
            ),
        );
        decision.system_id = Some(machine.system_id.clone());
        return decision;
    }
    let recommendation = recommend(job.state, Some(&job.stage), job.failure_class);
    let manual = || {
        Decision::blocked(
            BlockCause::ManualIntervention {
                job_id: job.id,
                stage: job.stage.clone(),
                failure_class: job.failure_class,
                error_code: job.error_code.clone(),
                error: job.error_message.clone(),
                recommended_action: recommendation.action,
                recommendation: recommendation.text.clone(),
            },
            format!(
                "onboarding {id} {failure}; next: {}{gone}",
                recommendation.text
            ),
        )
    };
    if job.state == JobState::FailedManualIntervention {
        return manual();
    }
    match recommendation.action {
        Some(RecoveryAction::Rerun) => Decision::new(
            Action::Rerun { job_id: job.id },
            format!(
                "onboarding {id} {failure}: rerun it from the top (stages adopt what is already done){gone}"
            ),
        ),
        Some(RecoveryAction::Resume | RecoveryAction::RetryStage) | None => resume(format!(
            "onboarding {id} {failure}: resume at {}{gone}",
            job.stage
        )),
        Some(_) => manual(),
    }
}

/// An open decommission decides (001 §5): pending, or left running or compensating by a stopped
/// executor, it is resumed where its journal stands — nothing new is started for the node
/// meanwhile; failed, an operator recovers it first.
pub(super) fn open_decommission(job: &ObservedJob) -> Decision {
    let id = short(&job.id);
    let what = match job.mode {
        Some(mode) => format!("{mode} {id}"),
        None => format!("decommission {id}"),
    };
    let reason = match job.state {
        JobState::Pending => format!("{what} was requested but never started: start it"),
        JobState::Running => format!(
            "{what} was left running at {} (an apply stopped, or is still at work): resume there",
            job.stage
        ),
        JobState::Compensating => format!(
            "{what} stopped while being cancelled at {}: finish the cancellation",
            job.stage
        ),
        _ => {
            let failure = describe_failure(job);
            return Decision::blocked(
                BlockCause::DecommissionInProgress {
                    job_id: job.id,
                    mode: job.mode,
                    state: job.state,
                },
                format!(
                    "{what} {failure}: nothing else is planned until an operator recovers it (`metalform decommissions retry {}` or `cancel {}`)",
                    job.id, job.id
                ),
            );
        }
    };
    let mut decision = Decision::new(
        Action::ResumeDecommission {
            job_id: job.id,
            mode: job.mode,
            stage: job.stage.clone(),
        },
        reason,
    );
    // Continuing a reimage, decommission or retirement still destroys what it has not yet;
    // finishing a cancellation gives the node back.
    decision.destructive = job.state != JobState::Compensating
        && job.mode.is_none_or(DecommissionMode::is_destructive);
    decision
}

/// A node the manifests retire or decommission (`lifecycle: retired | decommissioned`): taken
/// out of the fleet when the inventory holds it in service, left alone when it is already where
/// the manifests want it, never onboarded.
fn leaving(f: &Facts<'_>) -> Decision {
    let lifecycle = f.node.lifecycle;
    let why = f
        .node
        .retired_reason
        .as_deref()
        .map(|r| format!(" ({r:?})"))
        .unwrap_or_default();
    if let Some(job) = f.open {
        return Decision::blocked(
            BlockCause::OnboardingInProgress {
                job_id: job.id,
                state: job.state,
            },
            format!(
                "lifecycle {lifecycle}{why}, but onboarding {} is {} at {}: cancel it first (`metalform onboardings cancel {}`)",
                short(&job.id),
                job.state,
                job.stage,
                job.id
            ),
        );
    }
    let Some(inv) = f.inventory else {
        return Decision::new(
            Action::Noop,
            match lifecycle {
                Lifecycle::Decommissioned => format!(
                    "lifecycle {lifecycle}{why}: not in the inventory (never onboarded, or removed already)"
                ),
                _ => format!("lifecycle {lifecycle}{why}: not onboarded"),
            },
        );
    };
    let machine = f.machine_text();
    let (action, what) = match (lifecycle, inv.status) {
        (Lifecycle::Retired, NodeState::Active | NodeState::Offline | NodeState::Quarantined) => (
            Action::Retire,
            "drain it, release and power off its machine, keep its identity retired",
        ),
        (
            Lifecycle::Decommissioned,
            NodeState::Active | NodeState::Offline | NodeState::Quarantined,
        ) => (
            Action::Decommission,
            "drain it, release and power off its machine, remove the node record",
        ),
        (Lifecycle::Decommissioned, NodeState::Retired) => (
            Action::Decommission,
            "its retirement drained it; release and power off its machine if still needed, remove the node record",
        ),
        (Lifecycle::Retired, NodeState::Retired) => {
            let mut decision = Decision::new(
                Action::Noop,
                format!("lifecycle {lifecycle}{why}: retired; {machine}"),
            );
            match f.machine() {
                Some(m) if m.status.in_use() => {
                    decision.drift = Some(format!("MAAS shows {}, expected released", m.status));
                }
                _ => decision.settled = true,
            }
            return decision;
        }
        (_, state) => {
            return Decision::blocked(
                BlockCause::InventoryState {
                    node_id: inv.id,
                    state,
                    retired: inv.retired,
                },
                format!(
                    "lifecycle {lifecycle}{why}, but the inventory holds it {state} with no open job: an operator decides what happens next (metalform status {})",
                    f.node.id
                ),
            );
        }
    };
    let mut decision = Decision::new(
        action,
        format!(
            "lifecycle {lifecycle}{why}; the node is {}, {machine}: {what}",
            inv.status
        ),
    );
    decision.destructive = true;
    decision
}

/// An in-service node whose manifest asks for a reimage (a `reimage.generation` above the one
/// last applied) is reimaged; otherwise it is left alone ([`in_service`]).
fn reimage_or_in_service(f: &Facts<'_>, inv: &InventoryNode) -> Decision {
    let wanted = f.node.reimage.generation;
    let mut decision = in_service(f, inv);
    match inv.reimage_generation {
        Some(applied) if wanted > applied => {
            let mut reimage = reimage(f, inv, applied);
            reimage.drift = decision.drift;
            reimage
        }
        None if wanted > 0 => {
            decision.reason.push_str(&format!(
                "; reimage.generation {wanted} is not compared: no applied generation is recorded for this node (onboarded before metalform recorded them)"
            ));
            decision.settled = false;
            decision
        }
        _ => decision,
    }
}

/// A reimage of the node (000 §5.3): the manifest's `reimage.generation` is above `applied`.
pub(super) fn reimage(f: &Facts<'_>, inv: &InventoryNode, applied: u64) -> Decision {
    let wanted = f.node.reimage.generation;
    let mut reimage = Decision::new(
        Action::Reimage {
            generation: wanted,
            applied,
        },
        format!(
            "reimage.generation {applied} → {wanted}; the node is {}, {}: release (erase {}) and redeploy it with the same node id",
            inv.status,
            f.machine_text(),
            f.node.decommission.erase
        ),
    );
    reimage.destructive = true;
    reimage
}

/// `failed_retryable at wait_for_ready (pxe_discovery_failure, failed_commission_timeout)`.
pub(super) fn describe_failure(job: &ObservedJob) -> String {
    let mut detail: Vec<String> = Vec::new();
    if let Some(class) = job.failure_class {
        detail.push(class.to_string());
    }
    if let Some(code) = &job.error_code {
        detail.push(code.clone());
    }
    let detail = if detail.is_empty() {
        String::new()
    } else {
        format!(" ({})", detail.join(", "))
    };
    format!("is {} at {}{detail}", job.state, job.stage)
}

/// An active (or offline) node: nothing to do, drift reported (000 §6.4, 001 §6.2).
fn in_service(f: &Facts<'_>, inv: &InventoryNode) -> Decision {
    let status = f.machine_status();
    let shown = match (f.machine(), status) {
        (Some(m), _) => format!("{} in MAAS ({})", m.status, m.system_id),
        (None, _) => "not matched to a MAAS machine".to_owned(),
    };
    let mut decision = Decision::new(Action::Noop, format!("{}; {shown}", inv.status));
    let mut drift = Vec::new();
    if !inv.status.expected_maas().allows(status) {
        drift.push(match f.machine() {
            Some(m) => format!("MAAS shows {}, expected Deployed", m.status),
            None => "no MAAS machine matches it, expected one Deployed".to_owned(),
        });
    }
    if inv.status == NodeState::Offline {
        drift.push("the node agent is not polling".to_owned());
    }
    if drift.is_empty() {
        decision.settled = true;
    } else {
        decision.drift = Some(drift.join("; "));
    }
    decision
}

/// No open job and not in service: match the machine and onboard, or adopt a Deployed and
/// enrolled one (000 §4.3 CreateOrFindInMaas, §4.16).
fn new_onboarding(f: &Facts<'_>) -> Decision {
    let earlier = f
        .latest
        .map(|j| {
            format!(
                " (the last onboarding, {}, ended {})",
                short(&j.id),
                j.state
            )
        })
        .unwrap_or_default();
    match f.matched {
        Match::Ambiguous(candidates) => {
            let what = match candidates.len() {
                1 => "a MAAS machine another node matches too".to_owned(),
                n => format!("{n} MAAS machines could be this node"),
            };
            Decision::blocked(
                BlockCause::DiscoveryAmbiguity {
                    candidates: candidates.clone(),
                },
                format!(
                    "{what} ({}): fix the hostname, BMC address or PXE MAC in MAAS or the manifests so exactly one machine matches",
                    describe_candidates(candidates)
                ),
            )
        }
        Match::One { machine, keys } => {
            let how = keys
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            if machine.status.maas() == Some(MaasStatus::Deployed)
                && let Some(adopt) = adopt_deployed(f, machine, &how, &earlier)
            {
                return adopt;
            }
            let mut decision = if machine.status.in_use() {
                let owner = machine
                    .owner
                    .as_deref()
                    .map(|o| format!(", owner {o}"))
                    .unwrap_or_default();
                let why = if machine.status.maas() == Some(MaasStatus::Deployed) {
                    format!(
                        "reimage.generation {} asks for a redeploy",
                        f.node.reimage.generation
                    )
                } else {
                    "metalform did not deploy it".to_owned()
                };
                let mut d = Decision::new(
                    Action::Onboard,
                    format!(
                        "MAAS lists it {} ({}{owner}, matched by {how}) and {why}: onboarding releases and redeploys it, destroying what runs there{earlier}",
                        machine.status, machine.system_id
                    ),
                );
                d.destructive = true;
                d
            } else {
                Decision::new(
                    Action::Onboard,
                    format!(
                        "MAAS lists it {} ({}, matched by {how}): onboard{earlier}",
                        machine.status, machine.system_id
                    ),
                )
            };
            decision.system_id = Some(machine.system_id.clone());
            decision
        }
        Match::None => Decision::new(
            Action::Onboard,
            format!(
                "not in MAAS yet: onboard (find or enlist it by its BMC {}){earlier}",
                f.node.bmc.ipmi_ip
            ),
        ),
    }
}

/// A Deployed machine that matches the node and that metalform has no record of running is a
/// fleet that already exists: adopted as it is, never redeployed — its agent enrollment is
/// issued as a follow-up. Only an explicit `reimage.generation` (above 0) asks for the redeploy,
/// a destructive onboarding (`None` here).
fn adopt_deployed(
    f: &Facts<'_>,
    machine: &ObservedMachine,
    how: &str,
    earlier: &str,
) -> Option<Decision> {
    let sid = &machine.system_id;
    let reason = if f.enrolled() {
        format!(
            "Deployed in MAAS ({sid}, matched by {how}) and its agent enrolled: adopt it{earlier}"
        )
    } else if f.inventory.is_none() && f.node.reimage.generation == 0 {
        let owner = machine
            .owner
            .as_deref()
            .map(|o| format!(", owner {o}"))
            .unwrap_or_default();
        format!(
            "Deployed in MAAS ({sid}{owner}, matched by {how}) with no metalform record: adopt it \
             as it runs, no redeploy; its agent enrollment follows (set reimage.generation to \
             redeploy it){earlier}"
        )
    } else {
        return None;
    };
    let mut decision = Decision::new(
        Action::Adopt {
            job_id: None,
            system_id: sid.clone(),
        },
        reason,
    );
    decision.system_id = Some(sid.clone());
    Some(decision)
}

fn describe_candidates(candidates: &[Candidate]) -> String {
    candidates
        .iter()
        .map(|c| {
            let keys: Vec<String> = c.matched_by.iter().map(ToString::to_string).collect();
            format!("{} {} by {}", c.system_id, c.hostname, keys.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Per-node rules that hold a change back: `paused` (manifest or inventory), `protected` for
/// anything destructive — a reimage, decommission or retirement, onboarding a machine in use
/// (seed 004; Ironic's `protected`) —, then a disabled site for new onboardings (000 §3.5:
/// in-flight work continues).
fn hold_back(f: &Facts<'_>, decision: Decision) -> Decision {
    if !decision.action.is_change() {
        return decision;
    }
    let paused = if f.node.paused {
        Some(PauseSource::Manifest)
    } else if f.inventory.is_some_and(|n| n.paused) {
        Some(PauseSource::Inventory)
    } else {
        None
    };
    if let Some(source) = paused {
        let would = decision.action.name().to_owned();
        let where_ = match source {
            PauseSource::Manifest => "the manifest (set paused: false to proceed)",
            PauseSource::Inventory => "the inventory",
        };
        return Decision {
            node_id: decision.node_id,
            ..Decision::blocked(
                BlockCause::Paused {
                    source,
                    would: would.clone(),
                },
                format!("paused in {where_}; would {would}: {}", decision.reason),
            )
        };
    }
    let protected = if f.node.protected {
        Some(PauseSource::Manifest)
    } else if f.inventory.is_some_and(|n| n.protected) {
        Some(PauseSource::Inventory)
    } else {
        None
    };
    if let Some(source) = protected
        && decision.destructive
    {
        let would = decision.action.name().to_owned();
        let where_ = match source {
            PauseSource::Manifest => "the manifest (set protected: false to proceed)",
            PauseSource::Inventory => "the inventory",
        };
        return Decision {
            node_id: decision.node_id,
            ..Decision::blocked(
                BlockCause::Protected {
                    source,
                    would: would.clone(),
                },
                format!("protected in {where_}; would {would}: {}", decision.reason),
            )
        };
    }
    if f.site.status == SiteStatus::Disabled
        && matches!(decision.action, Action::Onboard | Action::Provision { .. })
    {
        return Decision {
            node_id: decision.node_id,
            ..Decision::blocked(
                BlockCause::SiteDisabled,
                format!(
                    "site {} is disabled: no new onboarding; would onboard: {}",
                    f.site.name, decision.reason
                ),
            )
        };
    }
    decision
}

/// The item for a decision; changes carry their resolved target.
fn item(fleet: &Fleet, node: &Node, decision: Decision) -> PlanItem {
    let target = if decision.action.is_change() {
        // A fleet built by `manifest` always resolves a node.
        NodeTarget::resolve(fleet, node).map(|target| NodeTarget {
            system_id: decision.system_id.clone(),
            node_id: decision.node_id,
            job_id: decision.job_id,
            ..target
        })
    } else {
        None
    };
    PlanItem {
        node: node.id.clone(),
        in_manifests: true,
        action: decision.action,
        reason: decision.reason,
        destructive: decision.destructive,
        settled: decision.settled,
        drift: decision.drift,
        window_ignored: decision.window_ignored,
        user_data: None,
        target: target.map(Box::new),
    }
}
