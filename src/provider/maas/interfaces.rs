//! Interfaces, VLANs and subnet links (API_REFERENCE §5.19; seed 000 §4.3 ApplyRoCEPhase2,
//! EnsurePxeInterfaceAuto).
//!
//! Interfaces live under `nodes/{id}/interfaces/` only (`machines/…/interfaces/` is not
//! routed). Link modes are sent upper-case (`AUTO`) and read lower-case (`auto`).

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::client::MaasClient;
use super::de::{empty_as_none, null_default};
use super::error::MaasError;
use super::subnets::{Subnet, SubnetRef};
use super::transport::{Call, Params};
use super::vlans::Vlan;

/// How an interface is linked to a subnet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkMode {
    /// MAAS assigns a static address from the subnet at deploy time.
    Auto,
    Dhcp,
    Static,
    /// Up, without an address.
    LinkUp,
    Other(String),
}

impl LinkMode {
    /// The form value MAAS's `link_subnet` takes.
    pub fn as_param(&self) -> &str {
        match self {
            LinkMode::Auto => "AUTO",
            LinkMode::Dhcp => "DHCP",
            LinkMode::Static => "STATIC",
            LinkMode::LinkUp => "LINK_UP",
            LinkMode::Other(other) => other,
        }
    }

    fn parse(text: &str) -> Self {
        match text.to_ascii_lowercase().as_str() {
            "auto" => LinkMode::Auto,
            "dhcp" => LinkMode::Dhcp,
            "static" => LinkMode::Static,
            "link_up" => LinkMode::LinkUp,
            _ => LinkMode::Other(text.to_owned()),
        }
    }

    /// As MAAS emits it.
    pub fn as_str(&self) -> String {
        self.as_param().to_ascii_lowercase()
    }
}

impl fmt::Display for LinkMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

impl<'de> Deserialize<'de> for LinkMode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(|text| LinkMode::parse(&text))
    }
}

impl Serialize for LinkMode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.as_str())
    }
}

/// One entry of an interface's `links`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// The link id `unlink_subnet` takes.
    pub id: i64,
    pub mode: LinkMode,
    /// Only when an address is assigned.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub ip_address: Option<String>,
    #[serde(default)]
    pub subnet: Option<Subnet>,
}

/// An interface's `params`: `""` in some MAAS versions, an object in others.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum InterfaceParams {
    Map(BTreeMap<String, serde_json::Value>),
    Text(String),
}

impl Default for InterfaceParams {
    fn default() -> Self {
        InterfaceParams::Map(BTreeMap::new())
    }
}

impl InterfaceParams {
    pub fn get(&self, name: &str) -> Option<&serde_json::Value> {
        match self {
            InterfaceParams::Map(map) => map.get(name),
            InterfaceParams::Text(_) => None,
        }
    }
}

/// A machine interface (`nodes/{id}/interfaces/`, or a machine's `interface_set`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    pub id: i64,
    pub name: String,
    /// `physical`, `bond`, `bridge`, `vlan` or `unknown`.
    #[serde(rename = "type", default, deserialize_with = "null_default")]
    pub interface_type: String,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub system_id: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub mac_address: Option<String>,
    #[serde(default)]
    pub enabled: bool,
    #[serde(default)]
    pub vlan: Option<Vlan>,
    #[serde(default, deserialize_with = "null_default")]
    pub links: Vec<Link>,
    #[serde(default, deserialize_with = "null_default")]
    pub parents: Vec<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub children: Vec<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub tags: Vec<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub params: InterfaceParams,
    #[serde(default)]
    pub effective_mtu: i64,
    #[serde(default)]
    pub vendor: Option<String>,
    #[serde(default)]
    pub product: Option<String>,
    #[serde(default)]
    pub firmware_version: Option<String>,
    #[serde(default)]
    pub link_connected: Option<bool>,
    /// Mbit/s.
    #[serde(default)]
    pub interface_speed: Option<i64>,
    #[serde(default)]
    pub link_speed: Option<i64>,
    #[serde(default)]
    pub numa_node: Option<i64>,
    #[serde(default)]
    pub sriov_max_vf: Option<i64>,
    #[serde(default, deserialize_with = "null_default")]
    pub resource_uri: String,
}

impl Interface {
    /// Whether the interface has a link in `mode` (to `subnet_id`, if given).
    pub fn has_link(&self, mode: &LinkMode, subnet_id: Option<i64>) -> bool {
        self.links.iter().any(|link| {
            &link.mode == mode
                && subnet_id.is_none_or(|id| link.subnet.as_ref().is_some_and(|s| s.id == id))
        })
    }
}

/// What `link_subnet` should create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkRequest {
    /// MAAS picks a static address from the subnet at deploy time.
    Auto {
        subnet: SubnetRef,
    },
    Dhcp {
        subnet: Option<SubnetRef>,
    },
    /// A fixed address (`None`: MAAS picks one now).
    Static {
        subnet: SubnetRef,
        ip_address: Option<IpAddr>,
    },
    LinkUp {
        subnet: Option<SubnetRef>,
    },
}

/// `POST nodes/{id}/interfaces/{iface}/?op=link_subnet` (admin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSubnetParams {
    pub link: LinkRequest,
    /// AUTO/STATIC only; the subnet must have a gateway.
    pub default_gateway: Option<bool>,
    /// Allow LINK_UP alongside other links (MAAS deletes them) and any VLAN.
    pub force: Option<bool>,
}

