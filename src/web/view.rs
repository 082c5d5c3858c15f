//! What the status pages show (seed 001 §9.1 inventory view, §9.2 lifecycle detail view; seed
//! 000 §6.5 drift, §4.2.1 stage events), read through the store's read API and the daemon's
//! accepted fleet and last plans. Pure data: `pages.rs` renders it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::api::FleetRevision;
use crate::lifecycle::{
    DecommissionMode, JobKind, JobState, MaasStatus, NodeState, OnboardingStage, ProviderView,
    ProvisioningStatus,
};
use crate::model::{NodeId, SiteName};
use crate::plan::Plan;
use crate::store::{
    AuditRecord, Job, JobFilter, MaasState, Node, NodeFilter, ProvisioningFilter, StageEventRow,
    Store, StoreError,
};

/// The plan of one site as the daemon's last reconcile made it.
#[derive(Debug, Clone)]
pub struct LatestPlan {
    /// The plan of this one site.
    pub plan: Plan,
    /// When the MAAS observation the plan used was taken.
    pub observed_at: DateTime<Utc>,
}

/// What the pages ask of the running daemon (implemented by `crate::daemon`).
pub trait DaemonView: Send + Sync + 'static {
    /// The fleet revision the daemon accepted last.
    fn fleet(&self) -> Option<Arc<FleetRevision>>;
    /// The last plan of each site, by site name.
    fn plans(&self) -> Vec<(SiteName, Arc<LatestPlan>)>;
}

/// A node's open job in a list row.
#[derive(Debug, Clone, PartialEq)]
pub struct JobBrief {
    pub id: Uuid,
    pub kind: JobKind,
    pub mode: Option<DecommissionMode>,
    pub state: JobState,
    pub stage: String,
    pub attempt: i64,
    pub error: Option<String>,
}

impl JobBrief {
    fn of(job: &Job) -> Self {
        JobBrief {
            id: job.id,
            kind: job.kind,
            mode: job.mode(),
            state: job.state,
            stage: job.stage.clone(),
            attempt: job.attempt,
            error: job.error_message.clone(),
        }
    }

    /// `onboarding`, `decommission (reimage)`.
    pub fn what(&self) -> String {
        match self.mode {
            Some(mode) => format!("{} ({mode})", self.kind),
            None => self.kind.to_string(),
        }
    }
}

/// One node as the list shows it: the manifests' view and the inventory's, joined by site and
/// hostname. A node in the manifests that was never onboarded has no inventory state.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    pub site: String,
    pub hostname: String,
    pub node_id: Option<Uuid>,
    /// The coarse state (001 §3.1); `None`: not in the inventory yet.
    pub state: Option<NodeState>,
    pub in_manifests: bool,
    pub group: Option<String>,
    /// The manifest's `lifecycle`.
    pub lifecycle: Option<String>,
    pub retired: bool,
    pub protected: bool,
    pub paused: bool,
    pub maas_status: Option<String>,
    pub power_state: Option<String>,
    /// Open drift: its rule and message.
    pub drift: Option<String>,
    /// The open job (failed ones included).
    pub job: Option<JobBrief>,
    pub agent_contact: Option<DateTime<Utc>>,
    /// A node the Redfish provisioner installs, with a completed provisioning job: it has no
    /// inventory row (no MAAS machine, no agent), and is listed as [`PROVISIONED`].
    pub provisioned: bool,
}

impl NodeRow {
    /// The node's open job failed (retryable or waiting for an operator).
    pub fn failed(&self) -> bool {
        self.job.as_ref().is_some_and(|j| j.state.is_failed())
    }

    /// The state column: the coarse state, `provisioned` or `not_onboarded`.
    pub fn state_label(&self) -> &'static str {
        state_label(self.state, self.provisioned)
    }
}

/// A node's state as the pages and the node list name it: its coarse state, or for a node
/// outside the inventory `provisioned` (installed over Redfish) or `not_onboarded`.
pub fn state_label(state: Option<NodeState>, provisioned: bool) -> &'static str {
    match state {
        Some(state) => state.as_str(),
        None if provisioned => PROVISIONED,
        None => NOT_ONBOARDED,
    }
}

