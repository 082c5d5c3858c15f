//! Fabrics, VLANs, subnets, interfaces and their links (API_REFERENCE.md §5.19–§5.20).
//!
//! IPv4 only: the reconciler links PXE interfaces (AUTO) and RoCE ports (STATIC on /31s).

use std::net::Ipv4Addr;

use serde::Serialize;

/// An IPv4 network in CIDR form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cidr {
    pub network: Ipv4Addr,
    pub prefix: u8,
}

impl Cidr {
    /// Parses `10.0.0.0/24`; host bits must be zero (MAAS normalises them; we refuse them).
    pub fn parse(text: &str) -> Option<Cidr> {
        let (addr, prefix) = text.trim().split_once('/')?;
        let network: Ipv4Addr = addr.parse().ok()?;
        let prefix: u8 = prefix.parse().ok()?;
        if prefix > 32 {
            return None;
        }
        let cidr = Cidr { network, prefix };
        (u32::from(network) & !cidr.mask() == 0).then_some(cidr)
    }

    fn mask(self) -> u32 {
        if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - self.prefix)
        }
    }

    pub fn contains(self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask() == u32::from(self.network)
    }

    /// Addresses a host may use: every address of a /31 or /32 (RFC 3021), otherwise all but
    /// the network and broadcast addresses.
    pub fn hosts(self) -> impl Iterator<Item = Ipv4Addr> {
        let base = u32::from(self.network);
        let size: u64 = 1u64 << (32 - u32::from(self.prefix));
        let (first, last) = if self.prefix >= 31 {
            (0, size - 1)
        } else {
            (1, size - 2)
        };
        (first..=last).map(move |offset| Ipv4Addr::from(base + offset as u32))
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// A fabric. Fabric 0 (`fabric-0`) holds the PXE VLAN; commissioning adds one per NIC it
/// finds unlinked (`guess_vlan_for_interface`).
#[derive(Debug, Clone, PartialEq)]
pub struct Fabric {
    pub id: u64,
    /// `None`: MAAS's default name `fabric-<id>`.
    pub name: Option<String>,
    pub description: String,
    pub class_type: Option<String>,
}

impl Fabric {
    pub fn new(id: u64) -> Fabric {
        Fabric {
            id,
            name: None,
            description: String::new(),
            class_type: None,
        }
    }

    /// `Fabric.get_name()`.
    pub fn name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("fabric-{}", self.id))
    }
}

/// A VLAN of a fabric; every fabric has its untagged one (VID 0).
#[derive(Debug, Clone, PartialEq)]
pub struct Vlan {
    pub id: u64,
    pub vid: u16,
    pub fabric_id: u64,
    /// The fabric's name, kept in step when the fabric is renamed.
    pub fabric: String,
    /// `None`: MAAS's default name (`untagged` for VID 0, else the VID).
    pub name: Option<String>,
    pub description: String,
    pub mtu: u32,
    pub dhcp_on: bool,
    /// The rack controller serving it (system id): only the PXE VLAN has one.
    pub primary_rack: Option<String>,
    pub space: Option<String>,
}

impl Vlan {
    /// The untagged VLAN of a new fabric.
    pub fn untagged(id: u64, fabric_id: u64) -> Vlan {
        Vlan {
            id,
            vid: 0,
            fabric_id,
            fabric: format!("fabric-{fabric_id}"),
            name: None,
            description: String::new(),
            mtu: 1500,
            dhcp_on: false,
            primary_rack: None,
            space: None,
        }
    }

    /// `VLAN.get_name()`.
    pub fn name(&self) -> String {
        match (&self.name, self.vid) {
            (Some(name), _) => name.clone(),
            (None, 0) => "untagged".to_string(),
            (None, vid) => vid.to_string(),
        }
    }
}

/// The VLAN object MAAS renders (`DISPLAYED_VLAN_FIELDS`, api/vlans.py).
#[derive(Debug, Serialize)]
pub struct VlanView {
    pub vid: u16,
    pub mtu: u32,
    pub dhcp_on: bool,
    pub external_dhcp: Option<String>,
    pub relay_vlan: Option<u64>,
    pub fabric: String,
    pub primary_rack: Option<String>,
    pub name: String,
    pub id: u64,
    pub space: String,
    pub secondary_rack: Option<String>,
    pub fabric_id: u64,
    pub resource_uri: String,
}

