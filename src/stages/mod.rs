//! Stage actions (seed 000 §4.3, §4.6–§4.16; DESIGN.md §8 "executor steps are idempotent
//! ensure_* functions returning what they did; one pass is one try; the loop handles failure").
//!
//! A stage is an `ensure_*` function over a [`StageCtx`]: it refreshes what it needs from MAAS
//! and the store, does at most one step towards its goal, and returns a [`StageOutcome`] — done
//! (with what it did, and where to go next), wait and poll again, or failed with a failure class
//! (000 §4.7) stored as a field. The executor (`crate::apply`) owns the loop: journal writes,
//! retries with backoff, leases and concurrency. One folder per stage family: onboarding
//! (issue 5), decommission (issue 6) and Redfish provisioning (seed 003, `provision`).

pub mod decommission;
mod env;
pub mod onboard;
pub mod provision;

use std::time::Duration;

use serde_json::{Value, json};

use crate::lifecycle::{FailureClass, JobState, OnboardingStage, PolicyTimeout, StageName};
use crate::provider::bmc::BmcError;
use crate::provider::host::HostError;
use crate::provider::maas::MaasError;
use crate::secrets::SecretError;
use crate::store::StoreError;
pub use env::{
    Checkpoint, JournalFacts, MaasAccess, NodeMemory, Peers, SitePeers, SitePreflight,
    SlotStanding, StageClock, StageEnv, checkpoint,
};

/// Where the job goes after a stage is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The stage's normal successor in the kind's stage table.
    Normal,
    /// Another stage, by name (status-aware adoption, the deploy-failure branch, a re-render):
    /// the kind's table says whether it has that stage.
    Jump(&'static str),
    /// The job reached its goal.
    Complete,
}

/// A finished stage.
#[derive(Debug, Clone, PartialEq)]
pub struct StageDone {
    /// One line for the progress output and the event row.
    pub message: String,
    /// Stage-specific details for the event row (ids, counts, what was adopted).
    pub details: Value,
    pub next: Next,
    /// Nothing needed doing (the event row says `skipped`).
    pub skipped: bool,
}

/// Not there yet: poll again.
#[derive(Debug, Clone, PartialEq)]
pub struct StageWait {
    pub reason: String,
    /// Poll sooner or later than the executor's interval.
    pub poll: Option<Duration>,
    /// Poll sooner when this node's agent is heard from (its enrollment recorded by this
    /// process's listener); `poll` is then the slow fallback.
    pub wake: Option<crate::agent::AgentWatch>,
}

/// How the executor may retry a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The stage's bound from 000 §4.6 for this class ([`retry_budget`]).
    Budget,
    /// Stop now (the class or the situation allows no automatic retry).
    Never,
}

/// A failed stage pass (000 §4.7, §4.12).
#[derive(Debug, Clone, PartialEq)]
pub struct StageFailure {
    pub class: FailureClass,
    /// Stable code for the job row (`boot_disk_not_found`, `failed_enrollment`, …).
    pub code: String,
    pub message: String,
    /// Boxed: failures travel in `Result`s, which should stay small.
    pub details: Box<Value>,
    pub retry: Retry,
    /// The job state when no retry is left; `None`: the class's default (`FailureClass::handling`).
    pub state: Option<JobState>,
}

