//! The simulated MAAS region's state (API_REFERENCE.md §4–§6; DESIGN.md §5): machines,
//! fabrics, VLANs, subnets, tags, zones and pools, events, counters, the timeline of pending
//! background work, and the lookups, permission checks (`get_node_or_404`), status guard and
//! address allocation every operation shares. What MAAS does over time is `lifecycle`; what
//! the API asks is `ops*`.
//!
//! Durations are MAAS-realistic simulated seconds divided by the time scale, jittered from the
//! seeded RNG.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::catalog::{Placement, Tag};
use super::config::{MachineSpec, SimConfig};
use super::events::{Event, Level};
use super::faults::{FaultSpec, FaultState, Scenario};
use super::host::AgentBoot;
use super::listing::{Machines, NetworkRef};
use super::machine::{Machine, NodeToken, Pending, PowerState};
use super::model::{AgentRecord, AgentTaskRecord, Caller, Counter, Counters, OpRecord};
use super::network::{Cidr, Fabric, Interface, LinkMode, NetworkLookup, Subnet, Vlan};
use super::reply::MaasError;
use super::status::{self, Status};
use super::storage::BlockDevice;

/// A hardware entry: a BMC with the machine behind it.
#[derive(Debug, Clone)]
pub(super) struct Hardware {
    pub(super) spec: MachineSpec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum TimerKind {
    /// `Machine::pending` (valid while the machine's generation matches).
    Pending,
    /// A hardware-sync post (valid while `sync_due` matches).
    Sync,
    /// An out-of-band scenario (valid while the boot matches).
    OutOfBand(Scenario),
    /// Enlistment of the PXE-booted BMC at `hardware` index.
    Enlist,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Timer {
    pub(super) kind: TimerKind,
    /// Machine id, or hardware index for `Enlist`.
    pub(super) target: u64,
    pub(super) stamp: u64,
}

/// The PXE (boot) VLAN: the untagged VLAN of `fabric-0`, served by the region's rack.
pub(super) const PXE_VLAN: u64 = 5001;
/// The simulated rack controller's system id.
pub(super) const RACK_SYSTEM_ID: &str = "sim7rk";

/// Distro series the simulated region has images for (name, os/series, version).
pub(super) const DISTROS: [(&str, &str); 3] =
    [("focal", "20.04"), ("jammy", "22.04"), ("noble", "24.04")];

/// Hosts and OS the simulated region can deploy.
pub(super) fn resolve_distro(value: &str) -> Option<(&'static str, &'static str)> {
    let wanted = value.strip_prefix("ubuntu/").unwrap_or(value);
    DISTROS
        .iter()
        .find(|(name, version)| *name == wanted || *version == wanted)
        .map(|(name, _)| ("ubuntu", *name))
}

/// Permission levels of `get_node_or_404` (auth/local.py).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Perm {
    View,
    Edit,
    Admin,
    AdminRead,
}

/// The whole simulated region.
#[derive(Debug)]
pub struct World {
    pub seed: u64,
    pub time_scale: f64,
    pub config: SimConfig,
    pub(super) rng: ChaCha8Rng,
    pub machines: Machines,
    pub(super) by_system_id: HashMap<String, u64>,
    pub(super) hardware: Vec<Hardware>,
    /// Hardware index by NIC MAC (lower case) and by BMC IP; the inventory never changes.
    hardware_by_mac: HashMap<String, usize>,
    hardware_by_bmc: HashMap<String, usize>,
    pub fabrics: BTreeMap<u64, Fabric>,
    pub vlans: BTreeMap<u64, Vlan>,
    pub subnets: BTreeMap<u64, Subnet>,
    pub(super) rendered_subnets: super::listing::SubnetRenderings,
    pub tags: BTreeMap<String, Tag>,
    /// Zones and resource pools by id; `default` (zone 1, pool 0) always exists.
    pub zones: BTreeMap<u64, Placement>,
    pub pools: BTreeMap<u64, Placement>,
    pub pxe_subnet: u64,
    pub events: Vec<Event>,
    /// Positions in `events` by system id: a query for some machines' events reads theirs.
    events_by_node: HashMap<String, Vec<usize>>,
    pub counters: BTreeMap<String, Counters>,
    pub ops: Vec<OpRecord>,
    pub agent_log: Vec<AgentRecord>,
    /// Injected agent task failures, with how often each has fired.
    pub agent_task_faults: Vec<(super::config::TaskFault, u32)>,
    /// Every task a simulated agent ran.
    pub agent_task_log: Vec<AgentTaskRecord>,
    /// (system id, boot) of hosts whose agent process was stopped out of band: the host stays
    /// up, the agent neither enrolls nor polls until the machine boots again.
    stopped_agents: BTreeSet<(String, u64)>,
    /// Per machine id, what wakes its running agent when its host may have gone (a status or
    /// power change, its agent stopped): the agent long-polls for minutes and must not learn
    /// of it only when its poll ends.
    agent_wakers: HashMap<u64, Arc<tokio::sync::Notify>>,
    pub(super) timeline: BTreeSet<(DateTime<Utc>, u64, Timer)>,
    timer_seq: u64,
    next_id: u64,
    pub faults: FaultSpec,
    pub fault_state: FaultState,
    /// Agents to start (drained by the server).
    pub outbox: Vec<AgentBoot>,
    /// Nonces seen, with their timestamps (OAuth replay check).
    pub nonces: Nonces,
    /// User name → (api key parts, admin).
    pub users: Vec<(String, [String; 3], bool)>,
}

/// A MAAS-style random id string.
pub(super) fn random_string(rng: &mut ChaCha8Rng, alphabet: &[u8], len: usize) -> String {
    (0..len)
        .map(|_| alphabet[rng.random_range(0..alphabet.len())] as char)
        .collect()
}

const SYSTEM_ID_ALPHABET: &[u8] = b"abcdefghkmnpqrstwxy3456789";
pub(super) const TOKEN_ALPHABET: &[u8] =
    b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";

const ADJECTIVES: [&str; 16] = [
    "alert", "brave", "calm", "eager", "fair", "gentle", "happy", "keen", "lively", "merry",
    "noble", "proud", "quick", "sharp", "tidy", "witty",
];
const NOUNS: [&str; 16] = [
    "buck", "crane", "dove", "eagle", "fox", "gecko", "heron", "ibex", "jay", "koala", "lark",
    "mole", "newt", "otter", "quail", "wren",
];

/// An API key `consumer:token:secret` split in three.
pub fn split_api_key(key: &str) -> Option<[String; 3]> {
    let mut parts = key.split(':');
    let a = parts.next()?;
    let b = parts.next()?;
    let c = parts.next()?;
    if parts.next().is_some() || a.is_empty() || b.is_empty() || c.is_empty() {
        return None;
    }
    Some([a.to_string(), b.to_string(), c.to_string()])
}

impl NetworkLookup for World {
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

/// Errors building a world from a configuration.
#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    #[error("invalid API key for user `{0}`: expected consumer:token:secret")]
    ApiKey(String),
    #[error(transparent)]
    Faults(#[from] super::faults::FaultSpecError),
    #[error("invalid PXE subnet `{0}`")]
    PxeCidr(String),
    #[error("time scale must be a positive number, got {0}")]
    TimeScale(f64),
    #[error("machine {index}: {reason}")]
    Machine { index: usize, reason: String },
}

impl World {
    /// The region with its hardware inventory and network, before MAAS knows any machine
    /// (`World::new` in `lifecycle` installs the known ones).
    pub(super) fn empty(config: SimConfig) -> Result<World, WorldError> {
        if !(config.time_scale.is_finite() && config.time_scale > 0.0) {
            return Err(WorldError::TimeScale(config.time_scale));
        }
        let admin_key = split_api_key(&config.api_key)
            .ok_or_else(|| WorldError::ApiKey(config.username.clone()))?;
        let mut users = vec![(config.username.clone(), admin_key, true)];
        for user in &config.users {
            let key = split_api_key(&user.api_key)
                .ok_or_else(|| WorldError::ApiKey(user.username.clone()))?;
            users.push((user.username.clone(), key, false));
        }
        let faults = FaultSpec::parse(&config.faults, &super::describe::is_known_action)?;
        let pxe = Cidr::parse(&config.pxe_cidr)
            .ok_or_else(|| WorldError::PxeCidr(config.pxe_cidr.clone()))?;
        let mut world = World {
            seed: config.seed,
            time_scale: config.time_scale,
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            machines: Machines::default(),
            by_system_id: HashMap::new(),
            hardware: Vec::new(),
            hardware_by_mac: HashMap::new(),
            hardware_by_bmc: HashMap::new(),
            fabrics: BTreeMap::from([(0, Fabric::new(0))]),
            tags: BTreeMap::new(),
            zones: BTreeMap::from([(
                1,
                Placement {
                    id: 1,
                    name: "default".to_string(),
                    description: String::new(),
                },
            )]),
            pools: BTreeMap::from([(
                0,
                Placement {
                    id: 0,
                    name: "default".to_string(),
                    description: "Default pool".to_string(),
                },
            )]),
            vlans: BTreeMap::from([(
                PXE_VLAN,
                Vlan {
                    dhcp_on: true,
                    primary_rack: Some(RACK_SYSTEM_ID.to_string()),
                    ..Vlan::untagged(PXE_VLAN, 0)
                },
            )]),
            subnets: BTreeMap::new(),
            rendered_subnets: Default::default(),
            pxe_subnet: 1,
            events: Vec::new(),
            events_by_node: HashMap::new(),
            counters: BTreeMap::new(),
            ops: Vec::new(),
            agent_log: Vec::new(),
            agent_task_faults: config
                .agent_task_faults
                .iter()
                .map(|f| (f.clone(), 0))
                .collect(),
            agent_task_log: Vec::new(),
            stopped_agents: BTreeSet::new(),
            agent_wakers: HashMap::new(),
            timeline: BTreeSet::new(),
            timer_seq: 0,
            next_id: 1,
            faults,
            fault_state: FaultState::default(),
            outbox: Vec::new(),
            nonces: Nonces::default(),
            users,
            config: config.clone(),
        };
        world.subnets.insert(
            1,
            Subnet {
                id: 1,
                name: pxe.to_string(),
                description: String::new(),
                cidr: pxe,
                gateway_ip: config.pxe_gateway.parse().ok(),
                dns_servers: Vec::new(),
                vlan_id: PXE_VLAN,
                managed: true,
                allow_dns: true,
                allow_proxy: true,
                active_discovery: false,
                rdns_mode: 2,
            },
        );
        world.next_id = 2;
        for (index, spec) in config.machines.iter().enumerate() {
            if spec.interfaces.is_empty() {
                return Err(WorldError::Machine {
                    index,
                    reason: "a machine needs at least one interface (its PXE NIC)".to_string(),
                });
            }
            for nic in &spec.interfaces {
                world
                    .hardware_by_mac
                    .insert(nic.mac.to_ascii_lowercase(), index);
            }
            if let Some(ip) = &spec.bmc_ip {
                world.hardware_by_bmc.insert(ip.clone(), index);
            }
            world.hardware.push(Hardware { spec: spec.clone() });
        }
        Ok(world)
    }

