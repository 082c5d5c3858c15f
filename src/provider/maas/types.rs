//! Value types shared by MAAS resources (API_REFERENCE §4.1 machine status, §3.1 zone/pool/
//! domain references, node types).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::de::{null_default, opt_lenient_bool};

/// MAAS's simplified status (`SIMPLIFIED_NODE_STATUSES_MAP`), the `simple_status=` filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SimpleStatus {
    New,
    Commissioning,
    Testing,
    Ready,
    Allocated,
    Deploying,
    Deployed,
    Releasing,
    Broken,
    Failed,
    RescueMode,
    Other,
}

macro_rules! machine_statuses {
    ($($code:literal => $variant:ident, $name:literal, $filter:literal, $simple:ident;)*) => {
        /// A machine's `status` (MAAS `NODE_STATUS`), with MAAS's codes and `status_name`s.
        /// Codes this client does not know (a newer MAAS) are kept as `Unknown(code)`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum MachineStatus {
            $($variant,)*
            Unknown(i64),
        }

        impl MachineStatus {
            /// Every status MAAS 3.x defines, in code order.
            pub const ALL: &'static [MachineStatus] = &[$(MachineStatus::$variant,)*];

            pub fn from_code(code: i64) -> Self {
                match code {
                    $($code => MachineStatus::$variant,)*
                    other => MachineStatus::Unknown(other),
                }
            }

            pub fn code(self) -> i64 {
                match self {
                    $(MachineStatus::$variant => $code,)*
                    MachineStatus::Unknown(code) => code,
                }
            }

            /// MAAS's `status_name` (`"Releasing failed"`, not "Failed releasing").
            pub fn name(self) -> Option<&'static str> {
                match self {
                    $(MachineStatus::$variant => Some($name),)*
                    MachineStatus::Unknown(_) => None,
                }
            }

            /// The value of the `status=` filter of `GET machines/`.
            pub fn filter_value(self) -> Option<&'static str> {
                match self {
                    $(MachineStatus::$variant => Some($filter),)*
                    MachineStatus::Unknown(_) => None,
                }
            }

            pub fn simple(self) -> SimpleStatus {
                match self {
                    $(MachineStatus::$variant => SimpleStatus::$simple,)*
                    MachineStatus::Unknown(_) => SimpleStatus::Other,
                }
            }
        }
    };
}

machine_statuses! {
    0 => New, "New", "new", New;
    1 => Commissioning, "Commissioning", "commissioning", Commissioning;
    2 => FailedCommissioning, "Failed commissioning", "failed_commissioning", Failed;
    3 => Missing, "Missing", "missing", Other;
    4 => Ready, "Ready", "ready", Ready;
    5 => Reserved, "Reserved", "reserved", Other;
    6 => Deployed, "Deployed", "deployed", Deployed;
    7 => Retired, "Retired", "retired", Other;
    8 => Broken, "Broken", "broken", Broken;
    9 => Deploying, "Deploying", "deploying", Deploying;
    10 => Allocated, "Allocated", "allocated", Allocated;
    11 => FailedDeployment, "Failed deployment", "failed_deployment", Failed;
    12 => Releasing, "Releasing", "releasing", Releasing;
    13 => FailedReleasing, "Releasing failed", "failed_releasing", Failed;
    14 => DiskErasing, "Disk erasing", "disk_erasing", Releasing;
    15 => FailedDiskErasing, "Failed disk erasing", "failed_disk_erasing", Failed;
    16 => RescueMode, "Rescue mode", "rescue_mode", RescueMode;
    17 => EnteringRescueMode, "Entering rescue mode", "entering_rescue_mode", RescueMode;
    18 => FailedEnteringRescueMode, "Failed to enter rescue mode", "failed_entering_rescue_mode", Failed;
    19 => ExitingRescueMode, "Exiting rescue mode", "exiting_rescue_mode", RescueMode;
    20 => FailedExitingRescueMode, "Failed to exit rescue mode", "failed_exiting_rescue_mode", Failed;
    21 => Testing, "Testing", "testing", Testing;
    22 => FailedTesting, "Failed testing", "failed_testing", Failed;
}

