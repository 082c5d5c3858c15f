//! MAAS machine statuses and the transition guard (API_REFERENCE.md §4.1–§4.2).
//!
//! Codes, `status_name`s and the `NODE_TRANSITIONS` table are MAAS 3.6's; the simulator refuses
//! an illegal transition with MAAS's own `Invalid transition: <old> -> <new>.` text.

use serde::{Deserialize, Serialize};

/// `NODE_STATUS` (src/maascommon/enums/node.py). The discriminant is the code MAAS emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    New = 0,
    Commissioning = 1,
    FailedCommissioning = 2,
    Missing = 3,
    Ready = 4,
    Reserved = 5,
    Deployed = 6,
    Retired = 7,
    Broken = 8,
    Deploying = 9,
    Allocated = 10,
    FailedDeployment = 11,
    Releasing = 12,
    FailedReleasing = 13,
    DiskErasing = 14,
    FailedDiskErasing = 15,
    RescueMode = 16,
    EnteringRescueMode = 17,
    FailedEnteringRescueMode = 18,
    ExitingRescueMode = 19,
    FailedExitingRescueMode = 20,
    Testing = 21,
    FailedTesting = 22,
}

use Status::*;

/// Every status, in code order.
pub const ALL: [Status; 23] = [
    New,
    Commissioning,
    FailedCommissioning,
    Missing,
    Ready,
    Reserved,
    Deployed,
    Retired,
    Broken,
    Deploying,
    Allocated,
    FailedDeployment,
    Releasing,
    FailedReleasing,
    DiskErasing,
    FailedDiskErasing,
    RescueMode,
    EnteringRescueMode,
    FailedEnteringRescueMode,
    ExitingRescueMode,
    FailedExitingRescueMode,
    Testing,
    FailedTesting,
];

/// `RELEASABLE_STATUSES` (models/node.py:943).
pub const RELEASABLE: [Status; 8] = [
    Allocated,
    Reserved,
    Broken,
    Deploying,
    Deployed,
    FailedDeployment,
    FailedDiskErasing,
    FailedReleasing,
];

