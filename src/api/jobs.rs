//! The job routes of every kind (seed 000 §4.2 and §5.7 read models, §4.9 and §5.8 recovery
//! actions, §4.12 audit, §4.15): `GET /api/v1/admin/{kind}s`, `GET …/{id}` and
//! `POST …/{id}/{action}` for each action the kind offers — one set of handlers, mounted per
//! kind by [`routes`], over the library services of `apply::jobs` and `apply::recovery` (the
//! same code as `metalform jobs`). An action is recorded and audited, then carried out by the
//! daemon in the background (202); a cancel the kind compensates with the store alone is done
//! at once (200).

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

use super::{Access, ApiError, ApiState, JsonBody, Principal, RouteTable, required_reason};
use crate::apply::jobs::{self, ConflictReason, KindInfo, ServiceError};
use crate::apply::kinds::info;
use crate::apply::recovery::{self, Execution};
use crate::lifecycle::{JobKind, JobState, RecoveryAction};
use crate::plan::NodeTarget;
use crate::store::JobFilter;

/// `/api/v1/admin/{kind}s`.
pub(super) fn base(kind: JobKind) -> String {
    format!("/api/v1/admin/{}", info(kind).plural)
}

/// Mount the job routes of `kind`.
pub(super) fn routes(table: &mut RouteTable, kind: JobKind) {
    let base = base(kind);
    table.add(
        Method::GET,
        &base,
        Access::Admin,
        move |state: State<ApiState>,
              query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>| {
            list(state, query, kind)
        },
    );
    table.add(
        Method::GET,
        &format!("{base}/{{id}}"),
        Access::Admin,
        move |state: State<ApiState>, path: Path<String>| get(state, path, kind),
    );
    for action in info(kind).actions {
        let action = *action;
        table.add(
            Method::POST,
            &format!("{base}/{{id}}/{}", action.route()),
            Access::Admin,
            move |state: State<ApiState>,
                  principal: Extension<Principal>,
                  path: Path<String>,
                  body: JsonBody<RecoveryBody>| {
                recover(state, principal, path, body, kind, action)
            },
        );
    }
}