/// The list's label of a node of the manifests without an inventory row.
pub const NOT_ONBOARDED: &str = "not_onboarded";
/// The list's label of a node the Redfish provisioner installed (it has no inventory row).
pub const PROVISIONED: &str = "provisioned";
/// The labels of nodes outside the inventory, after the coarse states in every list of them.
pub const OUTSIDE_INVENTORY: [&str; 2] = [NOT_ONBOARDED, PROVISIONED];

/// The coarse states the overview counts (001 §3.1, `deleted` is outside the inventory).
pub fn counted_states() -> impl Iterator<Item = NodeState> {
    NodeState::ALL.iter().copied().filter(|s| s.in_inventory())
}

/// One site's counts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SiteOverview {
    pub site: String,
    pub in_manifests: bool,
    pub nodes: usize,
    pub by_state: BTreeMap<NodeState, usize>,
    pub not_onboarded: usize,
    pub provisioned: usize,
    pub drifted: usize,
    pub failed: usize,
    /// Open jobs that are running or waiting to (not failed).
    pub in_progress: usize,
}

/// Everything the overview, the node list and the plan page show: read in one go and shared
/// by every viewer until it is refreshed.
#[derive(Debug, Clone)]
pub struct FleetSnapshot {
    pub taken_at: DateTime<Utc>,
    /// The fleet revision the daemon works from and when it was accepted.
    pub revision: Option<(String, DateTime<Utc>)>,
    pub sites: Vec<SiteOverview>,
    /// Ordered by site, then hostname.
    pub rows: Vec<NodeRow>,
    pub groups: BTreeSet<String>,
    pub plans: Vec<(SiteName, Arc<LatestPlan>)>,
}

/// Read the snapshot: the live nodes, their MAAS state rows, the open jobs and the completed
/// Redfish provisionings, joined with the daemon's fleet.
pub async fn fleet_snapshot(
    store: &Store,
    daemon: &dyn DaemonView,
) -> Result<FleetSnapshot, StoreError> {
    let nodes = store.list_nodes(&NodeFilter::default()).await?;
    let maas: HashMap<Uuid, MaasState> = store
        .maas_states(None)
        .await?
        .into_iter()
        .map(|m| (m.node_id, m))
        .collect();
    let mut open: HashMap<Uuid, Job> = HashMap::new();
    // Redfish provisioning jobs belong to no inventory node: by site and hostname.
    let mut open_provisioning: HashMap<(String, String), Job> = HashMap::new();
    for kind in JobKind::ALL {
        let filter = JobFilter {
            open_only: true,
            ..JobFilter::default()
        };
        for job in store.list_jobs(*kind, &filter).await? {
            if *kind == JobKind::Provisioning {
                open_provisioning
                    .entry((job.site.clone(), job.hostname.clone()))
                    .or_insert(job);
                continue;
            }
            if let Some(node) = job.node_id {
                // Newest request first: keep the first one seen of each node.
                let newer = open
                    .get(&node)
                    .is_none_or(|held| job.requested_at > held.requested_at);
                if newer {
                    open.insert(node, job);
                }
            }
        }
    }
    let provisioned: BTreeSet<(String, String)> = store
        .list_provisioning(&ProvisioningFilter {
            status: Some(ProvisioningStatus::Complete),
            ..ProvisioningFilter::default()
        })
        .await?
        .into_iter()
        .map(|job| (job.site, job.hostname))
        .collect();
    let fleet = daemon.fleet();
    let mut rows: BTreeMap<(String, String), NodeRow> = BTreeMap::new();
    for node in &nodes {
        let state = maas.get(&node.id);
        rows.insert(
            (node.site.clone(), node.hostname.clone()),
            NodeRow {
                site: node.site.clone(),
                hostname: node.hostname.clone(),
                node_id: Some(node.id),
                state: Some(node.status),
                in_manifests: false,
                group: None,
                lifecycle: None,
                retired: node.retired,
                protected: node.protected,
                paused: node.paused,
                maas_status: state.and_then(|m| m.last_maas_status.clone()),
                power_state: state.and_then(|m| m.last_maas_power_state.clone()),
                drift: state.and_then(open_drift),
                job: open.get(&node.id).map(JobBrief::of),
                agent_contact: node.last_agent_contact_at,
                provisioned: false,
            },
        );
    }
    let mut groups = BTreeSet::new();
    let mut manifest_sites = BTreeSet::new();
    if let Some(fleet) = &fleet {
        manifest_sites.extend(fleet.fleet.sites.keys().map(|s| s.to_string()));
        for node in fleet.fleet.nodes.values() {
            let key = (node.id.site.to_string(), node.id.hostname.to_string());
            let group = node.group.as_ref().map(|g| g.to_string());
            if let Some(group) = &group {
                groups.insert(group.clone());
            }
            let row = rows.entry(key.clone()).or_insert_with(|| NodeRow {
                site: key.0.clone(),
                hostname: key.1.clone(),
                node_id: None,
                state: None,
                in_manifests: true,
                group: None,
                lifecycle: None,
                retired: false,
                protected: node.protected,
                paused: node.paused,
                maas_status: None,
                power_state: None,
                drift: None,
                job: None,
                agent_contact: None,
                provisioned: false,
            });
            row.in_manifests = true;
            row.group = group;
            row.lifecycle = Some(node.lifecycle.to_string());
            if row.node_id.is_none() && node.provisioner.redfish().is_some() {
                row.provisioned = provisioned.contains(&key);
                row.job = open_provisioning.get(&key).map(JobBrief::of);
            }
        }
    }
    let rows: Vec<NodeRow> = rows.into_values().collect();
    let mut sites: BTreeMap<String, SiteOverview> = manifest_sites
        .iter()
        .map(|s| {
            (
                s.clone(),
                SiteOverview {
                    site: s.clone(),
                    in_manifests: true,
                    ..SiteOverview::default()
                },
            )
        })
        .collect();
    for row in &rows {
        let site = sites
            .entry(row.site.clone())
            .or_insert_with(|| SiteOverview {
                site: row.site.clone(),
                ..SiteOverview::default()
            });
        site.nodes += 1;
        match row.state {
            Some(state) => *site.by_state.entry(state).or_default() += 1,
            None if row.provisioned => site.provisioned += 1,
            None => site.not_onboarded += 1,
        }
        if row.drift.is_some() {
            site.drifted += 1;
        }
        match &row.job {
            Some(job) if job.state.is_failed() => site.failed += 1,
            Some(_) => site.in_progress += 1,
            None => {}
        }
    }
    Ok(FleetSnapshot {
        taken_at: store.clock().now(),
        revision: fleet.as_ref().map(|f| (f.revision.clone(), f.accepted_at)),
        sites: sites.into_values().collect(),
        rows,
        groups,
        plans: daemon.plans(),
    })
}

