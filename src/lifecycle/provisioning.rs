//! The Redfish provisioning job (seed 003 "Job State Machine", "Worker Orchestration Flow"):
//! the seed's job status and its transitions, and the provisioning kind's stage table.
//!
//! A provisioning job carries two states. `status` is the seed's: queued → provisioning →
//! succeeded | failed → complete, plus any → failed on a terminal error; it is what the jobs
//! API shows and what the maintenance OS's webhook moves. The job engine's own job state
//! (pending, running, completed, …) runs beside it like for every kind. [`status_for`] says
//! which seed status an engine state implies when the engine moves, so the two never disagree.

use super::job::JobState;
use super::stages::StageName;

named_enum! {
    "provisioning status",
    /// `provisioning_jobs.status` (seed 003 "States").
    pub enum ProvisioningStatus {
        /// Persisted, not yet picked by a worker.
        Queued = "queued",
        /// A worker holds the job: the task ISO, the virtual media, the reset, the wait for the
        /// maintenance OS.
        Provisioning = "provisioning",
        /// The maintenance OS reported success; cleanup is due.
        Succeeded = "succeeded",
        /// The maintenance OS reported a failure, the controller gave up (webhook timeout, a
        /// terminal error); cleanup is due.
        Failed = "failed",
        /// Cleanup finished (media ejected, host rebooted into its installed OS).
        Complete = "complete",
    }
}

named_enum! {
    "provisioning stage",
    /// The provisioning kind's stage table (seed 003 "Worker Orchestration Flow" 2–5).
    pub enum ProvisioningStage {
        /// Build the task ISO and record its size and sha256.
        BuildTaskIso = "build_task_iso",
        /// Find the system and its virtual media; eject images that are not this job's.
        PrepareMedia = "prepare_media",
        /// CD1: the maintenance OS image.
        MountMaintenance = "mount_maintenance",
        /// CD2: the job's task ISO, by a signed URL valid for the whole job.
        MountTask = "mount_task",
        /// One-time boot from the virtual CD.
        BootFromCd = "boot_from_cd",
        /// Graceful restart, forced after a grace period.
        ResetHost = "reset_host",
        /// Until the maintenance OS reports, or the stuck timeout fails the job.
        AwaitWebhook = "await_webhook",
        /// Cleanup: both drives emptied (best effort).
        EjectMedia = "eject_media",
        /// Cleanup: the host restarted into its installed OS (best effort).
        RebootHost = "reboot_host",
    }
}

impl StageName for ProvisioningStage {
    fn name(self) -> &'static str {
        self.as_str()
    }
}

impl ProvisioningStage {
    pub fn first() -> Self {
        ProvisioningStage::BuildTaskIso
    }

    /// The next stage; `None` after the last.
    pub fn next(self) -> Option<Self> {
        let at = Self::ALL.iter().position(|s| *s == self)?;
        Self::ALL.get(at + 1).copied()
    }

    /// The first cleanup stage: where a reported outcome or a failure leads.
    pub fn cleanup() -> Self {
        ProvisioningStage::EjectMedia
    }

    /// Cleanup stages run after the outcome is known; they are best effort and never fail
    /// the job (seed 003 "Cleanup: best-effort").
    pub fn is_cleanup(self) -> bool {
        matches!(
            self,
            ProvisioningStage::EjectMedia | ProvisioningStage::RebootHost
        )
    }
}

impl ProvisioningStatus {
    /// The job still owns its server: at most one such job per server serial.
    pub fn is_active(self) -> bool {
        self != ProvisioningStatus::Complete
    }

    /// The outcome is known (reported or decided); cleanup is what remains.
    pub fn has_outcome(self) -> bool {
        matches!(
            self,
            ProvisioningStatus::Succeeded | ProvisioningStatus::Failed
        )
    }