    // ----- ids, time, randomness -------------------------------------------------------------

    pub(super) fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    pub(super) fn new_system_id(&mut self) -> String {
        loop {
            let candidate = random_string(&mut self.rng, SYSTEM_ID_ALPHABET, 6);
            if !self.by_system_id.contains_key(&candidate) {
                return candidate;
            }
        }
    }

    pub(super) fn new_token(&mut self) -> NodeToken {
        NodeToken {
            consumer_key: random_string(&mut self.rng, TOKEN_ALPHABET, 18),
            token_key: random_string(&mut self.rng, TOKEN_ALPHABET, 18),
            token_secret: random_string(&mut self.rng, TOKEN_ALPHABET, 32),
        }
    }

    pub(super) fn uuid(&mut self) -> String {
        let a: u128 = self.rng.random();
        let h = format!("{a:032x}");
        format!(
            "{}-{}-4{}-a{}-{}",
            &h[0..8],
            &h[8..12],
            &h[13..16],
            &h[17..20],
            &h[20..32]
        )
    }

    /// A simulated duration, jittered and divided by the time scale.
    pub fn sim_duration(&mut self, secs: f64) -> Duration {
        let jitter = self.config.timings.jitter.clamp(0.0, 0.9);
        let factor = if jitter > 0.0 {
            self.rng.random_range((1.0 - jitter)..(1.0 + jitter))
        } else {
            1.0
        };
        scaled(secs * factor, self.time_scale)
    }

