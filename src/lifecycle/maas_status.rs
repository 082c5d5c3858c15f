//! Observed MAAS machine status (../shared/maas/API_REFERENCE.md §4.1: names, codes, filter
//! values, simplified statuses) and the MAAS statuses expected for each coarse node state
//! (seed 001 §6.2).

use super::node_state::NodeState;

named_enum! {
    "MAAS simple status",
    /// MAAS's `simple_status` grouping.
    pub enum SimpleStatus {
        New = "New",
        Commissioning = "Commissioning",
        Failed = "Failed",
        Ready = "Ready",
        Deployed = "Deployed",
        Broken = "Broken",
        Deploying = "Deploying",
        Allocated = "Allocated",
        Releasing = "Releasing",
        RescueMode = "Rescue Mode",
        Testing = "Testing",
        Other = "Other",
    }
}

/// MAAS `NODE_STATUS` (all 23). The canonical name is MAAS's `status_name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MaasStatus {
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
}

use MaasStatus as M;

/// (status, code, status_name, filter value, simple status) — API_REFERENCE §4.1.
const TABLE: &[(MaasStatus, u8, &str, &str, SimpleStatus)] = &[
    (M::New, 0, "New", "new", SimpleStatus::New),
    (
        M::Commissioning,
        1,
        "Commissioning",
        "commissioning",
        SimpleStatus::Commissioning,
    ),
    (
        M::FailedCommissioning,
        2,
        "Failed commissioning",
        "failed_commissioning",
        SimpleStatus::Failed,
    ),
    (M::Missing, 3, "Missing", "missing", SimpleStatus::Other),
    (M::Ready, 4, "Ready", "ready", SimpleStatus::Ready),
    (M::Reserved, 5, "Reserved", "reserved", SimpleStatus::Other),
    (
        M::Deployed,
        6,
        "Deployed",
        "deployed",
        SimpleStatus::Deployed,
    ),
    (M::Retired, 7, "Retired", "retired", SimpleStatus::Other),
    (M::Broken, 8, "Broken", "broken", SimpleStatus::Broken),
    (
        M::Deploying,
        9,
        "Deploying",
        "deploying",
        SimpleStatus::Deploying,
    ),
    (
        M::Allocated,
        10,
        "Allocated",
        "allocated",
        SimpleStatus::Allocated,
    ),
    (
        M::FailedDeployment,
        11,
        "Failed deployment",
        "failed_deployment",
        SimpleStatus::Failed,
    ),
    (
        M::Releasing,
        12,
        "Releasing",
        "releasing",
        SimpleStatus::Releasing,
    ),
    // Not "Failed releasing": MAAS really says "Releasing failed".
    (
        M::FailedReleasing,
        13,
        "Releasing failed",
        "failed_releasing",
        SimpleStatus::Failed,
    ),
    (
        M::DiskErasing,
        14,
        "Disk erasing",
        "disk_erasing",
        SimpleStatus::Releasing,
    ),
    (
        M::FailedDiskErasing,
        15,
        "Failed disk erasing",
        "failed_disk_erasing",
        SimpleStatus::Failed,
    ),
    (
        M::RescueMode,
        16,
        "Rescue mode",
        "rescue_mode",
        SimpleStatus::RescueMode,
    ),
    (
        M::EnteringRescueMode,
        17,
        "Entering rescue mode",
        "entering_rescue_mode",
        SimpleStatus::RescueMode,
    ),
    (
        M::FailedEnteringRescueMode,
        18,
        "Failed to enter rescue mode",
        "failed_entering_rescue_mode",
        SimpleStatus::Failed,
    ),
    (
        M::ExitingRescueMode,
        19,
        "Exiting rescue mode",
        "exiting_rescue_mode",
        SimpleStatus::RescueMode,
    ),
    (
        M::FailedExitingRescueMode,
        20,
        "Failed to exit rescue mode",
        "failed_exiting_rescue_mode",
        SimpleStatus::Failed,
    ),
    (M::Testing, 21, "Testing", "testing", SimpleStatus::Testing),
    (
        M::FailedTesting,
        22,
        "Failed testing",
        "failed_testing",
        SimpleStatus::Failed,
    ),
];

impl MaasStatus {
    pub const ALL: [MaasStatus; 23] = {
        let mut all = [M::New; 23];
        let mut i = 0;
        while i < 23 {
            all[i] = TABLE[i].0;
            i += 1;
        }
        all
    };

