//! The drift rules (seed 000 §6.4, the heartbeat of §6.3; seed 001 §3.3 owners): observed site
//! × inventory nodes × last agent contact × now × policy → one finding per node. Pure: no I/O,
//! no clock (`now` is passed in), no randomness.
//!
//! Each finding names the §6.4 row that applies (its rule id and the table's alert level),
//! what was expected and observed, the auto-actions the row calls for, and those the policy,
//! a paused or protected node, or the absence guard held back. A site whose MAAS could not be
//! read is never taken for an empty one: its nodes get no MAAS rule at all, only the
//! heartbeat. A node with an open onboarding or decommission is left to that job.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::lifecycle::{JobKind, JobState, MaasStatus, NodeState};
use crate::observe::{InventoryNode, ObservedMachine, ObservedStatus, SiteObservation};
use crate::store::MaasState;

use super::policy::DriftPolicy;

/// A rule of 000 §6.4 (the first nine), or why none of them applied (the last four).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// Deployed | active: OK.
    DeployedActive,
    /// Deployed | offline (or going offline): agent issue, no MAAS action.
    AgentNotPolling,
    /// Ready / released (or being redeployed) | active: quarantine.
    ReleasedOutsideWorkflow,
    /// Failed / Broken | active: quarantine.
    HardwareFailure,
    /// Commissioning | active: warning only.
    UnexpectedRecommission,
    /// Deployed with another IP | active: update the host address.
    IpChanged,
    /// Absent from MAAS | active: quarantine.
    MachineDeleted,
    /// Deployed | retired: release and power off.
    RetiredStillDeployed,
    /// A MAAS machine no node or job claims: no action.
    UnmanagedMachine,
    /// The site's MAAS could not be read: no MAAS rule applies (unreadable is not empty).
    MaasUnreadable,
    /// A MAAS status the table has no row for (rescue mode, Missing, a newer MAAS's code).
    UnexpectedMaasStatus,
    /// An open onboarding or decommission owns the node.
    LeftToJob,
    /// Not in service (quarantined, enrolling without a job, …): observed and recorded only.
    NotInService,
}

impl Rule {
    pub const ALL: [Rule; 13] = [
        Rule::DeployedActive,
        Rule::AgentNotPolling,
        Rule::ReleasedOutsideWorkflow,
        Rule::HardwareFailure,
        Rule::UnexpectedRecommission,
        Rule::IpChanged,
        Rule::MachineDeleted,
        Rule::RetiredStillDeployed,
        Rule::UnmanagedMachine,
        Rule::MaasUnreadable,
        Rule::UnexpectedMaasStatus,
        Rule::LeftToJob,
        Rule::NotInService,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Rule::DeployedActive => "deployed_active",
            Rule::AgentNotPolling => "agent_not_polling",
            Rule::ReleasedOutsideWorkflow => "released_outside_workflow",
            Rule::HardwareFailure => "hardware_failure",
            Rule::UnexpectedRecommission => "unexpected_recommission",
            Rule::IpChanged => "ip_changed",
            Rule::MachineDeleted => "machine_deleted",
            Rule::RetiredStillDeployed => "retired_still_deployed",
            Rule::UnmanagedMachine => "unmanaged_machine",
            Rule::MaasUnreadable => "maas_unreadable",
            Rule::UnexpectedMaasStatus => "unexpected_maas_status",
            Rule::LeftToJob => "left_to_job",
            Rule::NotInService => "not_in_service",
        }
    }

    pub fn from_name(name: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// The table's alert level.
    pub fn severity(self) -> Severity {
        match self {
            Rule::DeployedActive | Rule::NotInService => Severity::None,
            Rule::UnmanagedMachine | Rule::LeftToJob => Severity::Debug,
            Rule::IpChanged | Rule::RetiredStillDeployed => Severity::Info,
            Rule::AgentNotPolling
            | Rule::UnexpectedRecommission
            | Rule::MaasUnreadable
            | Rule::UnexpectedMaasStatus => Severity::Warn,
            Rule::ReleasedOutsideWorkflow | Rule::HardwareFailure | Rule::MachineDeleted => {
                Severity::Critical
            }
        }
    }

    /// The table's alert text.
    pub fn alert(self) -> &'static str {
        match self {
            Rule::DeployedActive => "ok",
            Rule::AgentNotPolling => "agent not polling",
            Rule::ReleasedOutsideWorkflow => "node released outside workflow",
            Rule::HardwareFailure => "hardware failure detected",
            Rule::UnexpectedRecommission => "node being recommissioned",
            Rule::IpChanged => "IP change detected",
            Rule::MachineDeleted => "machine deleted from MAAS",
            Rule::RetiredStillDeployed => "cleaning up retired node",
            Rule::UnmanagedMachine => "unmanaged MAAS machine",
            Rule::MaasUnreadable => "MAAS could not be read",
            Rule::UnexpectedMaasStatus => "unexpected MAAS status",
            Rule::LeftToJob => "left to its job",
            Rule::NotInService => "not in service",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Alert levels of the table, lowest first; `None` is the table's "—".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    None,
    Debug,
    Info,
    Warn,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::None => "none",
            Severity::Debug => "debug",
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Critical => "critical",
        }
    }
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An auto-action of the table (or of the heartbeat).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum DriftAction {
    /// active → offline: no agent contact past the threshold (owner: reconciler).
    MarkOffline,
    /// offline → active: the agent is heard from again.
    MarkActive,
    /// active/offline → quarantined; allocations are never force-released.
    Quarantine,
    UpdateHost {
        from: Option<String>,
        to: String,
    },
    /// MAAS release (no erase) then power off, after re-reading the machine.
    ReleaseAndPowerOff {
        system_id: String,
    },
}

