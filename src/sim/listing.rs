//! The machine table and the machine objects MAAS answers with (API_REFERENCE.md §1
//! "Responses", §3.1): piston's indent-4 JSON of one machine (`GET machines/{id}/` and every
//! operation's answer) and the list of them (`GET machines/`), assembled from each machine's
//! kept rendering.
//!
//! A machine object is ~28 KB of JSON, so a region of thousands answers a list with tens to
//! hundreds of megabytes, and a wave of onboardings reads each machine dozens of times while
//! waiting for it; rendering them again for every answer would dominate the simulator's work.
//! Each machine's rendering is therefore kept until the machine changes (every way to change
//! one drops it) or something it embeds from the network does: the VLANs, subnets, zone and
//! pool it names and the PXE gateway, recorded while rendering and compared when it is used
//! again, so a new subnet elsewhere (a RoCE /31 of another node) keeps it. A list is sent as
//! the renderings one after the other, never joined into one buffer.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Deref;

use bytes::{BufMut, Bytes, BytesMut};

use super::catalog::Placement;
use super::machine::Machine;
use super::network::{NetworkLookup, Subnet, Vlan};
use super::reply::write_piston_json;

/// Every machine by internal id (MAAS lists by id), with each one's kept rendering.
///
/// Reading goes through `Deref` to the map; every way to change a machine (`get_mut`,
/// `values_mut`, `insert`, `remove`) drops its rendering first, so the compiler sees to it that
/// no change can leave a stale one behind.
#[derive(Default)]
pub struct Machines {
    table: BTreeMap<u64, Machine>,
    rendered: BTreeMap<u64, Rendering>,
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
        gateway_of(self.subnet(self.pxe_subnet))
    }
}

fn gateway_of(subnet: Option<&Subnet>) -> Option<String> {
    subnet.and_then(|s| s.gateway_ip.map(|g| g.to_string()))
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

/// What one rendering read from the network, and what it found: the rendering holds while
/// every one of these reads finds the same again.
#[derive(Debug, Default)]
struct NetworkReads {
    vlans: Vec<(u64, Option<Vlan>)>,
    subnets: Vec<(u64, Option<Subnet>)>,
    zones: Vec<(String, Option<u64>)>,
    pools: Vec<(String, Option<u64>)>,
}

impl NetworkReads {
    fn still_hold(&self, net: &NetworkRef) -> bool {
        self.vlans.iter().all(|(id, v)| net.vlan(*id) == v.as_ref())
            && self
                .subnets
                .iter()
                .all(|(id, s)| net.subnet(*id) == s.as_ref())
            && self.zones.iter().all(|(name, id)| net.zone_id(name) == *id)
            && self.pools.iter().all(|(name, id)| net.pool_id(name) == *id)
    }
}

/// A [`NetworkLookup`] that notes every read (once each) for [`NetworkReads::still_hold`].
struct Recording<'a> {
    net: NetworkRef<'a>,
    reads: RefCell<NetworkReads>,
}

fn note<K: PartialEq, V>(reads: &mut Vec<(K, V)>, key: K, found: impl FnOnce() -> V) {
    if !reads.iter().any(|(k, _)| *k == key) {
        reads.push((key, found()));
    }
}

impl NetworkLookup for Recording<'_> {
    fn vlan(&self, id: u64) -> Option<&Vlan> {
        let found = self.net.vlan(id);
        note(&mut self.reads.borrow_mut().vlans, id, || found.cloned());
        found
    }

    fn subnet(&self, id: u64) -> Option<&Subnet> {
        let found = self.net.subnet(id);
        note(&mut self.reads.borrow_mut().subnets, id, || found.cloned());
        found
    }

    fn zone_id(&self, name: &str) -> Option<u64> {
        let found = self.net.zone_id(name);
        note(&mut self.reads.borrow_mut().zones, name.to_owned(), || {
            found
        });
        found
    }

    fn pool_id(&self, name: &str) -> Option<u64> {
        let found = self.net.pool_id(name);
        note(&mut self.reads.borrow_mut().pools, name.to_owned(), || {
            found
        });
        found
    }
}

