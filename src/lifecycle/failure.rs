//! Failure taxonomy (seed 000 §4.7), timeout policy (§4.14), operator recovery actions (§4.9,
//! 001 §8) and the recommended next action shown in the lifecycle detail view (001 §9.2,
//! 000 §4.12).
//!
//! Failure classes are stored as a field of the job, never inferred from message text.

use super::job::JobState;
use super::stages::OnboardingStage;

named_enum! {
    "failure class",
    pub enum FailureClass {
        InputConfigError = "input_config_error",
        SiteCapabilityMissing = "site_capability_missing",
        UpstreamTransient = "upstream_transient",
        BmcPowerFailure = "bmc_power_failure",
        PxeDiscoveryFailure = "pxe_discovery_failure",
        HardwareMismatch = "hardware_mismatch",
        DeployCloudInitFailure = "deploy_cloud_init_failure",
        PostDeployConnectivityFailure = "post_deploy_connectivity_failure",
        HardwareSyncFailure = "hardware_sync_failure",
        AgentEnrollmentFailure = "agent_enrollment_failure",
        StateAmbiguity = "state_ambiguity",
    }
}

named_enum! {
    "retry policy",
    /// How much automatic retrying a failure class gets (000 §4.7 "default handling").
    pub enum RetryPolicy {
        /// Fail at once; no automatic retry.
        None = "none",
        /// Bounded automatic retry (the stage's own bound, 000 §4.6).
        Bounded = "bounded",
    }
}

/// The default handling of a failure class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FailureHandling {
    pub retry: RetryPolicy,
    /// The job state once automatic retries are exhausted (or at once for `RetryPolicy::None`).
    pub exhausted: JobState,
}

impl FailureClass {
    /// 000 §4.7. Input and capability errors are `failed_retryable` with no automatic retry:
    /// once the operator fixes the manifest or the site, resuming is safe. Hardware mismatch and
    /// ambiguity stop automation; the bounded classes end in manual intervention when their
    /// bound is spent, except transient upstream errors, which stay retryable.
    pub fn handling(self) -> FailureHandling {
        use FailureClass as F;
        let (retry, exhausted) = match self {
            F::InputConfigError | F::SiteCapabilityMissing => {
                (RetryPolicy::None, JobState::FailedRetryable)
            }
            F::UpstreamTransient => (RetryPolicy::Bounded, JobState::FailedRetryable),
            F::HardwareMismatch | F::StateAmbiguity => {
                (RetryPolicy::None, JobState::FailedManualIntervention)
            }
            F::BmcPowerFailure
            | F::PxeDiscoveryFailure
            | F::DeployCloudInitFailure
            | F::PostDeployConnectivityFailure
            | F::HardwareSyncFailure
            | F::AgentEnrollmentFailure => {
                (RetryPolicy::Bounded, JobState::FailedManualIntervention)
            }
        };
        FailureHandling { retry, exhausted }
    }

    /// The job state after a failure of this class, given whether automatic retries remain.
    pub fn job_state_after(self, retries_left: bool) -> JobState {
        let handling = self.handling();
        if retries_left && handling.retry == RetryPolicy::Bounded {
            JobState::Running
        } else {
            handling.exhausted
        }
    }
}

named_enum! {
    "policy timeout",
    /// The policy timeouts of 000 §4.14 (profile `timeouts.*`).
    pub enum PolicyTimeout {
        Discovery = "discovery",
        Commission = "commission",
        Deploy = "deploy",
        HwSyncSeed = "hw_sync_seed",
        HwSyncHealth = "hw_sync_health",
        Enrollment = "enrollment",
    }
}

/// What a policy timeout turns into (000 §4.14: a failure class, a job state and an action).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TimeoutOutcome {
    pub class: FailureClass,
    pub state: JobState,
    /// Stable error code for the job row (the seed's failed_* names).
    pub error_code: &'static str,
    pub action: RecoveryAction,
}