impl DriftAction {
    pub fn as_str(&self) -> &'static str {
        match self {
            DriftAction::MarkOffline => "mark_offline",
            DriftAction::MarkActive => "mark_active",
            DriftAction::Quarantine => "quarantine",
            DriftAction::UpdateHost { .. } => "update_host",
            DriftAction::ReleaseAndPowerOff { .. } => "release_and_power_off",
        }
    }

    /// Whether the self-heal policy lets the pass take this action.
    pub fn allowed_by(&self, policy: &DriftPolicy) -> bool {
        match self {
            DriftAction::MarkOffline | DriftAction::MarkActive => policy.heartbeat,
            DriftAction::Quarantine => policy.quarantine,
            DriftAction::UpdateHost { .. } => policy.update_host,
            DriftAction::ReleaseAndPowerOff { .. } => policy.release_retired,
        }
    }

    /// The policy key that turns this action on or off (for "held" explanations).
    pub fn policy_key(&self) -> &'static str {
        match self {
            DriftAction::MarkOffline | DriftAction::MarkActive => "heartbeat",
            DriftAction::Quarantine => "quarantine",
            DriftAction::UpdateHost { .. } => "update_host",
            DriftAction::ReleaseAndPowerOff { .. } => "release_retired",
        }
    }

    /// Talks to MAAS or depends on what MAAS shows: the pass re-reads the machine first.
    pub fn needs_fresh_machine(&self) -> bool {
        matches!(
            self,
            DriftAction::Quarantine
                | DriftAction::UpdateHost { .. }
                | DriftAction::ReleaseAndPowerOff { .. }
        )
    }
}

/// An action the rules call for but did not let run, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Held {
    #[serde(flatten)]
    pub action: DriftAction,
    pub reason: String,
}

/// What happens to the node's drift record (000 §6.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftMarking {
    /// Leave the drift fields as they are.
    Leave,
    /// The node is as expected: a flagged drift auto-heals.
    Clear,
    /// Drift: flag it (or keep it flagged).
    Flag,
}

/// The part of a MAAS machine the rules read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MachineFacts {
    pub system_id: String,
    pub hostname: String,
    pub status: ObservedStatus,
    pub power_state: String,
    pub ip_addresses: Vec<String>,
}

impl From<&ObservedMachine> for MachineFacts {
    fn from(m: &ObservedMachine) -> Self {
        MachineFacts {
            system_id: m.system_id.clone(),
            hostname: m.hostname.clone(),
            status: m.status.clone(),
            power_state: m.power_state.clone(),
            ip_addresses: m.ip_addresses.clone(),
        }
    }
}

impl From<&crate::provider::maas::Machine> for MachineFacts {
    fn from(m: &crate::provider::maas::Machine) -> Self {
        let status = ObservedStatus {
            code: m.status.code(),
            name: m.status_label(),
        };
        let mut ip_addresses = m.ip_addresses.clone();
        ip_addresses.sort();
        MachineFacts {
            system_id: m.system_id.clone(),
            hostname: m.hostname.clone(),
            status,
            power_state: m.power_state.to_string(),
            ip_addresses,
        }
    }
}

/// What MAAS says about a node's machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaasView<'a> {
    Machine(&'a MachineFacts),
    /// The site answered and the machine is not in it.
    Absent,
    /// The site could not be read (or was not observed).
    Unreadable,
}

/// An open job of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OpenJob {
    pub kind: JobKind,
    pub id: Uuid,
    pub state: JobState,
}

/// One inventory node with what the rules need besides MAAS.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInput {
    pub node: InventoryNode,
    /// Its machine: the system id of its `node_maas_state` row, else of its latest job; `None`
    /// lets the site evaluation match by hostname.
    pub system_id: Option<String>,
    /// The agent's last authenticated contact.
    pub last_contact: Option<DateTime<Utc>>,
    /// Its `node_maas_state` row.
    pub prior: Option<MaasState>,
    pub open_job: Option<OpenJob>,
}

/// The verdict on one node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub node_id: Uuid,
    pub site: String,
    pub hostname: String,
    pub node_state: NodeState,
    pub rule: Rule,
    pub severity: Severity,
    pub expected: String,
    pub observed: String,
    pub message: String,
    /// The machine the node is bound to, when known.
    pub system_id: Option<String>,
    /// What MAAS showed for it (`None`: absent, or the site was not read).
    pub machine: Option<MachineFacts>,
    pub actions: Vec<DriftAction>,
    pub held: Vec<Held>,
    pub marking: DriftMarking,
    /// The flag is new (or the rule changed): the pass audits it.
    pub newly_detected: bool,
    /// The observation is written to `node_maas_state` (the site was read and the machine
    /// is known).
    pub record: bool,
}

impl Finding {
    /// `drift_details` (000 §6.5: rule, MAAS status, expected, …).
    pub fn details(&self) -> Value {
        json!({
            "rule": self.rule.as_str(),
            "severity": self.severity.as_str(),
            "alert": self.rule.alert(),
            "maas_status": self.machine.as_ref().map(|m| m.status.name.clone()),
            "expected": self.expected,
            "observed": self.observed,
            "message": self.message,
            "system_id": self.system_id,
            "actions": self.actions,
            "held": self.held,
        })
    }
}

/// Every finding of one site.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SiteEvaluation {
    pub site: String,
    pub readable: bool,
    /// One per inventory node, in the order given.
    pub findings: Vec<Finding>,
    /// System ids of machines no node or job claims (000 §6.4 last row: counted, no action).
    pub unmanaged: Vec<String>,
    /// Why the absence guard held the quarantines back, when it did.
    pub guard: Option<String>,
}

/// MAAS statuses grouped the way the table reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StatusClass {
    Deployed,
    /// Ready or on the way there, or redeploying: the workflow's deployment is gone.
    Released,
    Failed,
    Commissioning,
    Other,
}