/// `rule: message` of open drift.
fn open_drift(state: &MaasState) -> Option<String> {
    if !state.drift_detected {
        return None;
    }
    let field = |key: &str| {
        state
            .drift_details
            .get(key)
            .and_then(serde_json::Value::as_str)
    };
    Some(match (field("rule"), field("message")) {
        (Some(rule), Some(message)) => format!("{rule}: {message}"),
        (Some(rule), None) => rule.to_owned(),
        (None, Some(message)) => message.to_owned(),
        (None, None) => "drift detected".to_owned(),
    })
}

/// The node list's filters (`?site=&state=&group=&drift=1&failed=1`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeQuery {
    pub site: Option<String>,
    /// A coarse state, or one of [`OUTSIDE_INVENTORY`].
    pub state: Option<String>,
    pub group: Option<String>,
    pub drift: bool,
    pub failed: bool,
}

impl NodeQuery {
    /// Parse the query string's pairs; an unknown key or value is refused with what is allowed.
    pub fn parse(pairs: &[(String, String)]) -> Result<NodeQuery, String> {
        let mut query = NodeQuery::default();
        let flag = |key: &str, value: &str| match value {
            "" | "0" | "false" | "no" => Ok(false),
            "1" | "true" | "yes" | "on" => Ok(true),
            other => Err(format!("`{key}={other}`: use {key}=1 or leave it out")),
        };
        for (key, value) in pairs {
            let value = value.trim();
            let some = || (!value.is_empty()).then(|| value.to_owned());
            match key.as_str() {
                "site" => query.site = some(),
                "group" => query.group = some(),
                "state" => {
                    if !value.is_empty()
                        && !OUTSIDE_INVENTORY.contains(&value)
                        && value.parse::<NodeState>().is_err()
                    {
                        let known: Vec<&str> = counted_states()
                            .map(NodeState::as_str)
                            .chain(OUTSIDE_INVENTORY)
                            .collect();
                        return Err(format!(
                            "unknown state `{value}`; the states are {}",
                            known.join(", ")
                        ));
                    }
                    query.state = some();
                }
                "drift" => query.drift = flag("drift", value)?,
                "failed" => query.failed = flag("failed", value)?,
                other => {
                    return Err(format!(
                        "unknown filter `{other}`; the filters are site, state, group, drift and failed"
                    ));
                }
            }
        }
        Ok(query)
    }

