//! Operator recovery actions on an onboarding (seed 000 §4.9, §4.12, §4.15): the one library
//! path behind `metalform onboardings retry|resume|…` and the admin API's
//! `POST /api/v1/admin/onboardings/{id}/{action}`.
//!
//! An action is two steps. [`record`] is the audited state change (the store writes the job
//! move and the audit row in one transaction, or refuses and changes nothing); it is quick and
//! the API answers after it. [`Executor::carry_out`] then does what the action needs — the
//! stages for retry, resume, rerun and adopt, the compensation for cancel and restart-clean,
//! nothing for mark-manual — and may take as long as the stages do.

use uuid::Uuid;

use super::{ApplyReport, Compensation, Executor, NodeTarget, Work, WorkItem};
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

/// Record (and audit) `action` on onboarding `job_id`. A refusal — the action does not apply
/// to the job's state, the job is unknown — changes nothing.
pub async fn record(
    store: &Store,
    job_id: Uuid,
    action: RecoveryAction,
    actor: &Actor,
    reason: &str,
) -> Result<Recovery, StoreError> {
    let prior = store.job(JobKind::Onboarding, job_id).await?;
    if action == RecoveryAction::Resume && prior.state == JobState::Compensating {
        return Ok(Recovery {
            action,
            job: prior.clone(),
            prior,
            execution: Execution::FinishCompensation,
        });
    }
    let job = store
        .recover_job(JobKind::Onboarding, job_id, action, actor, Some(reason))
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

impl Executor {
    /// Carry out a recorded action for its node (`target`): what [`Recovery::execution`] says.
    pub async fn carry_out(&self, target: NodeTarget, recovery: &Recovery) -> ApplyReport {
        let job_id = recovery.job.id;
        let item = |work| WorkItem::new(target.clone(), work);
        match recovery.execution {
            Execution::Nothing => ApplyReport::default(),
            Execution::Continue => self.run(vec![item(Work::Continue { job_id })]).await,
            Execution::FinishCompensation => self.run(vec![item(Work::Resume { job_id })]).await,
            Execution::Compensate(kind) => {
                let compensated = self.compensate(&target, job_id, kind).await;
                let pending = self
                    .env()
                    .store
                    .job(JobKind::Onboarding, job_id)
                    .await
                    .is_ok_and(|job| job.state == JobState::Pending);
                if kind == Compensation::RestartClean && pending {
                    self.run(vec![item(Work::Continue { job_id })]).await
                } else {
                    ApplyReport {
                        results: vec![compensated],
                    }
                }
            }
        }
    }
}