    /// `sync_interval` as MAAS shows it: the configured interval in scaled seconds.
    pub(super) fn sync_interval_secs(&self) -> u64 {
        (self.config.timings.hw_sync_interval_secs / self.time_scale)
            .round()
            .max(1.0) as u64
    }

    pub(super) fn schedule(
        &mut self,
        due: DateTime<Utc>,
        kind: TimerKind,
        target: u64,
        stamp: u64,
    ) {
        self.timer_seq += 1;
        self.timeline.insert((
            due,
            self.timer_seq,
            Timer {
                kind,
                target,
                stamp,
            },
        ));
    }

    pub(super) fn set_pending(&mut self, id: u64, work: Option<(Pending, DateTime<Utc>)>) {
        let Some(m) = self.machines.get_mut(&id) else {
            return;
        };
        m.generation += 1;
        m.pending = work;
        let generation = m.generation;
        if let Some((_, due)) = work {
            self.schedule(due, TimerKind::Pending, id, generation);
        }
    }

    /// A new fabric with its untagged VLAN (`Fabric.objects.create()`); returns the VLAN id.
    pub(super) fn new_fabric(&mut self) -> u64 {
        let fabric = self.fabrics.keys().last().map_or(0, |f| f + 1);
        let vlan = self.vlans.keys().last().map_or(PXE_VLAN, |v| v + 1);
        self.fabrics.insert(fabric, Fabric::new(fabric));
        self.vlans.insert(vlan, Vlan::untagged(vlan, fabric));
        vlan
    }

