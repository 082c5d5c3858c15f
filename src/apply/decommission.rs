//! The decommission job kind (seed 000 §5, §5.7, §5.8; seed 001 §5, §8): soft resets,
//! reimages, full decommissions, storage cleanups and retirements on the engine — each mode its
//! own stage list (`DecommissionMode::stages`), a jump out of it (the onboarding's
//! deploy-failure branch during a reimage's redeploy) a failed redeploy, completion moving the
//! node to the mode's end state, and a cancel compensated with the store alone: the job's open
//! agent tasks closed, the node given back when nothing destructive happened, MAAS left as it
//! is.
//!
//! The services the admin API's node requests and the tests call are here too
//! ([`request_soft_reset`], [`request_storage_cleanup`]), and the decommission-named forms of
//! the generic job services (`super::jobs`).

use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::json;
use uuid::Uuid;

use super::engine::{Compensation, Continuing, Engine, Kind, Pass, Run, Stop, profile_limit};
use super::jobs::{self, JobView, KindInfo, ServiceError};
use super::outcome::NodeOutcome;
use super::progress::ProgressStatus;
use crate::lifecycle::{
    DecommissionMode, DecommissionStage, FailureClass, JobKind, JobState, NodeState, Owner,
    RecoveryAction,
};
use crate::stages::decommission::{
    DecommissionCtx, DecommissionFacts, DecommissionTarget, DecommissionTiming, run_stage,
};
use crate::stages::{Next, StageDone, StageFailure, StageOutcome};
use crate::store::{
    Actor, EventStatus, Fence, Job, JobFilter, JobUpdate, NewDecommission, NodeTransition,
    StageEvent, Store, StoreError,
};

/// What to run for one node.
#[derive(Debug, Clone, PartialEq)]
pub enum DecommissionJob {
    /// Start this decommission (or continue the node's open one of the same mode).
    New(NewDecommission),
    /// Continue a recorded job (pending, running, or moved by an operator's retry).
    Existing(Uuid),
}

#[derive(Debug, Clone, PartialEq)]
pub struct DecommissionWork {
    pub target: DecommissionTarget,
    pub job: DecommissionJob,
}

/// The decommission kind.
pub struct Decommission;

/// Runs decommission work; cheap to clone.
pub type DecommissionExecutor = Engine<Decommission>;

/// What the job services, the CLI and the API need to know of the kind.
pub(super) const INFO: KindInfo = KindInfo {
    kind: JobKind::Decommission,
    plural: "decommissions",
    // Resume: a running decommission whose executor was lost (001 §8: "draining ->
    // resume"); mark-manual freezes one for a human. Restart-clean is cancel, then the
    // manifests (or the API) ask again.
    actions: &[
        RecoveryAction::RetryStage,
        RecoveryAction::Resume,
        RecoveryAction::Cancel,
        RecoveryAction::MarkManualInterventionRequired,
    ],
    reason_example: "agent restarted on the host (ticket OPS-117)",
    column: Some(("MODE", mode_of)),
    request: request_lines,
    journal: journal_lines,
    extras,
    needs_manifests: false,
    cancel_with_store: Some(compensate_cancel_boxed),
};

fn mode(job: &Job) -> DecommissionMode {
    job.mode().unwrap_or(DecommissionMode::FullDecommission)
}

fn mode_of(job: &Job) -> String {
    job.mode().map(|m| m.to_string()).unwrap_or_default()
}

impl Kind for Decommission {
    const KIND: JobKind = JobKind::Decommission;
    type Stage = DecommissionStage;
    type Facts = DecommissionFacts;
    type Item = DecommissionWork;

    fn node(item: &DecommissionWork) -> (&str, &str) {
        (&item.target.site, &item.target.hostname)
    }

    /// The node's profile, when the manifests still resolve it; an agent-only decommission of
    /// a node no longer in them runs alone.
    fn limit(item: &DecommissionWork) -> Option<((String, String), usize)> {
        item.target.resolved.as_ref().map(profile_limit)
    }

    /// Soft resets and storage cleanups only talk to the node agent: they run for a node the
    /// manifests no longer have.
    fn continue_job(asked: Continuing<'_>) -> Result<DecommissionWork, String> {
        let Continuing { job, target, .. } = asked;
        let node_id = job.node_id.or(target.as_ref().and_then(|t| t.node_id));
        Ok(DecommissionWork {
            target: DecommissionTarget {
                node_id: node_id.ok_or("the decommission names no node")?,
                site: job.site.clone(),
                hostname: job.hostname.clone(),
                resolved: target,
            },
            job: DecommissionJob::Existing(job.id),
        })
    }

    fn take_up<'a>(run: &'a mut Run<'_, Self>) -> BoxFuture<'a, Result<Job, Stop>> {
        Box::pin(take_up(run))
    }