impl StageFailure {
    pub fn new(class: FailureClass, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            class,
            code: code.into(),
            message: message.into(),
            details: Box::new(json!({})),
            retry: if class.handling().retry == crate::lifecycle::RetryPolicy::Bounded {
                Retry::Budget
            } else {
                Retry::Never
            },
            state: None,
        }
    }

    pub fn details(mut self, details: Value) -> Self {
        self.details = Box::new(details);
        self
    }

    pub fn never_retry(mut self) -> Self {
        self.retry = Retry::Never;
        self
    }

    pub fn state(mut self, state: JobState) -> Self {
        self.state = Some(state);
        self
    }

    /// A policy timeout (000 §4.14): its class, job state and error code.
    pub fn timeout(timeout: PolicyTimeout, after: Duration, what: &str) -> Self {
        let outcome = timeout.outcome();
        Self {
            class: outcome.class,
            code: outcome.error_code.to_owned(),
            message: format!(
                "{what} within the {} timeout ({})",
                timeout.as_str().replace('_', " "),
                crate::model::duration::format(after)
            ),
            details: Box::new(json!({"timeout": timeout.as_str(), "after_secs": after.as_secs()})),
            retry: Retry::Never,
            state: Some(outcome.state),
        }
    }

    /// The job state this failure lands in once no retry is left.
    pub fn final_state(&self) -> JobState {
        self.state.unwrap_or(self.class.handling().exhausted)
    }

    /// Out-of-band change or unclear ownership (000 §4.11, §4.13): stop and let a human decide.
    pub fn ambiguity(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(FailureClass::StateAmbiguity, code, message)
    }

    /// A MAAS error, classified once (000 §4.7).
    pub fn maas(err: &MaasError) -> Self {
        let message = err.to_string();
        let details = json!({"maas_status": err.status(), "hint": err.hint()});
        let failure = match err {
            MaasError::Transient { .. } => {
                Self::new(FailureClass::UpstreamTransient, "maas_unavailable", message)
            }
            MaasError::Unauthorized { .. } => {
                Self::new(FailureClass::InputConfigError, "maas_unauthorized", message)
            }
            MaasError::Forbidden { .. } => Self::new(
                FailureClass::SiteCapabilityMissing,
                "maas_forbidden",
                message,
            ),
            MaasError::NotFound { .. } => Self::ambiguity("maas_not_found", message),
            MaasError::Conflict { .. } => Self::ambiguity("maas_state_conflict", message),
            MaasError::AddressUnavailable { .. } => Self::new(
                FailureClass::InputConfigError,
                "maas_address_unavailable",
                message,
            ),
            MaasError::BadRequest { .. } => {
                Self::new(FailureClass::InputConfigError, "maas_rejected", message)
            }
            MaasError::Decode { .. } => Self::new(
                FailureClass::SiteCapabilityMissing,
                "maas_unreadable_answer",
                message,
            ),
            MaasError::Config { .. } => {
                Self::new(FailureClass::InputConfigError, "maas_config", message)
            }
        };
        failure.details(details)
    }

    /// A secret-store error (Vault unreachable is transient; a missing secret is input).
    pub fn secret(err: &SecretError) -> Self {
        let details = json!({"hint": err.hint()});
        if err.is_transient() {
            Self::new(
                FailureClass::UpstreamTransient,
                "secrets_unavailable",
                err.to_string(),
            )
        } else {
            Self::new(
                FailureClass::InputConfigError,
                "secret_unusable",
                err.to_string(),
            )
        }
        .details(details)
    }

    /// A store error inside a stage: transient ones are retried, the rest are bugs or
    /// conflicts an operator must look at.
    pub fn store(err: &StoreError) -> Self {
        if err.is_transient() {
            Self::new(
                FailureClass::UpstreamTransient,
                "store_unavailable",
                err.to_string(),
            )
        } else {
            Self::ambiguity("store_conflict", err.to_string())
        }
    }

    /// A BMC error (000 §4.7 `bmc_power_failure`: bounded retry, then manual intervention).
    pub fn bmc(err: &BmcError) -> Self {
        let failure = Self::new(
            FailureClass::BmcPowerFailure,
            "bmc_power_failed",
            err.to_string(),
        )
        .details(json!({"hint": err.hint()}));
        if err.is_transient() {
            failure
        } else {
            failure.never_retry()
        }
    }

    /// A deployed host that cannot be reached or changed (000 §4.7
    /// `post_deploy_connectivity_failure`).
    pub fn host(err: &HostError) -> Self {
        Self::new(
            FailureClass::PostDeployConnectivityFailure,
            "host_unreachable",
            err.to_string(),
        )
    }
}

/// What one pass of a stage came to.
#[derive(Debug, Clone, PartialEq)]
pub enum StageOutcome {
    Done(StageDone),
    Wait(StageWait),
    Failed(StageFailure),
}

