//! Workflow/job state (seed 001 §4.1, §5.1; seed 000 §4.8) and its mapping onto the coarse
//! node state (001 §4.3, §5.3).
//!
//! Onboardings and decommissions share one job-state model. A job state describes the job; the
//! mapping says which coarse node states are consistent with it while the job is the node's
//! current one, and the store refuses a write that would leave the pair inconsistent.

use super::node_state::NodeState;

named_enum! {
    "job state",
    /// `onboardings.status` / `decommissions.status`.
    pub enum JobState {
        /// Accepted but not started.
        Pending = "pending",
        /// Executing.
        Running = "running",
        /// Reached the intended terminal success.
        Completed = "completed",
        /// Failed, but a safe recovery path exists.
        FailedRetryable = "failed_retryable",
        /// Blocked pending operator action.
        FailedManualIntervention = "failed_manual_intervention",
        /// Cancelled by an operator or the system.
        Cancelled = "cancelled",
        /// Rollback/cleanup in progress.
        Compensating = "compensating",
        /// A failed or ambiguous job realigned with observed state (adopt/reconcile).
        Reconciled = "reconciled",
    }
}

named_enum! {
    "job kind",
    pub enum JobKind {
        Onboarding = "onboarding",
        Decommission = "decommission",
        /// Redfish virtual-media provisioning (seed 003).
        Provisioning = "provisioning",
    }
}

named_enum! {
    "decommission mode",
    /// Seed 000 §5.1.
    pub enum DecommissionMode {
        SoftReset = "soft_reset",
        Reimage = "reimage",
        FullDecommission = "full_decommission",
        StorageCleanup = "storage_cleanup",
        /// `lifecycle: retired` (seed 004, DESIGN.md §2): the first half of a full
        /// decommission — drained, released, powered off and `retired` — keeping the node
        /// identity (001 §3.2 retired -> active stays possible).
        Retire = "retire",
        /// `lifecycle: active` on a retired node (001 §3.2 retired -> active, "explicit
        /// reactivate/reuse flow"; seed 004: the flag is cleared first): the flag cleared,
        /// the machine cleaned and made available, then redeployed with the same node id.
        Reactivate = "reactivate",
    }
}

impl DecommissionMode {
    /// Modes that undeploy or rebuild the machine, which a protected node refuses (seed 004,
    /// Ironic `protected`: blocks rebuild, undeploy and delete).
    pub fn is_destructive(self) -> bool {
        matches!(
            self,
            DecommissionMode::Reimage
                | DecommissionMode::FullDecommission
                | DecommissionMode::Retire
        )
    }
}

impl DecommissionMode {
    /// The mode releases the machine in MAAS (its disks are erased, its OS gone).
    pub fn releases_machine(self) -> bool {
        !matches!(
            self,
            DecommissionMode::SoftReset | DecommissionMode::StorageCleanup
        )
    }
}