/// One machine's object as piston renders it, in the two places it appears, each made when
/// first needed: one container deep (an element of a list) and as a document of its own. The
/// two differ only in indentation: every line after the first is 4 spaces deeper in a list
/// (JSON strings carry no raw newline, so every newline byte starts an indented line).
#[derive(Debug)]
struct Rendering {
    element: Option<Bytes>,
    document: Option<Bytes>,
    reads: NetworkReads,
}

impl Rendering {
    fn make(machine: &Machine, net: NetworkRef, level: usize, size_hint: usize) -> Rendering {
        let recording = Recording {
            net,
            reads: RefCell::new(NetworkReads::default()),
        };
        let gateway = gateway_of(recording.subnet(net.pxe_subnet));
        let mut out = Vec::with_capacity(size_hint);
        write_piston_json(&mut out, &machine.view(&recording, gateway), level);
        let out = Some(Bytes::from(out));
        let reads = recording.reads.into_inner();
        match level {
            0 => Rendering {
                element: None,
                document: out,
                reads,
            },
            _ => Rendering {
                element: out,
                document: None,
                reads,
            },
        }
    }

    /// As an element of a list.
    fn element(&mut self) -> Bytes {
        if self.element.is_none() {
            self.element = self.document.as_ref().map(|d| reindent(d, true));
        }
        self.element.clone().unwrap_or_default()
    }

    /// As a document of its own.
    fn document(&mut self) -> Bytes {
        if self.document.is_none() {
            self.document = self.element.as_ref().map(|e| reindent(e, false));
        }
        self.document.clone().unwrap_or_default()
    }

    fn len(&self) -> usize {
        self.element
            .as_ref()
            .or(self.document.as_ref())
            .map_or(0, Bytes::len)
    }
}

/// `text` with every line after the first 4 spaces deeper (`deeper`) or shallower.
fn reindent(text: &[u8], deeper: bool) -> Bytes {
    const INDENT: &[u8] = b"    ";
    let mut out = BytesMut::with_capacity(text.len() + text.len() / 8);
    for (n, line) in text.split_inclusive(|b| *b == b'\n').enumerate() {
        if n == 0 {
            out.put_slice(line);
        } else if deeper {
            out.put_slice(INDENT);
            out.put_slice(line);
        } else {
            out.put_slice(line.strip_prefix(INDENT).unwrap_or(line));
        }
    }
    out.freeze()
}

const OPEN: Bytes = Bytes::from_static(b"[\n    ");
const BETWEEN: Bytes = Bytes::from_static(b",\n    ");
const CLOSE: Bytes = Bytes::from_static(b"\n]");
const EMPTY: Bytes = Bytes::from_static(b"[]");

/// A piston list of `elements` (each rendered one container deep), in pieces.
fn list_of(elements: impl IntoIterator<Item = Bytes>) -> Vec<Bytes> {
    let mut parts = Vec::new();
    for element in elements {
        parts.push(if parts.is_empty() { OPEN } else { BETWEEN });
        parts.push(element);
    }
    if parts.is_empty() {
        return vec![EMPTY];
    }
    parts.push(CLOSE);
    parts
}

/// Each subnet's rendering as an element of `GET subnets/` (which a wave of RoCE onboardings
/// reads once per node while adding a /31 per node), kept with the subnet and VLAN it shows.
#[derive(Debug, Default)]
pub struct SubnetRenderings {
    kept: BTreeMap<u64, (Subnet, Vlan, Bytes)>,
}