impl PolicyTimeout {
    /// The stage whose wait the timeout bounds.
    pub fn stage(self) -> OnboardingStage {
        match self {
            PolicyTimeout::Discovery => OnboardingStage::CreateOrFindInMaas,
            PolicyTimeout::Commission => OnboardingStage::WaitForReady,
            PolicyTimeout::Deploy => OnboardingStage::WaitForDeployed,
            PolicyTimeout::HwSyncSeed => OnboardingStage::EnsureHardwareSyncConfigured,
            PolicyTimeout::HwSyncHealth => OnboardingStage::WaitForHardwareSyncHealthy,
            PolicyTimeout::Enrollment => OnboardingStage::WaitForAgentEnrollment,
        }
    }

    /// 000 §4.6 + §4.14. A commission timeout is a machine that never came back from its PXE
    /// boot into the commissioning environment; MAAS keeps the machine as-is, so resuming
    /// re-reads MAAS and waits again. A deploy timeout compensates by releasing to Ready and
    /// stays retryable. Post-deploy timeouts leave MAAS alone and need a human.
    pub fn outcome(self) -> TimeoutOutcome {
        use FailureClass as F;
        use JobState as J;
        let (class, state, error_code, action) = match self {
            PolicyTimeout::Discovery => (
                F::PxeDiscoveryFailure,
                J::FailedManualIntervention,
                "failed_discovery_timeout",
                RecoveryAction::Resume,
            ),
            PolicyTimeout::Commission => (
                F::PxeDiscoveryFailure,
                J::FailedRetryable,
                "failed_commission_timeout",
                RecoveryAction::Resume,
            ),
            PolicyTimeout::Deploy => (
                F::DeployCloudInitFailure,
                J::FailedRetryable,
                "failed_deploy_timeout",
                RecoveryAction::Rerun,
            ),
            PolicyTimeout::HwSyncSeed => (
                F::HardwareSyncFailure,
                J::FailedManualIntervention,
                "failed_hw_sync_seed",
                RecoveryAction::RetryStage,
            ),
            PolicyTimeout::HwSyncHealth => (
                F::HardwareSyncFailure,
                J::FailedManualIntervention,
                "failed_hw_sync_health",
                RecoveryAction::RetryStage,
            ),
            PolicyTimeout::Enrollment => (
                F::AgentEnrollmentFailure,
                J::FailedManualIntervention,
                "failed_enrollment",
                RecoveryAction::AdoptObservedState,
            ),
        };
        TimeoutOutcome {
            class,
            state,
            error_code,
            action,
        }
    }
}

