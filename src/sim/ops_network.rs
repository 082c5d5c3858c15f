//! Interfaces, subnet links and subnets as the API changes them (API_REFERENCE.md §5.19–§5.20;
//! MAAS api/interfaces.py, forms/interface_link.py, forms/subnet.py).

use std::net::Ipv4Addr;

use super::model::Caller;
use super::network::{Cidr, Interface, Link, LinkMode, Subnet};
use super::reply::{MaasError, django_bool, string_bool};
use super::status::Status;
use super::transport::Params;
use super::world::{Perm, World};

impl World {
    /// An interface by id or name.
    pub fn find_interface(&self, id: u64, iface: &str) -> Result<usize, MaasError> {
        self.machines[&id]
            .interfaces
            .iter()
            .position(|i| {
                i.id.to_string() == iface || i.name == iface || format!("name:{}", i.name) == iface
            })
            .ok_or_else(|| MaasError::NotFound("No Interface matches the given query.".to_string()))
    }
    /// A subnet by id or specifier (`cidr:…`, `name:…`, a bare CIDR or name).
    pub fn find_subnet(&self, spec: &str) -> Option<u64> {
        let spec = spec.trim();
        if let Ok(id) = spec.parse::<u64>() {
            return self.subnets.contains_key(&id).then_some(id);
        }
        let (key, value) = spec.split_once(':').unwrap_or(("", spec));
        self.subnets
            .values()
            .find(|s| match key {
                "cidr" => s.cidr.to_string() == value,
                "name" => s.name == value,
                "id" => s.id.to_string() == value,
                _ => s.cidr.to_string() == value || s.name == value,
            })
            .map(|s| s.id)
    }
    fn link_gate(&self, caller: &Caller, system_id: &str, verb: &str) -> Result<u64, MaasError> {
        let id = self.node_for(caller, system_id, Perm::Admin)?;
        if !matches!(
            self.machines[&id].status,
            Status::New
                | Status::Ready
                | Status::FailedTesting
                | Status::Allocated
                | Status::Broken
        ) {
            return Err(MaasError::Conflict(format!(
                "Cannot {verb} interface because the machine is not New, Ready, Allocated, or Broken."
            )));
        }
        Ok(id)
    }
    /// `POST nodes/{id}/interfaces/{iface}/?op=link_subnet`.
    pub fn link_subnet(
        &mut self,
        caller: &Caller,
        system_id: &str,
        iface: &str,
        p: &Params,
    ) -> Result<(u64, usize), MaasError> {
        let id = self.link_gate(caller, system_id, "link subnet")?;
        let index = self.find_interface(id, iface)?;
        let mode = match p.get("mode") {
            None | Some("") => return Err(MaasError::field("mode", "This field is required.")),
            Some(m) => LinkMode::parse(m).ok_or_else(|| {
                MaasError::field(
                    "mode",
                    format!("Select a valid choice. {m} is not one of the available choices."),
                )
            })?,
        };
        let force = string_bool("force", p.get("force"), false)?;
        let subnet = match p.get("subnet").filter(|s| !s.is_empty()) {
            Some(s) => Some(self.find_subnet(s).ok_or_else(|| {
                MaasError::field(
                    "subnet",
                    "Select a valid choice. That choice is not one of the available choices.",
                )
            })?),
            None => None,
        };
        let interface = &self.machines[&id].interfaces[index];
        if matches!(mode, LinkMode::Auto | LinkMode::Static) && subnet.is_none() {
            return Err(MaasError::field("subnet", "This field is required."));
        }
        if let (Some(subnet_id), Some(vlan)) = (subnet, interface.vlan_id)
            && self.subnets[&subnet_id].vlan_id != vlan
            && !force
        {
            return Err(MaasError::field(
                "subnet",
                "Select a valid choice. That choice is not one of the available choices.",
            ));
        }
        let real_links = interface
            .links
            .iter()
            .filter(|l| l.mode != LinkMode::LinkUp)
            .count();
        if mode == LinkMode::LinkUp && real_links > 0 && !force {
            return Err(MaasError::field(
                "mode",
                "Cannot configure interface to link up (with no IP address) while other links are already configured. Specify force=True to override this behavior and delete all links.",
            ));
        }
        // default_gateway (Django BooleanField): AUTO/STATIC only, on a subnet with a gateway.
        let default_gateway = django_bool(p.get("default_gateway"));
        if default_gateway {
            if !matches!(mode, LinkMode::Auto | LinkMode::Static) {
                return Err(MaasError::field(
                    "default_gateway",
                    format!("Cannot use in mode '{}'.", mode.label()),
                ));
            }
            if let Some(s) = subnet.map(|id| &self.subnets[&id])
                && s.gateway_ip.is_none()
            {
                return Err(MaasError::field(
                    "default_gateway",
                    format!(
                        "Cannot set as default gateway because subnet {} doesn't provide a gateway IP address.",
                        s.name
                    ),
                ));
            }
        }
        if mode == LinkMode::Dhcp && interface.links.iter().any(|l| l.mode == LinkMode::Dhcp) {
            return Err(MaasError::field(
                "mode",
                "Interface is already set to DHCP.",
            ));
        }
        let ip = if mode == LinkMode::Static {
            let subnet = self.subnets[&subnet.unwrap_or_default()].clone();
            Some(self.static_ip(&subnet, p.get("ip_address"))?)
        } else {
            if p.get("ip_address").is_some_and(|v| !v.is_empty()) {
                return Err(MaasError::field(
                    "ip_address",
                    "IP address can only be set for STATIC links.",
                ));
            }
            None
        };
        let link_id = self.id();
        let vlan = subnet.map(|s| self.subnets[&s].vlan_id);
        let m = self
            .machines
            .get_mut(&id)
            .ok_or_else(MaasError::no_machine)?;
        let interface: &mut Interface = &mut m.interfaces[index];
        if mode == LinkMode::LinkUp && force {
            interface.links.clear();
        }
        interface.links.retain(|l| l.mode != LinkMode::LinkUp);
        interface.links.push(Link {
            id: link_id,
            mode,
            subnet_id: subnet,
            ip,
        });
        if let Some(vlan) = vlan {
            interface.vlan_id = Some(vlan);
        }
        if default_gateway {
            m.gateway_link = Some(link_id);
        }
        Ok((id, index))
    }
    fn static_ip(&self, subnet: &Subnet, wanted: Option<&str>) -> Result<Ipv4Addr, MaasError> {
        match wanted.filter(|w| !w.is_empty()) {
            Some(text) => {
                let ip: Ipv4Addr = text.parse().map_err(|_| {
                    MaasError::field("ip_address", "Enter a valid IPv4 or IPv6 address.")
                })?;
                if !subnet.cidr.contains(ip) {
                    return Err(MaasError::field(
                        "ip_address",
                        format!("IP address is not in the given subnet '{}'.", subnet.name),
                    ));
                }
                if self.ip_in_use(ip) {
                    return Err(MaasError::field(
                        "ip_address",
                        format!("IP address {ip} is already in use."),
                    ));
                }
                Ok(ip)
            }
            None => self.free_ip(subnet).ok_or_else(|| {
                MaasError::Unavailable(format!("No more IPs available in subnet: {}.", subnet.cidr))
            }),
        }
    }
    /// `POST nodes/{id}/interfaces/{iface}/?op=unlink_subnet`.
    pub fn unlink_subnet(
        &mut self,
        caller: &Caller,
        system_id: &str,
        iface: &str,
        p: &Params,
    ) -> Result<(u64, usize), MaasError> {
        let id = self.link_gate(caller, system_id, "unlink subnet")?;
        let index = self.find_interface(id, iface)?;
        let link = match p.get("id") {
            None | Some("") => return Err(MaasError::field("id", "This field is required.")),
            Some(v) => v,
        };
        let link_up = self.id();
        let m = self
            .machines
            .get_mut(&id)
            .ok_or_else(MaasError::no_machine)?;
        let interface = &mut m.interfaces[index];
        let position = interface
            .links
            .iter()
            .position(|l| l.id.to_string() == link)
            .ok_or_else(|| {
                MaasError::field(
                    "id",
                    "Select a valid choice. That choice is not one of the available choices.",
                )
            })?;
        interface.links.remove(position);
        if interface.links.is_empty() && interface.vlan_id.is_some() {
            // MAAS keeps a connected interface "link up" when its last link goes.
            interface.links.push(Link {
                id: link_up,
                mode: LinkMode::LinkUp,
                subnet_id: None,
                ip: None,
            });
        }
        Ok((id, index))
    }
    /// `POST subnets/`.
    pub fn create_subnet(&mut self, caller: &Caller, p: &Params) -> Result<u64, MaasError> {
        if !caller.is_admin() {
            return Err(MaasError::Forbidden(
                "This method is reserved for admin users.".to_string(),
            ));
        }
        let text = match p.get("cidr") {
            None | Some("") => return Err(MaasError::field("cidr", "This field is required.")),
            Some(c) => c,
        };
        let cidr = Cidr::parse(text)
            .ok_or_else(|| MaasError::field("cidr", "Required format: <network>/<prefixlen>."))?;
        if self.subnets.values().any(|s| s.cidr == cidr) {
            return Err(MaasError::field(
                "cidr",
                "Subnet with this Cidr already exists.",
            ));
        }
        let vlan_id = match p.get("vlan").filter(|v| !v.is_empty()) {
            Some(v) => v
                .parse::<u64>()
                .ok()
                .filter(|v| self.vlans.contains_key(v))
                .ok_or_else(|| {
                    MaasError::field(
                        "vlan",
                        "Select a valid choice. That choice is not one of the available choices.",
                    )
                })?,
            None => self.vlan_of_fabric(p)?,
        };
        // RDNS_MODE_CHOICES: 0 disabled, 1 enabled, 2 RFC 2317 (the default).
        let rdns_mode = match p.get("rdns_mode").filter(|v| !v.is_empty()) {
            None => 2,
            Some(v) => v.parse::<u8>().ok().filter(|m| *m <= 2).ok_or_else(|| {
                MaasError::field(
                    "rdns_mode",
                    format!("Select a valid choice. {v} is not one of the available choices."),
                )
            })?,
        };
        let gateway_ip = match p.get("gateway_ip").filter(|g| !g.is_empty()) {
            Some(g) => {
                let ip: Ipv4Addr = g.parse().map_err(|_| {
                    MaasError::field("gateway_ip", "Enter a valid IPv4 or IPv6 address.")
                })?;
                if !cidr.contains(ip) {
                    return Err(MaasError::field(
                        "gateway_ip",
                        "Gateway IP must be within CIDR range.",
                    ));
                }
                Some(ip)
            }
            None => None,
        };
        let name = p
            .get("name")
            .filter(|n| !n.is_empty())
            .map_or_else(|| cidr.to_string(), String::from);
        if self.subnets.values().any(|s| s.name == name) {
            return Err(MaasError::field(
                "name",
                "Subnet with this Name already exists.",
            ));
        }
        let id = self.subnets.keys().last().copied().unwrap_or(0) + 1;
        self.subnets.insert(
            id,
            Subnet {
                id,
                name,
                description: p.get("description").unwrap_or("").to_string(),
                cidr,
                gateway_ip,
                dns_servers: p
                    .get("dns_servers")
                    .map(|d| {
                        d.split([',', ' '])
                            .filter(|s| !s.is_empty())
                            .map(String::from)
                            .collect()
                    })
                    .unwrap_or_default(),
                vlan_id,
                managed: string_bool("managed", p.get("managed"), true)?,
                allow_dns: string_bool("allow_dns", p.get("allow_dns"), true)?,
                allow_proxy: string_bool("allow_proxy", p.get("allow_proxy"), true)?,
                active_discovery: string_bool(
                    "active_discovery",
                    p.get("active_discovery"),
                    false,
                )?,
                rdns_mode,
            },
        );
        Ok(id)
    }
    /// A subnet's VLAN from `fabric` (id, default fabric 0) and `vid` (default the untagged
    /// VLAN 0), used when `vlan` is not given (§5.20).
    fn vlan_of_fabric(&self, p: &Params) -> Result<u64, MaasError> {
        let fabric = match p.get("fabric").filter(|f| !f.is_empty()) {
            None => None,
            Some(f) => Some(
                f.parse::<u64>()
                    .ok()
                    .filter(|f| self.vlans.values().any(|v| v.fabric_id == *f))
                    .ok_or_else(|| {
                        MaasError::field(
                            "fabric",
                            "Select a valid choice. That choice is not one of the available choices.",
                        )
                    })?,
            ),
        };
        let vid = match p.get("vid").filter(|v| !v.is_empty()) {
            None => 0,
            Some(v) => v
                .parse::<u16>()
                .ok()
                .filter(|v| *v <= 4094)
                .ok_or_else(|| {
                    MaasError::field("vid", format!("VID {v} is not in the range 0-4094."))
                })?,
        };
        self.vlans
            .values()
            .find(|v| v.fabric_id == fabric.unwrap_or(0) && v.vid == vid)
            .map(|v| v.id)
            .ok_or_else(|| {
                MaasError::field(
                    "vid",
                    match fabric {
                        Some(f) => format!("No VLAN with vid {vid} in fabric fabric-{f}."),
                        None => format!("No VLAN with vid {vid} in default fabric."),
                    },
                )
            })
    }
}
