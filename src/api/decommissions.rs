//! Decommissions (seed 000 §5.7 monitoring, §5.2 soft reset and §5.5 storage-only cleanup as
//! runtime triggers, §5.8 retry and cancel): the job routes of the kind (`jobs`: list, one job
//! with its events and follow-ups, retry, cancel), and the node requests — the two runtime
//! modes through the library services of `apply::decommission`, audited there with the token's
//! name, role and the reason, then run by the daemon: the API asks for an immediate reconcile
//! of the node's site, whose plan takes the open job up (`Action::ResumeDecommission`). Reimage,
//! full decommission and retirement are declarative and refused as owned by git.

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};

use super::jobs::node_id;
use super::{
    Access, ApiError, ApiState, JsonBody, MaybeJsonBody, Principal, RouteTable, required_reason,
};
use crate::apply::decommission;
use crate::lifecycle::JobKind;
use crate::model::Node as ManifestNode;
use crate::store::{Job, Node};

const NODES: &str = "/api/v1/admin/nodes";

/// The declarative modes (000 §5.3, §5.4, seed 004): path segment, what the manifest says.
const DECLARATIVE: &[(&str, &str)] = &[
    ("reimage", "bump `reimage.generation`"),
    ("decommission", "set `lifecycle: decommissioned`"),
    ("retire", "set `lifecycle: retired` (and `retiredReason`)"),
];

pub(super) fn routes(table: &mut RouteTable) {
    super::jobs::routes(table, JobKind::Decommission);
    table.add(
        Method::POST,
        &format!("{NODES}/{{node_id}}/soft-reset"),
        Access::Admin,
        soft_reset,
    );
    table.add(
        Method::POST,
        &format!("{NODES}/{{node_id}}/storage-cleanup"),
        Access::Admin,
        storage_cleanup,
    );
    for (segment, change) in DECLARATIVE {
        table.add(
            Method::POST,
            &format!("{NODES}/{{node_id}}/{segment}"),
            Access::Admin,
            move |state: State<ApiState>, path: Path<String>, body: MaybeJsonBody<Value>| {
                declarative(state, path, body, segment, change)
            },
        );
    }
}

/// Ask the daemon to reconcile `site` now (its plan resumes the open job); the outcome is
/// the job's, so nothing waits for the reconcile.
fn run_soon(state: &ApiState, principal: &Principal, site: &str) -> Result<(), ApiError> {
    let site = crate::model::SiteName::new(site);
    drop(
        state
            .inner
            .control
            .reconcile(site, principal.actor(), None)?,
    );
    Ok(())
}

/// 503 once the daemon is shutting down: nothing new is recorded it would not run.
fn accepting(state: &ApiState) -> Result<(), ApiError> {
    if state.inner.control.accepting() {
        Ok(())
    } else {
        Err(super::ControlError::ShuttingDown.into())
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SoftResetBody {
    reason: Option<String>,
    /// Storage cleanup scope of the soft reset: none | local | weka | all (default none).
    storage_cleanup: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StorageCleanupBody {
    reason: Option<String>,
    /// local | weka | all (default all).
    scope: Option<String>,
}

fn scope_of(scope: &str, allowed: &[&str]) -> Result<(), ApiError> {
    if allowed.contains(&scope) {
        Ok(())
    } else {
        Err(
            ApiError::bad_request(format!("storage cleanup scope `{scope}` is not known"))
                .hint(format!("one of {}", allowed.join(", "))),
        )
    }
}

/// The inventory node of a runtime request and its manifest: it must be one the daemon
/// reconciles (in the accepted fleet), since the daemon runs the job.
async fn runtime_node(state: &ApiState, id: &str) -> Result<Node, ApiError> {
    let id = node_id(id)?;
    accepting(state)?;
    let node = state.store().node(id).await?;
    reconciled(state, &node.site, &node.hostname)?;
    Ok(node)
}

/// 409 unless the node is in the accepted fleet: the daemon runs the jobs of the nodes it
/// reconciles, and nothing is recorded that would wait for ever.
fn reconciled(state: &ApiState, site: &str, hostname: &str) -> Result<(), ApiError> {
    let accepted = state.fleet()?;
    if manifest_node(&accepted.fleet, site, hostname).is_some() {
        Ok(())
    } else {
        Err(ApiError::conflict(format!(
            "{site}/{hostname} is not in the fleet's manifests: the daemon runs decommissions of the nodes it reconciles"
        ))
        .hint("add the node back to the manifests and commit, or cancel the job"))
    }
}

/// The manifest entry of the node `site`/`hostname`.
fn manifest_node<'a>(
    fleet: &'a crate::model::Fleet,
    site: &str,
    hostname: &str,
) -> Option<&'a ManifestNode> {
    fleet
        .nodes
        .values()
        .find(|n| n.id.site.as_str() == site && n.id.hostname.as_str() == hostname)
}

/// 202 with the recorded job, after asking for the reconcile that runs it.
fn requested(
    state: &ApiState,
    principal: &Principal,
    job: Job,
) -> Result<impl IntoResponse + use<>, ApiError> {
    tracing::info!(decommission = %job.id, node = %job.hostname, actor = %principal.name, "decommission requested");
    run_soon(state, principal, &job.site)?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(json!({"decommission": job, "execution": "queued"})),
    ))
}

async fn soft_reset(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<SoftResetBody>,
) -> Result<impl IntoResponse, ApiError> {
    let reason = required_reason(body.reason.as_deref())?;
    if let Some(scope) = body.storage_cleanup.as_deref() {
        scope_of(scope, &["none", "local", "weka", "all"])?;
    }
    let node = runtime_node(&state, &id).await?;
    let job = decommission::request_soft_reset(
        state.store(),
        node.id,
        body.storage_cleanup.as_deref(),
        &principal.actor(),
        Some(&reason),
    )
    .await?;
    requested(&state, &principal, job)
}

async fn storage_cleanup(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<StorageCleanupBody>,
) -> Result<impl IntoResponse, ApiError> {
    let reason = required_reason(body.reason.as_deref())?;
    let scope = body.scope.as_deref().unwrap_or("all");
    scope_of(scope, &["local", "weka", "all"])?;
    let node = runtime_node(&state, &id).await?;
    let job = decommission::request_storage_cleanup(
        state.store(),
        node.id,
        scope,
        &principal.actor(),
        Some(&reason),
    )
    .await?;
    requested(&state, &principal, job)
}

/// Reimage, full decommission, retire: 409 `owned_by_git` naming the node's manifest.
async fn declarative(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    MaybeJsonBody(_): MaybeJsonBody<Value>,
    segment: &str,
    change: &str,
) -> Result<(), ApiError> {
    let id = node_id(&id)?;
    let accepted = state.fleet()?;
    let node = state.store().node(id).await?;
    let (file, at) = match manifest_node(&accepted.fleet, &node.site, &node.hostname) {
        Some(n) => (n.provenance.file.clone(), n.provenance.to_string()),
        None => (
            "nodes/".to_owned(),
            "the node's manifest under nodes/".to_owned(),
        ),
    };
    Err(ApiError::owned_by_git(
        format!(
            "{segment} of {}/{} is declared in the manifests: {change} for {} in {at}",
            node.site, node.hostname, node.hostname
        ),
        &file,
    ))
}