fn classify(status: &ObservedStatus) -> StatusClass {
    use MaasStatus as M;
    match status.maas() {
        Some(M::Deployed) => StatusClass::Deployed,
        Some(M::Ready | M::Releasing | M::DiskErasing | M::Allocated | M::Deploying | M::New) => {
            StatusClass::Released
        }
        Some(s) if s == M::Broken || s.is_failed() => StatusClass::Failed,
        Some(M::Commissioning | M::Testing) => StatusClass::Commissioning,
        _ => StatusClass::Other,
    }
}

/// How long since the last contact, when that is past the threshold (never heard from counts).
fn stale_for(
    last_contact: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    policy: &DriftPolicy,
) -> Option<String> {
    let threshold =
        chrono::Duration::from_std(policy.heartbeat_threshold).unwrap_or(chrono::Duration::MAX);
    match last_contact {
        None => Some("the agent was never heard from".to_owned()),
        Some(at) if now - at > threshold => Some(format!(
            "no agent contact for {} (threshold {}; last {})",
            crate::model::duration::format((now - at).to_std().unwrap_or_default()),
            crate::model::duration::format(policy.heartbeat_threshold),
            at.format("%Y-%m-%dT%H:%M:%SZ"),
        )),
        Some(_) => None,
    }
}

/// The new host among the machine's addresses: one that was not there before (preferring the
/// old host's /24), else the first.
fn pick_host(old: &str, observed: &[String], before: &[String]) -> String {
    let appeared: Vec<&String> = observed.iter().filter(|ip| !before.contains(ip)).collect();
    let pool: Vec<&String> = if appeared.is_empty() {
        observed.iter().collect()
    } else {
        appeared
    };
    let prefix = |ip: &str| ip.rsplit_once('.').map(|(net, _)| net.to_owned());
    let same_net = prefix(old).and_then(|net| {
        pool.iter()
            .find(|ip| prefix(ip).as_deref() == Some(net.as_str()))
            .copied()
    });
    same_net
        .or_else(|| pool.first().copied())
        .cloned()
        .unwrap_or_default()
}

fn describe(m: &MachineFacts) -> String {
    format!(
        "{} ({}, power {}{})",
        m.status.name,
        m.system_id,
        m.power_state,
        if m.ip_addresses.is_empty() {
            String::new()
        } else {
            format!(", {}", m.ip_addresses.join(" "))
        }
    )
}

