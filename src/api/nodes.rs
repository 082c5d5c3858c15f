//! What operators read about their nodes through the API (seed 001 §9.1 inventory view, §9.2
//! lifecycle detail view; seed 000 §4.12 audit log; docs/api.md): the node list with the status
//! page's filters, one node with its jobs, stage timelines and audit rows, the daemon's current
//! plan of every site, and an audit log query. Read only; the same reads as the status pages
//! (`crate::web`), answered as JSON.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::Method;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use super::{Access, ApiError, ApiState, Control, FleetRevision, RouteTable};
use crate::lifecycle::JobKind;
use crate::model::SiteName;
use crate::store::{AuditQuery, JobFilter};
use crate::web::{DaemonView, LatestPlan, NodeQuery, NodeRow};

const NODES: &str = "/api/v1/admin/nodes";

/// Audit rows answered when `limit` is not given, and at most.
const AUDIT_DEFAULT_LIMIT: u32 = 100;
const AUDIT_MAX_LIMIT: u32 = 1000;

pub(super) fn routes(table: &mut RouteTable) {
    table.add(Method::GET, NODES, Access::Admin, list);
    table.add(
        Method::GET,
        &format!("{NODES}/{{node_id}}"),
        Access::Admin,
        get,
    );
    table.add(Method::GET, "/api/v1/admin/plan", Access::Admin, plan);
    table.add(Method::GET, "/api/v1/admin/audit", Access::Admin, audit);
}

/// The daemon's view, for the status pages' reads.
struct View(Arc<dyn Control>);

impl DaemonView for View {
    fn fleet(&self) -> Option<Arc<FleetRevision>> {
        self.0.fleet()
    }
    fn plans(&self) -> Vec<(SiteName, Arc<LatestPlan>)> {
        self.0.plans()
    }
}

fn view(state: &ApiState) -> View {
    View(state.inner.control.clone())
}

/// The query string's pairs, in order.
fn pairs(query: Option<String>) -> Vec<(String, String)> {
    url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

/// One node of the list.
#[derive(Debug, Serialize)]
struct NodeItem<'a> {
    site: &'a str,
    hostname: &'a str,
    /// `null` for a node of the manifests that was never onboarded.
    node_id: Option<uuid::Uuid>,
    /// The coarse state, `not_onboarded` or `provisioned`.
    state: &'a str,
    in_manifests: bool,
    group: Option<&'a str>,
    lifecycle: Option<&'a str>,
    retired: bool,
    protected: bool,
    paused: bool,
    maas_status: Option<&'a str>,
    power_state: Option<&'a str>,
    drift: Option<&'a str>,
    failed: bool,
    job: Option<Value>,
    agent_contact: Option<DateTime<Utc>>,
}

impl<'a> NodeItem<'a> {
    fn of(row: &'a NodeRow) -> Self {
        NodeItem {
            site: &row.site,
            hostname: &row.hostname,
            node_id: row.node_id,
            state: row.state_label(),
            in_manifests: row.in_manifests,
            group: row.group.as_deref(),
            lifecycle: row.lifecycle.as_deref(),
            retired: row.retired,
            protected: row.protected,
            paused: row.paused,
            maas_status: row.maas_status.as_deref(),
            power_state: row.power_state.as_deref(),
            drift: row.drift.as_deref(),
            failed: row.failed(),
            job: row.job.as_ref().map(|job| {
                json!({
                    "id": job.id,
                    "kind": job.kind.as_str(),
                    "mode": job.mode.map(|m| m.to_string()),
                    "state": job.state.as_str(),
                    "stage": job.stage,
                    "attempt": job.attempt,
                    "error": job.error,
                })
            }),
            agent_contact: row.agent_contact,
        }
    }
}

async fn list(
    State(state): State<ApiState>,
    RawQuery(query): RawQuery,
) -> Result<impl IntoResponse, ApiError> {
    let pairs = pairs(query);
    let hint = "filters: site=NAME, state=STATE, group=NAME, drift=true|false, failed=true|false";
    // The API is stricter than the page's form: a flag is `true` or `false`, a state is named.
    for (key, value) in &pairs {
        match key.as_str() {
            "drift" | "failed" if !matches!(value.as_str(), "true" | "false") => {
                return Err(ApiError::bad_request(format!(
                    "`{key}={value}`: use {key}=true or {key}=false"
                ))
                .hint(hint));
            }
            "state" if value.trim().is_empty() => {
                return Err(ApiError::bad_request(
                    "`state=` names no state; leave it out for every state",
                )
                .hint(hint));
            }
            _ => {}
        }
    }
    let query =
        NodeQuery::parse(&pairs).map_err(|message| ApiError::bad_request(message).hint(hint))?;
    let snapshot = crate::web::fleet_snapshot(state.store(), &view(&state)).await?;
    let nodes: Vec<NodeItem> = snapshot
        .rows
        .iter()
        .filter(|row| query.matches(row))
        .map(NodeItem::of)
        .collect();
    Ok(axum::Json(json!({
        "taken_at": snapshot.taken_at,
        "revision": snapshot.revision.as_ref().map(|(r, _)| r),
        "nodes": nodes,
    })))
}