impl JobState {
    /// Terminal states: nothing moves a job out of them; recovery from there starts a new job.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Completed | JobState::Cancelled | JobState::Reconciled
        )
    }

    /// Failed states that an operator recovery action applies to.
    pub fn is_failed(self) -> bool {
        matches!(
            self,
            JobState::FailedRetryable | JobState::FailedManualIntervention
        )
    }

    /// The job still owns the node (in progress, failed awaiting recovery, or compensating).
    pub fn is_open(self) -> bool {
        !self.is_terminal()
    }

    /// The state a successful run ends in: `reconciled` when an adopt action finished it
    /// (001 §4.3 "workflow succeeded after adopt/reconcile action"), else `completed` — also
    /// for an adopted job that was rerun from the top.
    pub fn on_success(ends_reconciled: bool) -> JobState {
        if ends_reconciled {
            JobState::Reconciled
        } else {
            JobState::Completed
        }
    }

    /// Job-state moves the executor and the recovery actions make (000 §4.8, §4.9).
    pub fn successors(self) -> &'static [JobState] {
        use JobState as J;
        match self {
            J::Pending => &[
                J::Running,
                J::Compensating,
                J::Cancelled,
                J::FailedManualIntervention,
            ],
            J::Running => &[
                J::Completed,
                J::Reconciled,
                J::FailedRetryable,
                J::FailedManualIntervention,
                J::Compensating,
            ],
            J::FailedRetryable => &[
                J::Running,
                J::FailedManualIntervention,
                J::Compensating,
                J::Reconciled,
            ],
            J::FailedManualIntervention => &[J::Running, J::Compensating, J::Reconciled],
            // Compensation ends in cancelled (cancel), back to pending (restart_clean), or stuck
            // for a human when the compensation itself fails.
            J::Compensating => &[J::Cancelled, J::Pending, J::FailedManualIntervention],
            J::Completed | J::Cancelled | J::Reconciled => &[],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobStateError {
    #[error("job is {from}, which is terminal; start a new job instead")]
    Terminal { from: JobState },
    #[error("illegal job transition {from} -> {to}")]
    Illegal { from: JobState, to: JobState },
    #[error("{kind} job {job} while the node is {node} (consistent node states: {expected})")]
    NodeMismatch {
        kind: JobKind,
        job: JobState,
        node: NodeState,
        expected: String,
    },
}

impl JobState {
    /// Check a job-state move; staying in the same state (a new attempt, a new stage) is fine.
    pub fn check_move(self, to: JobState) -> Result<(), JobStateError> {
        if self == to && !self.is_terminal() {
            return Ok(());
        }
        if self.is_terminal() {
            return Err(JobStateError::Terminal { from: self });
        }
        if self.successors().contains(&to) {
            Ok(())
        } else {
            Err(JobStateError::Illegal { from: self, to })
        }
    }
}

use NodeState as N;

const NOT_DELETED: &[NodeState] = &[
    N::BootstrapIssued,
    N::Enrolling,
    N::Active,
    N::Offline,
    N::Quarantined,
    N::Draining,
    N::Retired,
    N::Removing,
];

/// Where a reactivation holds the node before it is back in service.
const REACTIVATING: &[NodeState] = &[N::Active, N::Offline, N::Quarantined, N::Retired];

/// The live states from `from` to `to` in [`NOT_DELETED`]'s order, the way a node leaves
/// service (active, offline, quarantined, draining, retired, removing).
fn live(from: NodeState, to: NodeState) -> &'static [NodeState] {
    let at = |state| {
        NOT_DELETED
            .iter()
            .position(|s| *s == state)
            .expect("a live state")
    };
    &NOT_DELETED[at(from)..=at(to)]
}

/// The coarse node states consistent with a job state for the node's current job.
///
/// Onboarding follows 001 §4.3 literally; `cancelled` and `compensating` are not in that table
/// and allow any live state (the compensation decides where the node goes). Full decommission
/// follows 001 §5.3, plus the pre-retirement states for failures that happen before the node
/// is retired (000 §5.8: drain or release fails while the node is still active/draining). The
/// other modes keep the node in service (soft reset, storage cleanup) or take it out of
/// scheduling with `quarantined` while the OS is rebuilt (reimage; 001 §3.2 has no
/// active -> enrolling), and end `active`.
pub fn job_node_states(
    kind: JobKind,
    mode: Option<DecommissionMode>,
    job: JobState,
) -> &'static [NodeState] {
    use JobState as J;
    match kind {
        JobKind::Onboarding => match job {
            J::Pending | J::Running | J::FailedRetryable => &[N::Enrolling],
            J::FailedManualIntervention => &[N::Enrolling, N::Quarantined],
            J::Completed | J::Reconciled => &[N::Active],
            J::Cancelled | J::Compensating => NOT_DELETED,
        },
        // Redfish provisioning jobs are bound to a server serial, never to a node record:
        // nothing to keep consistent.
        JobKind::Provisioning => NOT_DELETED,
        JobKind::Decommission => match mode.unwrap_or(DecommissionMode::FullDecommission) {
            DecommissionMode::FullDecommission => match job {
                J::Pending | J::Running => live(N::Active, N::Removing),
                J::FailedRetryable | J::FailedManualIntervention => live(N::Active, N::Retired),
                J::Completed | J::Reconciled => &[N::Deleted],
                J::Cancelled | J::Compensating => NOT_DELETED,
            },
            DecommissionMode::Retire => match job {
                J::Pending | J::Running | J::FailedRetryable | J::FailedManualIntervention => {
                    live(N::Active, N::Retired)
                }
                J::Completed | J::Reconciled => &[N::Retired],
                J::Cancelled | J::Compensating => NOT_DELETED,
            },
            // Taken out of retirement (retired -> active) and at once out of scheduling
            // (active -> quarantined) while the machine is rebuilt; an offline node flagged
            // retired is quarantined the same way.
            DecommissionMode::Reactivate => match job {
                J::Pending | J::Running | J::FailedRetryable | J::FailedManualIntervention => {
                    REACTIVATING
                }
                J::Completed | J::Reconciled => &[N::Active],
                J::Cancelled | J::Compensating => NOT_DELETED,
            },
            DecommissionMode::SoftReset
            | DecommissionMode::Reimage
            | DecommissionMode::StorageCleanup => match job {
                J::Pending | J::Running | J::FailedRetryable | J::FailedManualIntervention => {
                    live(N::Active, N::Quarantined)
                }
                J::Completed | J::Reconciled => &[N::Active],
                J::Cancelled | J::Compensating => NOT_DELETED,
            },
        },
    }
}

