//! Value types shared by MAAS resources (API_REFERENCE §4.1 machine status, §3.1 zone/pool/
//! domain references, node types).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::de::{null_default, opt_lenient_bool};
use crate::lifecycle::{MaasStatus, SimpleStatus};

/// A machine's `status` (MAAS `NODE_STATUS`): one of the statuses MAAS 3.x defines — their
/// codes, `status_name`s and simple statuses are [`MaasStatus`]'s, the one table of
/// API_REFERENCE §4.1 — or the code of a newer MAAS, kept as `Unknown(code)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MachineStatus {
    Known(MaasStatus),
    Unknown(i64),
}

impl MachineStatus {
    pub fn from_code(code: i64) -> Self {
        u8::try_from(code)
            .ok()
            .and_then(MaasStatus::from_code)
            .map_or(MachineStatus::Unknown(code), MachineStatus::Known)
    }

    pub fn code(self) -> i64 {
        match self {
            MachineStatus::Known(status) => status.code().into(),
            MachineStatus::Unknown(code) => code,
        }
    }

    /// The status, when this client knows it.
    pub fn known(self) -> Option<MaasStatus> {
        match self {
            MachineStatus::Known(status) => Some(status),
            MachineStatus::Unknown(_) => None,
        }
    }

    /// MAAS's `status_name` (`"Releasing failed"`, not "Failed releasing").
    pub fn name(self) -> Option<&'static str> {
        self.known().map(MaasStatus::name)
    }

    pub fn simple(self) -> SimpleStatus {
        self.known().map_or(SimpleStatus::Other, MaasStatus::simple)
    }

    /// One of MAAS's failed states (`Failed …`, `Releasing failed`): needs attention.
    pub fn is_failed(self) -> bool {
        self.known().is_some_and(MaasStatus::is_failed)
    }
}

impl From<MaasStatus> for MachineStatus {
    fn from(status: MaasStatus) -> Self {
        MachineStatus::Known(status)
    }
}

impl PartialEq<MaasStatus> for MachineStatus {
    fn eq(&self, other: &MaasStatus) -> bool {
        self.known() == Some(*other)
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

/// A machine's `power_state` (`provisioningserver/enum.py`), keeping unknown values.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum PowerState {
    On,
    Off,
    /// The power type cannot be queried, or it has not been queried yet.
    #[default]
    Unknown,
    /// The last query failed (BMC unreachable, wrong credentials).
    Error,
    Other(String),
}

impl PowerState {
    pub fn as_str(&self) -> &str {
        match self {
            PowerState::On => "on",
            PowerState::Off => "off",
            PowerState::Unknown => "unknown",
            PowerState::Error => "error",
            PowerState::Other(other) => other,
        }
    }

    fn parse(text: &str) -> Self {
        match text {
            "on" => PowerState::On,
            "off" => PowerState::Off,
            "unknown" => PowerState::Unknown,
            "error" => PowerState::Error,
            other => PowerState::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for PowerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for PowerState {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Option::<String>::deserialize(deserializer)?
            .map_or(PowerState::Unknown, |text| PowerState::parse(&text)))
    }
}

impl Serialize for PowerState {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
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
    fn status_codes_and_names_are_maas_s_and_unknown_codes_are_kept() {
        for status in MaasStatus::ALL {
            let read = MachineStatus::from_code(status.code().into());
            assert_eq!(read, status);
            assert_eq!(read.code(), i64::from(status.code()));
        }
        assert_eq!(
            MachineStatus::from_code(13).name(),
            Some("Releasing failed")
        );
        assert_eq!(MachineStatus::from_code(99), MachineStatus::Unknown(99));
        assert_eq!(MachineStatus::from_code(-1), MachineStatus::Unknown(-1));
        assert_eq!(MachineStatus::Unknown(99).to_string(), "unknown status 99");
        assert_eq!(MachineStatus::Unknown(99).simple(), SimpleStatus::Other);
        assert!(!MachineStatus::Unknown(99).is_failed());
        assert_eq!(
            MachineStatus::from_code(14).simple(),
            SimpleStatus::Releasing
        );
        let failed: Vec<i64> = (0..30)
            .map(MachineStatus::from_code)
            .filter(|s| s.is_failed())
            .map(|s| s.code())
            .collect();
        assert_eq!(failed, [2, 11, 13, 15, 18, 20, 22]);
    }

    #[test]
    fn statuses_round_trip_as_integers() {
        let status: MachineStatus = serde_json::from_str("6").unwrap();
        assert_eq!(status, MaasStatus::Deployed);
        assert_eq!(
            serde_json::to_string(&MachineStatus::Unknown(42)).unwrap(),
            "42"
        );
        assert_eq!(
            serde_json::from_str::<NodeType>("4").unwrap(),
            NodeType::RegionAndRackController
        );
    }

    #[test]
    fn power_states_parse_and_keep_unknown_values() {
        let states: Vec<PowerState> =
            serde_json::from_str(r#"["on", "off", "unknown", "error", "sleeping", null]"#).unwrap();
        assert_eq!(
            states,
            [
                PowerState::On,
                PowerState::Off,
                PowerState::Unknown,
                PowerState::Error,
                PowerState::Other("sleeping".into()),
                PowerState::Unknown
            ]
        );
        assert_eq!(serde_json::to_string(&PowerState::Off).unwrap(), "\"off\"");
    }
}