    /// When the next background work is due.
    pub fn next_due(&self) -> Option<DateTime<Utc>> {
        self.timeline.first().map(|(due, _, _)| *due)
    }

    // ----- lookups -----------------------------------------------------------------------------

    /// `get_node_or_404`: 404 when the system id is unknown, 403 (empty) when the caller may
    /// not act on it.
    pub fn node_for(&self, caller: &Caller, system_id: &str, perm: Perm) -> Result<u64, MaasError> {
        let id = self
            .machine_id(system_id)
            .ok_or_else(MaasError::no_machine)?;
        let m = &self.machines[&id];
        let visible =
            caller.is_admin() || m.owner.is_none() || m.owner.as_deref() == Some(caller.name());
        let allowed = match perm {
            Perm::View => visible,
            Perm::Edit => visible && !m.locked,
            Perm::Admin => caller.is_admin() && !m.locked,
            Perm::AdminRead => caller.is_admin(),
        };
        if allowed {
            Ok(id)
        } else {
            Err(MaasError::Forbidden(String::new()))
        }
    }
    pub fn can_view(&self, caller: &Caller, id: u64) -> bool {
        self.machines
            .get(&id)
            .is_some_and(|m| visible_to(m, caller))
    }

    pub fn machine_id(&self, system_id: &str) -> Option<u64> {
        self.by_system_id.get(system_id).copied()
    }

    pub fn machine(&self, system_id: &str) -> Option<&Machine> {
        self.machines.get(&self.machine_id(system_id)?)
    }

    pub fn machine_mut(&mut self, system_id: &str) -> Option<&mut Machine> {
        let id = self.machine_id(system_id)?;
        self.machines.get_mut(&id)
    }

    /// The machine a system id, hostname or BMC IP names.
    pub fn find_machine(&self, name: &str) -> Option<&Machine> {
        self.machine(name).or_else(|| {
            self.machines
                .values()
                .find(|m| m.hostname == name || m.bmc_ip() == Some(name))
        })
    }

    pub fn pxe_gateway(&self) -> Option<String> {
        self.network().pxe_gateway()
    }

    /// The network machine objects embed.
    pub fn network(&self) -> NetworkRef<'_> {
        NetworkRef {
            vlans: &self.vlans,
            subnets: &self.subnets,
            pxe_subnet: self.pxe_subnet,
            zones: &self.zones,
            pools: &self.pools,
        }
    }

    /// The machine table, to render from, and the network its renderings embed.
    fn machines_and_network(&mut self) -> (&mut Machines, NetworkRef<'_>) {
        let net = NetworkRef {
            vlans: &self.vlans,
            subnets: &self.subnets,
            pxe_subnet: self.pxe_subnet,
            zones: &self.zones,
            pools: &self.pools,
        };
        (&mut self.machines, net)
    }

    /// `GET machines/`'s body for the machines `ids`, in pieces (see [`Machines::list_body`]).
    pub fn machines_list_body(&mut self, ids: &[u64]) -> Vec<bytes::Bytes> {
        let (machines, net) = self.machines_and_network();
        machines.list_body(ids, net)
    }

    /// Machine `id`'s object as MAAS answers it on its own (`GET machines/{id}/`, an
    /// operation's answer), from its kept rendering (see [`Machines::document`]).
    pub fn machine_document(&mut self, id: u64) -> Option<bytes::Bytes> {
        let (machines, net) = self.machines_and_network();
        machines.document(id, net)
    }

    pub fn counter(&mut self, system_id: &str, which: Counter) {
        let c = self.counters.entry(system_id.to_string()).or_default();
        match which {
            Counter::Deploy => c.deploy += 1,
            Counter::Release => c.release += 1,
            Counter::Commission => c.commission += 1,
            Counter::Erase => c.erase += 1,
            Counter::PowerOn => c.power_on += 1,
            Counter::PowerOff => c.power_off += 1,
            Counter::Abort => c.abort += 1,
            Counter::Create => c.create += 1,
            Counter::Delete => c.delete += 1,
        }
    }

    // ----- events and transitions -------------------------------------------------------------

    pub fn event(
        &mut self,
        id: u64,
        level: Level,
        kind: &str,
        description: &str,
        username: &str,
        now: DateTime<Utc>,
    ) {
        let Some(m) = self.machines.get_mut(&id) else {
            return;
        };
        let event = Event {
            id: self.events.last().map_or(1, |e| e.id + 1),
            system_id: m.system_id.clone(),
            hostname: m.hostname.clone(),
            username: username.to_string(),
            level,
            kind: kind.to_string(),
            description: description.to_string(),
            created: now,
        };
        if level != Level::Audit && level >= Level::Info {
            m.status_message = Some(event.status_message());
        }
        self.events_by_node
            .entry(event.system_id.clone())
            .or_default()
            .push(self.events.len());
        self.events.push(event);
    }