/// Refuse a (job state, node state) pair outside [`job_node_states`].
pub fn check_job_node_state(
    kind: JobKind,
    mode: Option<DecommissionMode>,
    job: JobState,
    node: NodeState,
) -> Result<(), JobStateError> {
    let allowed = job_node_states(kind, mode, job);
    if allowed.contains(&node) {
        Ok(())
    } else {
        let expected: Vec<&str> = allowed.iter().map(|s| s.as_str()).collect();
        Err(JobStateError::NodeMismatch {
            kind,
            job,
            node,
            expected: expected.join(", "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_job_states_have_no_way_out() {
        for state in JobState::ALL {
            if state.is_terminal() {
                assert!(state.successors().is_empty());
                for to in JobState::ALL {
                    assert!(state.check_move(*to).is_err());
                }
            }
        }
        assert_eq!(
            JobState::Completed
                .check_move(JobState::Running)
                .unwrap_err()
                .to_string(),
            "job is completed, which is terminal; start a new job instead"
        );
    }

    #[test]
    fn decommission_modes_keep_their_node_states() {
        let states = |mode, job| job_node_states(JobKind::Decommission, Some(mode), job).to_vec();
        use DecommissionMode as M;
        assert_eq!(
            states(M::FullDecommission, JobState::Running),
            [
                N::Active,
                N::Offline,
                N::Quarantined,
                N::Draining,
                N::Retired,
                N::Removing
            ]
        );
        assert_eq!(
            states(M::FullDecommission, JobState::FailedRetryable),
            [
                N::Active,
                N::Offline,
                N::Quarantined,
                N::Draining,
                N::Retired
            ]
        );
        assert_eq!(
            states(M::Retire, JobState::Pending),
            states(M::FullDecommission, JobState::FailedManualIntervention)
        );
        assert_eq!(
            states(M::SoftReset, JobState::Running),
            [N::Active, N::Offline, N::Quarantined]
        );
    }

    #[test]
    fn onboarding_mapping_follows_001_4_3() {
        let check = |job, node| check_job_node_state(JobKind::Onboarding, None, job, node);
        assert!(check(JobState::Running, N::Enrolling).is_ok());
        assert!(check(JobState::Completed, N::Active).is_ok());
        assert!(check(JobState::FailedManualIntervention, N::Quarantined).is_ok());
        assert_eq!(
            check(JobState::Completed, N::Enrolling)
                .unwrap_err()
                .to_string(),
            "onboarding job completed while the node is enrolling (consistent node states: active)"
        );
        assert!(
            check_job_node_state(
                JobKind::Decommission,
                Some(DecommissionMode::FullDecommission),
                JobState::Completed,
                N::Deleted
            )
            .is_ok()
        );
    }
}