    /// The seed's transitions: queued → provisioning → succeeded | failed → complete, and
    /// queued | provisioning → failed on a terminal error.
    pub fn successors(self) -> &'static [ProvisioningStatus] {
        use ProvisioningStatus as S;
        match self {
            S::Queued => &[S::Provisioning, S::Failed],
            S::Provisioning => &[S::Succeeded, S::Failed],
            S::Succeeded | S::Failed => &[S::Complete],
            S::Complete => &[],
        }
    }

    pub fn can_move(self, to: ProvisioningStatus) -> bool {
        self.successors().contains(&to)
    }

    /// The statuses that move to `to`.
    pub fn predecessors(to: ProvisioningStatus) -> Vec<ProvisioningStatus> {
        Self::ALL
            .iter()
            .copied()
            .filter(|s| s.can_move(to))
            .collect()
    }

    /// The statuses a job may have while `stage` runs: the provisioning stages before the
    /// outcome, the cleanup stages after it.
    pub fn during(stage: ProvisioningStage) -> &'static [ProvisioningStatus] {
        use ProvisioningStatus as S;
        if stage.is_cleanup() {
            &[S::Succeeded, S::Failed]
        } else {
            &[S::Provisioning, S::Succeeded, S::Failed]
        }
    }
}

/// The seed status an engine move to `state` implies, from `current`: completion is
/// `complete`; a job the engine gives up on without cleanup is `failed`; other moves leave the
/// status to the lease, the webhook and the stages.
pub fn status_for(state: JobState, current: ProvisioningStatus) -> ProvisioningStatus {
    use ProvisioningStatus as S;
    match state {
        JobState::Completed | JobState::Reconciled | JobState::Cancelled => S::Complete,
        JobState::FailedRetryable | JobState::FailedManualIntervention
            if matches!(current, S::Queued | S::Provisioning) =>
        {
            S::Failed
        }
        _ => current,
    }
}

/// What the maintenance OS reported on the status webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookReport {
    Success,
    Failed { step: Option<String> },
}

impl WebhookReport {
    /// The status the report moves a provisioning job to.
    pub fn status(&self) -> ProvisioningStatus {
        match self {
            WebhookReport::Success => ProvisioningStatus::Succeeded,
            WebhookReport::Failed { .. } => ProvisioningStatus::Failed,
        }
    }

    pub fn failed_step(&self) -> Option<&str> {
        match self {
            WebhookReport::Success => None,
            WebhookReport::Failed { step } => step.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProvisioningStatus as S;

    #[test]
    fn the_seed_transitions_and_nothing_else() {
        let mut moves = Vec::new();
        for from in S::ALL {
            for to in S::ALL {
                if from.can_move(*to) {
                    moves.push(format!("{from}->{to}"));
                }
            }
        }
        assert_eq!(
            moves,
            [
                "queued->provisioning",
                "queued->failed",
                "provisioning->succeeded",
                "provisioning->failed",
                "succeeded->complete",
                "failed->complete",
            ]
        );
        assert_eq!(S::predecessors(S::Failed), [S::Queued, S::Provisioning]);
        assert!(!S::Complete.is_active());
        assert!(S::Failed.is_active() && S::Failed.has_outcome());
    }

    #[test]
    fn engine_moves_imply_seed_statuses() {
        assert_eq!(status_for(JobState::Completed, S::Succeeded), S::Complete);
        assert_eq!(status_for(JobState::Completed, S::Failed), S::Complete);
        assert_eq!(status_for(JobState::Running, S::Succeeded), S::Succeeded);
        assert_eq!(
            status_for(JobState::FailedManualIntervention, S::Provisioning),
            S::Failed
        );
        assert_eq!(
            status_for(JobState::FailedManualIntervention, S::Succeeded),
            S::Succeeded
        );
    }

    #[test]
    fn stages_run_in_order_and_cleanup_comes_last() {
        let mut stage = ProvisioningStage::first();
        let mut order = vec![stage];
        while let Some(next) = stage.next() {
            order.push(next);
            stage = next;
        }
        assert_eq!(order, ProvisioningStage::ALL);
        assert_eq!(
            order.iter().position(|s| s.is_cleanup()),
            order
                .iter()
                .position(|s| *s == ProvisioningStage::cleanup())
        );
        assert_eq!(
            S::during(ProvisioningStage::RebootHost),
            [S::Succeeded, S::Failed]
        );
    }
}