    /// The events of the machines `system_ids`, oldest first.
    pub fn events_of(&self, system_ids: &[&str]) -> Vec<&Event> {
        let mut positions: Vec<usize> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for system_id in system_ids.iter().filter(|s| seen.insert(**s)) {
            positions.extend(self.events_by_node.get(*system_id).into_iter().flatten());
        }
        positions.sort_unstable();
        positions.into_iter().map(|at| &self.events[at]).collect()
    }

    /// `Node.update_status` with MAAS's guard and side effects (entering New/Ready clears the
    /// owner, an owner change deletes the token).
    pub fn transition(&mut self, id: u64, to: Status, now: DateTime<Utc>) -> Result<(), MaasError> {
        let Some(m) = self.machines.get_mut(&id) else {
            return Err(MaasError::no_machine());
        };
        let from = m.status;
        if !from.can_transition(to) {
            return Err(MaasError::Conflict(status::invalid_transition_message(
                from, to,
            )));
        }
        if from != to {
            m.previous_status = from;
            m.status = to;
            if let Some(waker) = self.agent_wakers.get(&id) {
                waker.notify_one();
            }
            if matches!(to, Status::New | Status::Ready) {
                set_owner(m, None);
            }
            let text = format!("From '{}' to '{}'", from.name(), to.name());
            self.event(
                id,
                Level::Debug,
                "Node changed status",
                &text,
                "unknown",
                now,
            );
        }
        Ok(())
    }

    pub(super) fn power(&mut self, id: u64, state: PowerState, now: DateTime<Utc>) {
        let Some(m) = self.machines.get_mut(&id) else {
            return;
        };
        if m.power_state != state {
            m.power_state = state;
            if let Some(waker) = self.agent_wakers.get(&id) {
                waker.notify_one();
            }
            let kind = if state == PowerState::On {
                "Node powered on"
            } else {
                "Node powered off"
            };
            self.event(id, Level::Debug, kind, "", "unknown", now);
        }
    }

    // ----- building machines -------------------------------------------------------------------

    pub(super) fn hardware_disks(&mut self, spec: &MachineSpec) -> Vec<BlockDevice> {
        spec.disks
            .iter()
            .map(|d| BlockDevice {
                id: self.id(),
                name: d.name.clone(),
                model: d.model.clone(),
                serial: d.serial.clone(),
                size: d.size_bytes,
                id_path: d.id_path.clone(),
                partitions: Vec::new(),
            })
            .collect()
    }

    pub(super) fn hardware_interfaces(&mut self, spec: &MachineSpec) -> Vec<Interface> {
        spec.interfaces
            .iter()
            .enumerate()
            .map(|(index, nic)| Interface {
                id: self.id(),
                name: nic.name.clone(),
                mac: nic.mac.to_ascii_lowercase(),
                vlan_id: (index == 0).then_some(PXE_VLAN),
                links: Vec::new(),
                speed_mbps: nic.speed_mbps,
                vendor: if index == 0 {
                    "Broadcom Inc. and subsidiaries".to_string()
                } else {
                    "Mellanox Technologies".to_string()
                },
                product: if index == 0 {
                    "NetXtreme BCM5720 Gigabit Ethernet PCIe".to_string()
                } else {
                    "MT2910 Family [ConnectX-7]".to_string()
                },
            })
            .collect()
    }

    pub(super) fn blank_machine(
        &mut self,
        spec: &MachineSpec,
        system_id: String,
        hostname: String,
    ) -> Machine {
        let hardware_disks = self.hardware_disks(spec);
        let serial = random_string(&mut self.rng, b"0123456789ABCDEFGHJKLMNPQRSTUVWXYZ", 7);
        Machine {
            id: 0,
            system_id,
            hostname,
            description: String::new(),
            hardware_uuid: self.uuid(),
            status: Status::New,
            previous_status: Status::New,
            owner: None,
            locked: false,
            architecture: spec.architecture.clone(),
            cpu_count: spec.cpu_count,
            memory: spec.memory_mib,
            hardware_vendor: spec.hardware_vendor.clone(),
            hardware_product: spec.hardware_product.clone(),
            hardware_serial: serial,
            power_type: "ipmi".to_string(),
            power_parameters: BTreeMap::new(),
            power_state: PowerState::Off,
            osystem: String::new(),
            distro_series: String::new(),
            hwe_kernel: None,
            min_hwe_kernel: String::new(),
            netboot: true,
            ephemeral_deploy: false,
            enable_kernel_crash_dump: false,
            user_data: None,
            enable_hw_sync: false,
            sync_interval: None,
            last_sync: None,
            sync_due: None,
            sync_timer: false,
            sync_stalled: false,
            error_description: String::new(),
            interfaces: Vec::new(),
            disks: Vec::new(),
            boot_disk_id: None,
            volume_groups: Vec::new(),
            gateway_link: None,
            token: None,
            commissioning_status: -1,
            testing_status: -1,
            status_message: None,
            zone: "default".to_string(),
            pool: "default".to_string(),
            tag_names: Vec::new(),
            workload_annotations: BTreeMap::new(),
            pending: None,
            generation: 0,
            scenarios: Vec::new(),
            deployments: 0,
            erase: None,
            host_files: BTreeMap::new(),
            boot: 0,
            agent: spec.agent.clone(),
            skip_networking: false,
            skip_storage: false,
            hardware_disks,
        }
    }

