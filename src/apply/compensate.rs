//! Compensation of an operator's cancel or restart-clean (seed 000 §4.6 "compensation on
//! cancel", §4.9 `cancel` / `restart_clean`), run under the node lease like any stage.
//!
//! | stage the job was in | cancel | restart clean |
//! |---|---|---|
//! | up to ensure_pxe_interface_auto | nothing (the machine stays as it is in MAAS) | forget the binding |
//! | render_cloud_init | expire the enrollment tokens | same, forget the binding |
//! | deploy_via_maas … recover_for_datasource_retry | release the machine back to Ready, expire tokens | same |
//! | hardware sync, enrollment | expire tokens; MAAS is left alone (the OS runs) | release to Ready, expire tokens |
//!
//! The node record stays (`enrolling`): a cancelled onboarding keeps the identity for the next
//! one, which recovers it (000 §4.6 "Duplicate: recover existing node_id").

use crate::lifecycle::MaasStatus;
use serde_json::json;
use uuid::Uuid;

use super::lease::NodeLease;
use super::progress::{ProgressEvent, ProgressStatus};
use super::runner::Shared;
use super::{NodeOutcome, NodeResult, NodeTarget};
use crate::lifecycle::{FailureClass, JobKind, JobState, OnboardingStage};
use crate::provider::maas::{MaasError, ReleaseParams};
use crate::stages::onboard::Facts;
use crate::store::{EventStatus, Job, JobFailure, JobUpdate, StageEvent, StoreError};

/// Which recovery action is being compensated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compensation {
    /// Stop and compensate; the job ends `cancelled`.
    Cancel,
    /// Compensate known progress and start again from the top (`pending`).
    RestartClean,
}

pub(super) async fn run(
    shared: &Shared,
    target: &NodeTarget,
    job_id: Uuid,
    kind: Compensation,
) -> NodeResult {
    let label = target.label();
    let outcome = match compensate(shared, target, job_id, kind).await {
        Ok(outcome) => outcome,
        Err(err) => NodeOutcome::Aborted {
            reason: err.to_string(),
        },
    };
    let (status, message) = match &outcome {
        NodeOutcome::Failed { message, .. } => (ProgressStatus::Failed, message.clone()),
        NodeOutcome::Left { reason } | NodeOutcome::Aborted { reason } => {
            (ProgressStatus::Left, reason.clone())
        }
        NodeOutcome::Converged { state } => (ProgressStatus::Converged, format!("job {state}")),
    };
    shared.progress.report(ProgressEvent {
        node: label.clone(),
        stage: "-".into(),
        status,
        message,
    });
    NodeResult {
        node: label,
        job_id: Some(job_id),
        outcome,
    }
}

async fn compensate(
    shared: &Shared,
    target: &NodeTarget,
    job_id: Uuid,
    kind: Compensation,
) -> Result<NodeOutcome, StoreError> {
    let env = &shared.env;
    let lease = match NodeLease::acquire_node(
        &env.store,
        target.site_name(),
        target.hostname(),
        &shared.options.holder,
        shared.options.lease_ttl,
    )
    .await
    {
        Ok(lease) => lease,
        Err(_) => {
            return Ok(NodeOutcome::Left {
                reason: "another executor holds the node; the job stays compensating and is \
                         compensated when that executor sees it"
                    .into(),
            });
        }
    };
    let result = compensate_under_lease(shared, target, job_id, kind, &lease).await;
    lease.release().await;
    result
}