    fn run_stage<'a>(
        stage: DecommissionStage,
        pass: Pass<'a, Self>,
    ) -> BoxFuture<'a, StageOutcome> {
        Box::pin(async move {
            let target = &pass.item.target;
            let mut ctx = DecommissionCtx {
                env: pass.env,
                target,
                job: pass.job,
                facts: pass.facts,
                memory: pass.memory,
                journal: pass.journal,
                fence: pass.fence,
                timing: DecommissionTiming::for_target(target),
                now: pass.now,
            };
            run_stage(stage, &mut ctx).await
        })
    }

    /// The mode's next stage; a jump to a stage outside the mode (the onboarding's
    /// deploy-failure branch) is a failed redeploy.
    fn next(
        job: &Job,
        stage: DecommissionStage,
        done: &StageDone,
    ) -> Result<Option<DecommissionStage>, StageFailure> {
        let mode = mode(job);
        match done.next {
            Next::Complete => Ok(None),
            Next::Normal => Ok(mode.next_stage(stage)),
            Next::Jump(to) => match to.parse::<DecommissionStage>() {
                Ok(to) if mode.stages().contains(&to) => Ok(Some(to)),
                _ => Err(StageFailure::new(
                    FailureClass::DeployCloudInitFailure,
                    "redeploy_failed",
                    format!("the reimage's redeploy failed: {}", done.message),
                )
                .details(done.details.clone())
                .never_retry()
                .state(JobState::FailedManualIntervention)),
            },
        }
    }

    fn is_first(job: &Job, stage: DecommissionStage) -> bool {
        stage == mode(job).first_stage()
    }

    fn retry_budget(stage: DecommissionStage, class: FailureClass) -> Option<u32> {
        crate::stages::decommission::retry_budget(stage, class)
    }

    /// The mode's end state (001 §5.3): back in service (soft reset, reimage, storage cleanup),
    /// deleted (full decommission), retired (retire: already there).
    fn completion<'a>(
        run: &'a Run<'_, Self>,
        job: &'a Job,
    ) -> BoxFuture<'a, Result<Option<(NodeState, Owner)>, StoreError>> {
        Box::pin(async move {
            let node = run.store().node(run.item.target.node_id).await?;
            Ok(match mode(job) {
                DecommissionMode::FullDecommission => {
                    Some((NodeState::Deleted, Owner::DecommissionWorkflow))
                }
                DecommissionMode::Retire => None,
                // 001 §3.3 gives quarantined -> active to "explicit operator recovery": the
                // operator's request (API call or manifest change) is what runs this job.
                _ if node.status != NodeState::Active => Some((NodeState::Active, Owner::Operator)),
                _ => None,
            })
        })
    }

    fn compensate<'a>(
        run: &'a Run<'_, Self>,
        job: &'a Job,
        how: Compensation,
    ) -> BoxFuture<'a, Result<NodeOutcome, StoreError>> {
        Box::pin(async move {
            if how == Compensation::RestartClean {
                return Ok(NodeOutcome::Left {
                    reason: format!(
                        "decommission {} takes no restart-clean: cancel it and request it again",
                        job.id
                    ),
                });
            }
            compensate_cancel(run.store(), &run.env().actor, job, &run.fence()).await?;
            Ok(NodeOutcome::Left {
                reason: format!("decommission {} cancelled", job.id),
            })
        })
    }
}

async fn take_up(run: &mut Run<'_, Decommission>) -> Result<Job, Stop> {
    let job = match &run.item.job {
        DecommissionJob::Existing(id) => run.store().job(JobKind::Decommission, *id).await?,
        DecommissionJob::New(new) => match open_decommission(run.store(), new.node_id).await? {
            Some(job) if job.mode() == Some(new.mode) => job,
            Some(job) => {
                return Err(Stop::left(format!(
                    "a {} decommission ({}) of the node is {}: it ends first",
                    mode_of(&job),
                    job.id,
                    job.state
                )));
            }
            None => {
                let job = run.store().create_decommission(new).await?;
                run.report(
                    "-",
                    ProgressStatus::Begin,
                    &format!("{} {} created", new.mode, job.id),
                );
                job
            }
        },
    };
    if job.state == JobState::Compensating {
        // A cancel whose compensation did not finish: finish it.
        run.finish_compensation(&job).await?;
    }
    match job.state {
        JobState::Pending | JobState::Running => {
            retired_flag(run, &job).await?;
            Ok(job)
        }
        other => Err(Stop::left(format!(
            "decommission {} is {other} at {}: recover it with `metalform decommissions`",
            job.id, job.stage
        ))),
    }
}

