//! The Ironic provision state machine (seed 002) with retirement (seed 004) and Ironic's
//! `protected` flag: the provider-neutral view of a node, onto which every MAAS status maps.
//!
//! A node has a current state and, while a process runs, a target (a stable state). Processes
//! follow the -ING / -WAIT / -FAIL pattern: the active (-ING) state does work, the optional
//! -WAIT state waits for the ramdisk or in-band step, success passes through the momentary -ED
//! state (not a resting state, so not modelled) to the next state, failure lands in -FAIL.
//! Stable states move only on a verb.

use super::maas_status::MaasStatus;

named_enum! {
    "provision state",
    pub enum ProvisionState {
        Enroll = "ENROLL",
        Verifying = "VERIFYING",
        Manageable = "MANAGEABLE",
        Inspecting = "INSPECTING",
        InspectWait = "INSPECTWAIT",
        InspectFail = "INSPECTFAIL",
        Cleaning = "CLEANING",
        CleanWait = "CLEANWAIT",
        CleanFail = "CLEANFAIL",
        Available = "AVAILABLE",
        Deploying = "DEPLOYING",
        DeployWait = "DEPLOYWAIT",
        DeployFail = "DEPLOYFAIL",
        Active = "ACTIVE",
        Deleting = "DELETING",
        Error = "ERROR",
        Rescuing = "RESCUING",
        RescueWait = "RESCUEWAIT",
        RescueFail = "RESCUEFAIL",
        Rescue = "RESCUE",
        Unrescuing = "UNRESCUING",
        UnrescueFail = "UNRESCUEFAIL",
    }
}

named_enum! {
    "verb",
    /// API requests (seed 002 "REST API impact"). `Deploy` is the `active` verb, `Delete` the
    /// `deleted` verb (undeploy).
    pub enum Verb {
        Manage = "manage",
        Inspect = "inspect",
        Clean = "clean",
        Provide = "provide",
        Deploy = "active",
        Rebuild = "rebuild",
        Delete = "deleted",
        Rescue = "rescue",
        Unrescue = "unrescue",
        Abort = "abort",
    }
}

named_enum! {
    "provision phase",
    /// Where a state sits in the -ING / -WAIT / -FAIL pattern.
    pub enum Phase {
        /// Passive: moves only on a verb.
        Stable = "stable",
        /// -ING: the conductor is doing something.
        Active = "active",
        /// -WAIT: waiting for the ramdisk or an in-band step.
        Wait = "wait",
        /// -FAIL (and ERROR): the process failed.
        Fail = "fail",
    }
}

use ProvisionState as P;

impl ProvisionState {
    pub fn phase(self) -> Phase {
        match self {
            P::Enroll | P::Manageable | P::Available | P::Active | P::Rescue => Phase::Stable,
            P::Verifying
            | P::Inspecting
            | P::Cleaning
            | P::Deploying
            | P::Deleting
            | P::Rescuing
            | P::Unrescuing => Phase::Active,
            P::InspectWait | P::CleanWait | P::DeployWait | P::RescueWait => Phase::Wait,
            P::InspectFail
            | P::CleanFail
            | P::DeployFail
            | P::Error
            | P::RescueFail
            | P::UnrescueFail => Phase::Fail,
        }
    }

    pub fn is_stable(self) -> bool {
        self.phase() == Phase::Stable
    }

    /// The -WAIT state of an -ING state, if its process has one.
    fn wait_state(self) -> Option<ProvisionState> {
        match self {
            P::Inspecting => Some(P::InspectWait),
            P::Cleaning => Some(P::CleanWait),
            P::Deploying => Some(P::DeployWait),
            P::Rescuing => Some(P::RescueWait),
            _ => None,
        }
    }

