//! The machine table and the body of `GET machines/` (API_REFERENCE.md §1 "Responses", §3.1):
//! piston's indent-4 list of machine objects, assembled from each machine's cached rendering.
//!
//! A machine object is ~28 KB of JSON, so a region of thousands answers a list with tens to
//! hundreds of megabytes; rendering them all again for every list would dominate any
//! observation of a large site. Each machine's rendering is therefore kept, as an element of a list, until the
//! machine or the network it embeds (VLANs, subnets, the PXE gateway) changes, and a list is
//! sent as those renderings one after the other, never joined into one buffer.

use std::collections::BTreeMap;
use std::ops::Deref;

use bytes::Bytes;

use super::catalog::Placement;
use super::machine::Machine;
use super::network::{NetworkLookup, Subnet, Vlan};
use super::reply::write_piston_json;

/// Every machine by internal id (MAAS lists by id), with each one's list rendering.
///
/// Reading goes through `Deref` to the map; every way to change a machine (`get_mut`,
/// `values_mut`, `insert`, `remove`) drops its rendering first, so the compiler sees to it that
/// no change can leave a stale one behind.
#[derive(Default)]
pub struct Machines {
    table: BTreeMap<u64, Machine>,
    rendered: BTreeMap<u64, Bytes>,
    /// The network the renderings were made with.
    network: Option<Network>,
    /// The largest rendering so far: the buffer size of the next one.
    size_hint: usize,
}

impl std::fmt::Debug for Machines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Machines")
            .field("table", &self.table)
            .field("rendered", &self.rendered.len())
            .finish_non_exhaustive()
    }
}

impl Deref for Machines {
    type Target = BTreeMap<u64, Machine>;

    fn deref(&self) -> &Self::Target {
        &self.table
    }
}

/// The world's network as machine objects embed it (interfaces' VLANs, links' subnets, the
/// default gateway).
#[derive(Debug, Clone, Copy)]
pub struct NetworkRef<'a> {
    pub vlans: &'a BTreeMap<u64, Vlan>,
    pub subnets: &'a BTreeMap<u64, Subnet>,
    pub pxe_subnet: u64,
    /// Zone and pool ids by name.
    pub zones: &'a BTreeMap<u64, Placement>,
    pub pools: &'a BTreeMap<u64, Placement>,
}

impl NetworkRef<'_> {
    /// The PXE subnet's gateway: MAAS's default IPv4 gateway of a machine with an AUTO link.
    pub fn pxe_gateway(&self) -> Option<String> {
        self.subnets
            .get(&self.pxe_subnet)
            .and_then(|s| s.gateway_ip.map(|g| g.to_string()))
    }

    fn owned(&self) -> Network {
        Network {
            vlans: self.vlans.clone(),
            subnets: self.subnets.clone(),
            pxe_subnet: self.pxe_subnet,
            zones: self.zones.clone(),
            pools: self.pools.clone(),
        }
    }
}

impl NetworkLookup for NetworkRef<'_> {
    fn vlan(&self, id: u64) -> Option<&Vlan> {
        self.vlans.get(&id)
    }

    fn subnet(&self, id: u64) -> Option<&Subnet> {
        self.subnets.get(&id)
    }

    fn zone_id(&self, name: &str) -> Option<u64> {
        self.zones.values().find(|z| z.name == name).map(|z| z.id)
    }

    fn pool_id(&self, name: &str) -> Option<u64> {
        self.pools.values().find(|p| p.name == name).map(|p| p.id)
    }
}

/// A copy of the network the renderings embed (a handful of VLANs and subnets).
#[derive(Debug, Clone, PartialEq)]
struct Network {
    vlans: BTreeMap<u64, Vlan>,
    subnets: BTreeMap<u64, Subnet>,
    pxe_subnet: u64,
    zones: BTreeMap<u64, Placement>,
    pools: BTreeMap<u64, Placement>,
}

impl Network {
    fn is(&self, net: &NetworkRef) -> bool {
        self.pxe_subnet == net.pxe_subnet
            && &self.vlans == net.vlans
            && &self.subnets == net.subnets
            && &self.zones == net.zones
            && &self.pools == net.pools
    }
}

const OPEN: Bytes = Bytes::from_static(b"[\n    ");
const BETWEEN: Bytes = Bytes::from_static(b",\n    ");
const CLOSE: Bytes = Bytes::from_static(b"\n]");
const EMPTY: Bytes = Bytes::from_static(b"[]");

impl Machines {
    /// The machine, to change: its rendering is dropped.
    pub fn get_mut(&mut self, id: &u64) -> Option<&mut Machine> {
        self.rendered.remove(id);
        self.table.get_mut(id)
    }