impl StageOutcome {
    pub fn done(message: impl Into<String>, details: Value) -> Self {
        StageOutcome::Done(StageDone {
            message: message.into(),
            details,
            next: Next::Normal,
            skipped: false,
        })
    }

    pub fn skipped(message: impl Into<String>) -> Self {
        StageOutcome::Done(StageDone {
            message: message.into(),
            details: json!({}),
            next: Next::Normal,
            skipped: true,
        })
    }

    pub fn jump(to: impl StageName, message: impl Into<String>, details: Value) -> Self {
        StageOutcome::Done(StageDone {
            message: message.into(),
            details,
            next: Next::Jump(to.name()),
            skipped: false,
        })
    }

    pub fn complete(message: impl Into<String>, details: Value) -> Self {
        StageOutcome::Done(StageDone {
            message: message.into(),
            details,
            next: Next::Complete,
            skipped: false,
        })
    }

    pub fn wait(reason: impl Into<String>) -> Self {
        StageOutcome::Wait(StageWait {
            reason: reason.into(),
            poll: None,
            wake: None,
        })
    }
}

impl From<StageFailure> for StageOutcome {
    fn from(failure: StageFailure) -> Self {
        StageOutcome::Failed(failure)
    }
}

/// How many automatic retries a stage gets for a class of failure (000 §4.6). `None`: retry
/// until the stage's policy timeout ends it (the hardware-sync stages).
pub fn retry_budget(stage: OnboardingStage, class: FailureClass) -> Option<u32> {
    use FailureClass as F;
    use OnboardingStage as O;
    match (stage, class) {
        (_, F::UpstreamTransient) => Some(match stage {
            O::DeployViaMaas => 2,
            O::RecoverForDatasourceRetry => 1,
            _ => 3,
        }),
        (O::EnsureHardwareSyncConfigured | O::WaitForHardwareSyncHealthy, _) => None,
        (O::CreateOrFindInMaas, F::BmcPowerFailure | F::PxeDiscoveryFailure) => Some(3),
        (O::EnsurePxeInterfaceAuto, _) => Some(1),
        (O::DeployViaMaas, _) => Some(2),
        (O::RecoverForDatasourceRetry, _) => Some(1),
        (O::WaitForAgentEnrollment, _) => Some(1),
        _ => Some(3),
    }
}

/// Bounded text for job rows and events (MAAS texts can be long).
pub fn bounded(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(max).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_table_follows_000_4_6() {
        use FailureClass as F;
        use OnboardingStage as O;
        assert_eq!(
            retry_budget(O::LoadSiteConfig, F::UpstreamTransient),
            Some(3)
        );
        assert_eq!(
            retry_budget(O::DeployViaMaas, F::UpstreamTransient),
            Some(2)
        );
        assert_eq!(
            retry_budget(O::RecoverForDatasourceRetry, F::UpstreamTransient),
            Some(1)
        );
        assert_eq!(
            retry_budget(
                O::EnsureHardwareSyncConfigured,
                F::PostDeployConnectivityFailure
            ),
            None
        );
        assert_eq!(
            retry_budget(O::EnsurePxeInterfaceAuto, F::HardwareMismatch),
            Some(1)
        );
    }

    #[test]
    fn maas_errors_are_classified_once() {
        let conflict = MaasError::Conflict {
            operation: "deploy",
            message: "Can't deploy".into(),
        };
        let failure = StageFailure::maas(&conflict);
        assert_eq!(failure.class, FailureClass::StateAmbiguity);
        assert_eq!(failure.final_state(), JobState::FailedManualIntervention);
        assert_eq!(failure.retry, Retry::Never);
        let timeout = StageFailure::timeout(
            PolicyTimeout::Enrollment,
            Duration::from_secs(1800),
            "the node agent did not enroll",
        );
        assert_eq!(timeout.code, "failed_enrollment");
        assert_eq!(
            timeout.message,
            "the node agent did not enroll within the enrollment timeout (30m)"
        );
        assert_eq!(bounded("abcdef", 3), "abc…");
    }
}