    /// Where the process fails to. A failed verification returns to ENROLL and a failed
    /// teardown lands in ERROR, as in Ironic.
    fn fail_state(self) -> Option<ProvisionState> {
        match self {
            P::Verifying => Some(P::Enroll),
            P::Inspecting | P::InspectWait => Some(P::InspectFail),
            P::Cleaning | P::CleanWait => Some(P::CleanFail),
            P::Deploying | P::DeployWait => Some(P::DeployFail),
            P::Deleting => Some(P::Error),
            P::Rescuing | P::RescueWait => Some(P::RescueFail),
            P::Unrescuing => Some(P::UnrescueFail),
            _ => None,
        }
    }
}

/// What happens to a node: an API verb, a flag change, or the conductor reporting progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IronicEvent {
    Verb(Verb),
    /// The -ING state hands over to its -WAIT state.
    Wait,
    /// The running process succeeded.
    Done,
    /// The running process failed.
    Fail,
    SetRetired {
        reason: Option<String>,
    },
    UnsetRetired,
    SetProtected {
        reason: Option<String>,
    },
    UnsetProtected,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IronicError {
    #[error("verb `{verb}` is not allowed in state {state}")]
    VerbNotAllowed { verb: Verb, state: ProvisionState },
    /// Seed 004: `provide` on a retired node is an HTTP 409; so is deploying it (`active`):
    /// a retired node is never scheduled again.
    #[error("conflict: node is retired{}; unset `retired` before `{verb}`", reason_suffix(.reason))]
    Retired { verb: Verb, reason: Option<String> },
    #[error("conflict: node is protected; unset `protected` before `{verb}`")]
    Protected { verb: Verb },
    #[error("conflict: `retired` cannot be set in AVAILABLE; `manage` the node first")]
    RetireAvailable,
    #[error("conflict: `protected` can only be set in ACTIVE or RESCUE, not {state}")]
    ProtectNotDeployed { state: ProvisionState },
    #[error("no process is running in {state}")]
    NotRunning { state: ProvisionState },
    #[error("{state} has no wait phase")]
    NoWaitPhase { state: ProvisionState },
}

fn reason_suffix(reason: &Option<String>) -> String {
    match reason {
        Some(r) if !r.is_empty() => format!(" ({r})"),
        _ => String::new(),
    }
}

impl IronicError {
    /// Seed 004 and Ironic answer these with 409 Conflict.
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            IronicError::Retired { .. }
                | IronicError::Protected { .. }
                | IronicError::RetireAvailable
                | IronicError::ProtectNotDeployed { .. }
        )
    }
}

/// One node in the provider-neutral view.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IronicNode {
    pub state: ProvisionState,
    /// The stable state a running process is heading to (`None` in stable states).
    pub target: Option<ProvisionState>,
    pub retired: bool,
    pub retired_reason: Option<String>,
    pub protected: bool,
    pub protected_reason: Option<String>,
}

impl Default for IronicNode {
    fn default() -> Self {
        Self::new()
    }
}

impl IronicNode {
    /// Every node starts in ENROLL.
    pub fn new() -> Self {
        Self {
            state: P::Enroll,
            target: None,
            retired: false,
            retired_reason: None,
            protected: false,
            protected_reason: None,
        }
    }

    /// Apply one event; on error nothing changes.
    pub fn apply(&self, event: &IronicEvent) -> Result<IronicNode, IronicError> {
        let mut next = self.clone();
        match event {
            IronicEvent::Verb(verb) => {
                let (state, target) = self.verb(*verb)?;
                next.state = state;
                next.target = target;
            }
            IronicEvent::Wait => {
                if !matches!(self.state.phase(), Phase::Active) {
                    return Err(IronicError::NotRunning { state: self.state });
                }
                next.state = self
                    .state
                    .wait_state()
                    .ok_or(IronicError::NoWaitPhase { state: self.state })?;
            }
            IronicEvent::Done => {
                let (state, target) = self.done()?;
                next.state = state;
                next.target = target;
            }
            IronicEvent::Fail => {
                next.state = self
                    .state
                    .fail_state()
                    .ok_or(IronicError::NotRunning { state: self.state })?;
                // A failed verification is back in ENROLL, a stable state with no target; the
                // -FAIL states keep the target they failed to reach.
                if next.state.is_stable() {
                    next.target = None;
                }
            }
            IronicEvent::SetRetired { reason } => {
                if self.state == P::Available {
                    return Err(IronicError::RetireAvailable);
                }
                next.retired = true;
                next.retired_reason = reason.clone();
            }
            IronicEvent::UnsetRetired => {
                next.retired = false;
                next.retired_reason = None;
            }
            IronicEvent::SetProtected { reason } => {
                if !matches!(self.state, P::Active | P::Rescue) {
                    return Err(IronicError::ProtectNotDeployed { state: self.state });
                }
                next.protected = true;
                next.protected_reason = reason.clone();
            }
            IronicEvent::UnsetProtected => {
                next.protected = false;
                next.protected_reason = None;
            }
        }
        Ok(next)
    }