impl MachineStatus {
    /// One of MAAS's failed states (`Failed …`, `Releasing failed`): needs attention.
    pub fn is_failed(self) -> bool {
        self.simple() == SimpleStatus::Failed
    }
}

impl fmt::Display for MachineStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "unknown status {}", self.code()),
        }
    }
}

impl<'de> Deserialize<'de> for MachineStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        i64::deserialize(deserializer).map(MachineStatus::from_code)
    }
}

impl Serialize for MachineStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_i64(self.code())
    }
}

/// A node's `node_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeType {
    Machine,
    Device,
    RackController,
    RegionController,
    RegionAndRackController,
    Unknown(i64),
}

impl NodeType {
    pub fn from_code(code: i64) -> Self {
        match code {
            0 => NodeType::Machine,
            1 => NodeType::Device,
            2 => NodeType::RackController,
            3 => NodeType::RegionController,
            4 => NodeType::RegionAndRackController,
            other => NodeType::Unknown(other),
        }
    }

    pub fn code(self) -> i64 {
        match self {
            NodeType::Machine => 0,
            NodeType::Device => 1,
            NodeType::RackController => 2,
            NodeType::RegionController => 3,
            NodeType::RegionAndRackController => 4,
            NodeType::Unknown(code) => code,
        }
    }
}

impl<'de> Deserialize<'de> for NodeType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        i64::deserialize(deserializer).map(NodeType::from_code)
    }
}

impl Serialize for NodeType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_i64(self.code())
    }
}

/// A zone or resource pool as embedded in a machine (`{name, description, id, resource_uri}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedRef {
    #[serde(default)]
    pub id: i64,
    pub name: String,
    #[serde(default, deserialize_with = "null_default")]
    pub description: String,
}

/// A DNS domain as embedded in a machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainRef {
    #[serde(default)]
    pub id: i64,
    pub name: String,
    #[serde(default, deserialize_with = "opt_lenient_bool")]
    pub authoritative: Option<bool>,
    #[serde(default)]
    pub ttl: Option<i64>,
    #[serde(default, deserialize_with = "opt_lenient_bool")]
    pub is_default: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_names_and_filters_match_maas() {
        assert_eq!(MachineStatus::ALL.len(), 23);
        for (index, status) in MachineStatus::ALL.iter().enumerate() {
            assert_eq!(status.code(), index as i64);
            assert_eq!(MachineStatus::from_code(index as i64), *status);
        }
        assert_eq!(
            MachineStatus::from_code(13).name(),
            Some("Releasing failed")
        );
        assert_eq!(
            MachineStatus::FailedReleasing.filter_value(),
            Some("failed_releasing")
        );
        assert_eq!(MachineStatus::from_code(99), MachineStatus::Unknown(99));
        assert_eq!(MachineStatus::Unknown(99).to_string(), "unknown status 99");
        assert_eq!(MachineStatus::DiskErasing.simple(), SimpleStatus::Releasing);
        let failed: Vec<i64> = MachineStatus::ALL
            .iter()
            .filter(|s| s.is_failed())
            .map(|s| s.code())
            .collect();
        assert_eq!(failed, [2, 11, 13, 15, 18, 20, 22]);
    }

    #[test]
    fn statuses_round_trip_as_integers() {
        let status: MachineStatus = serde_json::from_str("6").unwrap();
        assert_eq!(status, MachineStatus::Deployed);
        assert_eq!(
            serde_json::to_string(&MachineStatus::Unknown(42)).unwrap(),
            "42"
        );
        assert_eq!(
            serde_json::from_str::<NodeType>("4").unwrap(),
            NodeType::RegionAndRackController
        );
    }
}