    pub fn matches(&self, row: &NodeRow) -> bool {
        self.site.as_ref().is_none_or(|s| *s == row.site)
            && self.state.as_ref().is_none_or(|s| s == row.state_label())
            && self
                .group
                .as_ref()
                .is_none_or(|g| row.group.as_ref() == Some(g))
            && (!self.drift || row.drift.is_some())
            && (!self.failed || row.failed())
    }

    /// The query string that selects the same nodes (for links).
    pub fn to_query_string(&self) -> String {
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        if let Some(site) = &self.site {
            pairs.push(("site", site));
        }
        if let Some(state) = &self.state {
            pairs.push(("state", state));
        }
        if let Some(group) = &self.group {
            pairs.push(("group", group));
        }
        if self.drift {
            pairs.push(("drift", "1"));
        }
        if self.failed {
            pairs.push(("failed", "1"));
        }
        url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish()
    }
}

/// How one stage of a job went, from its event rows.
#[derive(Debug, Clone, PartialEq)]
pub struct StageStep {
    pub stage: String,
    pub status: StepStatus,
    /// The highest attempt seen.
    pub attempts: i64,
    pub started_at: Option<DateTime<Utc>>,
    pub last_at: Option<DateTime<Utc>>,
    pub message: Option<String>,
}

/// Where a stage stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepStatus {
    Pending,
    Running,
    Succeeded,
    Failed,
    Skipped,
    Compensated,
}

impl StepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::Running => "running",
            StepStatus::Succeeded => "succeeded",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
            StepStatus::Compensated => "compensated",
        }
    }
}

/// The stage timeline of a job: its kind's (or mode's) stages in order, each with how its
/// events say it went; stages the events name outside that list come after.
pub fn timeline(job: &Job, events: &[StageEventRow]) -> Vec<StageStep> {
    let catalog: Vec<&'static str> = match job.mode() {
        Some(mode) => mode.stages().iter().map(|s| s.as_str()).collect(),
        None => OnboardingStage::ALL.iter().map(|s| s.as_str()).collect(),
    };
    let mut steps: Vec<StageStep> = catalog
        .iter()
        .map(|stage| StageStep {
            stage: (*stage).to_owned(),
            status: StepStatus::Pending,
            attempts: 0,
            started_at: None,
            last_at: None,
            message: None,
        })
        .collect();
    for event in events {
        let at = match steps.iter().position(|s| s.stage == event.stage) {
            Some(at) => at,
            None => {
                steps.push(StageStep {
                    stage: event.stage.clone(),
                    status: StepStatus::Pending,
                    attempts: 0,
                    started_at: None,
                    last_at: None,
                    message: None,
                });
                steps.len() - 1
            }
        };
        let step = &mut steps[at];
        step.attempts = step.attempts.max(event.attempt);
        step.started_at.get_or_insert(event.occurred_at);
        step.last_at = Some(event.occurred_at);
        step.status = match event.status.as_str() {
            "started" => StepStatus::Running,
            "succeeded" => StepStatus::Succeeded,
            "failed" => StepStatus::Failed,
            "skipped" => StepStatus::Skipped,
            "compensated" => StepStatus::Compensated,
            _ => step.status,
        };
        if event.message.is_some() {
            step.message = event.message.clone();
        }
    }
    // A stage whose last event is `started` runs only while the job does: a stopped job's
    // stage waits for its resume.
    if !matches!(job.state, JobState::Running | JobState::Compensating) {
        for step in &mut steps {
            if step.status == StepStatus::Running {
                step.status = StepStatus::Pending;
            }
        }
    }
    steps
}

/// One job of a node with its timeline.
#[derive(Debug, Clone)]
pub struct JobView {
    pub job: Job,
    pub steps: Vec<StageStep>,
}