impl Vlan {
    pub fn view(&self) -> VlanView {
        VlanView {
            vid: self.vid,
            mtu: self.mtu,
            dhcp_on: self.dhcp_on,
            external_dhcp: None,
            relay_vlan: None,
            fabric: self.fabric.clone(),
            primary_rack: self.primary_rack.clone(),
            name: self.name(),
            id: self.id,
            space: self
                .space
                .clone()
                .unwrap_or_else(|| "undefined".to_string()),
            secondary_rack: None,
            fabric_id: self.fabric_id,
            resource_uri: format!("/MAAS/api/2.0/vlans/{}/", self.id),
        }
    }
}

/// A fabric as MAAS renders it (`DISPLAYED_FABRIC_FIELDS`: id, name, class_type, vlans).
#[derive(Debug, Serialize)]
pub struct FabricView {
    pub class_type: Option<String>,
    pub id: u64,
    pub name: String,
    pub vlans: Vec<VlanView>,
    pub resource_uri: String,
}

impl Fabric {
    pub fn view<'a>(&self, vlans: impl Iterator<Item = &'a Vlan>) -> FabricView {
        let mut vlans: Vec<&Vlan> = vlans.filter(|v| v.fabric_id == self.id).collect();
        vlans.sort_by_key(|v| v.id);
        FabricView {
            class_type: self.class_type.clone(),
            id: self.id,
            name: self.name(),
            vlans: vlans.into_iter().map(Vlan::view).collect(),
            resource_uri: format!("/MAAS/api/2.0/fabrics/{}/", self.id),
        }
    }
}

/// A subnet.
#[derive(Debug, Clone, PartialEq)]
pub struct Subnet {
    pub id: u64,
    pub name: String,
    pub description: String,
    pub cidr: Cidr,
    pub gateway_ip: Option<Ipv4Addr>,
    pub dns_servers: Vec<String>,
    pub vlan_id: u64,
    pub managed: bool,
    pub allow_dns: bool,
    pub allow_proxy: bool,
    pub active_discovery: bool,
    pub rdns_mode: u8,
}

/// `DISPLAYED_SUBNET_FIELDS` + resource_uri.
#[derive(Debug, Serialize)]
pub struct SubnetView {
    pub name: String,
    pub description: String,
    pub vlan: VlanView,
    pub cidr: String,
    pub rdns_mode: u8,
    pub gateway_ip: Option<String>,
    pub dns_servers: Vec<String>,
    pub allow_dns: bool,
    pub allow_proxy: bool,
    pub active_discovery: bool,
    pub managed: bool,
    pub disabled_boot_architectures: Vec<String>,
    pub id: u64,
    pub space: &'static str,
    pub resource_uri: String,
}

impl Subnet {
    pub fn view(&self, vlan: &Vlan) -> SubnetView {
        SubnetView {
            name: self.name.clone(),
            description: self.description.clone(),
            vlan: vlan.view(),
            cidr: self.cidr.to_string(),
            rdns_mode: self.rdns_mode,
            gateway_ip: self.gateway_ip.map(|g| g.to_string()),
            dns_servers: self.dns_servers.clone(),
            allow_dns: self.allow_dns,
            allow_proxy: self.allow_proxy,
            active_discovery: self.active_discovery,
            managed: self.managed,
            disabled_boot_architectures: Vec::new(),
            id: self.id,
            space: "undefined",
            resource_uri: format!("/MAAS/api/2.0/subnets/{}/", self.id),
        }
    }
}

/// Link modes (stored lower-case, accepted case-insensitively).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkMode {
    Auto,
    Dhcp,
    Static,
    LinkUp,
}

impl LinkMode {
    pub fn parse(text: &str) -> Option<LinkMode> {
        Some(match text.to_ascii_lowercase().as_str() {
            "auto" => LinkMode::Auto,
            "dhcp" => LinkMode::Dhcp,
            "static" => LinkMode::Static,
            "link_up" => LinkMode::LinkUp,
            _ => return None,
        })
    }

    /// `INTERFACE_LINK_TYPE_CHOICES`' display name (form error texts).
    pub fn label(self) -> &'static str {
        match self {
            LinkMode::Auto => "Auto IP",
            LinkMode::Dhcp => "DHCP",
            LinkMode::Static => "Static IP",
            LinkMode::LinkUp => "Link up",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LinkMode::Auto => "auto",
            LinkMode::Dhcp => "dhcp",
            LinkMode::Static => "static",
            LinkMode::LinkUp => "link_up",
        }
    }
}

/// A link of an interface to a subnet (a StaticIPAddress row in MAAS).
#[derive(Debug, Clone)]
pub struct Link {
    pub id: u64,
    pub mode: LinkMode,
    pub subnet_id: Option<u64>,
    /// STATIC: always; AUTO: claimed at deployment, released on release; DHCP: none.
    pub ip: Option<Ipv4Addr>,
}