named_enum! {
    "recovery action",
    /// Operator recovery actions (000 §4.9, 001 §8). Distinct operations, not synonyms.
    pub enum RecoveryAction {
        /// Rerun only the current failed stage.
        RetryStage = "retry_stage",
        /// Continue from the last safe checkpoint (also: requeue a lost lifecycle task).
        Resume = "resume",
        /// Re-enter from the top with status-aware adoption.
        Rerun = "rerun",
        /// Compensate/reset known progress, then start again.
        RestartClean = "restart_clean",
        /// Stop and compensate where possible.
        Cancel = "cancel",
        /// Accept externally advanced state and continue/finish.
        AdoptObservedState = "adopt_observed_state",
        /// Freeze automation until a human resolves the condition.
        MarkManualInterventionRequired = "mark_manual_intervention_required",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{action} does not apply to a {from} job (applies to: {applies})")]
pub struct RecoveryError {
    pub action: RecoveryAction,
    pub from: JobState,
    pub applies: String,
}

impl RecoveryAction {
    /// The action's name in routes and commands (000 §4.15 `…/{id}/restart-clean`).
    pub fn route(self) -> &'static str {
        match self {
            RecoveryAction::RetryStage => "retry",
            RecoveryAction::Resume => "resume",
            RecoveryAction::Rerun => "rerun",
            RecoveryAction::RestartClean => "restart-clean",
            RecoveryAction::Cancel => "cancel",
            RecoveryAction::AdoptObservedState => "adopt",
            RecoveryAction::MarkManualInterventionRequired => "mark-manual-intervention",
        }
    }

    /// The job states the action applies to.
    pub fn applies_to(self) -> &'static [JobState] {
        use JobState as J;
        match self {
            RecoveryAction::RetryStage | RecoveryAction::Rerun | RecoveryAction::RestartClean => {
                &[J::FailedRetryable, J::FailedManualIntervention]
            }
            // Resume also covers a running job whose owning task was lost or stalled (001 §8).
            RecoveryAction::Resume => {
                &[J::Running, J::FailedRetryable, J::FailedManualIntervention]
            }
            RecoveryAction::Cancel => &[
                J::Pending,
                J::Running,
                J::FailedRetryable,
                J::FailedManualIntervention,
            ],
            RecoveryAction::AdoptObservedState => {
                &[J::Running, J::FailedRetryable, J::FailedManualIntervention]
            }
            // Idempotent on an already frozen job.
            RecoveryAction::MarkManualInterventionRequired => &[
                J::Pending,
                J::Running,
                J::FailedRetryable,
                J::FailedManualIntervention,
            ],
        }
    }

    /// The job state the action leads to (the "expected target" recorded in the audit log).
    /// Cancel and restart-clean go through `compensating` (which then ends `cancelled` or back
    /// at `pending`); adopt continues `running` and the job ends `reconciled`
    /// ([`JobState::on_success`] with `ends_reconciled = true`).
    pub fn target(self, from: JobState) -> Result<JobState, RecoveryError> {
        if !self.applies_to().contains(&from) {
            let applies: Vec<&str> = self.applies_to().iter().map(|s| s.as_str()).collect();
            return Err(RecoveryError {
                action: self,
                from,
                applies: applies.join(", "),
            });
        }
        Ok(match self {
            RecoveryAction::RetryStage
            | RecoveryAction::Resume
            | RecoveryAction::Rerun
            | RecoveryAction::AdoptObservedState => JobState::Running,
            RecoveryAction::RestartClean | RecoveryAction::Cancel => JobState::Compensating,
            RecoveryAction::MarkManualInterventionRequired => JobState::FailedManualIntervention,
        })
    }
}

/// The recommended next operator action for a job (001 §9.2, 000 §4.12).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Recommendation {
    /// The recovery action to take, if one applies.
    pub action: Option<RecoveryAction>,
    /// One line for the operator: what to check or fix, then what to run.
    pub text: String,
}

