//! Drift read models and the operator's resolve (seed 000 §6.6 `reconciliation/status`,
//! `reconciliation/drift`, `drift/{node_id}/resolve`): library functions that the admin API
//! and `metalform drift` both call. Every resolve is audited.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::lifecycle::{MaasStatus, NodeState, Owner};
use crate::store::{Actor, DriftMark, DriftRecord, MaasState, Node, NodeFilter, Store, StoreError};

/// Which drift records [`list`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriftFilter {
    pub site: Option<String>,
    /// Also resolved (acknowledged or auto-healed) drift, not only open drift.
    pub include_resolved: bool,
}

/// One node's drift record joined with its node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DriftEntry {
    pub node_id: Uuid,
    pub site: String,
    pub hostname: String,
    pub node_state: NodeState,
    pub maas_system_id: String,
    pub maas_status: Option<String>,
    pub power_state: Option<String>,
    pub ips: Vec<String>,
    /// The §6.4 rule id (from the details).
    pub rule: Option<String>,
    pub severity: Option<String>,
    pub message: Option<String>,
    pub drift_detected: bool,
    pub drift_details: Value,
    pub last_reconciled_at: Option<DateTime<Utc>>,
    pub drift_resolved_at: Option<DateTime<Utc>>,
}

fn detail(details: &Value, key: &str) -> Option<String> {
    details.get(key).and_then(Value::as_str).map(str::to_owned)
}

impl DriftEntry {
    fn of(node: &Node, state: &MaasState) -> Self {
        DriftEntry {
            node_id: node.id,
            site: node.site.clone(),
            hostname: node.hostname.clone(),
            node_state: node.status,
            maas_system_id: state.maas_system_id.clone(),
            maas_status: state.last_maas_status.clone(),
            power_state: state.last_maas_power_state.clone(),
            ips: state.last_maas_ips.clone(),
            rule: detail(&state.drift_details, "rule"),
            severity: detail(&state.drift_details, "severity"),
            message: detail(&state.drift_details, "message"),
            drift_detected: state.drift_detected,
            drift_details: state.drift_details.clone(),
            last_reconciled_at: state.last_reconciled_at,
            drift_resolved_at: state.drift_resolved_at,
        }
    }
}

/// Nodes with drift (000 §6.6 `GET reconciliation/drift`), ordered by site and hostname.
pub async fn list(store: &Store, filter: &DriftFilter) -> Result<Vec<DriftEntry>, StoreError> {
    let nodes: HashMap<Uuid, Node> = store
        .list_nodes(&NodeFilter {
            site: filter.site.clone(),
            include_deleted: true,
            ..NodeFilter::default()
        })
        .await?
        .into_iter()
        .map(|n| (n.id, n))
        .collect();
    let mut entries: Vec<DriftEntry> = store
        .maas_states(filter.site.as_deref())
        .await?
        .iter()
        .filter(|s| {
            s.drift_detected || (filter.include_resolved && s.drift_details.get("rule").is_some())
        })
        .filter_map(|s| nodes.get(&s.node_id).map(|n| DriftEntry::of(n, s)))
        .collect();
    entries
        .sort_by(|a, b| (&a.site, &a.hostname, a.node_id).cmp(&(&b.site, &b.hostname, b.node_id)));
    Ok(entries)
}

/// Counts of one site (or of all).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DriftCounts {
    /// Reconciled and without open drift.
    pub ok: usize,
    /// Open drift.
    pub drifted: usize,
    /// Never reconciled (no MAAS state recorded yet, or its site could never be read).
    pub unreconciled: usize,
}

/// 000 §6.6 `GET reconciliation/status`: the nodes the reconciler watches (active, offline,
/// quarantined, retired), counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DriftSummary {
    pub nodes: usize,
    #[serde(flatten)]
    pub counts: DriftCounts,
    /// Open drift by rule id.
    pub by_rule: BTreeMap<String, usize>,
    pub sites: BTreeMap<String, DriftCounts>,
    /// The most recent reconciliation of any node.
    pub last_reconciled_at: Option<DateTime<Utc>>,
}