/// A physical interface.
#[derive(Debug, Clone)]
pub struct Interface {
    pub id: u64,
    pub name: String,
    pub mac: String,
    pub vlan_id: Option<u64>,
    pub links: Vec<Link>,
    pub speed_mbps: u64,
    pub vendor: String,
    pub product: String,
}

/// A link as MAAS renders it (`ip_address` and `subnet` only when present).
#[derive(Debug, Serialize)]
pub struct LinkView {
    pub id: u64,
    pub mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subnet: Option<SubnetView>,
}

/// `DISPLAYED_INTERFACE_FIELDS` + resource_uri.
#[derive(Debug, Serialize)]
pub struct InterfaceView {
    pub params: serde_json::Value,
    pub id: u64,
    pub system_id: String,
    pub name: String,
    pub r#type: &'static str,
    pub vlan: Option<VlanView>,
    pub mac_address: String,
    pub parents: Vec<String>,
    pub children: Vec<String>,
    pub tags: Vec<String>,
    pub enabled: bool,
    pub links: Vec<LinkView>,
    pub discovered: Option<Vec<serde_json::Value>>,
    pub effective_mtu: u32,
    pub vendor: String,
    pub product: String,
    pub firmware_version: String,
    pub link_connected: bool,
    pub interface_speed: u64,
    pub link_speed: u64,
    pub numa_node: u32,
    pub sriov_max_vf: u32,
    pub resource_uri: String,
}

/// Lookups a machine's rendering needs: the VLANs and subnets its interfaces embed, and the
/// ids of its zone and pool (by name).
pub trait NetworkLookup {
    fn vlan(&self, id: u64) -> Option<&Vlan>;
    fn subnet(&self, id: u64) -> Option<&Subnet>;
    fn zone_id(&self, _name: &str) -> Option<u64> {
        None
    }
    fn pool_id(&self, _name: &str) -> Option<u64> {
        None
    }
}

impl Interface {
    pub fn view(&self, system_id: &str, net: &dyn NetworkLookup) -> InterfaceView {
        let vlan = self.vlan_id.and_then(|id| net.vlan(id));
        InterfaceView {
            params: serde_json::Value::String(String::new()),
            id: self.id,
            system_id: system_id.to_string(),
            name: self.name.clone(),
            r#type: "physical",
            vlan: vlan.map(Vlan::view),
            mac_address: self.mac.clone(),
            parents: Vec::new(),
            children: Vec::new(),
            tags: Vec::new(),
            enabled: true,
            links: self
                .links
                .iter()
                .map(|link| LinkView {
                    id: link.id,
                    mode: link.mode.as_str(),
                    ip_address: link.ip.map(|ip| ip.to_string()),
                    subnet: link.subnet_id.and_then(|id| {
                        let subnet = net.subnet(id)?;
                        Some(subnet.view(net.vlan(subnet.vlan_id)?))
                    }),
                })
                .collect(),
            discovered: Some(Vec::new()),
            effective_mtu: vlan.map_or(1500, |v| v.mtu),
            vendor: self.vendor.clone(),
            product: self.product.clone(),
            firmware_version: "22.31.6".to_string(),
            link_connected: true,
            interface_speed: self.speed_mbps,
            link_speed: if vlan.is_some() { self.speed_mbps } else { 0 },
            numa_node: 0,
            sriov_max_vf: 0,
            resource_uri: format!("/MAAS/api/2.0/nodes/{system_id}/interfaces/{}/", self.id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_parses_and_enumerates_hosts() {
        let c = Cidr::parse("172.30.9.60/31").unwrap();
        let hosts: Vec<_> = c.hosts().collect();
        assert_eq!(
            hosts,
            vec![Ipv4Addr::new(172, 30, 9, 60), Ipv4Addr::new(172, 30, 9, 61)]
        );
        let c = Cidr::parse("10.0.0.0/30").unwrap();
        assert_eq!(c.hosts().count(), 2);
        assert!(c.contains(Ipv4Addr::new(10, 0, 0, 3)));
        assert!(!c.contains(Ipv4Addr::new(10, 0, 0, 4)));
        assert_eq!(Cidr::parse("10.0.0.1/24"), None);
        assert_eq!(Cidr::parse("10.0.0.0/33"), None);
        assert_eq!(Cidr::parse("nonsense"), None);
        assert_eq!(LinkMode::parse("STATIC"), Some(LinkMode::Static));
    }
}