    pub(super) fn insert_machine(&mut self, mut m: Machine) -> u64 {
        let id = self.id();
        m.id = id;
        let ids: Vec<String> = [
            Some(m.system_id.clone()),
            Some(m.hostname.clone()),
            m.bmc_ip().map(String::from),
        ]
        .into_iter()
        .flatten()
        .collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        m.scenarios = self.faults.scenarios_for(self.seed, &refs);
        self.by_system_id.insert(m.system_id.clone(), id);
        self.machines.insert(id, m);
        id
    }

    pub(super) fn power_parameters_for(spec: &MachineSpec) -> BTreeMap<String, String> {
        let mut p = BTreeMap::new();
        if let Some(ip) = &spec.bmc_ip {
            p.insert("power_address".to_string(), ip.clone());
            p.insert("power_user".to_string(), spec.power_user.clone());
            p.insert("power_pass".to_string(), spec.power_pass.clone());
            p.insert("power_driver".to_string(), "LAN_2_0".to_string());
        }
        p
    }

    pub(super) fn petname(&mut self) -> String {
        loop {
            let name = format!(
                "{}-{}",
                ADJECTIVES[self.rng.random_range(0..ADJECTIVES.len())],
                NOUNS[self.rng.random_range(0..NOUNS.len())]
            );
            let taken = self.machines.values().any(|m| m.hostname == name);
            if !taken {
                return name;
            }
            if self.machines.len() > ADJECTIVES.len() * NOUNS.len() / 2 {
                let n: u32 = self.rng.random_range(0..100_000);
                return format!("{name}-{n}");
            }
        }
    }

    /// Index of the hardware entry behind a machine (by PXE MAC, else BMC IP).
    pub(super) fn hardware_of(&self, m: &Machine) -> Option<usize> {
        m.interfaces
            .iter()
            .find_map(|i| self.hardware_by_mac.get(&i.mac).copied())
            .or_else(|| self.hardware_by_bmc.get(m.bmc_ip()?).copied())
    }

    /// Every MAC MAAS knows (one pass; for discovery questions).
    pub(super) fn known_macs(&self) -> std::collections::HashSet<&str> {
        self.machines
            .values()
            .flat_map(|m| m.interfaces.iter().map(|i| i.mac.as_str()))
            .collect()
    }

    // ----- background work ---------------------------------------------------------------------

    /// Whether the agent of `boot` still runs (the machine is Deployed, powered, same boot).
    /// The agent of this boot of the machine stops (out of band): woken, it drops its poll
    /// and polls no more.
    pub fn stop_agent(&mut self, system_id: String, boot: u64) {
        if let Some(waker) = self
            .machine_id(&system_id)
            .and_then(|id| self.agent_wakers.get(&id))
        {
            waker.notify_one();
        }
        self.stopped_agents.insert((system_id, boot));
    }

    /// What wakes the agent of `system_id` when its host may have gone (then it checks
    /// [`World::agent_alive`]); a wake-up that came while it was busy is kept for its next wait.
    pub fn agent_waker(&mut self, system_id: &str) -> Arc<tokio::sync::Notify> {
        let id = self.machine_id(system_id).unwrap_or(u64::MAX);
        self.agent_wakers.entry(id).or_default().clone()
    }

    pub fn agent_alive(&self, system_id: &str, boot: u64) -> bool {
        self.machine(system_id).is_some_and(|m| {
            m.boot == boot && m.status == Status::Deployed && m.power_state == PowerState::On
        }) && !self.stopped_agents.contains(&(system_id.to_owned(), boot))
    }

    // ----- enlistment ----------------------------------------------------------------------------

    // ----- IP addresses ------------------------------------------------------------------------

    pub(super) fn ip_in_use(&self, ip: Ipv4Addr) -> bool {
        self.machines
            .values()
            .flat_map(|m| m.interfaces.iter())
            .flat_map(|i| i.links.iter())
            .any(|l| l.ip == Some(ip))
    }