impl LinkSubnetParams {
    pub fn new(link: LinkRequest) -> Self {
        Self {
            link,
            default_gateway: None,
            force: None,
        }
    }

    fn params(&self) -> Params {
        let mut params = Params::new();
        let (mode, subnet, ip_address) = match &self.link {
            LinkRequest::Auto { subnet } => (LinkMode::Auto, Some(subnet), None),
            LinkRequest::Dhcp { subnet } => (LinkMode::Dhcp, subnet.as_ref(), None),
            LinkRequest::Static { subnet, ip_address } => {
                (LinkMode::Static, Some(subnet), ip_address.as_ref())
            }
            LinkRequest::LinkUp { subnet } => (LinkMode::LinkUp, subnet.as_ref(), None),
        };
        params.text("mode", mode.as_param());
        if let Some(subnet) = subnet {
            params.text("subnet", subnet.to_param());
        }
        if let Some(ip_address) = ip_address {
            params.text("ip_address", ip_address.to_string());
        }
        params
            .opt_flag("default_gateway", self.default_gateway)
            .opt_flag("force", self.force);
        params
    }
}

impl MaasClient {
    /// `GET nodes/{id}/interfaces/`.
    pub async fn list_interfaces(&self, system_id: &str) -> Result<Vec<Interface>, MaasError> {
        self.transport()
            .json(
                Call::get("list_interfaces", &["nodes", system_id, "interfaces"])
                    .expects("a list of interfaces"),
            )
            .await
    }

    /// `GET nodes/{id}/interfaces/{iface}/`.
    pub async fn read_interface(
        &self,
        system_id: &str,
        interface_id: i64,
    ) -> Result<Interface, MaasError> {
        let interface_id = interface_id.to_string();
        self.transport()
            .json(
                Call::get(
                    "read_interface",
                    &["nodes", system_id, "interfaces", &interface_id],
                )
                .expects("an interface object"),
            )
            .await
    }

    /// `POST nodes/{id}/interfaces/{iface}/?op=link_subnet`: returns the interface. Allowed
    /// while the machine is New, Ready, Allocated, Broken or Failed testing (409 otherwise).
    pub async fn link_subnet(
        &self,
        system_id: &str,
        interface_id: i64,
        params: &LinkSubnetParams,
    ) -> Result<Interface, MaasError> {
        let interface_id = interface_id.to_string();
        self.transport()
            .json(
                Call::post(
                    "link_subnet",
                    &["nodes", system_id, "interfaces", &interface_id],
                )
                .op("link_subnet")
                .params(params.params())
                .expects("an interface object"),
            )
            .await
    }

    /// `PUT nodes/{id}/interfaces/{iface}/` with `vlan=<VLAN id>` (admin; machine New, Ready,
    /// Allocated or Broken): moves the interface to another VLAN, as an operator does before
    /// linking it to a subnet of that VLAN. MAAS drops the links that do not fit the new VLAN.
    pub async fn set_interface_vlan(
        &self,
        system_id: &str,
        interface_id: i64,
        vlan_id: i64,
    ) -> Result<Interface, MaasError> {
        let interface_id = interface_id.to_string();
        let mut params = Params::new();
        params.number("vlan", vlan_id);
        self.transport()
            .json(
                Call::put(
                    "update_interface",
                    &["nodes", system_id, "interfaces", &interface_id],
                )
                .params(params)
                .expects("an interface object"),
            )
            .await
    }

    /// `POST nodes/{id}/interfaces/{iface}/?op=unlink_subnet` with `id=<link id>`.
    pub async fn unlink_subnet(
        &self,
        system_id: &str,
        interface_id: i64,
        link_id: i64,
    ) -> Result<Interface, MaasError> {
        let interface_id = interface_id.to_string();
        let mut params = Params::new();
        params.number("id", link_id);
        self.transport()
            .json(
                Call::post(
                    "unlink_subnet",
                    &["nodes", system_id, "interfaces", &interface_id],
                )
                .op("unlink_subnet")
                .params(params)
                .expects("an interface object"),
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_modes_read_lower_case_and_send_upper_case() {
        let modes: Vec<LinkMode> =
            serde_json::from_str(r#"["auto", "dhcp", "static", "link_up", "STATIC", "weird"]"#)
                .unwrap();
        assert_eq!(
            modes,
            [
                LinkMode::Auto,
                LinkMode::Dhcp,
                LinkMode::Static,
                LinkMode::LinkUp,
                LinkMode::Static,
                LinkMode::Other("weird".into())
            ]
        );
        assert_eq!(LinkMode::LinkUp.as_param(), "LINK_UP");
        assert_eq!(
            serde_json::to_string(&LinkMode::LinkUp).unwrap(),
            "\"link_up\""
        );
    }

    #[test]
    fn params_are_an_object_or_a_string() {
        #[derive(Deserialize)]
        struct P {
            #[serde(default, deserialize_with = "null_default")]
            params: InterfaceParams,
        }
        let empty: P = serde_json::from_str(r#"{"params": ""}"#).unwrap();
        assert_eq!(empty.params, InterfaceParams::Text(String::new()));
        let map: P = serde_json::from_str(r#"{"params": {"mtu": 9000}}"#).unwrap();
        assert_eq!(map.params.get("mtu"), Some(&serde_json::json!(9000)));
        let null: P = serde_json::from_str(r#"{"params": null}"#).unwrap();
        assert_eq!(null.params, InterfaceParams::default());
    }
}