impl Status {
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u64) -> Option<Status> {
        ALL.iter().copied().find(|s| u64::from(s.code()) == code)
    }

    /// `status_name` as MAAS shows it (note `Releasing failed`, not "Failed releasing").
    pub fn name(self) -> &'static str {
        match self {
            New => "New",
            Commissioning => "Commissioning",
            FailedCommissioning => "Failed commissioning",
            Missing => "Missing",
            Ready => "Ready",
            Reserved => "Reserved",
            Deployed => "Deployed",
            Retired => "Retired",
            Broken => "Broken",
            Deploying => "Deploying",
            Allocated => "Allocated",
            FailedDeployment => "Failed deployment",
            Releasing => "Releasing",
            FailedReleasing => "Releasing failed",
            DiskErasing => "Disk erasing",
            FailedDiskErasing => "Failed disk erasing",
            RescueMode => "Rescue mode",
            EnteringRescueMode => "Entering rescue mode",
            FailedEnteringRescueMode => "Failed to enter rescue mode",
            ExitingRescueMode => "Exiting rescue mode",
            FailedExitingRescueMode => "Failed to exit rescue mode",
            Testing => "Testing",
            FailedTesting => "Failed testing",
        }
    }

    /// The `status=` filter value of `ReadNodesForm` (lower-case constant name).
    pub fn filter_value(self) -> &'static str {
        match self {
            New => "new",
            Commissioning => "commissioning",
            FailedCommissioning => "failed_commissioning",
            Missing => "missing",
            Ready => "ready",
            Reserved => "reserved",
            Deployed => "deployed",
            Retired => "retired",
            Broken => "broken",
            Deploying => "deploying",
            Allocated => "allocated",
            FailedDeployment => "failed_deployment",
            Releasing => "releasing",
            FailedReleasing => "failed_releasing",
            DiskErasing => "disk_erasing",
            FailedDiskErasing => "failed_disk_erasing",
            RescueMode => "rescue_mode",
            EnteringRescueMode => "entering_rescue_mode",
            FailedEnteringRescueMode => "failed_entering_rescue_mode",
            ExitingRescueMode => "exiting_rescue_mode",
            FailedExitingRescueMode => "failed_exiting_rescue_mode",
            Testing => "testing",
            FailedTesting => "failed_testing",
        }
    }

    /// Parses a filter value (`ready`) or a status name (`Ready`, `Releasing failed`).
    pub fn parse(text: &str) -> Option<Status> {
        ALL.iter()
            .copied()
            .find(|s| s.filter_value() == text || s.name().eq_ignore_ascii_case(text))
    }

    /// `simple_status` filter value (`SIMPLIFIED_NODE_STATUSES_MAP`); "other" for the rest.
    pub fn simple(self) -> &'static str {
        match self {
            New => "new",
            Commissioning => "commissioning",
            FailedCommissioning
            | FailedDeployment
            | FailedReleasing
            | FailedDiskErasing
            | FailedEnteringRescueMode
            | FailedExitingRescueMode
            | FailedTesting => "failed",
            Ready => "ready",
            Deployed => "deployed",
            Broken => "broken",
            Deploying => "deploying",
            Allocated => "allocated",
            Releasing | DiskErasing => "releasing",
            RescueMode | EnteringRescueMode | ExitingRescueMode => "rescue_mode",
            Testing => "testing",
            Missing | Reserved | Retired => "other",
        }
    }

    /// `NODE_FAILURE_STATUS_TRANSITIONS`: where a failure of this status leads.
    pub fn failed_counterpart(self) -> Option<Status> {
        Some(match self {
            Commissioning => FailedCommissioning,
            Deploying => FailedDeployment,
            Releasing => FailedReleasing,
            DiskErasing => FailedDiskErasing,
            EnteringRescueMode => FailedEnteringRescueMode,
            ExitingRescueMode => FailedExitingRescueMode,
            Testing => FailedTesting,
            _ => return None,
        })
    }

    /// `NODE_TRANSITIONS[self]` (src/maasserver/node_status.py).
    pub fn allowed_targets(self) -> &'static [Status] {
        match self {
            New => &[
                Commissioning,
                Testing,
                Missing,
                Ready,
                Retired,
                Broken,
                EnteringRescueMode,
            ],
            Commissioning => &[
                FailedCommissioning,
                Ready,
                Retired,
                Missing,
                New,
                Broken,
                Testing,
            ],
            FailedCommissioning => &[
                Commissioning,
                Missing,
                Retired,
                Broken,
                EnteringRescueMode,
                Testing,
            ],
            Ready => &[
                EnteringRescueMode,
                Commissioning,
                Allocated,
                Reserved,
                Retired,
                Missing,
                Broken,
                Testing,
            ],
            Reserved => &[
                Ready,
                Allocated,
                Retired,
                Missing,
                Broken,
                DiskErasing,
                Releasing,
                EnteringRescueMode,
                Testing,
            ],
            Allocated => &[
                Ready,
                Retired,
                Missing,
                Broken,
                Deploying,
                DiskErasing,
                Releasing,
                EnteringRescueMode,
                Testing,
            ],
            Releasing => &[
                New,
                Allocated,
                Reserved,
                Deployed,
                Ready,
                Broken,
                Missing,
                FailedDeployment,
                FailedDiskErasing,
                FailedReleasing,
            ],
            Deploying => &[
                Allocated,
                Missing,
                Broken,
                FailedDeployment,
                Deployed,
                Ready,
                DiskErasing,
                Releasing,
            ],
            FailedDeployment | Deployed => &[
                Allocated,
                Missing,
                Broken,
                Ready,
                DiskErasing,
                Releasing,
                EnteringRescueMode,
                Testing,
            ],
            Missing => &[
                New,
                Ready,
                Allocated,
                Commissioning,
                Broken,
                EnteringRescueMode,
                Testing,
            ],
            Retired => &[New, Ready, Missing, Broken, EnteringRescueMode, Testing],
            Broken => &[
                Commissioning,
                Ready,
                DiskErasing,
                Releasing,
                EnteringRescueMode,
                Testing,
                Deployed,
            ],
            FailedReleasing => &[Releasing, DiskErasing, Ready, Broken, Testing],
            DiskErasing => &[Broken, DiskErasing, FailedDiskErasing, Ready, Releasing],
            FailedDiskErasing => &[
                DiskErasing,
                Releasing,
                Broken,
                Allocated,
                Ready,
                EnteringRescueMode,
                Testing,
            ],
            EnteringRescueMode => &[
                Ready,
                Broken,
                Deployed,
                RescueMode,
                FailedEnteringRescueMode,
                ExitingRescueMode,
            ],
            FailedEnteringRescueMode => &[Broken, EnteringRescueMode, ExitingRescueMode, Testing],
            RescueMode => &[Broken, ExitingRescueMode, Testing],
            ExitingRescueMode => &[
                New,
                Broken,
                FailedCommissioning,
                Ready,
                Reserved,
                Allocated,
                FailedDeployment,
                Deployed,
                Missing,
                Retired,
                FailedReleasing,
                FailedDiskErasing,
                RescueMode,
                FailedEnteringRescueMode,
                FailedExitingRescueMode,
                FailedTesting,
            ],
            FailedExitingRescueMode => &[Broken, ExitingRescueMode, Testing],
            Testing => &[
                Broken,
                New,
                Ready,
                Reserved,
                Allocated,
                Deployed,
                Commissioning,
                FailedDeployment,
                Missing,
                Retired,
                FailedReleasing,
                FailedDiskErasing,
                FailedEnteringRescueMode,
                FailedExitingRescueMode,
                FailedTesting,
            ],
            FailedTesting => &[
                Commissioning,
                Broken,
                Missing,
                EnteringRescueMode,
                Testing,
                Ready,
                Deployed,
            ],
        }
    }

    /// `Node.update_status` guard: same-status is always allowed.
    pub fn can_transition(self, to: Status) -> bool {
        self == to || self.allowed_targets().contains(&to)
    }
}

/// `NodeStateViolation` text for an illegal transition.
pub fn invalid_transition_message(from: Status, to: Status) -> String {
    format!("Invalid transition: {} -> {}.", from.name(), to.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_are_mass_ones() {
        for (code, status) in ALL.iter().enumerate() {
            assert_eq!(usize::from(status.code()), code);
            assert_eq!(Status::from_code(code as u64), Some(*status));
            assert_eq!(Status::parse(status.filter_value()), Some(*status));
        }
        assert_eq!(FailedReleasing.name(), "Releasing failed");
        assert_eq!(DiskErasing.simple(), "releasing");
    }

    #[test]
    fn guard_follows_node_transitions() {
        assert!(Ready.can_transition(Allocated));
        assert!(!Ready.can_transition(Deploying));
        assert!(Allocated.can_transition(Deploying));
        assert!(Broken.can_transition(Deployed));
        assert!(!New.can_transition(Deployed));
        assert_eq!(
            invalid_transition_message(New, Deployed),
            "Invalid transition: New -> Deployed."
        );
        for s in ALL {
            assert!(s.can_transition(s));
            assert!(s.can_transition(Broken) || s == Broken);
        }
    }
}