/// Evaluate one node against what MAAS shows for it.
pub fn evaluate_node(
    input: &NodeInput,
    maas: MaasView<'_>,
    now: DateTime<Utc>,
    policy: &DriftPolicy,
) -> Finding {
    let node = &input.node;
    let machine = match maas {
        MaasView::Machine(m) => Some(m.clone()),
        _ => None,
    };
    let system_id = machine
        .as_ref()
        .map(|m| m.system_id.clone())
        .or_else(|| input.system_id.clone());
    let observed_maas = match maas {
        MaasView::Machine(m) => describe(m),
        MaasView::Absent => format!(
            "absent from MAAS{}",
            system_id
                .as_deref()
                .map(|s| format!(" (was {s})"))
                .unwrap_or_default()
        ),
        MaasView::Unreadable => "MAAS could not be read".to_owned(),
    };
    let mut finding = Finding {
        node_id: node.id,
        site: node.site.clone(),
        hostname: node.hostname.clone(),
        node_state: node.status,
        rule: Rule::NotInService,
        severity: Severity::None,
        expected: String::new(),
        observed: observed_maas.clone(),
        message: String::new(),
        system_id: system_id.clone(),
        machine: machine.clone(),
        actions: Vec::new(),
        held: Vec::new(),
        marking: DriftMarking::Leave,
        newly_detected: false,
        record: maas != MaasView::Unreadable && system_id.is_some(),
    };
    let mut set = |rule: Rule, expected: &str, message: String| {
        finding.rule = rule;
        finding.severity = rule.severity();
        finding.expected = expected.to_owned();
        finding.message = message;
    };

    if let Some(job) = &input.open_job {
        set(
            Rule::LeftToJob,
            "its open job acts on it",
            format!(
                "{} {} is {}: the job owns the node",
                job.kind.as_str(),
                job.id,
                job.state
            ),
        );
        finding.record = false;
        return finding;
    }

    let stale = stale_for(input.last_contact, now, policy);
    let heartbeat = match (node.status, &stale) {
        (NodeState::Active, Some(_)) => Some(DriftAction::MarkOffline),
        (NodeState::Offline, None) => Some(DriftAction::MarkActive),
        _ => None,
    };
    let heartbeat_note = |base: String| match (&stale, node.status) {
        (Some(why), _) => format!("{base}; {why}"),
        (None, NodeState::Offline) => format!("{base}; the agent is heard from again"),
        _ => base,
    };

    match node.status {
        NodeState::Active | NodeState::Offline => {
            let class = machine.as_ref().map(|m| classify(&m.status));
            match (maas, class) {
                (MaasView::Unreadable, _) => {
                    if stale.is_some() {
                        set(
                            Rule::AgentNotPolling,
                            "the agent polling",
                            heartbeat_note("MAAS could not be read".into()),
                        );
                    } else {
                        set(
                            Rule::MaasUnreadable,
                            "Deployed",
                            heartbeat_note(
                                "no MAAS rule applied: an unreadable site is not an empty one"
                                    .into(),
                            ),
                        );
                    }
                    finding.actions.extend(heartbeat);
                }
                (MaasView::Absent, _) => {
                    set(
                        Rule::MachineDeleted,
                        "a Deployed machine",
                        format!("{observed_maas}: the node record is orphaned"),
                    );
                    finding.actions.push(DriftAction::Quarantine);
                    finding.marking = DriftMarking::Flag;
                }
                (MaasView::Machine(m), Some(StatusClass::Deployed)) => {
                    let changed = node.host.as_ref().filter(|host| {
                        !m.ip_addresses.is_empty() && !m.ip_addresses.contains(host)
                    });
                    if let Some(old) = changed {
                        let before = input
                            .prior
                            .as_ref()
                            .map(|p| p.last_maas_ips.clone())
                            .unwrap_or_default();
                        finding.actions.push(DriftAction::UpdateHost {
                            from: Some(old.clone()),
                            to: pick_host(old, &m.ip_addresses, &before),
                        });
                    }
                    if stale.is_some() {
                        set(
                            Rule::AgentNotPolling,
                            "the agent polling",
                            heartbeat_note(format!("{} is Deployed", m.system_id)),
                        );
                        finding.marking = DriftMarking::Flag;
                    } else if let Some(old) = changed {
                        set(
                            Rule::IpChanged,
                            &format!("host {old} among the machine's addresses"),
                            heartbeat_note(format!(
                                "{} is Deployed with {}, not {old}",
                                m.system_id,
                                m.ip_addresses.join(" ")
                            )),
                        );
                        finding.marking = DriftMarking::Flag;
                    } else {
                        set(
                            Rule::DeployedActive,
                            "Deployed",
                            heartbeat_note(format!("{} is Deployed", m.system_id)),
                        );
                        finding.marking = DriftMarking::Clear;
                    }
                    if m.power_state == "off" {
                        finding.message.push_str("; MAAS reports the power off");
                    }
                    finding.actions.extend(heartbeat);
                }
                (MaasView::Machine(m), Some(StatusClass::Released)) => {
                    set(
                        Rule::ReleasedOutsideWorkflow,
                        "Deployed",
                        format!(
                            "{} is {} outside any workflow: the agent is gone and allocations will fail",
                            m.system_id, m.status.name
                        ),
                    );
                    finding.actions.push(DriftAction::Quarantine);
                    finding.marking = DriftMarking::Flag;
                }
                (MaasView::Machine(m), Some(StatusClass::Failed)) => {
                    set(
                        Rule::HardwareFailure,
                        "Deployed",
                        format!(
                            "{} is {}: allocations go to a dead node",
                            m.system_id, m.status.name
                        ),
                    );
                    finding.actions.push(DriftAction::Quarantine);
                    finding.marking = DriftMarking::Flag;
                }
                (MaasView::Machine(m), Some(StatusClass::Commissioning)) => {
                    set(
                        Rule::UnexpectedRecommission,
                        "Deployed",
                        heartbeat_note(format!(
                            "{} is {}: recommissioned outside any workflow",
                            m.system_id, m.status.name
                        )),
                    );
                    finding.actions.extend(heartbeat);
                    finding.marking = DriftMarking::Flag;
                }
                (MaasView::Machine(m), _) => {
                    set(
                        Rule::UnexpectedMaasStatus,
                        "Deployed",
                        heartbeat_note(format!(
                            "{} is {}: no rule for it, left for an operator",
                            m.system_id, m.status.name
                        )),
                    );
                    finding.actions.extend(heartbeat);
                    finding.marking = DriftMarking::Flag;
                }
            }
        }
        NodeState::Retired => match maas {
            MaasView::Machine(m) if classify(&m.status) == StatusClass::Deployed => {
                set(
                    Rule::RetiredStillDeployed,
                    "released and powered off",
                    format!(
                        "{} is still Deployed: burning power, MAAS still manages it",
                        m.system_id
                    ),
                );
                finding.actions.push(DriftAction::ReleaseAndPowerOff {
                    system_id: m.system_id.clone(),
                });
                finding.marking = DriftMarking::Flag;
            }
            MaasView::Unreadable => set(
                Rule::MaasUnreadable,
                "not Deployed",
                "no MAAS rule applied: an unreadable site is not an empty one".into(),
            ),
            _ => {
                set(
                    Rule::NotInService,
                    "not Deployed",
                    "retired; its machine is not deployed".into(),
                );
                finding.marking = DriftMarking::Clear;
            }
        },
        other => {
            let expected = if other == NodeState::Quarantined {
                "an operator's review (drift resolve)"
            } else {
                "its lifecycle operation"
            };
            set(
                Rule::NotInService,
                expected,
                format!("{other}: observed only"),
            );
        }
    }
    hold(&mut finding, &input.node, policy);
    mark(&mut finding, input.prior.as_ref());
    finding
}

/// Move the actions a paused or protected node, or the policy, does not allow to `held`.
fn hold(finding: &mut Finding, node: &InventoryNode, policy: &DriftPolicy) {
    let actions = std::mem::take(&mut finding.actions);
    for action in actions {
        let reason = if node.paused {
            Some("the node is paused: the reconciler leaves it alone".to_owned())
        } else if !action.allowed_by(policy) {
            Some(format!(
                "the self-heal policy has `{}` off",
                action.policy_key()
            ))
        } else if node.protected && matches!(action, DriftAction::ReleaseAndPowerOff { .. }) {
            Some("the node is protected: unset `protected` to let it be released".to_owned())
        } else {
            None
        };
        match reason {
            Some(reason) => finding.held.push(Held { action, reason }),
            None => finding.actions.push(action),
        }
    }
}

/// Whether a flag is new, and keep an operator's acknowledgement of the same drift.
fn mark(finding: &mut Finding, prior: Option<&MaasState>) {
    if finding.marking != DriftMarking::Flag {
        return;
    }
    let Some(prior) = prior else {
        finding.newly_detected = true;
        return;
    };
    let rule = prior.drift_details.get("rule").and_then(Value::as_str);
    let status = prior
        .drift_details
        .get("maas_status")
        .and_then(Value::as_str);
    let same = rule == Some(finding.rule.as_str())
        && status == finding.machine.as_ref().map(|m| m.status.name.as_str());
    let acknowledged = prior.drift_details.get("acknowledged").is_some();
    if !prior.drift_detected && same && acknowledged && finding.actions.is_empty() {
        // Acknowledged and nothing changed since: stays resolved.
        finding.marking = DriftMarking::Leave;
        return;
    }
    finding.newly_detected = !(prior.drift_detected && rule == Some(finding.rule.as_str()));
}