    pub(super) fn free_ip(&self, subnet: &Subnet) -> Option<Ipv4Addr> {
        // The addresses in use, in order, walked alongside the hosts (also in order).
        let mut used: Vec<u32> = self
            .machines
            .values()
            .flat_map(|m| m.interfaces.iter())
            .flat_map(|i| i.links.iter())
            .filter(|l| l.subnet_id == Some(subnet.id))
            .filter_map(|l| l.ip.map(u32::from))
            .collect();
        used.sort_unstable();
        let mut used = used.into_iter().peekable();
        subnet
            .cidr
            .hosts()
            .filter(|ip| Some(*ip) != subnet.gateway_ip)
            // Leave the low addresses to routers and the rack controller.
            .skip(if subnet.cidr.prefix >= 31 { 0 } else { 9 })
            .find(|ip| {
                let ip = u32::from(*ip);
                while used.next_if(|u| *u < ip).is_some() {}
                used.peek() != Some(&ip)
            })
    }

    /// Deployment claims AUTO addresses (503 on exhaustion, as MAAS).
    pub(super) fn claim_auto_ips(&mut self, id: u64) -> Result<(), MaasError> {
        let Some(m) = self.machines.get(&id) else {
            return Ok(());
        };
        let wanted: Vec<(usize, usize, u64)> = m
            .interfaces
            .iter()
            .enumerate()
            .flat_map(|(i, iface)| {
                iface.links.iter().enumerate().filter_map(move |(l, link)| {
                    (link.mode == LinkMode::Auto && link.ip.is_none()).then_some((
                        i,
                        l,
                        link.subnet_id?,
                    ))
                })
            })
            .collect();
        let system_id = m.system_id.clone();
        for (i, l, subnet_id) in wanted {
            let Some(subnet) = self.subnets.get(&subnet_id).cloned() else {
                continue;
            };
            let ip = self.free_ip(&subnet).ok_or_else(|| {
                MaasError::Unavailable(format!(
                    "{system_id}: Unable to allocate static IP due to address exhaustion."
                ))
            })?;
            if let Some(m) = self.machines.get_mut(&id) {
                m.interfaces[i].links[l].ip = Some(ip);
            }
        }
        Ok(())
    }

    /// Whether every AUTO link of the machine can get an address (503 otherwise).
    pub(super) fn check_auto_ips(&self, id: u64) -> Result<(), MaasError> {
        let Some(m) = self.machines.get(&id) else {
            return Ok(());
        };
        for link in m.interfaces.iter().flat_map(|i| i.links.iter()) {
            if link.mode != LinkMode::Auto || link.ip.is_some() {
                continue;
            }
            let free = link
                .subnet_id
                .and_then(|s| self.subnets.get(&s))
                .is_none_or(|s| self.free_ip(s).is_some());
            if !free {
                return Err(MaasError::Unavailable(format!(
                    "{}: Unable to allocate static IP due to address exhaustion.",
                    m.system_id
                )));
            }
        }
        Ok(())
    }

    /// Post-commit work of a request that started a deployment: claim AUTO addresses.
    pub fn post_commit(&mut self, system_id: &str) {
        if let Some(id) = self.machine_id(system_id)
            && self.machines[&id].status == Status::Deploying
        {
            let _ = self.claim_auto_ips(id);
        }
    }

    pub(super) fn release_auto_ips(&mut self, id: u64) {
        if let Some(m) = self.machines.get_mut(&id) {
            for link in m.interfaces.iter_mut().flat_map(|i| i.links.iter_mut()) {
                if link.mode == LinkMode::Auto {
                    link.ip = None;
                }
            }
        }
    }
}

/// `secs` of simulated time as real time under `time_scale`.
/// Whether `caller` sees machine `m` (an admin sees all, a user the unowned and their own).
pub fn visible_to(m: &Machine, caller: &Caller) -> bool {
    caller.is_admin() || m.owner.is_none() || m.owner.as_deref() == Some(caller.name())
}

pub fn scaled(secs: f64, time_scale: f64) -> Duration {
    let real = (secs / time_scale).max(0.0);
    Duration::microseconds((real * 1e6).round() as i64)
}

/// Sets the owner; an ownership change deletes the machine's token
/// (`clear_nodekey_when_owner_changes`).
pub(super) fn set_owner(m: &mut Machine, owner: Option<String>) {
    if m.owner != owner {
        m.owner = owner;
        m.token = None;
    }
}

impl World {
    pub(super) fn set_owner_token(&mut self, id: u64, owner: Option<String>) {
        let token = self.new_token();
        if let Some(m) = self.machines.get_mut(&id) {
            set_owner(m, owner);
            if m.owner.is_some() && m.token.is_none() {
                m.token = Some(token);
            }
        }
    }