    fn verb(&self, verb: Verb) -> Result<(ProvisionState, Option<ProvisionState>), IronicError> {
        let refuse = || IronicError::VerbNotAllowed {
            verb,
            state: self.state,
        };
        if self.protected && matches!(verb, Verb::Rebuild | Verb::Delete) {
            // Check the state first so that a verb that is illegal anyway says so.
            if verb_start(verb, self.state).is_some() {
                return Err(IronicError::Protected { verb });
            }
        }
        let scheduling = (verb == Verb::Provide && self.state == P::Manageable)
            || (verb == Verb::Deploy && verb_start(verb, self.state).is_some());
        if self.retired && scheduling {
            return Err(IronicError::Retired {
                verb,
                reason: self.retired_reason.clone(),
            });
        }
        verb_start(verb, self.state).ok_or_else(refuse)
    }

    fn done(&self) -> Result<(ProvisionState, Option<ProvisionState>), IronicError> {
        let (state, target) = match self.state {
            P::Verifying | P::Inspecting | P::InspectWait => (P::Manageable, None),
            P::Cleaning | P::CleanWait => {
                // Seed 004: a retired node never ends cleaning in AVAILABLE.
                let target = self.target.unwrap_or(P::Available);
                if self.retired && target == P::Available {
                    (P::Manageable, None)
                } else {
                    (target, None)
                }
            }
            P::Deploying | P::DeployWait | P::Unrescuing => (P::Active, None),
            // DELETING -> DELETED -> CLEANING -> CLEANED -> AVAILABLE.
            P::Deleting => (P::Cleaning, Some(P::Available)),
            P::Rescuing | P::RescueWait => (P::Rescue, None),
            state => return Err(IronicError::NotRunning { state }),
        };
        Ok((state, target))
    }

    /// Every event that would be accepted now (used by the property tests and for help text).
    pub fn accepted_events(&self) -> Vec<IronicEvent> {
        all_events()
            .into_iter()
            .filter(|e| self.apply(e).is_ok())
            .collect()
    }
}

/// Every event kind once (flags with a fixed reason).
pub fn all_events() -> Vec<IronicEvent> {
    let mut events: Vec<IronicEvent> = Verb::ALL.iter().map(|v| IronicEvent::Verb(*v)).collect();
    events.extend([
        IronicEvent::Wait,
        IronicEvent::Done,
        IronicEvent::Fail,
        IronicEvent::SetRetired {
            reason: Some("end of warranty".into()),
        },
        IronicEvent::UnsetRetired,
        IronicEvent::SetProtected {
            reason: Some("tenant workload".into()),
        },
        IronicEvent::UnsetProtected,
    ]);
    events
}