/// Evaluate every inventory node of a site. `job_machines` are the system ids bound to jobs
/// (not unmanaged even without a node).
pub fn evaluate_site(
    site: &str,
    observation: Option<&SiteObservation>,
    nodes: &[NodeInput],
    job_machines: &BTreeSet<String>,
    now: DateTime<Utc>,
    policy: &DriftPolicy,
) -> SiteEvaluation {
    let machines: Option<Vec<MachineFacts>> = observation
        .and_then(SiteObservation::machines)
        .map(|ms| ms.iter().map(MachineFacts::from).collect());
    let mut by_id: HashMap<&str, &MachineFacts> = HashMap::new();
    let mut by_hostname: HashMap<String, Vec<&MachineFacts>> = HashMap::new();
    for m in machines.iter().flatten() {
        by_id.insert(&m.system_id, m);
        by_hostname
            .entry(m.hostname.to_ascii_lowercase())
            .or_default()
            .push(m);
    }
    let mut claimed: BTreeSet<&str> = job_machines.iter().map(String::as_str).collect();
    let mut findings = Vec::with_capacity(nodes.len());
    for input in nodes {
        let view = match &machines {
            None => MaasView::Unreadable,
            Some(_) => {
                let bound = match &input.system_id {
                    Some(id) => by_id.get(id.as_str()).copied(),
                    None => match by_hostname
                        .get(&input.node.hostname.to_ascii_lowercase())
                        .map(Vec::as_slice)
                    {
                        Some([only]) => Some(*only),
                        _ => None,
                    },
                };
                match bound {
                    Some(m) => {
                        claimed.insert(&m.system_id);
                        MaasView::Machine(m)
                    }
                    None => MaasView::Absent,
                }
            }
        };
        findings.push(evaluate_node(input, view, now, policy));
    }
    let unmanaged: Vec<String> = machines
        .iter()
        .flatten()
        .filter(|m| !claimed.contains(m.system_id.as_str()))
        .map(|m| m.system_id.clone())
        .collect();
    let guard = absence_guard(&mut findings, policy);
    SiteEvaluation {
        site: site.to_owned(),
        readable: machines.is_some(),
        findings,
        unmanaged,
        guard,
    }
}

/// Many in-service nodes absent at once looks like a partial list, not deletions: hold the
/// quarantines (the findings stay, flagged).
fn absence_guard(findings: &mut [Finding], policy: &DriftPolicy) -> Option<String> {
    let in_service = findings
        .iter()
        .filter(|f| f.rule != Rule::LeftToJob)
        .filter(|f| matches!(f.node_state, NodeState::Active | NodeState::Offline))
        .count();
    let absent = findings
        .iter()
        .filter(|f| f.rule == Rule::MachineDeleted)
        .count();
    if absent < 2 || (absent as f64) <= policy.absent_guard_fraction * in_service as f64 {
        return None;
    }
    let reason = format!(
        "{absent} of {in_service} in-service nodes are absent from the MAAS list: it looks partial (another MAAS, a restored database), so none is quarantined for absence; check the site"
    );
    for finding in findings
        .iter_mut()
        .filter(|f| f.rule == Rule::MachineDeleted)
    {
        let actions = std::mem::take(&mut finding.actions);
        finding.held.extend(actions.into_iter().map(|action| Held {
            action,
            reason: reason.clone(),
        }));
    }
    Some(reason)
}