/// The coarse states the drift pass watches.
pub const WATCHED_STATES: [NodeState; 4] = [
    NodeState::Active,
    NodeState::Offline,
    NodeState::Quarantined,
    NodeState::Retired,
];

pub async fn summary(store: &Store) -> Result<DriftSummary, StoreError> {
    let states: HashMap<Uuid, MaasState> = store
        .maas_states(None)
        .await?
        .into_iter()
        .map(|s| (s.node_id, s))
        .collect();
    let mut summary = DriftSummary::default();
    for node in store.list_nodes(&NodeFilter::default()).await? {
        if !WATCHED_STATES.contains(&node.status) {
            continue;
        }
        summary.nodes += 1;
        let site = summary.sites.entry(node.site.clone()).or_default();
        let state = states.get(&node.id);
        let bucket = match state {
            Some(s) if s.drift_detected => {
                let rule = detail(&s.drift_details, "rule").unwrap_or_else(|| "unknown".into());
                *summary.by_rule.entry(rule).or_default() += 1;
                site.drifted += 1;
                &mut summary.counts.drifted
            }
            Some(s) if s.last_reconciled_at.is_some() => {
                site.ok += 1;
                &mut summary.counts.ok
            }
            _ => {
                site.unreconciled += 1;
                &mut summary.counts.unreconciled
            }
        };
        *bucket += 1;
        if let Some(at) = state.and_then(|s| s.last_reconciled_at) {
            summary.last_reconciled_at = summary.last_reconciled_at.max(Some(at));
        }
    }
    Ok(summary)
}

/// What the operator decides (000 §6.4 "Admin reviews and decides").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// Seen and understood: the drift is marked resolved; the node stays as it is.
    Acknowledge,
    /// A quarantined node whose machine MAAS shows Deployed again goes back to active.
    Reactivate,
}

impl Resolution {
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Acknowledge => "acknowledge",
            Resolution::Reactivate => "reactivate",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("node {node} not found")]
    NotFound { node: Uuid },
    #[error("a drift resolution needs a reason (it goes to the audit log)")]
    MissingReason,
    #[error("node {hostname} ({node}) has no open drift to acknowledge")]
    NothingToResolve { node: Uuid, hostname: String },
    #[error("cannot {resolution} node {hostname}: {reason}")]
    Refused {
        node: Uuid,
        hostname: String,
        resolution: &'static str,
        reason: String,
    },
    #[error(transparent)]
    Store(StoreError),
}

impl ResolveError {
    /// The typed error name the API answers with.
    pub fn kind(&self) -> &'static str {
        match self {
            ResolveError::NotFound { .. } => "not_found",
            ResolveError::MissingReason => "bad_request",
            ResolveError::NothingToResolve { .. } => "nothing_to_resolve",
            ResolveError::Refused { .. } => "refused",
            ResolveError::Store(e) if e.is_conflict() => "conflict",
            ResolveError::Store(_) => "store_error",
        }
    }

    /// The HTTP status for it.
    pub fn http_status(&self) -> u16 {
        match self {
            ResolveError::NotFound { .. } => 404,
            ResolveError::MissingReason => 400,
            ResolveError::NothingToResolve { .. } | ResolveError::Refused { .. } => 409,
            ResolveError::Store(e) if e.is_conflict() => 409,
            ResolveError::Store(e) if e.is_transient() => 503,
            ResolveError::Store(_) => 500,
        }
    }

    /// What to do about it.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            ResolveError::NotFound { .. } => {
                Some("`metalform drift list` shows the nodes with drift and their ids")
            }
            ResolveError::MissingReason => Some("pass --reason TEXT"),
            ResolveError::NothingToResolve { .. } => {
                Some("`metalform drift list --all` shows resolved drift too")
            }
            ResolveError::Refused { .. } => None,
            ResolveError::Store(_) => None,
        }
    }
}