/// Everything the node page shows.
#[derive(Debug, Clone)]
pub struct NodeDetail {
    pub taken_at: DateTime<Utc>,
    pub site: String,
    pub hostname: String,
    /// The inventory row, when the node was onboarded.
    pub node: Option<Node>,
    /// The node as the manifests declare it.
    pub manifest: Option<crate::model::Node>,
    pub maas: Option<MaasState>,
    /// The provider-neutral provision state of the last MAAS status.
    pub provision: Option<ProviderView>,
    /// Newest first; the first [`TIMELINES`] with their stage timeline.
    pub jobs: Vec<JobView>,
    /// The node's audit rows, newest first (at most [`AUDIT_ROWS`]).
    pub audit: Vec<AuditRecord>,
    /// Outside the inventory, installed by a completed Redfish provisioning job.
    pub provisioned: bool,
}

/// How many jobs of a node show their stage timeline.
pub const TIMELINES: usize = 3;
/// How many jobs of a node are listed.
pub const JOBS: usize = 20;
/// How many audit rows of a node are shown.
pub const AUDIT_ROWS: usize = 25;
/// Event rows read per job for its timeline.
const EVENTS_PER_JOB: i64 = 500;

/// Read one node's page: `None` when neither the inventory nor the manifests know it.
pub async fn node_detail(
    store: &Store,
    daemon: &dyn DaemonView,
    site: &str,
    hostname: &str,
) -> Result<Option<NodeDetail>, StoreError> {
    let node = store.find_node(site, hostname).await?;
    let manifest = daemon
        .fleet()
        .and_then(|f| f.fleet.nodes.get(&NodeId::new(site, hostname)).cloned());
    if node.is_none() && manifest.is_none() {
        return Ok(None);
    }
    let mut detail = NodeDetail {
        taken_at: store.clock().now(),
        site: site.to_owned(),
        hostname: hostname.to_owned(),
        node: node.clone(),
        manifest,
        maas: None,
        provision: None,
        jobs: Vec::new(),
        audit: Vec::new(),
        provisioned: false,
    };
    let Some(node) = node else {
        // A node the Redfish provisioner installs has no inventory row: its provisioning jobs.
        if let Some(redfish) = detail
            .manifest
            .as_ref()
            .and_then(|m| m.provisioner.redfish())
        {
            let jobs: Vec<Job> = store
                .list_provisioning(&ProvisioningFilter {
                    serial: Some(redfish.serial.to_string()),
                    ..ProvisioningFilter::default()
                })
                .await?
                .into_iter()
                .filter(|job| job.site == site && job.hostname == hostname)
                .collect();
            detail.provisioned = jobs
                .iter()
                .any(|job| job.provisioning_status() == Some(ProvisioningStatus::Complete));
            detail.jobs = job_views(store, jobs).await?;
        }
        return Ok(Some(detail));
    };
    detail.maas = store.maas_state(node.id).await?;
    detail.provision = detail
        .maas
        .as_ref()
        .and_then(|m| m.last_maas_status.as_deref())
        .and_then(MaasStatus::from_name)
        .map(MaasStatus::provider_view);
    let mut jobs = Vec::new();
    for kind in JobKind::ALL {
        let filter = JobFilter {
            node_id: Some(node.id),
            ..JobFilter::default()
        };
        jobs.extend(store.list_jobs(*kind, &filter).await?);
    }
    detail.jobs = job_views(store, jobs).await?;
    let mut audit = store.audit_log("node", &node.id.to_string()).await?;
    audit.reverse();
    audit.truncate(AUDIT_ROWS);
    detail.audit = audit;
    Ok(Some(detail))
}