/// Seed 004's flag, as the job's mode wants it before its first stage: a retirement flags the
/// node retired with the manifest's reason (nothing schedules it from now on, while cleaning
/// still runs), a reactivation clears the flag first ("set to False first"). Audited with the
/// job; nothing when the flag already says so.
async fn retired_flag(run: &Run<'_, Decommission>, job: &Job) -> Result<(), StoreError> {
    let target = &run.item.target;
    let reason = match mode(job) {
        DecommissionMode::Retire => Some(
            target
                .resolved
                .as_ref()
                .and_then(|t| t.node.retired_reason.clone())
                .or_else(|| match &job.spec {
                    crate::store::JobSpec::Decommission { reason, .. } => reason.clone(),
                    _ => None,
                })
                .unwrap_or_else(|| "retired by metalform".into()),
        ),
        DecommissionMode::Reactivate => None,
        _ => return Ok(()),
    };
    run.store()
        .set_retired_by_job(target.node_id, reason.as_deref(), &run.env().actor, job.id)
        .await?;
    Ok(())
}

/// The node's open decommission, if any.
pub async fn open_decommission(store: &Store, node: Uuid) -> Result<Option<Job>, StoreError> {
    Ok(store
        .list_jobs(
            JobKind::Decommission,
            &JobFilter {
                node_id: Some(node),
                open_only: true,
                ..JobFilter::default()
            },
        )
        .await?
        .into_iter()
        .next())
}

/// Carry out a cancel (the job is `compensating`): close the job's open agent tasks, give the
/// node back when nothing destructive happened (quarantined → active; draining → offline), and
/// end `cancelled`. MAAS is left as it is: a release that reached MAAS is not undone.
async fn compensate_cancel(
    store: &Store,
    actor: &Actor,
    job: &Job,
    fence: &Fence,
) -> Result<(), StoreError> {
    let facts = DecommissionFacts::from_details(&job.stage_details);
    let touched_maas =
        !facts.decommission.releases.is_empty() || facts.decommission.power_off.is_some();
    let mut update = JobUpdate::new(JobState::Cancelled);
    update.fence = Some(fence.clone());
    if let Some(node_id) = job.node_id {
        store
            .close_open_tasks(node_id, "the decommission was cancelled")
            .await?;
        let node = store.node(node_id).await?;
        let back = match node.status {
            NodeState::Quarantined if !touched_maas => Some((NodeState::Active, Owner::Operator)),
            NodeState::Draining => Some((NodeState::Offline, Owner::DecommissionWorkflow)),
            // A removal stopped half way keeps the identity retired (001 §3.2 removing ->
            // retired, "operator rollback"): `removing` needs a job that owns it.
            NodeState::Removing => Some((NodeState::Retired, Owner::DecommissionWorkflow)),
            _ => None,
        };
        // A retirement cancelled before MAAS was touched never happened: the flag goes too.
        if mode(job) == DecommissionMode::Retire && !touched_maas {
            store
                .set_retired_by_job(node_id, None, actor, job.id)
                .await?;
        }
        if let Some((to, by)) = back {
            let mut transition = NodeTransition::new(to, by, actor.clone());
            transition.reason = Some(format!("decommission {} cancelled", job.id));
            transition.fence = Some(fence.clone());
            update.node_transition = Some(transition);
        }
    }
    update.event = Some(StageEvent {
        stage: job.stage.clone(),
        attempt: job.attempt,
        status: EventStatus::Compensated,
        message: Some(if touched_maas {
            "cancelled; MAAS left as it is (a release that reached MAAS is not undone)".into()
        } else {
            "cancelled before MAAS was touched; the node is back in service".into()
        }),
        details: json!({}),
    });
    store
        .advance_job(JobKind::Decommission, job.id, &update)
        .await?;
    Ok(())
}

fn compensate_cancel_boxed<'a>(
    store: &'a Store,
    actor: &'a Actor,
    job: &'a Job,
    fence: &'a Fence,
) -> BoxFuture<'a, Result<(), StoreError>> {
    Box::pin(compensate_cancel(store, actor, job, fence))
}

/// What a decommission's detail view shows of its request.
fn request_lines(job: &Job) -> Vec<(&'static str, String)> {
    let mut lines = vec![("mode", mode_of(job))];
    if let crate::store::JobSpec::Decommission {
        erase,
        storage_cleanup,
        reason,
        ..
    } = &job.spec
    {
        if let Some(erase) = erase {
            lines.push(("erase", erase.clone()));
        }
        if let Some(scope) = storage_cleanup {
            lines.push(("storage cleanup", scope.clone()));
        }
        if let Some(reason) = reason {
            lines.push(("reason", reason.clone()));
        }
    }
    lines
}

