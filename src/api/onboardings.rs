//! Onboardings (seed 000 §4.2 read model, §4.9 recovery semantics, §4.12 audit, §4.15): list
//! (by batch, site, state, hostname), one job with its recent stage events, and the recovery
//! actions — each recorded and audited through `apply::recovery` (the same code as `metalform
//! onboardings`), then carried out by the daemon in the background. Creating onboardings is
//! refused as owned by git: a node onboards when its manifest is committed.

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Access, ApiError, ApiState, JsonBody, Principal, RouteTable, required_reason};
use crate::apply::recovery::{self, Execution};
use crate::lifecycle::{JobKind, JobState, RecoveryAction};
use crate::plan::NodeTarget;
use crate::store::JobFilter;

const BASE: &str = "/api/v1/admin/onboardings";

/// The recovery routes: path segment and action (000 §4.15).
const ACTIONS: &[(&str, RecoveryAction)] = &[
    ("retry", RecoveryAction::RetryStage),
    ("resume", RecoveryAction::Resume),
    ("rerun", RecoveryAction::Rerun),
    ("restart-clean", RecoveryAction::RestartClean),
    ("cancel", RecoveryAction::Cancel),
    ("adopt", RecoveryAction::AdoptObservedState),
    (
        "mark-manual-intervention",
        RecoveryAction::MarkManualInterventionRequired,
    ),
];

pub(super) fn routes(table: &mut RouteTable) {
    table.add(Method::GET, BASE, Access::Admin, list);
    table.add(Method::POST, BASE, Access::Admin, create);
    table.add(
        Method::POST,
        &format!("{BASE}/batch"),
        Access::Admin,
        create,
    );
    table.add(Method::GET, &format!("{BASE}/{{id}}"), Access::Admin, get);
    for (segment, action) in ACTIONS {
        let action = *action;
        table.add(
            Method::POST,
            &format!("{BASE}/{{id}}/{segment}"),
            Access::Admin,
            move |state: State<ApiState>,
                  principal: Extension<Principal>,
                  path: Path<String>,
                  body: JsonBody<RecoveryBody>| {
                recover(state, principal, path, body, action)
            },
        );
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    batch_id: Option<String>,
    site: Option<String>,
    state: Option<String>,
    hostname: Option<String>,
    #[serde(default)]
    open: bool,
}

async fn list(
    State(state): State<ApiState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let job_state = query
        .state
        .as_deref()
        .map(|s| {
            s.parse::<JobState>().map_err(|e| {
                ApiError::bad_request(format!("state `{s}`: {e}")).hint(
                    "one of pending, running, completed, failed_retryable, failed_manual_intervention, cancelled, compensating, reconciled",
                )
            })
        })
        .transpose()?;
    let jobs = state
        .store()
        .list_jobs(
            JobKind::Onboarding,
            &JobFilter {
                site: query.site,
                state: job_state,
                batch_id: query.batch_id,
                open_only: query.open,
                ..JobFilter::default()
            },
        )
        .await?;
    let jobs: Vec<_> = jobs
        .into_iter()
        .filter(|j| query.hostname.as_deref().is_none_or(|h| j.hostname == h))
        .collect();
    Ok(axum::Json(json!({"onboardings": jobs})))
}

fn job_id(text: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text).map_err(|_| {
        ApiError::bad_request(format!("`{text}` is not an onboarding id (a UUID)"))
            .hint("GET /api/v1/admin/onboardings?hostname=HOST lists a node's onboardings")
    })
}

async fn get(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let id = job_id(&id)?;
    let job = state.store().job(JobKind::Onboarding, id).await?;
    let events = state
        .store()
        .job_events(JobKind::Onboarding, id, 50)
        .await?;
    Ok(axum::Json(json!({"onboarding": job, "events": events})))
}

async fn create(
    State(state): State<ApiState>,
    JsonBody(_): JsonBody<Value>,
) -> Result<(), ApiError> {
    let _ = state.fleet()?;
    Err(ApiError::owned_by_git(
        "onboardings start from the fleet's manifests: add the node (kind: Node, or an entry of a NodeGroup) under nodes/ and commit",
        "nodes/",
    ))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecoveryBody {
    reason: Option<String>,
}

async fn recover(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<RecoveryBody>,
    action: RecoveryAction,
) -> Result<impl IntoResponse, ApiError> {
    let id = job_id(&id)?;
    let reason = required_reason(body.reason.as_deref())?;
    let job = state.store().job(JobKind::Onboarding, id).await?;
    let executes = action != RecoveryAction::MarkManualInterventionRequired;
    let target = if executes {
        if !state.inner.control.accepting() {
            return Err(super::ControlError::ShuttingDown.into());
        }
        let accepted = state.fleet()?;
        let target = accepted
            .fleet
            .nodes
            .values()
            .find(|n| n.id.site.as_str() == job.site && n.id.hostname.as_str() == job.hostname)
            .and_then(|n| NodeTarget::resolve(&accepted.fleet, n))
            .ok_or_else(|| {
                ApiError::conflict(format!(
                    "{}/{} is not in the fleet's manifests: the stages need its site and profile",
                    job.site, job.hostname
                ))
                .hint("add the node back to the manifests, or cancel is the only way out: mark-manual-intervention records it")
            })?;
        Some(target)
    } else {
        None
    };
    let recovery = recovery::record(state.store(), id, action, &principal.actor(), &reason).await?;
    if recovery.execution == Execution::FinishCompensation {
        // Not audited by the store (the cancel or restart-clean it finishes was).
        state
            .audit(
                &principal,
                "onboarding.resume_compensation",
                ("onboarding", &id.to_string()),
                Some(&reason),
                json!({"state": recovery.job.state, "stage": recovery.job.stage}),
            )
            .await?;
    }
    tracing::info!(
        onboarding = %id,
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
            "onboarding": recovery.job,
            "execution": execution,
        })),
    ))
}