pub(super) async fn compensate_under_lease(
    shared: &Shared,
    target: &NodeTarget,
    job_id: Uuid,
    kind: Compensation,
    lease: &NodeLease,
) -> Result<NodeOutcome, StoreError> {
    let env = &shared.env;
    let job = env.store.job(JobKind::Onboarding, job_id).await?;
    if job.state != JobState::Compensating {
        return Ok(NodeOutcome::Left {
            reason: format!("onboarding {job_id} is {}, not compensating", job.state),
        });
    }
    let facts = Facts::from_details(&job.stage_details);
    let stage: OnboardingStage = job.stage.parse()?;
    let mut actions: Vec<String> = Vec::new();
    let deploy_stage = matches!(
        stage,
        OnboardingStage::DeployViaMaas
            | OnboardingStage::WaitForDeployed
            | OnboardingStage::ClassifyDeployFailure
            | OnboardingStage::RecoverForDatasourceRetry
    );
    let ours = facts.deploy.is_some() || job.adopted;
    let release = ours
        && match kind {
            Compensation::Cancel => deploy_stage,
            Compensation::RestartClean => true,
        };
    if release && let Some(system_id) = facts.system_id.clone() {
        match release_to_ready(shared, target, &system_id).await {
            Ok(Some(what)) => actions.push(what),
            Ok(None) => {}
            Err(err) => {
                let message = format!("compensation failed: releasing {system_id}: {err}");
                let mut update = JobUpdate::new(JobState::FailedManualIntervention);
                update.failure = Some(JobFailure {
                    class: if err.is_retryable() {
                        FailureClass::UpstreamTransient
                    } else {
                        FailureClass::StateAmbiguity
                    },
                    code: "compensation_failed".into(),
                    message: message.clone(),
                    details: json!({"system_id": system_id, "compensation": format!("{kind:?}")}),
                });
                update.fence = Some(lease.fence());
                let failed = env
                    .store
                    .advance_job(JobKind::Onboarding, job_id, &update)
                    .await?;
                return Ok(NodeOutcome::Failed {
                    state: failed.state,
                    class: failed.failure_class.unwrap_or(FailureClass::StateAmbiguity),
                    code: "compensation_failed".into(),
                    message,
                });
            }
        }
    }
    if let Some(node) = job.node_id.or(facts.node_id) {
        let expired = env
            .store
            .extend_enrollment_tokens(node, chrono::Duration::zero())
            .await?;
        if expired > 0 {
            actions.push(format!("{expired} enrollment token(s) expired"));
        }
    }
    if actions.is_empty() {
        actions.push("nothing to undo at this stage".into());
    }
    let message = actions.join("; ");
    let event = StageEvent {
        stage: job.stage.clone(),
        attempt: job.attempt,
        status: EventStatus::Compensated,
        message: Some(message.clone()),
        details: json!({"compensation": format!("{kind:?}"), "actions": actions}),
    };
    let mut update = match kind {
        Compensation::Cancel => JobUpdate::new(JobState::Cancelled),
        Compensation::RestartClean => {
            let mut update = JobUpdate::new(JobState::Pending);
            update.stage = Some(OnboardingStage::first().as_str().into());
            update.attempt = Some(0);
            // Known progress is reset; only the node record is kept for the new start.
            let fresh = Facts {
                node_id: job.node_id.or(facts.node_id),
                ..Facts::default()
            };
            update.stage_details = Some(fresh.to_details());
            update
        }
    };
    update.event = Some(event);
    update.fence = Some(lease.fence());
    let done: Job = env
        .store
        .advance_job(JobKind::Onboarding, job_id, &update)
        .await?;
    shared.progress.report(ProgressEvent {
        node: target.label(),
        stage: job.stage.clone(),
        status: ProgressStatus::Succeeded,
        message: format!("compensated: {message}"),
    });
    Ok(NodeOutcome::Left {
        reason: format!("onboarding {job_id} {}: {message}", done.state),
    })
}

/// The compensation a `compensating` job owes: the last cancel or restart-clean in its audit
/// trail.
pub(super) async fn requested(
    store: &crate::store::Store,
    job_id: Uuid,
) -> Result<Option<Compensation>, StoreError> {
    let audit = store.audit_log("onboarding", &job_id.to_string()).await?;
    Ok(audit
        .iter()
        .rev()
        .find_map(|entry| match entry.action.as_str() {
            "onboarding.cancel" => Some(Compensation::Cancel),
            "onboarding.restart_clean" => Some(Compensation::RestartClean),
            _ => None,
        }))
}

/// Release a machine this job deployed back to Ready. `Ok(None)`: nothing to release.
async fn release_to_ready(
    shared: &Shared,
    target: &NodeTarget,
    system_id: &str,
) -> Result<Option<String>, MaasError> {
    let maas = shared
        .env
        .maas
        .client(&target.site)
        .await
        .map_err(|f| MaasError::Config { message: f.message })?;
    let machine = match maas.read_machine(system_id).await {
        Ok(machine) => machine,
        Err(MaasError::NotFound { .. }) => {
            return Ok(Some(format!("{system_id} is no longer in MAAS")));
        }
        Err(err) => return Err(err),
    };
    use MaasStatus as S;
    if !matches!(
        machine.status.known(),
        Some(S::Allocated | S::Deploying | S::Deployed | S::FailedDeployment)
    ) {
        return Ok(None);
    }
    maas.release(
        system_id,
        &ReleaseParams {
            comment: Some("metalform: onboarding compensation".into()),
            ..ReleaseParams::default()
        },
    )
    .await?;
    Ok(Some(format!(
        "{system_id} released back to Ready (was {})",
        machine.status_label()
    )))
}