    pub(super) fn bind_hardware(&mut self, id: u64) {
        // A machine created through the API with a known BMC or MAC commissions the real hardware.
        let hardware = self.machines.get(&id).and_then(|m| self.hardware_of(m));
        if let Some(index) = hardware {
            let disks = self.hardware_disks(&self.hardware[index].spec.clone());
            if let Some(m) = self.machines.get_mut(&id) {
                m.hardware_disks = disks;
            }
        }
    }

    pub(super) fn hardware_spec(&self, index: usize) -> &MachineSpec {
        &self.hardware[index].spec
    }

    pub(super) fn remove_machine(&mut self, id: u64) -> Option<Machine> {
        let m = self.machines.remove(&id)?;
        self.by_system_id.remove(&m.system_id);
        if let Some(waker) = self.agent_wakers.remove(&id) {
            waker.notify_one();
        }
        Some(m)
    }

    /// Machines hiding their hardware from MAAS until discovered, by BMC IP.
    pub fn unknown_bmcs(&self) -> Vec<String> {
        let known = self.known_macs();
        self.hardware
            .iter()
            .filter(|h| {
                !h.spec
                    .interfaces
                    .iter()
                    .any(|n| known.contains(n.mac.to_ascii_lowercase().as_str()))
            })
            .filter_map(|h| h.spec.bmc_ip.clone())
            .collect()
    }
}

impl World {
    /// The injected fault a task of `task_type` on this machine hits now, if any (its count is
    /// used up).
    pub fn take_task_fault(
        &mut self,
        system_id: &str,
        task_type: &str,
    ) -> Option<super::config::TaskFault> {
        let hostname = self
            .machine(system_id)
            .map(|m| m.hostname.clone())
            .unwrap_or_default();
        let (fault, fired) = self.agent_task_faults.iter_mut().find(|(f, fired)| {
            (f.task == "*" || f.task == task_type)
                && f.machine
                    .as_deref()
                    .is_none_or(|m| m == system_id || m.eq_ignore_ascii_case(&hostname))
                && f.times.is_none_or(|t| *fired < t)
        })?;
        *fired += 1;
        Some(fault.clone())
    }

    /// Replace the agent task faults at run time (counts start afresh).
    pub fn replace_task_faults(&mut self, faults: Vec<super::config::TaskFault>) {
        self.agent_task_faults = faults.into_iter().map(|f| (f, 0)).collect();
    }

    /// Real time one agent task takes.
    pub fn task_duration(&mut self) -> std::time::Duration {
        let secs = self.config.timings.agent_task_secs;
        self.sim_duration(secs).to_std().unwrap_or_default()
    }

    /// Replaces the fault spec at run time: request faults and scenario draws start afresh.
    pub fn replace_faults(&mut self, spec: FaultSpec) {
        self.faults = spec;
        self.fault_state = FaultState::default();
        let seed = self.seed;
        for m in self.machines.values_mut() {
            let bmc = m.bmc_ip().unwrap_or("").to_string();
            let ids = [m.system_id.as_str(), m.hostname.as_str(), bmc.as_str()];
            m.scenarios = self.faults.scenarios_for(seed, &ids);
        }
    }
}

/// (consumer key, token, nonce).
type NonceKey = (String, String, String);

/// Nonces seen, with their timestamps (the replay check). Past [`Nonces::KEPT`] of them, the
/// ones whose timestamp is too old to be accepted again are forgotten, oldest first: a busy
/// region (a wave makes hundreds of requests a second) never walks them all per request.
#[derive(Debug, Default)]
pub struct Nonces {
    seen: HashMap<NonceKey, i64>,
    by_timestamp: BTreeMap<i64, Vec<NonceKey>>,
}

impl Nonces {
    /// How many nonces are kept before expired ones are forgotten.
    pub const KEPT: usize = 50_000;

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    pub fn seen(&self, key: &NonceKey) -> bool {
        self.seen.contains_key(key)
    }

    /// Notes `key`; nonces whose timestamp is more than `keep_for` seconds before `now` may
    /// be forgotten.
    pub fn insert(&mut self, key: NonceKey, timestamp: i64, now: i64, keep_for: i64) {
        if self.seen.len() > Self::KEPT {
            while let Some(entry) = self.by_timestamp.first_entry() {
                if now - *entry.key() <= keep_for {
                    break;
                }
                for expired in entry.remove() {
                    self.seen.remove(&expired);
                }
            }
        }
        if self.seen.insert(key.clone(), timestamp).is_none() {
            self.by_timestamp.entry(timestamp).or_default().push(key);
        }
    }
}