impl SubnetRenderings {
    /// `GET subnets/`'s body: every subnet whose VLAN exists, by id, byte for byte what
    /// rendering their list at once gives.
    pub fn list_body(
        &mut self,
        subnets: &BTreeMap<u64, Subnet>,
        vlans: &BTreeMap<u64, Vlan>,
    ) -> Vec<Bytes> {
        self.kept.retain(|id, _| subnets.contains_key(id));
        let mut elements = Vec::with_capacity(subnets.len());
        for (id, subnet) in subnets {
            let Some(vlan) = vlans.get(&subnet.vlan_id) else {
                continue;
            };
            let holds = self
                .kept
                .get(id)
                .is_some_and(|(s, v, _)| s == subnet && v == vlan);
            if !holds {
                let mut out = Vec::with_capacity(512);
                write_piston_json(&mut out, &subnet.view(vlan), 1);
                self.kept
                    .insert(*id, (subnet.clone(), vlan.clone(), Bytes::from(out)));
            }
            elements.push(self.kept[id].2.clone());
        }
        list_of(elements)
    }
}

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

    /// Machine `id`'s rendering, made at `level` if none holds any more.
    fn rendering(&mut self, id: u64, net: NetworkRef, level: usize) -> Option<&mut Rendering> {
        let machine = self.table.get(&id)?;
        let kept = self
            .rendered
            .get(&id)
            .is_some_and(|r| r.reads.still_hold(&net));
        if !kept {
            let rendering = Rendering::make(machine, net, level, self.size_hint);
            self.size_hint = self.size_hint.max(rendering.len());
            self.rendered.insert(id, rendering);
        }
        self.rendered.get_mut(&id)
    }

    /// Machine `id`'s object as a document of its own: byte for byte what rendering its view
    /// at the top level gives. `None` when there is no such machine.
    pub fn document(&mut self, id: u64, net: NetworkRef) -> Option<Bytes> {
        self.rendering(id, net, 0).map(Rendering::document)
    }

    /// The machines `ids` (in that order) as a piston-rendered JSON list, in pieces: byte for
    /// byte what rendering the list of their objects at once gives. Renderings missing (new,
    /// changed, or made with another network) are made now and kept.
    pub fn list_body(&mut self, ids: &[u64], net: NetworkRef) -> Vec<Bytes> {
        let mut elements = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(rendering) = self.rendering(*id, net, 1) {
                elements.push(rendering.element());
            }
        }
        list_of(elements)
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

    /// Each initial state renders differently (links, status, owner): every byte-for-byte
    /// check runs over all of them.
    const EVERY_INITIAL_STATE: [InitialState; 3] = [
        InitialState::Ready,
        InitialState::Deployed,
        InitialState::New,
    ];

    fn all_ids(world: &World) -> Vec<u64> {
        world.machines.keys().copied().collect()
    }

    #[test]
    fn a_list_is_byte_for_byte_the_list_rendered_at_once() {
        for initial in EVERY_INITIAL_STATE {
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

    /// One machine as rendering its view at the top level makes it (what the simulator sent
    /// for a read before renderings were kept).
    fn document_at_once(world: &World, id: u64) -> String {
        let view = world.machines[&id].view(world, world.pxe_gateway());
        String::from_utf8(to_piston_json(&view)).unwrap()
    }

    fn read(world: &mut World, id: u64) -> String {
        String::from_utf8(world.machine_document(id).unwrap().to_vec()).unwrap()
    }

    #[test]
    fn a_read_is_byte_for_byte_the_machine_rendered_alone_whichever_form_came_first() {
        for initial in EVERY_INITIAL_STATE {
            // Read first, then listed (the list element made from the document) …
            let mut world = world(initial);
            let ids = all_ids(&world);
            for id in &ids {
                let expected = document_at_once(&world, *id);
                assert!(expected.starts_with("{\n    \"system_id\": "));
                assert_eq!(read(&mut world, *id), expected, "{initial:?}, first read");
                assert_eq!(read(&mut world, *id), expected, "{initial:?}, kept");
            }
            assert_eq!(listed(&mut world, &ids), rendered_at_once(&world, &ids));
            // … and listed first, then read (the document made from the list element).
            let mut world = self::world(initial);
            listed(&mut world, &ids);
            for id in &ids {
                assert_eq!(read(&mut world, *id), document_at_once(&world, *id));
            }
        }
        assert!(
            world(InitialState::Ready)
                .machine_document(999_999)
                .is_none()
        );
    }

    #[test]
    fn a_change_to_what_a_machine_embeds_renders_it_again_and_nothing_else_does() {
        let mut world = world(InitialState::Deployed);
        let ids = all_ids(&world);
        for id in &ids {
            read(&mut world, *id);
        }
        listed(&mut world, &ids);
        let kept = |world: &World| -> Vec<Bytes> {
            ids.iter()
                .map(|id| world.machines.rendered[id].document.clone().unwrap())
                .collect()
        };
        let before = kept(&world);
        // A subnet no machine links to (another node's RoCE /31): every rendering holds.
        let mut roce = world.subnets[&world.pxe_subnet].clone();
        roce.id = 9_001;
        roce.name = "172.30.0.0/31".to_string();
        roce.cidr = crate::sim::network::Cidr::parse("172.30.0.0/31").unwrap();
        roce.gateway_ip = None;
        world.subnets.insert(roce.id, roce);
        assert_eq!(listed(&mut world, &ids), rendered_at_once(&world, &ids));
        for (id, document) in ids.iter().zip(&before) {
            assert_eq!(read(&mut world, *id), document_at_once(&world, *id));
            assert!(
                world.machines.rendered[id]
                    .document
                    .as_ref()
                    .is_some_and(|d| d.as_ptr() == document.as_ptr()),
                "machine {id} kept its rendering"
            );
        }
        // The VLAN of the first machine's boot interface: it and every machine on that VLAN
        // are rendered again, with the new MTU.
        let vlan = world.machines[&ids[0]].interfaces[0].vlan_id.unwrap();
        world.vlans.get_mut(&vlan).unwrap().mtu = 9000;
        for id in &ids {
            let document = read(&mut world, *id);
            assert_eq!(document, document_at_once(&world, *id));
            let on_vlan = world.machines[id]
                .interfaces
                .iter()
                .any(|i| i.vlan_id == Some(vlan));
            assert_eq!(document.contains("\"mtu\": 9000"), on_vlan, "machine {id}");
        }
        assert_eq!(listed(&mut world, &ids), rendered_at_once(&world, &ids));
        // A renamed zone is embedded by its id: a machine in it is rendered again.
        let zone = world.zones.keys().copied().next().unwrap();
        world.zones.get_mut(&zone).unwrap().name = "renamed".to_string();
        for id in &ids {
            assert_eq!(read(&mut world, *id), document_at_once(&world, *id));
        }
    }

    #[test]
    fn a_subnet_list_is_byte_for_byte_the_list_rendered_at_once() {
        let at_once = |world: &World| {
            let views: Vec<_> = world
                .subnets
                .values()
                .filter_map(|s| Some(s.view(world.vlans.get(&s.vlan_id)?)))
                .collect();
            String::from_utf8(to_piston_json(&views)).unwrap()
        };
        let mut world = world(InitialState::Deployed);
        let listed = |world: &mut World| {
            let parts = world
                .rendered_subnets
                .list_body(&world.subnets, &world.vlans);
            String::from_utf8(parts.concat()).unwrap()
        };
        let first = listed(&mut world);
        assert!(first.starts_with("[\n    {\n        \"name\": "), "{first}");
        assert_eq!(first, at_once(&world));
        assert_eq!(listed(&mut world), first, "from kept renderings");
        // A new subnet, a changed one, a changed VLAN, a removed subnet.
        let mut roce = world.subnets[&world.pxe_subnet].clone();
        roce.id = 9_001;
        roce.cidr = crate::sim::network::Cidr::parse("172.30.0.0/31").unwrap();
        world.subnets.insert(roce.id, roce);
        assert_eq!(listed(&mut world), at_once(&world));
        let pxe = world.pxe_subnet;
        world.subnets.get_mut(&pxe).unwrap().description = "changed".to_string();
        assert_eq!(listed(&mut world), at_once(&world));
        for vlan in world.vlans.values_mut() {
            vlan.mtu = 9000;
        }
        let after = listed(&mut world);
        assert!(after.contains("\"mtu\": 9000"));
        assert_eq!(after, at_once(&world));
        world.subnets.remove(&9_001);
        assert_eq!(listed(&mut world), at_once(&world));
        world.subnets.clear();
        assert_eq!(listed(&mut world), "[]");
        assert_eq!(at_once(&world), "[]");
    }
}
