//! Operator recovery actions on a job of any kind (seed 000 §4.9, §4.12, §4.15, §5.8): the one
//! library path behind `metalform jobs retry|resume|…` (and its `onboardings` and
//! `decommissions` aliases) and the admin API's `POST /api/v1/admin/{kind}s/{id}/{action}`.
//!
//! An action is two steps. [`record`] is the audited state change (the store writes the job
//! move and the audit row in one transaction, or refuses and changes nothing); it is quick and
//! the API answers after it. `Engine::carry_out` (`kinds`) then does what the action needs — the
//! stages for retry, resume, rerun and adopt, the compensation for cancel and restart-clean,
//! nothing for mark-manual — and may take as long as the stages do.

use uuid::Uuid;

use super::engine::Compensation;
use crate::lifecycle::{JobKind, JobState, RecoveryAction};
use crate::store::{Actor, Job, Store, StoreError};

/// What executing a recorded action takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Execution {
    /// Recorded only (mark-manual): automation stays frozen.
    Nothing,
    /// Run the job's stages from where the action moved it.
    Continue,
    /// Finish a cancel or restart-clean whose run stopped (a resume of a `compensating` job:
    /// it was audited when it was requested).
    FinishCompensation,
    /// Compensate, then (restart-clean) run again from the top.
    Compensate(Compensation),
}

/// A recorded recovery action.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovery {
    pub action: RecoveryAction,
    /// The job before the action.
    pub prior: Job,
    /// The job as the action left it (the same as `prior` for [`Execution::FinishCompensation`]).
    pub job: Job,
    pub execution: Execution,
}

/// Record (and audit) `action` on job `job_id` of `kind`. A refusal — the action does not
/// apply to the job's state, the job is unknown — changes nothing.
pub async fn record(
    store: &Store,
    kind: JobKind,
    job_id: Uuid,
    action: RecoveryAction,
    actor: &Actor,
    reason: &str,
) -> Result<Recovery, StoreError> {
    let prior = store.job(kind, job_id).await?;
    if action == RecoveryAction::Resume && prior.state == JobState::Compensating {
        return Ok(Recovery {
            action,
            job: prior.clone(),
            prior,
            execution: Execution::FinishCompensation,
        });
    }
    let job = store
        .recover_job(kind, job_id, action, actor, Some(reason))
        .await?;
    let execution = match action {
        RecoveryAction::MarkManualInterventionRequired => Execution::Nothing,
        RecoveryAction::Cancel => Execution::Compensate(Compensation::Cancel),
        RecoveryAction::RestartClean => Execution::Compensate(Compensation::RestartClean),
        RecoveryAction::RetryStage
        | RecoveryAction::Resume
        | RecoveryAction::Rerun
        | RecoveryAction::AdoptObservedState => Execution::Continue,
    };
    Ok(Recovery {
        action,
        prior,
        job,
        execution,
    })
}