async fn get(
    State(state): State<ApiState>,
    Path(node_id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let id = super::jobs::node_id(&node_id)?;
    let node = state.store().node(id).await?;
    let detail = crate::web::node_detail(state.store(), &view(&state), &node.site, &node.hostname)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no node {id}")))?;
    let jobs: Vec<Value> = detail
        .jobs
        .iter()
        .map(|view| {
            let steps: Vec<Value> = view
                .steps
                .iter()
                .map(|s| {
                    json!({
                        "stage": s.stage,
                        "status": s.status.as_str(),
                        "attempts": s.attempts,
                        "started_at": s.started_at,
                        "last_at": s.last_at,
                        "message": s.message,
                    })
                })
                .collect();
            json!({"job": view.job, "timeline": steps})
        })
        .collect();
    // When the reconciler next tries the node's failed job (`next try in 4m (attempt 3)`).
    let next_try = detail
        .jobs
        .iter()
        .find_map(|view| view.job.next_try(detail.taken_at));
    Ok(axum::Json(json!({
        "taken_at": detail.taken_at,
        "site": detail.site,
        "hostname": detail.hostname,
        "node": detail.node,
        "manifest": detail.manifest,
        "maas": detail.maas,
        "provision": detail.provision,
        "next_try": next_try,
        "jobs": jobs,
        "audit": detail.audit,
    })))
}

async fn plan(State(state): State<ApiState>) -> Result<impl IntoResponse, ApiError> {
    let control = state.inner.control.clone();
    let mut plans = control.plans();
    plans.sort_by(|a, b| a.0.cmp(&b.0));
    let mut sites = Vec::new();
    for (site, latest) in plans {
        let plan: Value = serde_json::from_str(&crate::plan::render::render_json(&latest.plan))
            .map_err(|e| ApiError::internal(format!("rendering the plan of {site}: {e}")))?;
        sites.push(json!({
            "site": site.as_str(),
            "observed_at": latest.observed_at,
            "plan": plan,
        }));
    }
    Ok(axum::Json(json!({
        "revision": control.fleet().map(|f| f.revision.clone()),
        "sites": sites,
    })))
}

/// `?node=&actor=&action=&since=&until=&limit=`.
fn audit_query(pairs: &[(String, String)]) -> Result<(AuditQuery, Option<uuid::Uuid>), ApiError> {
    let mut query = AuditQuery {
        limit: AUDIT_DEFAULT_LIMIT,
        ..AuditQuery::default()
    };
    let mut node = None;
    let time = |key: &str, value: &str| {
        DateTime::parse_from_rfc3339(value)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|_| {
                ApiError::bad_request(format!("`{key}={value}` is not an RFC 3339 time"))
                    .hint(format!("e.g. {key}=2026-11-26T04:00:00Z"))
            })
    };
    for (key, value) in pairs {
        let value = value.trim();
        match key.as_str() {
            "node" => node = Some(super::jobs::node_id(value)?),
            "actor" => query.actor = Some(value.to_owned()),
            "action" => query.action = Some(value.to_owned()),
            "since" => query.since = Some(time("since", value)?),
            "until" => query.until = Some(time("until", value)?),
            "limit" => {
                query.limit = value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=AUDIT_MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "`limit={value}`: give a number from 1 to {AUDIT_MAX_LIMIT}"
                        ))
                        .hint(format!(
                            "without limit the newest {AUDIT_DEFAULT_LIMIT} rows are answered; narrow with since= and until="
                        ))
                    })?;
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown filter `{other}`; the filters are node, actor, action, since, until and limit"
                ))
                .hint("e.g. ?node=NODE_ID&since=2026-11-26T04:00:00Z"));
            }
        }
    }
    Ok((query, node))
}

async fn audit(
    State(state): State<ApiState>,
    RawQuery(query): RawQuery,
) -> Result<impl IntoResponse, ApiError> {
    let (mut query, node) = audit_query(&pairs(query))?;
    if let Some(node) = node {
        // The node's rows, and its jobs' (a recovery action is audited on its job).
        let mut subjects = vec![node.to_string()];
        for kind in JobKind::ALL {
            let filter = JobFilter {
                node_id: Some(node),
                ..JobFilter::default()
            };
            subjects.extend(
                state
                    .store()
                    .list_jobs(*kind, &filter)
                    .await?
                    .into_iter()
                    .map(|j| j.id.to_string()),
            );
        }
        query.subject_ids = Some(subjects);
    }
    let entries = state.store().audit_query(&query).await?;
    Ok(axum::Json(json!({ "entries": entries })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(query: &str) -> Result<(AuditQuery, Option<uuid::Uuid>), String> {
        audit_query(&pairs(Some(query.to_owned()))).map_err(|e| e.message)
    }

    #[test]
    fn audit_filters_parse_and_bad_ones_are_refused_with_what_to_give() {
        let (query, node) = parse(
            "node=0b6c1d8e-9f3a-4c2e-8d7b-1a2b3c4d5e6f&actor=ops&since=2026-11-26T04:00:00Z&until=2026-11-26T05:00:00%2B01:00&limit=5",
        )
        .unwrap();
        assert_eq!(
            node.map(|n| n.to_string()).as_deref(),
            Some("0b6c1d8e-9f3a-4c2e-8d7b-1a2b3c4d5e6f")
        );
        assert_eq!(query.actor.as_deref(), Some("ops"));
        assert_eq!(query.limit, 5);
        assert_eq!(
            query.until.unwrap().to_rfc3339(),
            "2026-11-26T04:00:00+00:00"
        );
        assert_eq!(
            parse("since=yesterday").unwrap_err(),
            "`since=yesterday` is not an RFC 3339 time"
        );
        assert_eq!(
            parse("limit=0").unwrap_err(),
            "`limit=0`: give a number from 1 to 1000"
        );
        assert_eq!(
            parse("node=c07u43").unwrap_err(),
            "`c07u43` is not a node id (a UUID)"
        );
        assert_eq!(
            parse("who=me").unwrap_err(),
            "unknown filter `who`; the filters are node, actor, action, since, until and limit"
        );
        // An empty range is a question with no rows, not a mistake.
        assert!(parse("since=2026-11-26T05:00:00Z&until=2026-11-26T04:00:00Z").is_ok());
    }
}
