//! Reconciliation (seed 000 §6.6; §4.15 run): `POST reconciliation/run` reconciles a site now —
//! observe, plan, apply, drift pass — through the daemon's loop (the same path as its
//! interval), audited; `wait: true` answers with the outcome, otherwise 202 once queued.
//! `GET reconciliation/status` and `GET reconciliation/drift` are the drift read models
//! (`drift::summary`, `drift::list`); `POST reconciliation/drift/{node_id}/resolve` is the
//! operator's resolve (`drift::resolve`: acknowledge, or reactivate a quarantined node), which
//! audits it with the token's name, role and the required reason.

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

use super::{Access, ApiError, ApiState, JsonBody, Principal, RouteTable, required_reason};
use crate::drift::{self, DriftFilter, Resolution, ResolveError};
use crate::model::SiteName;

const BASE: &str = "/api/v1/admin/reconciliation";

pub(super) fn routes(table: &mut RouteTable) {
    table.add(Method::POST, &format!("{BASE}/run"), Access::Admin, run);
    table.add(
        Method::GET,
        &format!("{BASE}/status"),
        Access::Admin,
        status,
    );
    table.add(Method::GET, &format!("{BASE}/drift"), Access::Admin, list);
    table.add(
        Method::POST,
        &format!("{BASE}/drift/{{node_id}}/resolve"),
        Access::Admin,
        resolve,
    );
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunBody {
    /// The site to reconcile; every site of the fleet when absent.
    site: Option<String>,
    reason: Option<String>,
    /// Answer after the reconcile ended, with its outcome.
    #[serde(default)]
    wait: bool,
    /// Run disruptive items although their maintenance window is closed, this reconcile only;
    /// needs a `reason`, and each item that runs so is audited.
    #[serde(default)]
    ignore_windows: bool,
}

async fn run(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    JsonBody(body): JsonBody<RunBody>,
) -> Result<impl IntoResponse, ApiError> {
    let accepted = state.fleet()?;
    let ignore_windows = match body.ignore_windows {
        false => None,
        true => Some(required_reason(body.reason.as_deref()).map_err(|err| {
            ApiError::bad_request(
                "`ignore_windows` needs a `reason`: overriding a maintenance window is audited",
            )
            .hint(err.hint.unwrap_or_default())
        })?),
    };
    let sites: Vec<SiteName> = match &body.site {
        Some(site) => {
            let name = SiteName::new(site.as_str());
            if !accepted.fleet.sites.contains_key(&name) {
                return Err(super::ControlError::UnknownSite(site.clone()).into());
            }
            vec![name]
        }
        None => accepted.fleet.sites.keys().cloned().collect(),
    };
    let mut pending = Vec::new();
    for site in &sites {
        pending.push(state.inner.control.reconcile(
            site.clone(),
            principal.actor(),
            ignore_windows.clone(),
        )?);
    }
    let names: Vec<&str> = sites.iter().map(SiteName::as_str).collect();
    state
        .audit(
            &principal,
            "reconciliation.run_requested",
            ("reconciliation", &names.join(",")),
            body.reason.as_deref(),
            json!({"sites": names, "revision": accepted.revision, "ignore_windows": body.ignore_windows}),
        )
        .await?;
    if !body.wait {
        return Ok((StatusCode::ACCEPTED, axum::Json(json!({"queued": names}))));
    }
    let results = futures::future::join_all(pending).await;
    Ok((StatusCode::OK, axum::Json(json!({"results": results}))))
}

/// 000 §6.6 `GET reconciliation/status`: the watched nodes counted ok, drifted, unreconciled.
async fn status(State(state): State<ApiState>) -> Result<impl IntoResponse, ApiError> {
    let summary = drift::summary(state.store()).await?;
    Ok(axum::Json(json!({"summary": summary})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    site: Option<String>,
    /// Also drift that was acknowledged or auto-healed.
    #[serde(default)]
    all: bool,
}

/// 000 §6.6 `GET reconciliation/drift`: the nodes with open drift (`all=true`: resolved too).
async fn list(
    State(state): State<ApiState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let Query(query) = query.map_err(|e| {
        ApiError::bad_request(e.body_text()).hint("query parameters: site=NAME, all=true|false")
    })?;
    let entries = drift::list(
        state.store(),
        &DriftFilter {
            site: query.site,
            include_resolved: query.all,
        },
    )
    .await?;
    Ok(axum::Json(json!({"drift": entries})))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResolveBody {
    /// `acknowledge` (default) or `reactivate`.
    action: Option<Resolution>,
    reason: Option<String>,
}

/// 000 §6.6 `POST reconciliation/drift/{node_id}/resolve`: the admin acknowledges the drift
/// or reactivates the quarantined node. Audited by `drift::resolve` in the same transaction.
async fn resolve(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    Path(node_id): Path<String>,
    JsonBody(body): JsonBody<ResolveBody>,
) -> Result<impl IntoResponse, ApiError> {
    let node = Uuid::parse_str(&node_id).map_err(|_| {
        ApiError::bad_request(format!("`{node_id}` is not a node id (a UUID)"))
            .hint("GET /api/v1/admin/reconciliation/drift lists the nodes with drift and their ids")
    })?;
    let reason = required_reason(body.reason.as_deref())?;
    let resolution = body.action.unwrap_or(Resolution::Acknowledge);
    let resolved = drift::resolve(state.store(), node, resolution, &principal.actor(), &reason)
        .await
        .map_err(resolve_error)?;
    tracing::info!(
        node = %node,
        hostname = %resolved.node.hostname,
        resolution = resolution.as_str(),
        actor = %principal.name,
        state = %resolved.node.status,
        "drift resolved"
    );
    Ok(axum::Json(json!({
        "resolution": resolution,
        "node": resolved.node,
        "maas_state": resolved.maas_state,
    })))
}

/// The resolve's typed errors with their status; store failures are classified as every
/// other route's.
fn resolve_error(err: ResolveError) -> ApiError {
    let hint = match &err {
        ResolveError::Store(_) => None,
        ResolveError::NotFound { .. } => {
            Some("GET /api/v1/admin/reconciliation/drift lists the nodes with drift and their ids")
        }
        ResolveError::MissingReason => Some("send {\"reason\": \"…\"}"),
        ResolveError::NothingToResolve { .. } => {
            Some("GET /api/v1/admin/reconciliation/drift?all=true shows resolved drift too")
        }
        ResolveError::Refused { .. } => None,
    };
    let status = StatusCode::from_u16(err.http_status()).unwrap_or(StatusCode::CONFLICT);
    let api = match err {
        ResolveError::Store(e) => return ApiError::from(e),
        err => ApiError::new(status, err.kind(), err.to_string()),
    };
    match hint {
        Some(hint) => api.hint(hint),
        None => api,
    }
}