/// The verb table: (initial state) -> (first state, target). Seed 002's table, plus the
/// recoveries Ironic offers from its -FAIL states (the seed leaves them to "other specs"):
/// INSPECTFAIL and CLEANFAIL go back to MANAGEABLE with `manage` (INSPECTFAIL may also re-run
/// `inspect`), DEPLOYFAIL retries `active`/`rebuild` or tears down with `deleted`, the rescue
/// failures retry `rescue`/`unrescue` or tear down, and ERROR may `rebuild` or `deleted`.
fn verb_start(
    verb: Verb,
    state: ProvisionState,
) -> Option<(ProvisionState, Option<ProvisionState>)> {
    let to = match (verb, state) {
        (Verb::Manage, P::Enroll) => (P::Verifying, Some(P::Manageable)),
        (Verb::Manage, P::Available | P::CleanFail | P::InspectFail) => (P::Manageable, None),
        (Verb::Clean, P::Manageable) => (P::Cleaning, Some(P::Manageable)),
        (Verb::Inspect, P::Manageable | P::InspectFail) => (P::Inspecting, Some(P::Manageable)),
        (Verb::Provide, P::Manageable) => (P::Cleaning, Some(P::Available)),
        (Verb::Deploy, P::Available | P::DeployFail) => (P::Deploying, Some(P::Active)),
        (Verb::Rebuild, P::Active | P::DeployFail | P::Error) => (P::Deploying, Some(P::Active)),
        (
            Verb::Delete,
            P::Active
            | P::Rescue
            | P::DeployWait
            | P::DeployFail
            | P::Error
            | P::RescueFail
            | P::UnrescueFail,
        ) => (P::Deleting, Some(P::Available)),
        (Verb::Rescue, P::Active | P::RescueFail | P::UnrescueFail) => {
            (P::Rescuing, Some(P::Rescue))
        }
        (Verb::Unrescue, P::Rescue | P::RescueFail | P::UnrescueFail) => {
            (P::Unrescuing, Some(P::Active))
        }
        (Verb::Abort, P::CleanWait) => (P::CleanFail, Some(P::Manageable)),
        _ => return None,
    };
    Some(to)
}

/// How a MAAS status reads in the provider-neutral view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ProviderView {
    pub state: ProvisionState,
    pub target: Option<ProvisionState>,
    /// MAAS marks the machine unusable (Broken, Missing): Ironic's maintenance flag.
    pub maintenance: bool,
    /// MAAS's own Retired status (seed 004's retired flag on a MANAGEABLE node).
    pub retired: bool,
}