/// The newest [`JOBS`] of `jobs`, newest first, the first [`TIMELINES`] with their timeline.
async fn job_views(store: &Store, mut jobs: Vec<Job>) -> Result<Vec<JobView>, StoreError> {
    jobs.sort_by(|a, b| b.requested_at.cmp(&a.requested_at).then(a.id.cmp(&b.id)));
    jobs.truncate(JOBS);
    let mut views = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.into_iter().enumerate() {
        let steps = if i < TIMELINES {
            let events = store.job_events(job.kind, job.id, EVENTS_PER_JOB).await?;
            timeline(&job, &events)
        } else {
            Vec::new()
        };
        views.push(JobView { job, steps });
    }
    Ok(views)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(query: &str) -> Vec<(String, String)> {
        url::form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect()
    }

    fn row(state: Option<NodeState>) -> NodeRow {
        NodeRow {
            site: "dc1".into(),
            hostname: "c07u43".into(),
            node_id: None,
            state,
            in_manifests: true,
            group: Some("rack-c07".into()),
            lifecycle: Some("active".into()),
            retired: false,
            protected: false,
            paused: false,
            maas_status: None,
            power_state: None,
            drift: None,
            job: None,
            agent_contact: None,
            provisioned: false,
        }
    }

    #[test]
    fn filters_parse_match_and_round_trip() {
        let query = NodeQuery::parse(&pairs("site=dc1&state=active&group=rack-c07")).unwrap();
        assert!(query.matches(&row(Some(NodeState::Active))));
        assert!(!query.matches(&row(Some(NodeState::Offline))));
        assert!(!query.matches(&row(None)));
        assert_eq!(
            query.to_query_string(),
            "site=dc1&state=active&group=rack-c07"
        );
        // A node the Redfish provisioner installed has no inventory row, and its own label.
        let installed = NodeQuery::parse(&pairs("state=provisioned")).unwrap();
        let mut provisioned = row(None);
        provisioned.provisioned = true;
        assert!(installed.matches(&provisioned));
        assert!(!installed.matches(&row(None)));
        assert!(
            !NodeQuery::parse(&pairs("state=not_onboarded"))
                .unwrap()
                .matches(&provisioned)
        );
        let never = NodeQuery::parse(&pairs("state=not_onboarded&drift=1")).unwrap();
        assert!(!never.matches(&row(None)), "no drift on it");
        let mut drifted = row(None);
        drifted.drift = Some("maas_status_mismatch: Broken".into());
        assert!(never.matches(&drifted));
        assert_eq!(
            NodeQuery::parse(&pairs("state=deleted&failed=yes")),
            Ok(NodeQuery {
                state: Some("deleted".into()),
                failed: true,
                ..NodeQuery::default()
            })
        );
        assert_eq!(
            NodeQuery::parse(&pairs("drift=2")),
            Err("`drift=2`: use drift=1 or leave it out".into())
        );
    }

    #[test]
    fn the_timeline_follows_the_catalog_and_a_stopped_job_runs_nothing() {
        let job = Job {
            id: Uuid::nil(),
            kind: JobKind::Onboarding,
            node_id: None,
            site: "dc1".into(),
            hostname: "c07u43".into(),
            maas_system_id: None,
            requested_by: None,
            stage: "commission_node".into(),
            attempt: 2,
            state: JobState::FailedRetryable,
            adopted: false,
            ends_reconciled: false,
            failure_class: None,
            error_code: None,
            error_message: None,
            error_details: serde_json::json!({}),
            recommended_action: None,
            last_maas_status: None,
            last_maas_power_state: None,
            last_maas_ips: Vec::new(),
            stage_details: serde_json::json!({}),
            plan_id: None,
            requested_at: Utc::now(),
            started_at: None,
            completed_at: None,
            updated_at: Utc::now(),
            retry_failures: 0,
            next_try_at: None,
            retry_spec: None,
            spec: crate::store::JobSpec::Onboarding {
                batch_id: None,
                ipmi_ip: None,
                pxe_mac: None,
            },
        };
        let event = |stage: &str, attempt: i64, status: &str| StageEventRow {
            id: 0,
            stage: stage.into(),
            attempt,
            status: status.into(),
            message: Some(format!("{stage} {status}")),
            details: serde_json::json!({}),
            occurred_at: Utc::now(),
        };
        let events = [
            event("load_site_config", 1, "started"),
            event("load_site_config", 1, "succeeded"),
            event("commission_node", 1, "started"),
            event("commission_node", 1, "failed"),
            event("commission_node", 2, "started"),
        ];
        let steps = timeline(&job, &events);
        assert_eq!(steps.len(), OnboardingStage::ALL.len());
        assert_eq!(steps[0].status, StepStatus::Succeeded);
        assert_eq!(steps[1].status, StepStatus::Pending, "no event");
        let commission = steps.iter().find(|s| s.stage == "commission_node").unwrap();
        assert_eq!(commission.attempts, 2);
        // Its last event is `started`, but the job is not running: it waits.
        assert_eq!(commission.status, StepStatus::Pending);
        assert_eq!(
            commission.message.as_deref(),
            Some("commission_node started")
        );
    }
}