    fn row(self) -> &'static (MaasStatus, u8, &'static str, &'static str, SimpleStatus) {
        &TABLE[self as usize]
    }

    /// The numeric `status` field.
    pub fn code(self) -> u8 {
        self.row().1
    }

    /// The `status_name` field (canonical name, as stored).
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// The `status=` filter value of `GET machines/`.
    pub fn filter_value(self) -> &'static str {
        self.row().3
    }

    pub fn simple(self) -> SimpleStatus {
        self.row().4
    }

    pub fn from_code(code: u8) -> Option<Self> {
        TABLE.get(code as usize).map(|r| r.0)
    }

    /// Parse a `status_name` (exact) or a filter value.
    pub fn from_name(name: &str) -> Option<Self> {
        TABLE
            .iter()
            .find(|r| r.2 == name || r.3 == name)
            .map(|r| r.0)
    }

    /// Any failure status (simple status `Failed`).
    pub fn is_failed(self) -> bool {
        self.simple() == SimpleStatus::Failed
    }
}

impl std::fmt::Display for MaasStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for MaasStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// What MAAS may report for a node in a coarse state without that being drift (001 §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaasExpectation {
    /// Any status (or none) is fine.
    pub any: bool,
    /// These statuses are expected.
    pub statuses: &'static [MaasStatus],
    /// The machine may be absent from MAAS.
    pub absent_ok: bool,
}

impl MaasExpectation {
    /// Whether an observation (`None` = absent from MAAS) meets the expectation.
    pub fn allows(&self, observed: Option<MaasStatus>) -> bool {
        if self.any {
            return true;
        }
        match observed {
            None => self.absent_ok,
            Some(status) => self.statuses.contains(&status),
        }
    }
}

const FAILED: [MaasStatus; 7] = [
    M::FailedCommissioning,
    M::FailedDeployment,
    M::FailedReleasing,
    M::FailedDiskErasing,
    M::FailedEnteringRescueMode,
    M::FailedExitingRescueMode,
    M::FailedTesting,
];

impl NodeState {
    /// 001 §6.2. "Failed" covers every failure status; "powered off" is a power state, not a
    /// status, so `retired`/`removing` list the statuses a powered-off machine shows.
    pub fn expected_maas(self) -> MaasExpectation {
        const QUARANTINED: [MaasStatus; 10] = [
            M::Ready,
            M::Broken,
            M::Deployed,
            FAILED[0],
            FAILED[1],
            FAILED[2],
            FAILED[3],
            FAILED[4],
            FAILED[5],
            FAILED[6],
        ];
        let (any, statuses, absent_ok): (bool, &'static [MaasStatus], bool) = match self {
            NodeState::BootstrapIssued => (true, &[], true),
            NodeState::Enrolling => (
                false,
                &[
                    M::New,
                    M::Commissioning,
                    M::Ready,
                    M::Allocated,
                    M::Deploying,
                    M::Deployed,
                ],
                false,
            ),
            NodeState::Active | NodeState::Offline => (false, &[M::Deployed], false),
            NodeState::Quarantined => (false, &QUARANTINED, true),
            NodeState::Draining => (false, &[M::Deployed, M::Ready], false),
            NodeState::Retired => (false, &[M::Deployed, M::Ready], false),
            NodeState::Removing => (false, &[M::Ready], true),
            // "absent or retained in MAAS by policy".
            NodeState::Deleted => (true, &[], true),
        };
        MaasExpectation {
            any,
            statuses,
            absent_ok,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_the_reference() {
        for (i, status) in MaasStatus::ALL.iter().enumerate() {
            assert_eq!(status.code() as usize, i);
            assert_eq!(MaasStatus::from_code(i as u8), Some(*status));
            assert_eq!(MaasStatus::from_name(status.name()), Some(*status));
            assert_eq!(MaasStatus::from_name(status.filter_value()), Some(*status));
        }
        assert_eq!(MaasStatus::FailedReleasing.name(), "Releasing failed");
        assert_eq!(MaasStatus::from_code(23), None);
        assert_eq!(MaasStatus::DiskErasing.simple(), SimpleStatus::Releasing);
        assert_eq!(
            FAILED.len(),
            MaasStatus::ALL.iter().filter(|s| s.is_failed()).count()
        );
    }

    #[test]
    fn expectations_follow_001_6_2() {
        assert!(
            NodeState::Active
                .expected_maas()
                .allows(Some(MaasStatus::Deployed))
        );
        assert!(
            !NodeState::Active
                .expected_maas()
                .allows(Some(MaasStatus::Ready))
        );
        assert!(!NodeState::Active.expected_maas().allows(None));
        assert!(NodeState::Quarantined.expected_maas().allows(None));
        assert!(
            NodeState::Quarantined
                .expected_maas()
                .allows(Some(MaasStatus::FailedTesting))
        );
        assert!(NodeState::BootstrapIssued.expected_maas().allows(None));
    }
}