impl MaasStatus {
    /// Map a MAAS status onto the Ironic machine. Commissioning is inspection; testing and disk
    /// erasing are cleaning, in-band (CLEANWAIT); releasing is the teardown (DELETING); Allocated and Reserved are
    /// still AVAILABLE (Ironic keeps allocations outside the provision state); Broken and
    /// Missing keep the state they interrupt unknown, so they read as MANAGEABLE/ENROLL under
    /// maintenance.
    pub fn provider_view(self) -> ProviderView {
        use MaasStatus as M;
        let mut maintenance = false;
        let mut retired = false;
        let (state, target) = match self {
            M::New => (P::Enroll, None),
            M::Commissioning => (P::Inspecting, Some(P::Manageable)),
            M::FailedCommissioning => (P::InspectFail, Some(P::Manageable)),
            M::Missing => {
                maintenance = true;
                (P::Enroll, None)
            }
            M::Ready | M::Reserved | M::Allocated => (P::Available, None),
            M::Deployed => (P::Active, None),
            M::Retired => {
                retired = true;
                (P::Manageable, None)
            }
            M::Broken => {
                maintenance = true;
                (P::Manageable, None)
            }
            M::Deploying => (P::Deploying, Some(P::Active)),
            M::FailedDeployment => (P::DeployFail, Some(P::Active)),
            M::Releasing => (P::Deleting, Some(P::Available)),
            M::FailedReleasing => (P::Error, Some(P::Available)),
            // The erase runs in-band in MAAS's ephemeral environment: Ironic's CLEANWAIT, the
            // state `abort` interrupts (MAAS: Disk erasing -> Failed disk erasing).
            M::DiskErasing => (P::CleanWait, Some(P::Available)),
            M::FailedDiskErasing => (P::CleanFail, Some(P::Available)),
            M::RescueMode => (P::Rescue, None),
            M::EnteringRescueMode => (P::Rescuing, Some(P::Rescue)),
            M::FailedEnteringRescueMode => (P::RescueFail, Some(P::Rescue)),
            M::ExitingRescueMode => (P::Unrescuing, Some(P::Active)),
            M::FailedExitingRescueMode => (P::UnrescueFail, Some(P::Active)),
            M::Testing => (P::CleanWait, Some(P::Manageable)),
            M::FailedTesting => (P::CleanFail, Some(P::Manageable)),
        };
        ProviderView {
            state,
            target,
            maintenance,
            retired,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(events: &[IronicEvent]) -> Result<IronicNode, IronicError> {
        events
            .iter()
            .try_fold(IronicNode::new(), |node, event| node.apply(event))
    }

    fn v(verb: Verb) -> IronicEvent {
        IronicEvent::Verb(verb)
    }

    #[test]
    fn enroll_to_active_and_back_to_available() {
        let node = run(&[
            v(Verb::Manage),
            IronicEvent::Done,
            v(Verb::Provide),
            IronicEvent::Wait,
            IronicEvent::Done,
        ])
        .unwrap();
        assert_eq!(node.state, P::Available);
        let node = node.apply(&v(Verb::Deploy)).unwrap();
        assert_eq!((node.state, node.target), (P::Deploying, Some(P::Active)));
        let node = node.apply(&IronicEvent::Done).unwrap();
        assert_eq!(node.state, P::Active);
        let node = node.apply(&v(Verb::Delete)).unwrap();
        let node = node.apply(&IronicEvent::Done).unwrap();
        assert_eq!((node.state, node.target), (P::Cleaning, Some(P::Available)));
        assert_eq!(node.apply(&IronicEvent::Done).unwrap().state, P::Available);
    }

    #[test]
    fn retired_nodes_are_cleaned_to_manageable_and_cannot_be_provided() {
        let active = run(&[
            v(Verb::Manage),
            IronicEvent::Done,
            v(Verb::Provide),
            IronicEvent::Done,
            v(Verb::Deploy),
            IronicEvent::Done,
        ])
        .unwrap();
        let retired = active
            .apply(&IronicEvent::SetRetired {
                reason: Some("EOL".into()),
            })
            .unwrap();
        let cleaned = [v(Verb::Delete), IronicEvent::Done, IronicEvent::Done]
            .iter()
            .try_fold(retired, |n, e| n.apply(e))
            .unwrap();
        assert_eq!(cleaned.state, P::Manageable);
        let err = cleaned.apply(&v(Verb::Provide)).unwrap_err();
        assert!(err.is_conflict());
        assert_eq!(
            err.to_string(),
            "conflict: node is retired (EOL); unset `retired` before `provide`"
        );
    }

    #[test]
    fn protection_blocks_rebuild_and_delete_and_is_set_only_when_deployed() {
        let manageable = run(&[v(Verb::Manage), IronicEvent::Done]).unwrap();
        assert_eq!(
            manageable.apply(&IronicEvent::SetProtected { reason: None }),
            Err(IronicError::ProtectNotDeployed {
                state: P::Manageable
            })
        );
        let active = IronicNode {
            state: P::Active,
            ..IronicNode::new()
        };
        let protected = active
            .apply(&IronicEvent::SetProtected { reason: None })
            .unwrap();
        for verb in [Verb::Rebuild, Verb::Delete] {
            assert_eq!(
                protected.apply(&v(verb)),
                Err(IronicError::Protected { verb })
            );
        }
        assert!(protected.apply(&v(Verb::Rescue)).is_ok());
        let available = IronicNode {
            state: P::Available,
            ..IronicNode::new()
        };
        assert_eq!(
            available.apply(&IronicEvent::SetRetired { reason: None }),
            Err(IronicError::RetireAvailable)
        );
    }

    #[test]
    fn every_maas_status_maps_into_the_machine() {
        for status in MaasStatus::ALL {
            let view = status.provider_view();
            assert_eq!(view.target.is_none(), view.state.is_stable(), "{status}");
        }
        assert_eq!(MaasStatus::Deployed.provider_view().state, P::Active);
        assert!(MaasStatus::Retired.provider_view().retired);
    }
}