    /// Every machine, to change: every rendering is dropped.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Machine> {
        self.rendered.clear();
        self.table.values_mut()
    }

    pub fn insert(&mut self, id: u64, machine: Machine) -> Option<Machine> {
        self.rendered.remove(&id);
        self.table.insert(id, machine)
    }

    pub fn remove(&mut self, id: &u64) -> Option<Machine> {
        self.rendered.remove(id);
        self.table.remove(id)
    }

    /// Drops every kept rendering: the next list renders every machine anew (what a list
    /// costs after every machine changed; the benchmarks measure it).
    pub fn forget_renderings(&mut self) {
        self.rendered.clear();
    }

    /// The machines `ids` (in that order) as a piston-rendered JSON list, in pieces: byte for
    /// byte what rendering the list of their objects at once gives. Renderings missing (new,
    /// changed, or made with another network) are made now and kept.
    pub fn list_body(&mut self, ids: &[u64], net: NetworkRef) -> Vec<Bytes> {
        if !self.network.as_ref().is_some_and(|n| n.is(&net)) {
            self.rendered.clear();
            self.network = Some(net.owned());
        }
        let gateway = net.pxe_gateway();
        let mut parts = Vec::with_capacity(2 * ids.len() + 1);
        for (id, machine) in ids.iter().filter_map(|id| Some((id, self.table.get(id)?))) {
            parts.push(if parts.is_empty() { OPEN } else { BETWEEN });
            let rendering = match self.rendered.get(id) {
                Some(rendering) => rendering.clone(),
                None => {
                    let mut out = Vec::with_capacity(self.size_hint);
                    // An element of the list: one container deep.
                    write_piston_json(&mut out, &machine.view(&net, gateway.clone()), 1);
                    self.size_hint = self.size_hint.max(out.len());
                    let rendering = Bytes::from(out);
                    self.rendered.insert(*id, rendering.clone());
                    rendering
                }
            };
            parts.push(rendering);
        }
        if parts.is_empty() {
            return vec![EMPTY];
        }
        parts.push(CLOSE);
        parts
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::sim::reply::to_piston_json;
    use crate::sim::{FleetOptions, InitialState, SimConfig, World};

    fn world(initial: InitialState) -> World {
        let config = SimConfig::generated(
            7,
            &FleetOptions {
                machines: 6,
                initial,
                no_boss_every: 3,
                unknown: 0,
            },
        );
        World::new(config, Utc.with_ymd_and_hms(2025, 3, 1, 12, 0, 0).unwrap()).unwrap()
    }

    /// The list as rendering every object at once makes it (what the simulator sent before
    /// renderings were kept).
    fn rendered_at_once(world: &World, ids: &[u64]) -> String {
        let gateway = world.pxe_gateway();
        let views: Vec<_> = ids
            .iter()
            .map(|id| world.machines[id].view(world, gateway.clone()))
            .collect();
        String::from_utf8(to_piston_json(&views)).unwrap()
    }

    fn listed(world: &mut World, ids: &[u64]) -> String {
        let parts = world.machines_list_body(ids);
        String::from_utf8(parts.concat()).unwrap()
    }

    fn all_ids(world: &World) -> Vec<u64> {
        world.machines.keys().copied().collect()
    }

    #[test]
    fn a_list_is_byte_for_byte_the_list_rendered_at_once() {
        for initial in [
            InitialState::Ready,
            InitialState::Deployed,
            InitialState::New,
        ] {
            let mut world = world(initial);
            let ids = all_ids(&world);
            let expected = rendered_at_once(&world, &ids);
            assert!(expected.starts_with("[\n    {\n        \"system_id\": "));
            assert_eq!(
                listed(&mut world, &ids),
                expected,
                "{initial:?}, first list"
            );
            assert_eq!(world.machines.rendered.len(), ids.len());
            assert_eq!(
                listed(&mut world, &ids),
                expected,
                "{initial:?}, from kept renderings"
            );
            // A filtered list, in list order, and an empty one.
            let some = [ids[4], ids[1]];
            assert_eq!(listed(&mut world, &some), rendered_at_once(&world, &some));
            assert_eq!(listed(&mut world, &[]), "[]");
            assert_eq!(rendered_at_once(&world, &[]), "[]");
        }
    }

    #[test]
    fn a_changed_machine_is_rendered_again() {
        let mut world = world(InitialState::Deployed);
        let ids = all_ids(&world);
        listed(&mut world, &ids);
        world.machines.get_mut(&ids[2]).unwrap().hostname = "renamed".to_string();
        assert!(!world.machines.rendered.contains_key(&ids[2]));
        assert_eq!(world.machines.rendered.len(), ids.len() - 1);
        let body = listed(&mut world, &ids);
        assert!(body.contains("\"hostname\": \"renamed\""));
        assert_eq!(body, rendered_at_once(&world, &ids));

        for m in world.machines.values_mut() {
            m.owner = Some("alice".to_string());
        }
        assert!(world.machines.rendered.is_empty());
        let body = listed(&mut world, &ids);
        assert_eq!(body.matches("\"owner\": \"alice\"").count(), ids.len());
        assert_eq!(body, rendered_at_once(&world, &ids));

        let gone = world.machines.remove(&ids[0]).unwrap();
        assert_eq!(
            listed(&mut world, &ids),
            rendered_at_once(&world, &ids[1..]),
            "a removed machine is not listed"
        );
        world.machines.insert(
            ids[0],
            Machine {
                hostname: "back".to_string(),
                ..gone
            },
        );
        let body = listed(&mut world, &ids);
        assert!(body.contains("\"hostname\": \"back\""));
        assert_eq!(body, rendered_at_once(&world, &ids));
    }

    #[test]
    fn a_network_change_renders_every_machine_again() {
        let mut world = world(InitialState::Deployed);
        let ids = all_ids(&world);
        let before = listed(&mut world, &ids);
        let pxe = world.pxe_subnet;
        world.subnets.get_mut(&pxe).unwrap().gateway_ip = Some(Ipv4Addr::new(10, 176, 64, 254));
        let after = listed(&mut world, &ids);
        assert_ne!(after, before);
        assert!(after.contains("\"gateway_ip\": \"10.176.64.254\""));
        assert_eq!(after, rendered_at_once(&world, &ids));
        for vlan in world.vlans.values_mut() {
            vlan.mtu = 9000;
        }
        let after = listed(&mut world, &ids);
        assert!(after.contains("\"effective_mtu\": 9000"));
        assert_eq!(after, rendered_at_once(&world, &ids));
    }
}
