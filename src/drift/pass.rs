//! The drift pass of one site (seed 000 §6.3 MaasSiteReconcilerWorkflow, §6.4 auto-actions, §6.5
//! `node_maas_state`): read the site's MAAS (or take the daemon's observation), read the
//! inventory, the agent contacts, the drift records and the open jobs, evaluate the pure
//! rules, then per node record the observation and carry out the allowed auto-actions.
//!
//! Every action runs under the node's lease (an executor working on the node makes the pass
//! leave it alone) and after the machine was read again right before it: when MAAS moved on
//! since the list, the pass records what it now sees and acts on nothing (the next pass
//! decides again). A node's store write is checked against the node row the rules saw (its
//! generation), so a node that moved in between is left for the next pass. The writes of
//! nodes with nothing to act on share a transaction per batch of nodes, and a node whose
//! machine looks exactly as last recorded only has its reconcile time moved, in bulk.
//! Quarantine never touches allocations: it only takes the node out of scheduling.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::lifecycle::{NodeState, Owner};
use crate::model::Site;
use crate::observe::{InventoryNode, MaasClients, SiteObservation, observe_site};
use crate::provider::maas::{MaasClient, MaasError, ReleaseParams, StopMode};
use crate::secrets::SecretStore;
use crate::store::{
    Actor, AuditEntry, DriftMark, DriftRecord, Lease, MaasObservation, Node, SiteRows, Store,
    StoreError, node_lease_name,
};

use super::policy::DriftPolicy;
use super::rules::{
    self, DriftAction, DriftMarking, Finding, MaasView, MachineFacts, NodeInput, OpenJob, Rule,
};

/// How long the pass holds a node's lease while it acts on it.
const LEASE_TTL_SECS: i64 = 120;

/// What the pass needs: the store, the MAAS clients and secrets, who acts, and the policy.
#[derive(Clone)]
pub struct DriftEnv {
    pub store: Store,
    pub secrets: Arc<dyn SecretStore>,
    pub maas: MaasClients,
    /// Recorded in the audit log (a system actor: the reconciler).
    pub actor: Actor,
    pub policy: DriftPolicy,
    /// The node-lease holder name (`drift@host:pid`).
    pub holder: String,
}

impl DriftEnv {
    pub fn new(
        store: Store,
        secrets: Arc<dyn SecretStore>,
        maas: MaasClients,
        policy: DriftPolicy,
    ) -> Self {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
        DriftEnv {
            store,
            secrets,
            maas,
            actor: Actor::system("metalform-drift"),
            policy,
            holder: format!("drift@{host}:{}", std::process::id()),
        }
    }
}

/// What became of one auto-action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", content = "reason", rename_all = "snake_case")]
pub enum ActionResult {
    Taken,
    /// The policy, a paused/protected node or the absence guard held it back.
    Held(String),
    /// Not attempted now (the machine moved on, the node moved or a job owns it); the next
    /// pass decides again.
    Skipped(String),
    Failed(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActionOutcome {
    pub node_id: Uuid,
    pub hostname: String,
    #[serde(flatten)]
    pub action: DriftAction,
    #[serde(flatten)]
    pub result: ActionResult,
}

/// The result of one site's pass, for the daemon's logs and metrics and the CLI.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DriftReport {
    pub site: String,
    pub reconciled_at: DateTime<Utc>,
    /// Why the site's MAAS could not be read (nothing MAAS-side was decided).
    pub unreadable: Option<String>,
    /// One per live node of the site (after the re-read, for the nodes acted on).
    pub findings: Vec<Finding>,
    /// Findings counted by rule id, plus `unmanaged_machine`.
    pub by_rule: BTreeMap<String, usize>,
    /// Machines no node or job claims (000 §6.4: counted, debug).
    pub unmanaged: Vec<String>,
    /// The absence guard's reason, when it held the quarantines back.
    pub guard: Option<String>,
    pub actions: Vec<ActionOutcome>,
    /// Nodes whose record could not be written (the store said why).
    pub errors: Vec<String>,
}

impl DriftReport {
    /// Actions carried out.
    pub fn taken(&self) -> impl Iterator<Item = &ActionOutcome> {
        self.actions
            .iter()
            .filter(|a| a.result == ActionResult::Taken)
    }