/// The services' refusals, classified once: unknown → 404, a conflict → 409 whose code is its
/// reason, the manifests' business → 409 `owned_by_git`, the store's → as the store's.
impl From<ServiceError> for ApiError {
    fn from(err: ServiceError) -> Self {
        match err {
            ServiceError::NotFound { .. } => ApiError::not_found(err.to_string()),
            ServiceError::Conflict { reason, message } => {
                let (code, hint) = match reason {
                    ConflictReason::JobOpen(kind) => (
                        match kind {
                            JobKind::Onboarding => "onboarding_open",
                            JobKind::Decommission => "decommission_open",
                            JobKind::Provisioning => "server_busy",
                        },
                        format!(
                            "GET {}?node_id=… shows the open job: wait for it, retry or cancel it",
                            base(kind)
                        ),
                    ),
                    ConflictReason::NodeState => (
                        "node_state",
                        "the message lists the node states this starts from; GET /api/v1/admin/reconciliation/drift?all=true says why the node is where it is".into(),
                    ),
                    ConflictReason::JobState => (
                        "job_state",
                        "GET the job: its state and recommended action say which recovery applies".into(),
                    ),
                    ConflictReason::Protected => (
                        "protected",
                        "the node is protected: remove `protected: true` from its manifest first".into(),
                    ),
                };
                ApiError::new(StatusCode::CONFLICT, code, message).hint(hint)
            }
            ServiceError::OwnedByGit { file, message } => ApiError::owned_by_git(message, &file),
            ServiceError::Store(err) => err.into(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    batch_id: Option<String>,
    site: Option<String>,
    /// A job state.
    state: Option<String>,
    /// A job state, or `failed` for both failed states (000 §5.7 `?status=failed`).
    status: Option<String>,
    hostname: Option<String>,
    node_id: Option<String>,
    #[serde(default)]
    open: bool,
}

/// `name=value`: a job state, or `failed` for both failed states.
fn states(name: &str, value: &str) -> Result<Vec<JobState>, ApiError> {
    if value == "failed" {
        return Ok(vec![
            JobState::FailedRetryable,
            JobState::FailedManualIntervention,
        ]);
    }
    value.parse::<JobState>().map(|s| vec![s]).map_err(|e| {
        ApiError::bad_request(format!("{name} `{value}`: {e}")).hint(format!(
            "one of {}, or failed (both failed states)",
            JobState::NAMES.join(", ")
        ))
    })
}

pub(super) fn node_id(text: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text).map_err(|_| {
        ApiError::bad_request(format!("`{text}` is not a node id (a UUID)")).hint(
            "the node id is the inventory's (`metalform status --format json`, or a job's node_id)",
        )
    })
}

fn job_id(kind: JobKind, text: &str) -> Result<Uuid, ApiError> {
    let noun = kind.as_str();
    let article = if noun.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    Uuid::parse_str(text).map_err(|_| {
        ApiError::bad_request(format!("`{text}` is not {article} {noun} id (a UUID)")).hint(
            format!(
                "GET {}?hostname=HOST lists a node's {}",
                base(kind),
                info(kind).plural
            ),
        )
    })
}

async fn list(
    State(state): State<ApiState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
    kind: JobKind,
) -> Result<impl IntoResponse, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let node = query.node_id.as_deref().map(node_id).transpose()?;
    let mut wanted: Vec<Vec<JobState>> = Vec::new();
    for (name, value) in [("state", &query.state), ("status", &query.status)] {
        if let Some(value) = value {
            wanted.push(states(name, value)?);
        }
    }
    let filter = JobFilter {
        node_id: node,
        site: query.site,
        batch_id: query.batch_id,
        open_only: query.open,
        ..JobFilter::default()
    };
    let jobs: Vec<_> = jobs::list(state.store(), kind, &filter)
        .await?
        .into_iter()
        .filter(|j| wanted.iter().all(|states| states.contains(&j.state)))
        .filter(|j| {
            query
                .hostname
                .as_deref()
                .is_none_or(|h| j.hostname.eq_ignore_ascii_case(h))
        })
        .collect();
    Ok(axum::Json(json!({ info(kind).plural: jobs })))
}

async fn get(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    kind: JobKind,
) -> Result<impl IntoResponse, ApiError> {
    let view = jobs::show(state.store(), info(kind), job_id(kind, &id)?).await?;
    let mut body = json!({ kind.as_str(): view.job, "events": view.events });
    body.as_object_mut().expect("an object").extend(view.extras);
    Ok(axum::Json(body))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RecoveryBody {
    reason: Option<String>,
}

/// The node a recovery's stages run for, as the accepted fleet resolves it: 409 when the
/// manifests no longer have it (the daemon runs the jobs of the nodes it reconciles).
fn target(
    state: &ApiState,
    info: &KindInfo,
    site: &str,
    hostname: &str,
) -> Result<NodeTarget, ApiError> {
    let accepted = state.fleet()?;
    accepted
        .fleet
        .nodes
        .values()
        .find(|n| n.id.site.as_str() == site && n.id.hostname.as_str() == hostname)
        .and_then(|n| NodeTarget::resolve(&accepted.fleet, n))
        .ok_or_else(|| {
            ApiError::conflict(format!(
                "{site}/{hostname} is not in the fleet's manifests: the daemon runs the {} of the nodes it reconciles",
                info.plural
            ))
            .hint("add the node back to the manifests and commit, or cancel the job")
        })
}

async fn recover(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<RecoveryBody>,
    kind: JobKind,
    action: RecoveryAction,
) -> Result<axum::response::Response, ApiError> {
    let id = job_id(kind, &id)?;
    let reason = required_reason(body.reason.as_deref())?;
    let info = info(kind);
    let job = state.store().job(kind, id).await?;
    let noun = kind.as_str();
    if action == RecoveryAction::Cancel && info.cancel_with_store.is_some() {
        let done = jobs::cancel_now(
            state.store(),
            info,
            id,
            &principal.actor(),
            Some(&reason),
            state.inner.control.lease_ttl(),
        )
        .await?;
        tracing::info!(job = %id, kind = noun, actor = %principal.name, from = %job.state, to = %done.state, "job cancelled");
        return Ok(axum::Json(json!({
            "action": action,
            "prior_state": job.state,
            noun: done,
        }))
        .into_response());
    }
    let executes = action != RecoveryAction::MarkManualInterventionRequired;
    let target = if executes {
        if !state.inner.control.accepting() {
            return Err(super::ControlError::ShuttingDown.into());
        }
        Some(target(&state, info, &job.site, &job.hostname)?)
    } else {
        None
    };
    let recovery =
        recovery::record(state.store(), kind, id, action, &principal.actor(), &reason).await?;
    if recovery.execution == Execution::FinishCompensation {
        // Not audited by the store (the cancel or restart-clean it finishes was).
        state
            .audit(
                &principal,
                &format!("{noun}.resume_compensation"),
                (noun, &id.to_string()),
                Some(&reason),
                json!({"state": recovery.job.state, "stage": recovery.job.stage}),
            )
            .await?;
    }
    tracing::info!(
        job = %id,
        kind = noun,
        action = %action,
        actor = %principal.name,
        from = %recovery.prior.state,
        to = %recovery.job.state,
        "recovery action recorded"
    );
    let execution = match target {
        Some(target) if recovery.execution != Execution::Nothing => {
            state.inner.control.carry_out(target, recovery.clone())?;
            "queued"
        }
        _ => "none",
    };
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(json!({
            "action": action,
            "prior_state": recovery.prior.state,
            noun: recovery.job,
            "execution": execution,
        })),
    )
        .into_response())
}