/// The outcome of a resolve.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resolved {
    pub resolution: Resolution,
    pub node: Node,
    pub maas_state: Option<MaasState>,
}

/// Acknowledge a node's drift, or reactivate a quarantined node whose machine is Deployed
/// again (000 §6.6 `POST drift/{node_id}/resolve`; 001 §3.3 quarantined → active by an
/// operator). Audited with the actor and reason; refused with the reason otherwise.
pub async fn resolve(
    store: &Store,
    node_id: Uuid,
    resolution: Resolution,
    actor: &Actor,
    reason: &str,
) -> Result<Resolved, ResolveError> {
    if reason.trim().is_empty() {
        return Err(ResolveError::MissingReason);
    }
    let node = match store.node(node_id).await {
        Ok(node) => node,
        Err(StoreError::NotFound { .. }) => return Err(ResolveError::NotFound { node: node_id }),
        Err(e) => return Err(ResolveError::Store(e)),
    };
    let state = store
        .maas_state(node_id)
        .await
        .map_err(ResolveError::Store)?;
    let refused = |why: String| ResolveError::Refused {
        node: node.id,
        hostname: node.hostname.clone(),
        resolution: resolution.as_str(),
        reason: why,
    };
    let resolution_details = json!({
        "resolution": resolution.as_str(),
        "by": actor.name,
        "role": actor.role.as_str(),
        "at": store.clock().now(),
        "reason": reason,
    });
    let mut record = DriftRecord::new(&node, actor.clone());
    record.reason = Some(reason.to_owned());
    let open = state.as_ref().filter(|s| s.drift_detected);
    let resolved_details = |state: &MaasState| {
        let mut details = state.drift_details.clone();
        if let Some(map) = details.as_object_mut() {
            map.insert("acknowledged".into(), resolution_details.clone());
        }
        details
    };
    match resolution {
        Resolution::Acknowledge => {
            let Some(state) = open else {
                return Err(ResolveError::NothingToResolve {
                    node: node.id,
                    hostname: node.hostname.clone(),
                });
            };
            record.mark = DriftMark::Resolved(resolved_details(state));
            record.refuse_if_job_open = false;
            record.audit = Some((
                "node.drift_acknowledged".into(),
                json!({"drift": state.drift_details}),
            ));
        }
        Resolution::Reactivate => {
            if node.status != NodeState::Quarantined {
                return Err(refused(format!(
                    "it is {}; only a quarantined node is reactivated",
                    node.status
                )));
            }
            let deployed = state
                .as_ref()
                .and_then(|s| s.last_maas_status.as_deref())
                .and_then(MaasStatus::from_name)
                == Some(MaasStatus::Deployed);
            if !deployed {
                let shown = match &state {
                    Some(s) => format!(
                        "MAAS last showed {} for {}{}",
                        s.last_maas_status.as_deref().unwrap_or("no machine"),
                        s.maas_system_id,
                        s.last_reconciled_at
                            .map(|t| format!(" (at {})", t.format("%Y-%m-%dT%H:%M:%SZ")))
                            .unwrap_or_default()
                    ),
                    None => "no MAAS state is recorded for it".to_owned(),
                };
                return Err(refused(format!(
                    "{shown}; it goes back to active only once its machine is Deployed again (redeploy or reimage it, then let a drift pass record it)"
                )));
            }
            record.transition = Some((NodeState::Active, Owner::Operator));
            if let Some(state) = open {
                record.mark = DriftMark::Resolved(resolved_details(state));
            }
            record.audit = Some((
                "node.drift_reactivated".into(),
                json!({"drift": state.as_ref().map(|s| s.drift_details.clone())}),
            ));
        }
    }
    match store.record_drift(&record).await {
        Ok((node, maas_state)) => Ok(Resolved {
            resolution,
            node,
            maas_state,
        }),
        Err(StoreError::JobOpen { kind, job, .. }) => Err(refused(format!(
            "an open {kind} ({job}) owns the node; resolve that job first"
        ))),
        Err(e) => Err(ResolveError::Store(e)),
    }
}