    /// The finding of one node.
    pub fn finding(&self, node: Uuid) -> Option<&Finding> {
        self.findings.iter().find(|f| f.node_id == node)
    }
}

/// What a pass did, without the per-node findings: for the daemon's reconcile summary
/// (`reconciliation/run` with `wait`) — the counts by rule and the actions with their results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DriftPassSummary {
    pub reconciled_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
    pub by_rule: BTreeMap<String, usize>,
    pub actions: Vec<ActionOutcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guard: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

impl DriftReport {
    /// The report without its findings.
    pub fn pass_summary(&self) -> DriftPassSummary {
        DriftPassSummary {
            reconciled_at: self.reconciled_at,
            unreadable: self.unreadable.clone(),
            by_rule: self.by_rule.clone(),
            actions: self.actions.clone(),
            guard: self.guard.clone(),
            errors: self.errors.clone(),
        }
    }
}

impl ActionResult {
    /// `taken`, `held`, `skipped`, `failed` (metrics and logs).
    pub fn label(&self) -> &'static str {
        match self {
            ActionResult::Taken => "taken",
            ActionResult::Held(_) => "held",
            ActionResult::Skipped(_) => "skipped",
            ActionResult::Failed(_) => "failed",
        }
    }

    /// Why it was held, skipped or failed.
    pub fn reason(&self) -> Option<&str> {
        match self {
            ActionResult::Taken => None,
            ActionResult::Held(why) | ActionResult::Skipped(why) | ActionResult::Failed(why) => {
                Some(why)
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DriftError {
    #[error("cannot read the inventory of site {site}: {source}")]
    Store {
        site: String,
        #[source]
        source: StoreError,
    },
}

/// What the rules need about a site's nodes, read from the store.
struct Inputs {
    nodes: Vec<Node>,
    inputs: Vec<NodeInput>,
    job_machines: BTreeSet<String>,
}

/// What the drift pass takes from a site's inventory rows and current jobs ([`SiteRows`]): the
/// nodes, and of the jobs only which are open and which machines they name. Made as soon as
/// the rows are read, so that a reconcile holding it until its drift pass holds no job rows.
#[derive(Debug, Clone, Default)]
pub struct InventoryView {
    nodes: Vec<Node>,
    open: HashMap<Uuid, OpenJob>,
    /// Machines named by open jobs.
    job_machines: BTreeSet<String>,
    /// Each node's latest job that names a machine: that machine.
    latest_machine: HashMap<Uuid, String>,
}

impl From<SiteRows> for InventoryView {
    fn from(rows: SiteRows) -> Self {
        let mut view = InventoryView {
            nodes: rows.nodes,
            ..InventoryView::default()
        };
        for (_, current) in rows.jobs {
            // Newest request first: the first job of a node with a machine names its latest.
            for job in current {
                if job.state.is_open() {
                    view.job_machines.extend(job.maas_system_id.clone());
                    if let Some(node) = job.node_id {
                        view.open.entry(node).or_insert(OpenJob {
                            kind: job.kind,
                            id: job.id,
                            state: job.state,
                        });
                    }
                }
                if let (Some(node), Some(system_id)) = (job.node_id, job.maas_system_id) {
                    view.latest_machine.entry(node).or_insert(system_id);
                }
            }
        }
        view
    }
}

/// `view`: the site's inventory as the same reconcile's observation read it; read here when
/// not given.
async fn load_inputs(
    store: &Store,
    site: &str,
    view: Option<InventoryView>,
) -> Result<Inputs, StoreError> {
    let InventoryView {
        nodes,
        open,
        job_machines,
        latest_machine,
    } = match view {
        Some(view) => view,
        None => store.site_rows(Some(site)).await?.into(),
    };
    let contacts = store.agent_contacts(Some(site)).await?;
    let mut priors: HashMap<Uuid, crate::store::MaasState> = store
        .maas_states(Some(site))
        .await?
        .into_iter()
        .map(|s| (s.node_id, s))
        .collect();
    let inputs = nodes
        .iter()
        .map(|node| {
            let prior = priors.remove(&node.id);
            NodeInput {
                node: InventoryNode::from(node),
                system_id: prior
                    .as_ref()
                    .map(|p| p.maas_system_id.clone())
                    .filter(|s| !s.is_empty())
                    .or_else(|| latest_machine.get(&node.id).cloned()),
                last_contact: contacts.get(&node.id).copied(),
                prior,
                open_job: open.get(&node.id).cloned(),
            }
        })
        .collect();
    Ok(Inputs {
        nodes,
        inputs,
        job_machines,
    })
}

/// Reconcile one site: observe it (unless `observation` is given: the daemon's snapshot of
/// the same tick), evaluate, record and act. Fails only when the inventory cannot be read;
/// MAAS trouble and per-node refusals are in the report.
pub async fn reconcile_site(
    env: &DriftEnv,
    site: &Site,
    observation: Option<SiteObservation>,
) -> Result<DriftReport, DriftError> {
    let observation = match observation {
        Some(o) => o,
        None => observe_site(site, env.secrets.as_ref(), &env.maas).await,
    };
    reconcile_observed_site(env, site, observation, None).await
}

/// [`reconcile_site`] on an observation made already, and the inventory it was made with when
/// nothing can have opened a job since (the daemon's reconcile that dispatched nothing): that
/// is not read again.
pub async fn reconcile_observed_site(
    env: &DriftEnv,
    site: &Site,
    observation: SiteObservation,
    inventory: Option<InventoryView>,
) -> Result<DriftReport, DriftError> {
    let name = site.name.to_string();
    let store_error = |source| DriftError::Store {
        site: name.clone(),
        source,
    };
    let Inputs {
        nodes,
        inputs,
        job_machines,
    } = load_inputs(&env.store, &name, inventory)
        .await
        .map_err(store_error)?;
    let now = env.store.clock().now();
    let evaluation = rules::evaluate_site(
        &name,
        Some(&observation),
        &inputs,
        &job_machines,
        now,
        &env.policy,
    );
    let mut pass = Pass {
        env,
        site,
        client: None,
        guard: evaluation.guard.clone(),
        actions: Vec::new(),
        errors: Vec::new(),
        batch: Vec::new(),
        unchanged: Vec::new(),
    };
    let mut findings = Vec::with_capacity(evaluation.findings.len());
    for ((finding, input), node) in evaluation.findings.into_iter().zip(&inputs).zip(&nodes) {
        let settled = pass.settle(finding, input, node, findings.len()).await;
        findings.push(settled);
    }
    pass.flush(&mut findings).await;
    let mut by_rule: BTreeMap<String, usize> = rules::count_by_rule(&findings)
        .into_iter()
        .map(|(rule, n)| (rule.as_str().to_owned(), n))
        .collect();
    if !evaluation.unmanaged.is_empty() {
        by_rule.insert(
            Rule::UnmanagedMachine.as_str().to_owned(),
            evaluation.unmanaged.len(),
        );
    }
    for system_id in &evaluation.unmanaged {
        tracing::debug!(site = %name, system_id, "unmanaged MAAS machine");
    }
    Ok(DriftReport {
        site: name,
        reconciled_at: now,
        unreadable: match &observation {
            SiteObservation::Unreadable { error, .. } => Some(error.clone()),
            SiteObservation::Readable { .. } => None,
        },
        findings,
        by_rule,
        unmanaged: evaluation.unmanaged,
        guard: evaluation.guard,
        actions: pass.actions,
        errors: pass.errors,
    })
}

/// One site's pass in progress.
struct Pass<'a> {
    env: &'a DriftEnv,
    site: &'a Site,
    /// Made on first use: a pass with nothing to act on talks to MAAS once (the list).
    client: Option<MaasClient>,
    guard: Option<String>,
    actions: Vec<ActionOutcome>,
    errors: Vec<String>,
    /// Records of findings with nothing to act on, written together by [`Pass::flush`]: the
    /// index of the finding and its record.
    batch: Vec<(usize, DriftRecord)>,
    /// Nodes whose machine MAAS shows exactly as last recorded: only their reconcile time moves.
    unchanged: Vec<Uuid>,
}

/// How many nodes' records one store transaction of the pass writes: large enough that a
/// converged site costs a few transactions, small enough that the write lock is never held
/// long against the executors.
const BATCH: usize = 500;

impl Pass<'_> {
    fn outcome(&mut self, finding: &Finding, action: DriftAction, result: ActionResult) {
        self.actions.push(ActionOutcome {
            node_id: finding.node_id,
            hostname: finding.hostname.clone(),
            action,
            result,
        });
    }

    fn skip_all(&mut self, finding: &mut Finding, reason: &str) {
        for action in std::mem::take(&mut finding.actions) {
            self.outcome(finding, action, ActionResult::Skipped(reason.to_owned()));
        }
    }

    async fn client(&mut self) -> Result<&MaasClient, String> {
        if self.client.is_none() {
            let client = self
                .env
                .maas
                .client(self.site, self.env.secrets.as_ref())
                .await
                .map_err(|e| e.to_string())?;
            self.client = Some(client);
        }
        Ok(self.client.as_ref().expect("client made"))
    }

    /// Record one node's finding (the `index`th of the pass) and carry out its actions.
    async fn settle(
        &mut self,
        mut finding: Finding,
        input: &NodeInput,
        node: &Node,
        index: usize,
    ) -> Finding {
        for held in &finding.held {
            self.actions.push(ActionOutcome {
                node_id: finding.node_id,
                hostname: finding.hostname.clone(),
                action: held.action.clone(),
                result: ActionResult::Held(held.reason.clone()),
            });
        }
        if finding.actions.is_empty() {
            if finding.record || finding.marking != DriftMarking::Leave {
                let record = self.record(&finding, node, None, false);
                if seen_as_recorded(&record, input.prior.as_ref()) {
                    self.unchanged.push(node.id);
                } else if !writes_nothing(&record) {
                    self.batch.push((index, record));
                }
            }
            return finding;
        }
        let env = self.env;
        let lease = match env
            .store
            .acquire_lease(
                &node_lease_name(node.id),
                &env.holder,
                chrono::Duration::seconds(LEASE_TTL_SECS),
            )
            .await
        {
            Ok(lease) => lease,
            Err(err) => {
                let reason = match &err {
                    StoreError::LeaseHeld { holder, .. } => {
                        format!("the node's lease is held by {holder}: left to it")
                    }
                    other => format!("cannot take the node's lease: {other}"),
                };
                self.skip_all(&mut finding, &reason);
                return finding;
            }
        };
        let finding = self.act(finding, input, node, &lease).await;
        let _ = env.store.release_lease(&lease).await;
        finding
    }

    /// Under the node's lease: re-read the machine, then act.
    async fn act(
        &mut self,
        mut finding: Finding,
        input: &NodeInput,
        node: &Node,
        lease: &Lease,
    ) -> Finding {
        if finding.actions.iter().any(DriftAction::needs_fresh_machine) {
            match self.refresh(&finding).await {
                Ok(fresh) => {
                    let view = match &fresh {
                        Some(m) => MaasView::Machine(m),
                        None => MaasView::Absent,
                    };
                    let mut again = rules::evaluate_node(
                        input,
                        view,
                        self.env.store.clock().now(),
                        &self.env.policy,
                    );
                    if let Some(reason) = &self.guard
                        && again.rule == Rule::MachineDeleted
                    {
                        again
                            .held
                            .extend(again.actions.drain(..).map(|action| rules::Held {
                                action,
                                reason: reason.clone(),
                            }));
                    }
                    if again.rule != finding.rule || again.actions != finding.actions {
                        let reason = format!(
                            "MAAS moved on since the list: now {} ({})",
                            again.observed, again.rule
                        );
                        self.skip_all(&mut finding, &reason);
                        again.actions.clear();
                        let record = self.record(&again, node, None, false);
                        self.write(&mut again, record).await;
                        return again;
                    }
                    finding.machine = fresh;
                }
                Err(reason) => {
                    self.skip_all(&mut finding, &reason);
                    let record = self.record(&finding, node, None, false);
                    self.write(&mut finding, record).await;
                    return finding;
                }
            }
        }
        let planned = finding.actions.clone();
        let mut healed = true;
        let mut maas_taken = false;
        if let Some(system_id) = finding.actions.iter().find_map(|a| match a {
            DriftAction::ReleaseAndPowerOff { system_id } => Some(system_id.clone()),
            _ => None,
        }) {
            let action = DriftAction::ReleaseAndPowerOff {
                system_id: system_id.clone(),
            };
            finding.actions.retain(|a| a != &action);
            match self.release_and_power_off(&finding, &system_id).await {
                Ok(released) => {
                    finding.machine = Some(released);
                    maas_taken = true;
                    self.outcome(&finding, action, ActionResult::Taken);
                }
                Err(error) => {
                    healed = false;
                    self.outcome(&finding, action, ActionResult::Failed(error));
                }
            }
        }
        healed &= (maas_taken || !finding.actions.is_empty())
            && finding
                .actions
                .iter()
                .all(|a| matches!(a, DriftAction::UpdateHost { .. }));
        let record = self.record(&finding, node, Some(lease), healed);
        let store_actions = finding.actions.clone();
        if self.write(&mut finding, record).await {
            for action in store_actions {
                self.outcome(&finding, action, ActionResult::Taken);
            }
        }
        finding.actions = planned;
        finding
    }

    /// The machine as MAAS shows it now (`None`: gone).
    async fn refresh(&mut self, finding: &Finding) -> Result<Option<MachineFacts>, String> {
        let Some(system_id) = finding.system_id.clone() else {
            return Ok(None);
        };
        let client = self.client().await?;
        match client.read_machine(&system_id).await {
            Ok(machine) => Ok(Some(MachineFacts::from(&machine))),
            Err(MaasError::NotFound { .. }) => Ok(None),
            Err(err) => Err(format!("cannot re-read {system_id} before acting: {err}")),
        }
    }

    /// 000 §6.4 last-but-one row: release (no erase) then power off, audited before the calls.
    async fn release_and_power_off(
        &mut self,
        finding: &Finding,
        system_id: &str,
    ) -> Result<MachineFacts, String> {
        let env = self.env;
        env.store
            .audit(&AuditEntry {
                actor: env.actor.clone(),
                reason: Some(finding.message.clone()),
                action: "node.drift_release_retired".into(),
                subject_kind: "node".into(),
                subject_id: finding.node_id.to_string(),
                prior_state: Some(finding.node_state.as_str().into()),
                expected_target: Some(finding.node_state.as_str().into()),
                correlation_ids: json!({"system_id": system_id}),
                details: json!({"calls": ["release", "power_off"], "rule": finding.rule}),
            })
            .await
            .map_err(|e| e.to_string())?;
        let comment = format!(
            "metalform drift: node {} is retired ({})",
            finding.hostname, finding.node_id
        );
        let client = self.client().await?;
        let released = client
            .release(
                system_id,
                &ReleaseParams {
                    comment: Some(comment.clone()),
                    ..ReleaseParams::default()
                },
            )
            .await
            .map_err(|e| format!("MAAS release of {system_id} failed: {e}"))?;
        client
            .power_off(system_id, StopMode::Hard, Some(&comment))
            .await
            .map_err(|e| format!("{system_id} was released but MAAS power off failed: {e}"))?;
        Ok(MachineFacts::from(&released))
    }

    /// The store write for a finding.
    fn record(
        &self,
        finding: &Finding,
        node: &Node,
        lease: Option<&Lease>,
        healed: bool,
    ) -> DriftRecord {
        let mut record = DriftRecord::new(node, self.env.actor.clone());
        if finding.record
            && let Some(system_id) = &finding.system_id
        {
            record.observation = Some(MaasObservation {
                site: finding.site.clone(),
                system_id: system_id.clone(),
                status: finding.machine.as_ref().map(|m| m.status.name.clone()),
                power_state: finding.machine.as_ref().map(|m| m.power_state.clone()),
                ips: finding
                    .machine
                    .as_ref()
                    .map(|m| m.ip_addresses.clone())
                    .unwrap_or_default(),
            });
        }
        let details = finding.details();
        record.mark = match finding.marking {
            DriftMarking::Leave => DriftMark::Leave,
            DriftMarking::Clear => DriftMark::Clear,
            DriftMarking::Flag if healed => DriftMark::Resolved(with_auto_heal(details.clone())),
            DriftMarking::Flag => DriftMark::Flag(details.clone()),
        };
        record.transition = finding.actions.iter().find_map(|a| match a {
            DriftAction::Quarantine => Some((NodeState::Quarantined, Owner::Reconciler)),
            DriftAction::MarkOffline => Some((NodeState::Offline, Owner::Reconciler)),
            DriftAction::MarkActive => Some((NodeState::Active, Owner::Reconciler)),
            _ => None,
        });
        record.host = finding.actions.iter().find_map(|a| match a {
            DriftAction::UpdateHost { to, .. } => Some(to.clone()),
            _ => None,
        });
        record.reason = Some(format!(
            "drift {} ({}): {}",
            finding.rule,
            finding.rule.alert(),
            finding.message
        ));
        if finding.newly_detected && finding.marking == DriftMarking::Flag {
            record.audit = Some(("node.drift_detected".into(), details));
        }
        record.fence = lease.map(Lease::fence);
        record
    }

    /// Write; `false` (and the reason in the report) when the store refused.
    async fn write(&mut self, finding: &mut Finding, record: DriftRecord) -> bool {
        if writes_nothing(&record) {
            return true;
        }
        match self.env.store.record_drift(&record).await {
            Ok(_) => true,
            Err(err) => {
                self.refused(finding, &err);
                false
            }
        }
    }

    fn refused(&mut self, finding: &mut Finding, err: &StoreError) {
        let reason = match err {
            StoreError::JobOpen { kind, job, .. } => {
                format!("an open {kind} ({job}) owns the node now: left to it")
            }
            StoreError::StaleGeneration { .. } | StoreError::Concurrent { .. } => {
                "the node changed while the pass ran: left for the next pass".to_owned()
            }
            other => other.to_string(),
        };
        self.errors
            .push(format!("{}/{}: {reason}", finding.site, finding.hostname));
        self.skip_all(finding, &reason);
    }

    /// Write the records of the findings with nothing to act on, [`BATCH`] nodes per
    /// transaction, and move the reconcile time of the unchanged ones.
    async fn flush(&mut self, findings: &mut [Finding]) {
        let batch = std::mem::take(&mut self.batch);
        for chunk in batch.chunks(BATCH) {
            let records: Vec<DriftRecord> = chunk.iter().map(|(_, r)| r.clone()).collect();
            match self.env.store.record_drift_batch(&records).await {
                Ok(results) => {
                    for ((index, _), result) in chunk.iter().zip(results) {
                        if let Err(err) = result {
                            self.refused(&mut findings[*index], &err);
                        }
                    }
                }
                Err(err) => {
                    for (index, _) in chunk {
                        self.refused(&mut findings[*index], &err);
                    }
                }
            }
        }
        let unchanged = std::mem::take(&mut self.unchanged);
        if let Err(err) = self.env.store.touch_reconciled(&unchanged).await {
            self.errors.push(format!(
                "{}: cannot record the reconcile time of {} unchanged nodes: {err}",
                self.site.name,
                unchanged.len()
            ));
        }
    }
}

/// A record that would change nothing in the store.
fn writes_nothing(record: &DriftRecord) -> bool {
    record.observation.is_none()
        && record.mark == DriftMark::Leave
        && record.transition.is_none()
        && record.host.is_none()
        && record.audit.is_none()
}

/// A record that only repeats what the node's MAAS state row already says: the same machine,
/// status, power state and addresses, and no drift mark to change.
fn seen_as_recorded(record: &DriftRecord, prior: Option<&crate::store::MaasState>) -> bool {
    let (Some(observation), Some(prior)) = (&record.observation, prior) else {
        return false;
    };
    let mark_changes = match &record.mark {
        DriftMark::Leave => false,
        DriftMark::Clear => prior.drift_detected,
        DriftMark::Flag(_) | DriftMark::Resolved(_) => true,
    };
    !mark_changes
        && record.transition.is_none()
        && record.host.is_none()
        && record.audit.is_none()
        && prior.site == observation.site
        && prior.maas_system_id == observation.system_id
        && prior.last_maas_status == observation.status
        && prior.last_maas_power_state == observation.power_state
        && prior.last_maas_ips == observation.ips
}

fn with_auto_heal(mut details: Value) -> Value {
    if let Some(map) = details.as_object_mut() {
        map.insert("auto_healed".into(), Value::Bool(true));
    }
    details
}