/// Recommend the next operator action for (job state, stage, failure class).
pub fn recommend(
    state: JobState,
    stage: Option<&str>,
    class: Option<FailureClass>,
) -> Recommendation {
    use FailureClass as F;
    use JobState as J;
    let stage_text = stage.unwrap_or("the current stage");
    let (action, text): (Option<RecoveryAction>, String) = match state {
        J::Pending | J::Running => (None, "none: the job is in progress".to_owned()),
        J::Compensating => (None, "none: compensation is in progress".to_owned()),
        J::Completed | J::Reconciled => (None, "none".to_owned()),
        J::Cancelled => (
            None,
            "none: the job was cancelled; the next apply starts a new one if the manifests still ask for it".to_owned(),
        ),
        J::FailedRetryable | J::FailedManualIntervention => match class {
            None => (
                Some(RecoveryAction::Resume),
                format!("inspect the error of {stage_text}, then resume"),
            ),
            Some(F::InputConfigError) => (
                Some(RecoveryAction::Rerun),
                "fix the manifest (site, profile or node) the error names, then rerun".to_owned(),
            ),
            Some(F::SiteCapabilityMissing) => (
                Some(RecoveryAction::Resume),
                "enable the missing site capability or policy (MAAS feature, profile field), then resume".to_owned(),
            ),
            Some(F::UpstreamTransient) => (
                Some(RecoveryAction::Resume),
                "check that MAAS/Vault are reachable, then resume".to_owned(),
            ),
            Some(F::BmcPowerFailure) => (
                Some(RecoveryAction::Resume),
                "check the BMC address and power credentials (ipmitool from the MAAS rack), then resume".to_owned(),
            ),
            Some(F::PxeDiscoveryFailure) => (
                Some(RecoveryAction::Resume),
                "check PXE wiring, the boot order and the VLAN of the PXE interface, then resume".to_owned(),
            ),
            Some(F::HardwareMismatch) => (
                Some(RecoveryAction::Rerun),
                format!(
                    "the hardware does not match the profile ({stage_text}): fix the machine or the profile (e.g. storage.bootDisk.match), then rerun"
                ),
            ),
            Some(F::DeployCloudInitFailure) => (
                Some(RecoveryAction::Rerun),
                "read the MAAS deployment log and the rendered cloud-init, fix the cause, then rerun (the machine is released to Ready first)".to_owned(),
            ),
            Some(F::PostDeployConnectivityFailure) => (
                Some(RecoveryAction::RetryStage),
                "check that the deployed host is reachable on its deploy interface (SSH), then retry the stage".to_owned(),
            ),
            Some(F::HardwareSyncFailure) => (
                Some(RecoveryAction::RetryStage),
                "check maas-agent and the hardware-sync timer on the host and the machine token in MAAS, then retry the stage".to_owned(),
            ),
            Some(F::AgentEnrollmentFailure) => (
                Some(RecoveryAction::AdoptObservedState),
                "check the node agent on the host (can it reach the enrollment URL?); if it has enrolled since, adopt, else retry the stage".to_owned(),
            ),
            Some(F::StateAmbiguity) => (
                Some(RecoveryAction::AdoptObservedState),
                "compare MAAS with the job (who changed what?); adopt the observed state if it is right, else restart clean".to_owned(),
            ),
        },
    };
    Recommendation { action, text }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_actions_apply_only_where_the_seed_says() {
        assert_eq!(
            RecoveryAction::Cancel.target(JobState::Running),
            Ok(JobState::Compensating)
        );
        assert_eq!(
            RecoveryAction::RetryStage
                .target(JobState::Completed)
                .unwrap_err()
                .to_string(),
            "retry_stage does not apply to a completed job (applies to: failed_retryable, failed_manual_intervention)"
        );
        for action in RecoveryAction::ALL {
            for from in action.applies_to() {
                let to = action.target(*from).unwrap();
                assert!(from.check_move(to).is_ok(), "{action}: {from} -> {to}");
            }
        }
    }

    #[test]
    fn failure_classes_decide_job_state() {
        assert_eq!(
            FailureClass::HardwareMismatch.job_state_after(true),
            JobState::FailedManualIntervention
        );
        assert_eq!(
            FailureClass::UpstreamTransient.job_state_after(true),
            JobState::Running
        );
        assert_eq!(
            FailureClass::AgentEnrollmentFailure.job_state_after(false),
            JobState::FailedManualIntervention
        );
        for timeout in PolicyTimeout::ALL {
            let outcome = timeout.outcome();
            assert!(outcome.state.is_failed());
            assert!(outcome.action.applies_to().contains(&outcome.state));
        }
    }

    #[test]
    fn every_failed_combination_recommends_an_applicable_action() {
        for state in [
            JobState::FailedRetryable,
            JobState::FailedManualIntervention,
        ] {
            for class in FailureClass::ALL {
                let rec = recommend(state, Some("configure_storage"), Some(*class));
                let action = rec.action.expect("failed jobs get an action");
                assert!(action.applies_to().contains(&state));
            }
        }
        assert_eq!(recommend(JobState::Running, None, None).action, None);
    }
}