/// What a decommission's detail view shows of its journal: releases and follow-ups.
fn journal_lines(job: &Job) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    let facts = DecommissionFacts::from_details(&job.stage_details);
    for release in &facts.decommission.releases {
        lines.push((
            "release",
            format!(
                "erase {}{}, {}",
                release.erase,
                if release.fallback { " (fallback)" } else { "" },
                if release.received {
                    "received by MAAS"
                } else {
                    "intent recorded, not confirmed"
                }
            ),
        ));
    }
    for note in facts.decommission.follow_ups {
        lines.push(("follow-up", note));
    }
    lines
}

/// Follow-up work recorded by the job (000 §5.8).
fn extras(job: &Job) -> serde_json::Map<String, serde_json::Value> {
    let follow_ups = DecommissionFacts::from_details(&job.stage_details)
        .decommission
        .follow_ups;
    [("follow_ups".to_owned(), json!(follow_ups))]
        .into_iter()
        .collect()
}

// ----- services (the admin API's node requests, and the decommission-named job services) ----

async fn request_runtime(
    store: &Store,
    node: Uuid,
    mode: DecommissionMode,
    storage_cleanup: Option<&str>,
    actor: &Actor,
    reason: Option<&str>,
) -> Result<Job, ServiceError> {
    if let Some(scope) = storage_cleanup
        && !matches!(scope, "none" | "local" | "weka" | "all")
    {
        return Err(ServiceError::Conflict {
            reason: jobs::ConflictReason::JobState,
            message: format!("storage_cleanup `{scope}`: expected none, local, weka or all"),
        });
    }
    let job = store
        .create_decommission(&NewDecommission {
            node_id: node,
            mode,
            erase: None,
            storage_cleanup: storage_cleanup.map(str::to_owned),
            reason: reason.map(str::to_owned),
            requested_by: Some(actor.name.clone()),
            plan_id: None,
        })
        .await?;
    store
        .audit(&crate::store::AuditEntry {
            actor: actor.clone(),
            reason: reason.map(str::to_owned),
            action: format!("decommission.request_{mode}"),
            subject_kind: "decommission".into(),
            subject_id: job.id.to_string(),
            prior_state: None,
            expected_target: Some(JobState::Pending.as_str().into()),
            correlation_ids: json!({"job_id": job.id, "node_id": node}),
            details: json!({"mode": mode, "storage_cleanup": storage_cleanup}),
        })
        .await?;
    Ok(job)
}

/// Soft reset (000 §5.2, tenant turnover), requested through the API: recorded `pending` and
/// audited; an executor (the daemon) runs it. `storage_cleanup`: none | local | weka | all.
pub async fn request_soft_reset(
    store: &Store,
    node: Uuid,
    storage_cleanup: Option<&str>,
    actor: &Actor,
    reason: Option<&str>,
) -> Result<Job, ServiceError> {
    let mode = DecommissionMode::SoftReset;
    request_runtime(store, node, mode, storage_cleanup, actor, reason).await
}

/// Storage-only cleanup (000 §5.5): cleanup + validation; `scope` local | weka | all.
pub async fn request_storage_cleanup(
    store: &Store,
    node: Uuid,
    scope: &str,
    actor: &Actor,
    reason: Option<&str>,
) -> Result<Job, ServiceError> {
    let (mode, scope) = (DecommissionMode::StorageCleanup, Some(scope));
    request_runtime(store, node, mode, scope, actor, reason).await
}

/// Retry a failed decommission from its failed stage (000 §5.7 `…/retry`): audited, the job
/// `running` at the next attempt; an executor then continues it.
pub async fn retry_decommission(
    store: &Store,
    job: Uuid,
    actor: &Actor,
    reason: Option<&str>,
) -> Result<Job, ServiceError> {
    Ok(store
        .recover_job(
            JobKind::Decommission,
            job,
            RecoveryAction::RetryStage,
            actor,
            reason,
        )
        .await?)
}

/// Cancel a decommission (000 §5.7 `…/cancel`, best effort): [`jobs::cancel_now`].
pub async fn cancel_decommission(
    store: &Store,
    job: Uuid,
    actor: &Actor,
    reason: Option<&str>,
    lease_ttl: Duration,
) -> Result<Job, ServiceError> {
    jobs::cancel_now(store, &INFO, job, actor, reason, lease_ttl).await
}

/// Decommissions, newest first (000 §5.7 `GET …/decommissions?node_id=…&status=…`).
pub async fn list_decommissions(
    store: &Store,
    filter: &JobFilter,
) -> Result<Vec<Job>, ServiceError> {
    Ok(store.list_jobs(JobKind::Decommission, filter).await?)
}

/// One decommission with its stage events and follow-ups (000 §5.7 `GET …/decommissions/{id}`).
pub async fn show_decommission(store: &Store, job: Uuid) -> Result<JobView, ServiceError> {
    jobs::show(store, &INFO, job).await
}