/// Findings counted by rule (for reports and metrics).
pub fn count_by_rule<'a>(findings: impl IntoIterator<Item = &'a Finding>) -> BTreeMap<Rule, usize> {
    let mut counts = BTreeMap::new();
    for f in findings {
        *counts.entry(f.rule).or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    const NOW: &str = "2026-03-01T12:00:00Z";

    fn node(hostname: &str, status: NodeState) -> NodeInput {
        NodeInput {
            node: InventoryNode {
                id: Uuid::from_u128(hostname.bytes().fold(7u128, |h, b| h * 31 + b as u128)),
                site: "dc1".into(),
                hostname: hostname.into(),
                status,
                retired: false,
                retired_reason: None,
                protected: false,
                paused: false,
                ipmi_ip: None,
                host: Some("10.0.0.11".into()),
                agent_contact_at: None,
                reimage_generation: None,
                policy: None,
                sku: None,
                gpus: None,
            },
            system_id: Some(format!("sys-{hostname}")),
            last_contact: Some(t("2026-03-01T11:59:00Z")),
            prior: None,
            open_job: None,
        }
    }

    fn machine(hostname: &str, status: MaasStatus) -> ObservedMachine {
        ObservedMachine {
            system_id: format!("sys-{hostname}"),
            hostname: hostname.into(),
            status: ObservedStatus {
                code: status.code() as i64,
                name: status.name().into(),
            },
            power_state: "on".into(),
            power_address: None,
            macs: vec![],
            ip_addresses: vec!["10.0.0.11".into(), "172.30.0.1".into()],
            owner: Some("admin".into()),
            enable_hw_sync: Some(true),
            last_sync: None,
            next_sync: None,
            sync_interval: None,
        }
    }

    fn readable(machines: Vec<ObservedMachine>) -> SiteObservation {
        SiteObservation::Readable {
            maas_version: None,
            machines,
        }
    }

    fn one(input: &NodeInput, m: Option<&ObservedMachine>) -> Finding {
        let facts = m.map(MachineFacts::from);
        let view = match &facts {
            Some(f) => MaasView::Machine(f),
            None => MaasView::Absent,
        };
        evaluate_node(input, view, t(NOW), &DriftPolicy::default())
    }

    #[test]
    fn deployed_and_active_is_ok_and_clears_drift() {
        let n = node("n1", NodeState::Active);
        let f = one(&n, Some(&machine("n1", MaasStatus::Deployed)));
        assert_eq!(f.rule, Rule::DeployedActive);
        assert_eq!(f.severity, Severity::None);
        assert!(f.actions.is_empty() && f.held.is_empty());
        assert_eq!(f.marking, DriftMarking::Clear);
        assert!(f.record);
    }

    #[test]
    fn deployed_but_offline_warns_about_the_agent_without_touching_maas() {
        let mut n = node("n1", NodeState::Offline);
        n.last_contact = Some(t("2026-03-01T11:00:00Z"));
        let f = one(&n, Some(&machine("n1", MaasStatus::Deployed)));
        assert_eq!(f.rule, Rule::AgentNotPolling);
        assert_eq!(f.severity, Severity::Warn);
        assert!(f.actions.is_empty(), "{:?}", f.actions);
        assert_eq!(f.marking, DriftMarking::Flag);
        assert!(
            f.message.contains("no agent contact for 1h"),
            "{}",
            f.message
        );
    }

    #[test]
    fn heartbeat_moves_active_to_offline_and_back() {
        let mut n = node("n1", NodeState::Active);
        let m = machine("n1", MaasStatus::Deployed);
        // Exactly at the threshold is not yet stale; past it is.
        n.last_contact = Some(t("2026-03-01T11:55:00Z"));
        assert!(one(&n, Some(&m)).actions.is_empty());
        n.last_contact = Some(t("2026-03-01T11:54:59Z"));
        let f = one(&n, Some(&m));
        assert_eq!(f.rule, Rule::AgentNotPolling);
        assert_eq!(f.actions, vec![DriftAction::MarkOffline]);
        n.last_contact = None;
        let f = one(&n, Some(&m));
        assert_eq!(f.actions, vec![DriftAction::MarkOffline]);
        assert!(f.message.contains("never heard from"), "{}", f.message);

        let mut back = node("n1", NodeState::Offline);
        back.last_contact = Some(t("2026-03-01T11:59:30Z"));
        let f = one(&back, Some(&m));
        assert_eq!(f.rule, Rule::DeployedActive);
        assert_eq!(f.actions, vec![DriftAction::MarkActive]);
        assert_eq!(f.marking, DriftMarking::Clear);
    }

    #[test]
    fn released_or_redeployed_while_active_is_quarantined() {
        for status in [
            MaasStatus::Ready,
            MaasStatus::Releasing,
            MaasStatus::Deploying,
            MaasStatus::DiskErasing,
        ] {
            for state in [NodeState::Active, NodeState::Offline] {
                let f = one(&node("n1", state), Some(&machine("n1", status)));
                assert_eq!(f.rule, Rule::ReleasedOutsideWorkflow, "{status}");
                assert_eq!(f.severity, Severity::Critical);
                assert_eq!(f.actions, vec![DriftAction::Quarantine]);
                assert_eq!(f.marking, DriftMarking::Flag);
                assert!(f.newly_detected);
            }
        }
    }

    #[test]
    fn failed_or_broken_while_active_is_quarantined() {
        for status in [
            MaasStatus::FailedTesting,
            MaasStatus::Broken,
            MaasStatus::FailedDeployment,
        ] {
            let f = one(&node("n1", NodeState::Active), Some(&machine("n1", status)));
            assert_eq!(f.rule, Rule::HardwareFailure, "{status}");
            assert_eq!(f.actions, vec![DriftAction::Quarantine]);
            assert_eq!(f.expected, "Deployed");
            assert_eq!(
                f.observed,
                format!("{status} (sys-n1, power on, 10.0.0.11 172.30.0.1)")
            );
        }
    }

    #[test]
    fn recommissioning_only_warns() {
        let f = one(
            &node("n1", NodeState::Active),
            Some(&machine("n1", MaasStatus::Commissioning)),
        );
        assert_eq!(f.rule, Rule::UnexpectedRecommission);
        assert_eq!(f.severity, Severity::Warn);
        assert!(f.actions.is_empty());
        assert_eq!(f.marking, DriftMarking::Flag);
        let f = one(
            &node("n1", NodeState::Active),
            Some(&machine("n1", MaasStatus::RescueMode)),
        );
        assert_eq!(f.rule, Rule::UnexpectedMaasStatus);
        assert!(f.actions.is_empty());
    }

    #[test]
    fn a_changed_ip_updates_the_host_with_the_address_that_appeared() {
        let mut n = node("n1", NodeState::Active);
        n.prior = Some(MaasState {
            node_id: n.node.id,
            site: "dc1".into(),
            maas_system_id: "sys-n1".into(),
            last_maas_status: Some("Deployed".into()),
            last_maas_power_state: Some("on".into()),
            last_maas_ips: vec!["10.0.0.11".into(), "172.30.0.1".into()],
            last_reconciled_at: None,
            drift_detected: false,
            drift_details: json!({}),
            drift_resolved_at: None,
        });
        let mut m = machine("n1", MaasStatus::Deployed);
        m.ip_addresses = vec!["10.0.0.57".into(), "172.30.0.1".into()];
        let f = one(&n, Some(&m));
        assert_eq!(f.rule, Rule::IpChanged);
        assert_eq!(f.severity, Severity::Info);
        assert_eq!(
            f.actions,
            vec![DriftAction::UpdateHost {
                from: Some("10.0.0.11".into()),
                to: "10.0.0.57".into()
            }]
        );
        // Without a record of the old addresses, the old host's /24 decides.
        n.prior = None;
        m.ip_addresses = vec!["10.0.0.57".into(), "10.9.0.1".into()];
        assert_eq!(
            one(&n, Some(&m)).actions,
            vec![DriftAction::UpdateHost {
                from: Some("10.0.0.11".into()),
                to: "10.0.0.57".into()
            }]
        );
        // No address at all is not a change.
        m.ip_addresses.clear();
        assert_eq!(one(&n, Some(&m)).rule, Rule::DeployedActive);
    }

    #[test]
    fn absent_from_a_readable_maas_is_quarantined() {
        let f = one(&node("n1", NodeState::Active), None);
        assert_eq!(f.rule, Rule::MachineDeleted);
        assert_eq!(f.actions, vec![DriftAction::Quarantine]);
        assert_eq!(f.observed, "absent from MAAS (was sys-n1)");
        assert!(f.record, "the absence is recorded");
    }

    #[test]
    fn a_retired_node_still_deployed_is_released_and_powered_off() {
        let n = node("n1", NodeState::Retired);
        let f = one(&n, Some(&machine("n1", MaasStatus::Deployed)));
        assert_eq!(f.rule, Rule::RetiredStillDeployed);
        assert_eq!(f.severity, Severity::Info);
        assert_eq!(
            f.actions,
            vec![DriftAction::ReleaseAndPowerOff {
                system_id: "sys-n1".into()
            }]
        );
        let f = one(&n, Some(&machine("n1", MaasStatus::Ready)));
        assert_eq!(f.rule, Rule::NotInService);
        assert!(f.actions.is_empty());
        assert_eq!(f.marking, DriftMarking::Clear);
        // A retired node is not heartbeat-checked.
        let mut quiet = n.clone();
        quiet.last_contact = None;
        assert!(
            one(&quiet, Some(&machine("n1", MaasStatus::Ready)))
                .actions
                .is_empty()
        );
    }

    #[test]
    fn unmanaged_machines_are_counted_and_left_alone() {
        let nodes = vec![node("n1", NodeState::Active)];
        let observation = readable(vec![
            machine("n1", MaasStatus::Deployed),
            machine("stray", MaasStatus::Ready),
            machine("claimed", MaasStatus::Commissioning),
        ]);
        let jobs = BTreeSet::from(["sys-claimed".to_owned()]);
        let e = evaluate_site(
            "dc1",
            Some(&observation),
            &nodes,
            &jobs,
            t(NOW),
            &DriftPolicy::default(),
        );
        assert!(e.readable);
        assert_eq!(e.unmanaged, vec!["sys-stray".to_owned()]);
        assert_eq!(e.findings.len(), 1);
        assert_eq!(e.findings[0].rule, Rule::DeployedActive);
    }

    #[test]
    fn an_unreadable_site_is_not_an_empty_one() {
        let mut stale = node("n2", NodeState::Active);
        stale.last_contact = Some(t("2026-03-01T10:00:00Z"));
        let nodes = vec![
            node("n1", NodeState::Active),
            stale,
            node("r", NodeState::Retired),
        ];
        let observation = SiteObservation::Unreadable {
            error: "MAAS answered 503".into(),
            transient: true,
            hint: None,
        };
        for obs in [Some(&observation), None] {
            let e = evaluate_site(
                "dc1",
                obs,
                &nodes,
                &BTreeSet::new(),
                t(NOW),
                &DriftPolicy::default(),
            );
            assert!(!e.readable);
            assert!(e.unmanaged.is_empty());
            let rules: Vec<Rule> = e.findings.iter().map(|f| f.rule).collect();
            assert_eq!(
                rules,
                vec![
                    Rule::MaasUnreadable,
                    Rule::AgentNotPolling,
                    Rule::MaasUnreadable
                ]
            );
            assert!(
                e.findings
                    .iter()
                    .all(|f| !f.record && f.marking == DriftMarking::Leave)
            );
            // No MAAS-side action; the heartbeat still works without MAAS.
            assert!(e.findings[0].actions.is_empty());
            assert_eq!(e.findings[1].actions, vec![DriftAction::MarkOffline]);
            assert!(e.findings[2].actions.is_empty());
        }
    }

    #[test]
    fn a_mostly_empty_list_holds_the_quarantines_for_absence() {
        let nodes: Vec<NodeInput> = (1..=4)
            .map(|i| node(&format!("n{i}"), NodeState::Active))
            .collect();
        let policy = DriftPolicy::default();
        // One of four gone: a deletion.
        let three = readable(
            (1..=3)
                .map(|i| machine(&format!("n{i}"), MaasStatus::Deployed))
                .collect(),
        );
        let e = evaluate_site(
            "dc1",
            Some(&three),
            &nodes,
            &BTreeSet::new(),
            t(NOW),
            &policy,
        );
        assert_eq!(e.guard, None);
        assert_eq!(e.findings[3].actions, vec![DriftAction::Quarantine]);
        // Three of four (or all) gone: a partial list; flagged but held.
        for list in [vec![machine("n1", MaasStatus::Deployed)], vec![]] {
            let e = evaluate_site(
                "dc1",
                Some(&readable(list)),
                &nodes,
                &BTreeSet::new(),
                t(NOW),
                &policy,
            );
            let guard = e.guard.expect("guard");
            assert!(guard.contains("in-service nodes are absent"), "{guard}");
            let deleted: Vec<&Finding> = e
                .findings
                .iter()
                .filter(|f| f.rule == Rule::MachineDeleted)
                .collect();
            assert!(deleted.len() >= 3);
            assert!(
                deleted
                    .iter()
                    .all(|f| f.actions.is_empty() && f.held.len() == 1)
            );
            assert!(deleted.iter().all(|f| f.marking == DriftMarking::Flag));
        }
    }

    #[test]
    fn a_node_is_matched_by_hostname_when_its_machine_is_unknown() {
        let mut n = node("n1", NodeState::Active);
        n.system_id = None;
        let e = evaluate_site(
            "dc1",
            Some(&readable(vec![machine("N1", MaasStatus::Deployed)])),
            &[n.clone()],
            &BTreeSet::new(),
            t(NOW),
            &DriftPolicy::default(),
        );
        assert_eq!(e.findings[0].rule, Rule::DeployedActive);
        assert_eq!(e.findings[0].system_id.as_deref(), Some("sys-N1"));
        assert!(e.unmanaged.is_empty());
        // Two machines with the hostname: not matched (absent, never a guess).
        let e = evaluate_site(
            "dc1",
            Some(&readable(vec![machine("n1", MaasStatus::Deployed), {
                let mut m = machine("n1", MaasStatus::Ready);
                m.system_id = "other".into();
                m
            }])),
            &[n],
            &BTreeSet::new(),
            t(NOW),
            &DriftPolicy::default(),
        );
        assert_eq!(e.findings[0].rule, Rule::MachineDeleted);
        assert!(!e.findings[0].record, "no machine known: nothing recorded");
    }

    #[test]
    fn a_node_with_an_open_job_is_left_to_it() {
        let mut n = node("n1", NodeState::Active);
        n.open_job = Some(OpenJob {
            kind: JobKind::Decommission,
            id: Uuid::nil(),
            state: JobState::Running,
        });
        n.last_contact = None;
        let f = one(&n, Some(&machine("n1", MaasStatus::Ready)));
        assert_eq!(f.rule, Rule::LeftToJob);
        assert!(f.actions.is_empty() && !f.record);
        assert_eq!(f.marking, DriftMarking::Leave);
    }

    #[test]
    fn paused_protected_and_policy_hold_actions_back() {
        let mut paused = node("n1", NodeState::Active);
        paused.node.paused = true;
        let f = one(&paused, Some(&machine("n1", MaasStatus::Ready)));
        assert!(f.actions.is_empty());
        assert_eq!(f.held[0].action, DriftAction::Quarantine);
        assert!(f.held[0].reason.contains("paused"));
        assert_eq!(f.marking, DriftMarking::Flag, "still recorded as drift");

        let mut protected = node("n1", NodeState::Retired);
        protected.node.protected = true;
        let f = one(&protected, Some(&machine("n1", MaasStatus::Deployed)));
        assert!(f.actions.is_empty());
        assert!(
            f.held[0].reason.contains("protected"),
            "{}",
            f.held[0].reason
        );

        let policy = DriftPolicy {
            quarantine: false,
            ..DriftPolicy::default()
        };
        let facts = MachineFacts::from(&machine("n1", MaasStatus::Broken));
        let f = evaluate_node(
            &node("n1", NodeState::Active),
            MaasView::Machine(&facts),
            t(NOW),
            &policy,
        );
        assert_eq!(f.rule, Rule::HardwareFailure);
        assert!(f.actions.is_empty());
        assert_eq!(
            f.held[0].reason,
            "the self-heal policy has `quarantine` off"
        );
    }

    #[test]
    fn an_acknowledged_drift_stays_resolved_until_it_changes() {
        let mut n = node("n1", NodeState::Active);
        let prior = |rule: &str, status: &str, detected: bool, acknowledged: bool| MaasState {
            node_id: n.node.id,
            site: "dc1".into(),
            maas_system_id: "sys-n1".into(),
            last_maas_status: Some(status.into()),
            last_maas_power_state: None,
            last_maas_ips: vec![],
            last_reconciled_at: None,
            drift_detected: detected,
            drift_details: if acknowledged {
                json!({"rule": rule, "maas_status": status, "acknowledged": {"by": "ops"}})
            } else {
                json!({"rule": rule, "maas_status": status})
            },
            drift_resolved_at: None,
        };
        let commissioning = machine("n1", MaasStatus::Commissioning);
        n.prior = Some(prior(
            "unexpected_recommission",
            "Commissioning",
            false,
            true,
        ));
        let f = one(&n, Some(&commissioning));
        assert_eq!(f.marking, DriftMarking::Leave);
        assert!(!f.newly_detected);
        // Still flagged from an earlier pass: kept, not new.
        n.prior = Some(prior(
            "unexpected_recommission",
            "Commissioning",
            true,
            false,
        ));
        let f = one(&n, Some(&commissioning));
        assert_eq!((f.marking, f.newly_detected), (DriftMarking::Flag, false));
        // Acknowledged, then MAAS moved on to a failure: a new drift.
        n.prior = Some(prior(
            "unexpected_recommission",
            "Commissioning",
            false,
            true,
        ));
        let f = one(&n, Some(&machine("n1", MaasStatus::FailedCommissioning)));
        assert_eq!((f.marking, f.newly_detected), (DriftMarking::Flag, true));
    }

    #[test]
    fn quarantined_nodes_are_observed_only() {
        let mut n = node("n1", NodeState::Quarantined);
        n.last_contact = None;
        let f = one(&n, Some(&machine("n1", MaasStatus::Ready)));
        assert_eq!(f.rule, Rule::NotInService);
        assert!(f.actions.is_empty());
        assert_eq!(
            f.marking,
            DriftMarking::Leave,
            "drift stays open for the operator"
        );
        assert!(f.record);
    }

    #[test]
    fn rule_names_round_trip_and_severities_follow_the_table() {
        for rule in Rule::ALL {
            assert_eq!(Rule::from_name(rule.as_str()), Some(rule));
            assert_eq!(serde_json::to_value(rule).unwrap(), json!(rule.as_str()));
        }
        assert_eq!(Rule::UnmanagedMachine.severity(), Severity::Debug);
        assert!(Severity::Critical > Severity::Warn && Severity::Warn > Severity::Info);
    }
}
