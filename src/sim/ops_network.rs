//! Interfaces, subnet links and subnets as the API changes them (API_REFERENCE.md §5.19–§5.20;
//! MAAS api/interfaces.py, forms/interface_link.py, forms/subnet.py).

use std::net::Ipv4Addr;

use super::model::Caller;
use super::network::{Cidr, Interface, Link, LinkMode, Subnet, Vlan};
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
    /// `SpecifierOrModelChoiceField` over the subnets of `vlan` (every subnet when `None`): a
    /// numeric id outside the choices is `None found with id=N.`, a specifier that matches none
    /// Django's invalid choice.
    fn subnet_choice(&self, spec: &str, vlan: Option<u64>) -> Result<u64, String> {
        let in_scope =
            |id: &u64| vlan.is_none_or(|v| self.subnets.get(id).is_some_and(|s| s.vlan_id == v));
        let spec = spec.trim();
        if let Ok(id) = spec.parse::<u64>() {
            return Some(id)
                .filter(|id| self.subnets.contains_key(id) && in_scope(id))
                .ok_or_else(|| format!("None found with id={spec}."));
        }
        self.find_subnet(spec).filter(in_scope).ok_or_else(|| {
            "Select a valid choice. That choice is not one of the available choices.".to_string()
        })
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
        // CaseInsensitiveChoiceField with compose_invalid_choice_text (forms/interface_link.py).
        let mode = match p.get("mode") {
            None | Some("") => return Err(MaasError::field("mode", "This field is required.")),
            Some(m) => LinkMode::parse(m).ok_or_else(|| {
                MaasError::field(
                    "mode",
                    format!(
                        "'{m}' is not a valid mode.  It should be one of: 'auto', 'dhcp', \
                         'static', 'link_up'."
                    ),
                )
            })?,
        };
        let force = string_bool("force", p.get("force"), false)?;
        // The subnet field offers only the subnets of the interface's VLAN, unless the
        // interface has none or the link is forced.
        let scope = (!force)
            .then(|| self.machines[&id].interfaces[index].vlan_id)
            .flatten();
        let subnet = match p.get("subnet").filter(|s| !s.is_empty()) {
            Some(s) => Some(
                self.subnet_choice(s, scope)
                    .map_err(|m| MaasError::field("subnet", m))?,
            ),
            None => None,
        };
        let interface = &self.machines[&id].interfaces[index];
        if matches!(mode, LinkMode::Auto | LinkMode::Static) && subnet.is_none() {
            return Err(MaasError::field("subnet", "This field is required."));
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
                    format!("Cannot use in mode '{}'.", mode.as_str()),
                ));
            }
            if let Some(s) = subnet.map(|id| &self.subnets[&id])
                && s.gateway_ip.is_none()
            {
                return Err(MaasError::field(
                    "default_gateway",
                    format!(
                        "Cannot set as default gateway because subnet {} doesn't provide a gateway IP address.",
                        self.subnet_label(s)
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
            // GenericIPAddressField: checked in every mode, used only by STATIC.
            if p.get("ip_address")
                .is_some_and(|v| !v.is_empty() && v.parse::<std::net::IpAddr>().is_err())
            {
                return Err(MaasError::field(
                    "ip_address",
                    "Enter a valid IPv4 or IPv6 address.",
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
        // forms/interface_link.py save: LINK_UP, or any forced link (which may pick a subnet
        // of another VLAN and so moves the interface), replaces every link.
        if mode == LinkMode::LinkUp || force {
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
    /// The address of a STATIC link: the form checks the text and the subnet (400 JSON), the
    /// model its availability (`StaticIPAddressUnavailable`: 404 text, models/interface.py).
    fn static_ip(&self, subnet: &Subnet, wanted: Option<&str>) -> Result<Ipv4Addr, MaasError> {
        match wanted.filter(|w| !w.is_empty()) {
            Some(text) => {
                let ip: Ipv4Addr = text.parse().map_err(|_| {
                    MaasError::field("ip_address", "Enter a valid IPv4 or IPv6 address.")
                })?;
                if !subnet.cidr.contains(ip) {
                    return Err(MaasError::field(
                        "ip_address",
                        format!(
                            "IP address is not in the given subnet '{}'.",
                            self.subnet_label(subnet)
                        ),
                    ));
                }
                if self.ip_in_use(ip) {
                    return Err(MaasError::NotFound(
                        "IP address is already in use.".to_string(),
                    ));
                }
                Ok(ip)
            }
            None => self.free_ip(subnet).ok_or_else(|| {
                MaasError::Unavailable(format!("No more IPs available in subnet: {}.", subnet.cidr))
            }),
        }
    }

    /// `Subnet.__str__`: `name:cidr(vid=N)`.
    fn subnet_label(&self, subnet: &Subnet) -> String {
        let vid = self.vlans.get(&subnet.vlan_id).map_or(0, |v| v.vid);
        format!("{}:{}(vid={vid})", subnet.name, subnet.cidr)
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
                // InterfaceUnlinkForm: compose_invalid_choice_text over the link ids.
                let ids: Vec<String> = interface
                    .links
                    .iter()
                    .map(|l| format!("'{}'", l.id))
                    .collect();
                MaasError::field(
                    "id",
                    format!(
                        "'{link}' is not a valid id.  It should be one of: {}.",
                        ids.join(", ")
                    ),
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

    /// `PUT nodes/{id}/interfaces/{iface}/` (api/interfaces.py `update`): admin; New, Ready,
    /// Failed testing, Allocated or Broken (a Deployed machine only renames). A new VLAN drops
    /// every link (signals/interfaces.py `interface_vlan_update`) and deletes the old fabric
    /// when nothing is left on it.
    pub fn update_interface(
        &mut self,
        caller: &Caller,
        system_id: &str,
        iface: &str,
        p: &Params,
    ) -> Result<(u64, usize), MaasError> {
        let id = self.node_for(caller, system_id, Perm::Admin)?;
        let status = self.machines[&id].status;
        if !matches!(
            status,
            Status::New
                | Status::Ready
                | Status::FailedTesting
                | Status::Allocated
                | Status::Broken
                | Status::Deployed
        ) {
            return Err(MaasError::Conflict(
                "Cannot update interface interface because the machine is not New, Ready, \
                 Allocated, or Broken."
                    .to_string(),
            ));
        }
        let index = self.find_interface(id, iface)?;
        let vlan = match p.get("vlan").filter(|v| !v.is_empty()) {
            Some(_) if status == Status::Deployed => None,
            Some(v) => Some(
                v.parse::<u64>()
                    .ok()
                    .filter(|v| self.vlans.contains_key(v))
                    .ok_or_else(|| {
                        MaasError::field(
                            "vlan",
                            "Select a valid choice. That choice is not one of the available choices.",
                        )
                    })?,
            ),
            None => None,
        };
        let name = p.get("name").filter(|n| !n.is_empty()).map(String::from);
        if let Some(name) = &name
            && self.machines[&id]
                .interfaces
                .iter()
                .enumerate()
                .any(|(i, other)| i != index && &other.name == name)
        {
            return Err(MaasError::field(
                "name",
                format!("Interface with name '{name}' already exists on this node."),
            ));
        }
        let m = self
            .machines
            .get_mut(&id)
            .ok_or_else(MaasError::no_machine)?;
        let interface = &mut m.interfaces[index];
        if let Some(name) = name {
            interface.name = name;
        }
        let old = interface.vlan_id;
        if let Some(vlan) = vlan
            && old != Some(vlan)
        {
            interface.vlan_id = Some(vlan);
            interface.links.clear();
            if let Some(old) = old {
                self.drop_fabric_if_empty(old);
            }
        }
        Ok((id, index))
    }

    /// Deletes the fabric of VLAN `vlan` when no subnet and no interface uses any of its VLANs.
    fn drop_fabric_if_empty(&mut self, vlan: u64) {
        let Some(fabric) = self.vlans.get(&vlan).map(|v| v.fabric_id) else {
            return;
        };
        if fabric == 0 {
            return;
        }
        let ids: Vec<u64> = self
            .vlans
            .values()
            .filter(|v| v.fabric_id == fabric)
            .map(|v| v.id)
            .collect();
        let used = self.subnets.values().any(|s| ids.contains(&s.vlan_id))
            || self
                .machines
                .values()
                .flat_map(|m| m.interfaces.iter())
                .any(|i| i.vlan_id.is_some_and(|v| ids.contains(&v)));
        if !used {
            self.fabrics.remove(&fabric);
            self.vlans.retain(|_, v| v.fabric_id != fabric);
        }
    }

    /// A fabric by id (`fabrics/{id}/`): 404 `No Fabric matches the given query.`
    pub fn find_fabric(&self, spec: &str) -> Result<u64, MaasError> {
        spec.parse::<u64>()
            .ok()
            .filter(|id| self.fabrics.contains_key(id))
            .or_else(|| {
                self.fabrics
                    .values()
                    .find(|f| f.name() == spec.trim_start_matches("name:"))
                    .map(|f| f.id)
            })
            .ok_or_else(|| MaasError::NotFound("No Fabric matches the given query.".to_string()))
    }

    /// A VLAN by fabric and VID (`fabrics/{id}/vlans/{vid}/`) or by its id (`vlans/{id}/`).
    pub fn find_vlan(&self, fabric: Option<&str>, vid_or_id: &str) -> Result<u64, MaasError> {
        match fabric {
            Some(fabric) => {
                let fabric = self.find_fabric(fabric)?;
                vid_or_id
                    .parse::<u16>()
                    .ok()
                    .and_then(|vid| {
                        self.vlans
                            .values()
                            .find(|v| v.fabric_id == fabric && v.vid == vid)
                    })
                    .map(|v| v.id)
                    .ok_or_else(|| {
                        MaasError::NotFound("No VLAN matches the given query.".to_string())
                    })
            }
            None => vid_or_id
                .parse::<u64>()
                .ok()
                .filter(|id| self.vlans.contains_key(id))
                .ok_or_else(|| {
                    MaasError::NotFound("VLAN with specified ID does not exist.".to_string())
                }),
        }
    }

    /// `POST fabrics/` (admin; FabricForm): a fabric with its untagged VLAN.
    pub fn create_fabric(&mut self, caller: &Caller, p: &Params) -> Result<u64, MaasError> {
        if !caller.is_admin() {
            return Err(MaasError::Forbidden(String::new()));
        }
        let name = p.get("name").filter(|n| !n.is_empty());
        if let Some(name) = name
            && self.fabrics.values().any(|f| f.name() == name)
        {
            return Err(MaasError::field(
                "name",
                "Fabric with this Name already exists.",
            ));
        }
        let vlan = self.new_fabric();
        let fabric = self.vlans[&vlan].fabric_id;
        if let Some(f) = self.fabrics.get_mut(&fabric) {
            f.name = name.map(String::from);
            f.description = p.get("description").unwrap_or("").to_string();
            f.class_type = p
                .get("class_type")
                .filter(|c| !c.is_empty())
                .map(String::from);
        }
        self.rename_fabric_vlans(fabric);
        Ok(fabric)
    }

    /// `PUT fabrics/{id}/` (admin): name, description, class_type; omitted fields unchanged.
    pub fn update_fabric(
        &mut self,
        caller: &Caller,
        spec: &str,
        p: &Params,
    ) -> Result<u64, MaasError> {
        if !caller.is_admin() {
            return Err(MaasError::Forbidden(String::new()));
        }
        let id = self.find_fabric(spec)?;
        if let Some(name) = p.get("name").filter(|n| !n.is_empty())
            && self
                .fabrics
                .values()
                .any(|f| f.id != id && f.name() == name)
        {
            return Err(MaasError::field(
                "name",
                "Fabric with this Name already exists.",
            ));
        }
        if let Some(f) = self.fabrics.get_mut(&id) {
            if let Some(name) = p.get("name") {
                f.name = Some(name.to_string()).filter(|n| !n.is_empty());
            }
            if let Some(description) = p.get("description") {
                f.description = description.to_string();
            }
            if let Some(class_type) = p.get("class_type") {
                f.class_type = Some(class_type.to_string()).filter(|c| !c.is_empty());
            }
        }
        self.rename_fabric_vlans(id);
        Ok(id)
    }

    /// VLANs show their fabric's name.
    fn rename_fabric_vlans(&mut self, fabric: u64) {
        let name = self
            .fabrics
            .get(&fabric)
            .map(|f| f.name())
            .unwrap_or_default();
        for vlan in self.vlans.values_mut().filter(|v| v.fabric_id == fabric) {
            vlan.fabric = name.clone();
        }
    }

    /// `PUT fabrics/{id}/vlans/{vid}/` (admin; forms/vlan.py): name, description, mtu (at
    /// least 552), dhcp_on (needs a primary rack), space.
    pub fn update_vlan(&mut self, caller: &Caller, vlan: u64, p: &Params) -> Result<(), MaasError> {
        if !caller.is_admin() {
            return Err(MaasError::Forbidden(String::new()));
        }
        let mtu = match p.get("mtu").filter(|m| !m.is_empty()) {
            None => None,
            Some(m) => {
                let value: i64 = m
                    .parse()
                    .map_err(|_| MaasError::field("mtu", "Enter a whole number."))?;
                if value < 552 {
                    return Err(MaasError::field(
                        "mtu",
                        "Ensure this value is greater than or equal to 552.",
                    ));
                }
                Some(u32::try_from(value).map_err(|_| {
                    MaasError::field("mtu", "Ensure this value is less than or equal to 65535.")
                })?)
            }
        };
        let dhcp_on = match p.get("dhcp_on") {
            None => None,
            value => Some(django_bool(value)),
        };
        let current = &self.vlans[&vlan];
        if dhcp_on == Some(true) && current.primary_rack.is_none() {
            return Err(MaasError::field(
                "__all__",
                "dhcp can only be turned on when a primary rack controller is set.",
            ));
        }
        let Some(v) = self.vlans.get_mut(&vlan) else {
            return Err(MaasError::NotFound(
                "No VLAN matches the given query.".to_string(),
            ));
        };
        if let Some(name) = p.get("name") {
            v.name = Some(name.to_string()).filter(|n| !n.is_empty());
        }
        if let Some(description) = p.get("description") {
            v.description = description.to_string();
        }
        if let Some(mtu) = mtu {
            v.mtu = mtu;
        }
        if let Some(dhcp_on) = dhcp_on {
            v.dhcp_on = dhcp_on;
        }
        if let Some(space) = p.get("space") {
            v.space = Some(space.to_string()).filter(|s| !s.is_empty());
        }
        Ok(())
    }

    /// `DELETE fabrics/{id}/` (admin; models/fabric.py `delete`).
    pub fn delete_fabric(&mut self, caller: &Caller, spec: &str) -> Result<(), MaasError> {
        if !caller.is_admin() {
            return Err(MaasError::Forbidden(String::new()));
        }
        let id = self.find_fabric(spec)?;
        if id == 0 {
            return Err(MaasError::BadRequest(
                "This fabric is the default fabric, it cannot be deleted.".to_string(),
            ));
        }
        let vlans: Vec<u64> = self
            .vlans
            .values()
            .filter(|v| v.fabric_id == id)
            .map(|v| v.id)
            .collect();
        let mut subnets: Vec<String> = self
            .subnets
            .values()
            .filter(|s| vlans.contains(&s.vlan_id))
            .map(|s| s.cidr.to_string())
            .collect();
        subnets.sort();
        if !subnets.is_empty() {
            return Err(MaasError::BadRequest(format!(
                "Can't delete fabric; the following subnets are still present: {}",
                subnets.join(", ")
            )));
        }
        let connected: Vec<String> = self
            .machines
            .values()
            .flat_map(|m| {
                m.interfaces
                    .iter()
                    .filter(|i| i.vlan_id.is_some_and(|v| vlans.contains(&v)))
                    .map(move |i| format!("{} on {}", i.name, m.hostname))
            })
            .collect();
        if !connected.is_empty() {
            return Err(MaasError::BadRequest(format!(
                "Can't delete fabric; the following interfaces are still connected: {}",
                connected.join(", ")
            )));
        }
        self.fabrics.remove(&id);
        self.vlans.retain(|_, v| v.fabric_id != id);
        Ok(())
    }

    /// `POST fabrics/{id}/vlans/` (admin; VLANForm): `vid` required, 0–4094, new on the fabric.
    pub fn create_vlan(
        &mut self,
        caller: &Caller,
        fabric: &str,
        p: &Params,
    ) -> Result<u64, MaasError> {
        let fabric = self.find_fabric(fabric)?;
        if !caller.is_admin() {
            return Err(MaasError::Forbidden(String::new()));
        }
        let vid = match p.get("vid").filter(|v| !v.is_empty()) {
            None => return Err(MaasError::field("vid", "This field is required.")),
            Some(v) => v
                .parse::<i64>()
                .map_err(|_| MaasError::field("vid", "Enter a whole number."))?,
        };
        let vid = u16::try_from(vid)
            .ok()
            .filter(|v| *v <= 4094)
            .ok_or_else(|| MaasError::field("vid", "VID must be between 0 and 4094."))?;
        if self
            .vlans
            .values()
            .any(|v| v.fabric_id == fabric && v.vid == vid)
        {
            return Err(MaasError::field(
                "__all__",
                "VLAN with this Vid and Fabric already exists.",
            ));
        }
        let id = self.vlans.keys().last().map_or(5001, |v| v + 1);
        let mut vlan = Vlan::untagged(id, fabric);
        vlan.vid = vid;
        vlan.fabric = self.fabrics[&fabric].name();
        self.vlans.insert(id, vlan);
        if let Err(err) = self.update_vlan(caller, id, p) {
            self.vlans.remove(&id);
            return Err(err);
        }
        Ok(id)
    }

    /// `DELETE …/vlans/{vid}/` (admin): not the fabric's untagged VLAN, not one in use.
    pub fn delete_vlan(&mut self, caller: &Caller, vlan: u64) -> Result<(), MaasError> {
        if !caller.is_admin() {
            return Err(MaasError::Forbidden(String::new()));
        }
        let v = &self.vlans[&vlan];
        if v.vid == 0 {
            return Err(MaasError::BadRequest(format!(
                "This VLAN is the default VLAN for fabric {}, it cannot be deleted.",
                v.fabric
            )));
        }
        if self.subnets.values().any(|s| s.vlan_id == vlan) {
            return Err(MaasError::BadRequest(
                "Can't delete VLAN; subnets are still present on it.".to_string(),
            ));
        }
        self.vlans.remove(&vlan);
        Ok(())
    }
}
