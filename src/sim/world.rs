//! The simulated MAAS region: machines, networks, events, counters and MAAS's own background
//! work (API_REFERENCE.md §4–§6; DESIGN.md §5).
//!
//! Background transitions are lazy: each machine has at most one piece of pending work with a
//! due time on a timeline; [`World::advance`] runs whatever is due, on every request and from
//! the server's ticker, so idle machines cost nothing. Durations are MAAS-realistic simulated
//! seconds divided by the time scale, jittered from the seeded RNG.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;

use chrono::{DateTime, Duration, Utc};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::config::{AgentBehaviour, MachineSpec, SimConfig};
use super::events::{Event, Level};
use super::faults::{FaultSpec, FaultState, Scenario};
use super::host::{self, AgentBoot};
use super::listing::{Machines, NetworkRef};
use super::machine::{Erase, Machine, NodeToken, Pending, PowerState};
use super::network::{Cidr, Interface, Link, LinkMode, NetworkLookup, Subnet, Vlan};
use super::reply::MaasError;
use super::status::{self, Status};
use super::storage::{BlockDevice, EFI_SIZE, Partition};

/// Per-machine counters of API requests that took effect (docs/contracts.md §3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub deploy: u64,
    pub release: u64,
    pub commission: u64,
    pub erase: u64,
    pub power_on: u64,
    pub power_off: u64,
    pub abort: u64,
    pub create: u64,
    pub delete: u64,
}

/// Which counter an effective request bumps.
#[derive(Debug, Clone, Copy)]
pub enum Counter {
    Deploy,
    Release,
    Commission,
    Erase,
    PowerOn,
    PowerOff,
    Abort,
    Create,
    Delete,
}

/// One entry of the operation log.
#[derive(Debug, Clone, Serialize)]
pub struct OpRecord {
    pub seq: u64,
    pub at: String,
    pub method: String,
    pub path: String,
    pub op: Option<String>,
    /// `<handler>.<action>` (the fault-spec name), e.g. `machine.deploy`.
    pub action: Option<String>,
    pub system_id: Option<String>,
    pub status: u16,
    /// The fault rule that fired, if any.
    pub fault: Option<String>,
}

/// One call a simulated agent made (or gave up on).
#[derive(Debug, Clone, Serialize)]
pub struct AgentRecord {
    pub system_id: String,
    pub hostname: String,
    pub attempt: u32,
    pub at: String,
    /// HTTP status, or null on a connection error.
    pub status: Option<u16>,
    pub outcome: String,
    /// After a successful enrollment: where the agent's task loop polls (issue 6).
    pub tasks_url: Option<String>,
}

/// A caller of the MAAS API.
#[derive(Debug, Clone, PartialEq)]
pub enum Caller {
    Anonymous,
    User {
        name: String,
        admin: bool,
    },
    /// A machine's own metadata token (`maas-init-node`): refused on the regular API.
    Node {
        system_id: String,
    },
}

impl Caller {
    pub fn name(&self) -> &str {
        match self {
            Caller::User { name, .. } => name,
            Caller::Anonymous => "anonymous",
            Caller::Node { .. } => "maas-init-node",
        }
    }

    pub fn is_admin(&self) -> bool {
        matches!(self, Caller::User { admin: true, .. })
    }
}

/// A hardware entry: a BMC with the machine behind it.
#[derive(Debug, Clone)]
struct Hardware {
    spec: MachineSpec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKind {
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
struct Timer {
    kind: TimerKind,
    /// Machine id, or hardware index for `Enlist`.
    target: u64,
    stamp: u64,
}

/// Distro series the simulated region has images for (name, os/series, version).
pub(super) const DISTROS: [(&str, &str); 3] =
    [("focal", "20.04"), ("jammy", "22.04"), ("noble", "24.04")];

/// The whole simulated region.
#[derive(Debug)]
pub struct World {
    pub seed: u64,
    pub time_scale: f64,
    pub config: SimConfig,
    rng: ChaCha8Rng,
    pub machines: Machines,
    by_system_id: HashMap<String, u64>,
    hardware: Vec<Hardware>,
    /// Hardware index by NIC MAC (lower case) and by BMC IP; the inventory never changes.
    hardware_by_mac: HashMap<String, usize>,
    hardware_by_bmc: HashMap<String, usize>,
    pub vlans: BTreeMap<u64, Vlan>,
    pub subnets: BTreeMap<u64, Subnet>,
    pub pxe_subnet: u64,
    pub events: Vec<Event>,
    pub counters: BTreeMap<String, Counters>,
    pub ops: Vec<OpRecord>,
    pub agent_log: Vec<AgentRecord>,
    /// Injected agent task failures, with how often each has fired.
    pub agent_task_faults: Vec<(super::config::TaskFault, u32)>,
    /// Every task a simulated agent ran.
    pub agent_task_log: Vec<super::agent::AgentTaskRecord>,
    /// (system id, boot) of hosts whose agent process was stopped out of band: the host stays
    /// up, the agent neither enrolls nor polls until the machine boots again.
    stopped_agents: BTreeSet<(String, u64)>,
    timeline: BTreeSet<(DateTime<Utc>, u64, Timer)>,
    timer_seq: u64,
    next_id: u64,
    pub faults: FaultSpec,
    pub fault_state: FaultState,
    /// Agents to start (drained by the server).
    pub outbox: Vec<AgentBoot>,
    /// Nonces seen, with their timestamps (OAuth replay check).
    pub nonces: HashMap<(String, String, String), i64>,
    /// User name → (api key parts, admin).
    pub users: Vec<(String, [String; 3], bool)>,
}

/// A MAAS-style random id string.
fn random_string(rng: &mut ChaCha8Rng, alphabet: &[u8], len: usize) -> String {
    (0..len)
        .map(|_| alphabet[rng.random_range(0..alphabet.len())] as char)
        .collect()
}

const SYSTEM_ID_ALPHABET: &[u8] = b"abcdefghkmnpqrstwxy3456789";
const TOKEN_ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";

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
    pub fn new(config: SimConfig, now: DateTime<Utc>) -> Result<World, WorldError> {
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
            vlans: BTreeMap::from([(
                5001,
                Vlan {
                    id: 5001,
                    vid: 0,
                    fabric_id: 0,
                    mtu: 1500,
                    dhcp_on: true,
                },
            )]),
            subnets: BTreeMap::new(),
            pxe_subnet: 1,
            events: Vec::new(),
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
            timeline: BTreeSet::new(),
            timer_seq: 0,
            next_id: 1,
            faults,
            fault_state: FaultState::default(),
            outbox: Vec::new(),
            nonces: HashMap::new(),
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
                vlan_id: 5001,
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
            if let Some(status) = spec.initial.status() {
                world.install_known(index, status, now);
            }
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
    fn sync_interval_secs(&self) -> u64 {
        (self.config.timings.hw_sync_interval_secs / self.time_scale)
            .round()
            .max(1.0) as u64
    }

    fn schedule(&mut self, due: DateTime<Utc>, kind: TimerKind, target: u64, stamp: u64) {
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

    /// When the next background work is due.
    pub fn next_due(&self) -> Option<DateTime<Utc>> {
        self.timeline.first().map(|(due, _, _)| *due)
    }

    // ----- lookups -----------------------------------------------------------------------------

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
        }
    }

    /// `GET machines/`'s body for the machines `ids`, in pieces (see [`Machines::list_body`]).
    pub fn machines_list_body(&mut self, ids: &[u64]) -> Vec<bytes::Bytes> {
        let net = NetworkRef {
            vlans: &self.vlans,
            subnets: &self.subnets,
            pxe_subnet: self.pxe_subnet,
        };
        self.machines.list_body(ids, net)
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
        self.events.push(event);
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
            let kind = if state == PowerState::On {
                "Node powered on"
            } else {
                "Node powered off"
            };
            self.event(id, Level::Debug, kind, "", "unknown", now);
        }
    }

    // ----- building machines -------------------------------------------------------------------

    fn hardware_disks(&mut self, spec: &MachineSpec) -> Vec<BlockDevice> {
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

    fn hardware_interfaces(&mut self, spec: &MachineSpec) -> Vec<Interface> {
        spec.interfaces
            .iter()
            .enumerate()
            .map(|(index, nic)| Interface {
                id: self.id(),
                name: nic.name.clone(),
                mac: nic.mac.to_ascii_lowercase(),
                vlan_id: (index == 0).then_some(5001),
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
            error_description: String::new(),
            interfaces: Vec::new(),
            disks: Vec::new(),
            boot_disk_id: None,
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

    fn power_parameters_for(spec: &MachineSpec) -> BTreeMap<String, String> {
        let mut p = BTreeMap::new();
        if let Some(ip) = &spec.bmc_ip {
            p.insert("power_address".to_string(), ip.clone());
            p.insert("power_user".to_string(), spec.power_user.clone());
            p.insert("power_pass".to_string(), "********".to_string());
            p.insert("power_driver".to_string(), "LAN_2_0".to_string());
        }
        p
    }

    /// Installs a machine MAAS already knows, in `status`.
    fn install_known(&mut self, hardware: usize, status: Status, now: DateTime<Utc>) -> u64 {
        let spec = self.hardware[hardware].spec.clone();
        let system_id = match &spec.system_id {
            Some(sid) if !self.by_system_id.contains_key(sid) => sid.clone(),
            _ => self.new_system_id(),
        };
        let hostname = spec.hostname.clone().unwrap_or_else(|| self.petname());
        let mut m = self.blank_machine(&spec, system_id, hostname);
        m.power_parameters = Self::power_parameters_for(&spec);
        m.interfaces = self.hardware_interfaces(&spec);
        m.status = status;
        let id = self.insert_machine(m);
        if status != Status::New {
            self.discover_hardware(id, false, false);
            if let Some(m) = self.machines.get_mut(&id) {
                m.commissioning_status = 2;
                m.testing_status = 2;
            }
        }
        if matches!(status, Status::Allocated | Status::Deployed) {
            let owner = self.config.username.clone();
            let token = self.new_token();
            if let Some(m) = self.machines.get_mut(&id) {
                m.owner = Some(owner);
                m.token = Some(token);
            }
        }
        if status == Status::Deployed {
            let interval = self.sync_interval_secs();
            // An exhausted PXE subnet leaves the AUTO link without an address, as MAAS would.
            let _ = self.claim_auto_ips(id);
            if let Some(m) = self.machines.get_mut(&id) {
                m.osystem = "ubuntu".to_string();
                m.distro_series = "noble".to_string();
                m.hwe_kernel = Some("ga-24.04".to_string());
                m.power_state = PowerState::On;
                m.netboot = false;
                m.enable_hw_sync = true;
                m.sync_interval = Some(interval);
                m.deployments = 1;
            }
            self.start_hw_sync(id, now);
        }
        let kind = status.name().to_string();
        self.event(id, Level::Info, &kind, "", "unknown", now);
        id
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

    /// What commissioning finds: the real NICs (PXE one linked AUTO) and disks.
    pub(super) fn discover_hardware(&mut self, id: u64, skip_networking: bool, skip_storage: bool) {
        let hardware = self
            .machines
            .get(&id)
            .and_then(|m| self.hardware_of(m))
            .map(|h| self.hardware[h].spec.clone());
        if !skip_networking {
            let interfaces = match &hardware {
                Some(spec) => self.hardware_interfaces(spec),
                None => self
                    .machines
                    .get(&id)
                    .map(|m| m.interfaces.clone())
                    .unwrap_or_default(),
            };
            let link_id = self.id();
            let pxe = self.pxe_subnet;
            if let Some(m) = self.machines.get_mut(&id) {
                m.interfaces = interfaces;
                for (index, iface) in m.interfaces.iter_mut().enumerate() {
                    iface.links.clear();
                    if index == 0 {
                        iface.vlan_id = Some(5001);
                        iface.links.push(Link {
                            id: link_id,
                            mode: LinkMode::Auto,
                            subnet_id: Some(pxe),
                            ip: None,
                        });
                    }
                }
            }
        }
        if !skip_storage {
            let no_boot_disk = self
                .machines
                .get(&id)
                .is_some_and(|m| m.has_scenario(Scenario::NoBootDisk));
            if let Some(m) = self.machines.get_mut(&id) {
                let mut disks = m.hardware_disks.clone();
                if no_boot_disk {
                    disks.retain(|d| !d.looks_like_boot_device());
                }
                for d in &mut disks {
                    d.partitions.clear();
                }
                m.boot_disk_id = disks.first().map(|d| d.id);
                m.disks = disks;
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
    fn known_macs(&self) -> std::collections::HashSet<&str> {
        self.machines
            .values()
            .flat_map(|m| m.interfaces.iter().map(|i| i.mac.as_str()))
            .collect()
    }

    // ----- background work ---------------------------------------------------------------------

    /// Runs every piece of background work due at `now`.
    pub fn advance(&mut self, now: DateTime<Utc>) {
        while let Some((due, _, _)) = self.timeline.first().copied() {
            if due > now {
                break;
            }
            let Some((due, _, timer)) = self.timeline.pop_first() else {
                break;
            };
            self.fire(timer, due);
        }
    }

    fn fire(&mut self, timer: Timer, at: DateTime<Utc>) {
        match timer.kind {
            TimerKind::Enlist => self.enlist(timer.target as usize, at),
            TimerKind::Pending => {
                let Some(m) = self.machines.get(&timer.target) else {
                    return;
                };
                if m.generation != timer.stamp {
                    return;
                }
                let Some((work, _)) = m.pending else {
                    return;
                };
                self.set_pending(timer.target, None);
                self.complete(timer.target, work, at);
            }
            TimerKind::Sync => self.hw_sync_tick(timer.target, at),
            TimerKind::OutOfBand(scenario) => {
                let valid = self
                    .machines
                    .get(&timer.target)
                    .is_some_and(|m| m.boot == timer.stamp && m.status == Status::Deployed);
                if valid {
                    let action = match scenario {
                        Scenario::MachineDeleted => "delete",
                        Scenario::ReleasedOob => "release",
                        Scenario::PoweredOff => "power_off",
                        _ => "redeploy",
                    };
                    let _ = self.out_of_band(timer.target, action, at);
                }
            }
        }
    }

    fn complete(&mut self, id: u64, work: Pending, now: DateTime<Utc>) {
        let Some(m) = self.machines.get(&id) else {
            return;
        };
        let (skip_networking, skip_storage) = (m.skip_networking, m.skip_storage);
        match work {
            Pending::CommissioningDone => {
                if m.has_scenario(Scenario::CommissioningFails) {
                    if let Some(m) = self.machines.get_mut(&id) {
                        m.commissioning_status = 3;
                    }
                    self.fail(id, "Failed commissioning", "Commissioning failed, see the script results (simulated: 00-maas-01-lshw exited 1).", now);
                    return;
                }
                self.discover_hardware(id, skip_networking, skip_storage);
                if let Some(m) = self.machines.get_mut(&id) {
                    m.commissioning_status = 2;
                }
                let run_tests = self
                    .machines
                    .get(&id)
                    .is_some_and(|m| m.testing_status != 9);
                if run_tests {
                    let _ = self.transition(id, Status::Testing, now);
                    if let Some(m) = self.machines.get_mut(&id) {
                        m.testing_status = 1;
                    }
                    self.event(id, Level::Info, "Testing", "", "unknown", now);
                    let d = self.sim_duration(self.config.timings.testing_secs);
                    self.set_pending(
                        id,
                        Some((
                            Pending::TestingDone {
                                back_to: Status::Ready,
                            },
                            now + d,
                        )),
                    );
                } else {
                    self.become_ready(id, now);
                }
            }
            Pending::TestingDone { back_to } => {
                if m.has_scenario(Scenario::TestingFails) {
                    if let Some(m) = self.machines.get_mut(&id) {
                        m.testing_status = 3;
                    }
                    self.fail(id, "Failed testing", "Testing failed, see the script results (simulated: smartctl-validate failed).", now);
                    return;
                }
                if let Some(m) = self.machines.get_mut(&id) {
                    m.testing_status = 2;
                }
                if back_to == Status::Ready {
                    self.become_ready(id, now);
                } else {
                    let _ = self.transition(id, back_to, now);
                }
            }
            Pending::DeploymentDone => self.end_deployment(id, now),
            Pending::DeploymentTimedOut => self.fail(
                id,
                "Failed deployment",
                "Deployment timed out: the machine's AUTO addresses could not be allocated \
                 (simulated address exhaustion).",
                now,
            ),
            Pending::ReleaseDone => self.finish_release(id, now),
            Pending::RescueDone => {
                // The status before rescue stays the way back (MAAS sets it once, on start).
                let before = m.previous_status;
                let _ = self.transition(id, Status::RescueMode, now);
                if let Some(m) = self.machines.get_mut(&id) {
                    m.previous_status = before;
                }
                self.event(id, Level::Info, "Rescue mode", "", "unknown", now);
            }
            Pending::ExitRescueDone { back_to } => {
                if back_to != Status::Deployed {
                    self.power(id, PowerState::Off, now);
                }
                let _ = self.transition(id, back_to, now);
            }
            Pending::EraseDone => {
                if m.has_scenario(Scenario::EraseFails) {
                    self.fail(
                        id,
                        "Failed to erase disks",
                        "wipe-disks failed (simulated).",
                        now,
                    );
                    return;
                }
                self.event(
                    id,
                    Level::Info,
                    "Disk erasing",
                    "Finished erasing disks",
                    "unknown",
                    now,
                );
                self.finish_release(id, now);
            }
        }
    }

    /// `mark_failed`: the failed counterpart of the current status, with MAAS-like events.
    pub(super) fn fail(&mut self, id: u64, kind: &str, description: &str, now: DateTime<Utc>) {
        let Some(m) = self.machines.get(&id) else {
            return;
        };
        let Some(failed) = m.status.failed_counterpart() else {
            return;
        };
        let _ = self.transition(id, failed, now);
        self.event(id, Level::Info, kind, "", "unknown", now);
        self.event(
            id,
            Level::Error,
            "Marking node failed",
            description,
            "unknown",
            now,
        );
        if let Some(m) = self.machines.get_mut(&id) {
            m.error_description = description.to_string();
        }
        self.power(id, PowerState::Off, now);
    }

    pub(super) fn become_ready(&mut self, id: u64, now: DateTime<Utc>) {
        let _ = self.transition(id, Status::Ready, now);
        self.power(id, PowerState::Off, now);
        self.event(id, Level::Info, "Ready", "", "unknown", now);
    }

    /// DEPLOYING → DEPLOYED when the installed OS fetches its user_data, or the failure of a
    /// datasource_failure / deploy_fails scenario.
    fn end_deployment(&mut self, id: u64, now: DateTime<Utc>) {
        if !self.machines.contains_key(&id) {
            return;
        }
        for kind in [
            "Performing PXE boot",
            "Loading ephemeral",
            "Configuring storage",
            "Installing OS",
            "Configuring OS",
            "Rebooting",
        ] {
            self.event(id, Level::Info, kind, "", "unknown", now);
        }
        let m = &self.machines[&id];
        if m.has_scenario(Scenario::DatasourceFailure) && m.deployments == 1 {
            self.event(
                id,
                Level::Error,
                "Node installation failure",
                "cloud-init: DataSourceNotFound: no datasource found (searched MAAS); cloud-init modules:final stage failed",
                "unknown",
                now,
            );
            self.fail(
                id,
                "Failed deployment",
                "Installation failed (refer to the installation log for more information).",
                now,
            );
            return;
        }
        if m.has_scenario(Scenario::DeployFails) {
            self.event(
                id,
                Level::Error,
                "Node installation failure",
                "curtin: installation failed (simulated)",
                "unknown",
                now,
            );
            self.fail(
                id,
                "Failed deployment",
                "Installation failed (refer to the installation log for more information).",
                now,
            );
            return;
        }
        if self.transition(id, Status::Deployed, now).is_err() {
            return;
        }
        self.event(id, Level::Info, "Deployed", "", "unknown", now);
        self.start_hw_sync(id, now);
        self.boot_host(id, now);
    }

    pub(super) fn start_hw_sync(&mut self, id: u64, now: DateTime<Utc>) {
        let interval = self.sync_interval_secs();
        let Some(m) = self.machines.get_mut(&id) else {
            return;
        };
        if !m.enable_hw_sync {
            return;
        }
        m.last_sync = Some(now);
        m.sync_interval = Some(interval);
        let due = now + Duration::seconds(interval as i64);
        m.sync_due = Some(due);
        self.schedule(due, TimerKind::Sync, id, 0);
    }

    fn hw_sync_tick(&mut self, id: u64, at: DateTime<Utc>) {
        let Some(m) = self.machines.get_mut(&id) else {
            return;
        };
        if m.sync_due != Some(at) {
            return;
        }
        m.sync_due = None;
        let running =
            m.status == Status::Deployed && m.enable_hw_sync && m.power_state == PowerState::On;
        let reseeded = m
            .host_files
            .get(host::MAAS_CREDS_PATH)
            .zip(m.token.as_ref())
            .is_some_and(|(content, token)| content.contains(&token.token_key));
        let stopped = m.has_scenario(Scenario::HwsyncNever)
            || (m.has_scenario(Scenario::HwsyncStale) && !reseeded);
        if running && !stopped {
            self.start_hw_sync(id, at);
        }
    }

    /// A write through the SSH stand-in; a reseed of the MAAS credentials restarts the timer.
    pub fn write_host_file(
        &mut self,
        system_id: &str,
        path: &str,
        content: &str,
        now: DateTime<Utc>,
    ) -> Result<(), MaasError> {
        let id = self
            .machine_id(system_id)
            .ok_or_else(MaasError::no_machine)?;
        let m = self
            .machines
            .get_mut(&id)
            .ok_or_else(MaasError::no_machine)?;
        if m.status != Status::Deployed {
            return Err(MaasError::Conflict(format!(
                "{} is {}, not Deployed: there is no host to write to",
                m.hostname,
                m.status.name()
            )));
        }
        m.host_files.insert(path.to_string(), content.to_string());
        let reseed = path == host::MAAS_CREDS_PATH
            && m.token
                .as_ref()
                .is_some_and(|t| content.contains(&t.token_key))
            && m.enable_hw_sync
            && !m.has_scenario(Scenario::HwsyncNever);
        if reseed {
            // The restarted timer posts at once and then every interval.
            self.start_hw_sync(id, now);
        }
        Ok(())
    }

    /// The deployed OS boots: user_data's files land on the host and the agent starts.
    pub(super) fn boot_host(&mut self, id: u64, now: DateTime<Utc>) {
        let agent_delay_secs = self.config.timings.agent_boot_secs;
        let Some(m) = self.machines.get_mut(&id) else {
            return;
        };
        m.boot += 1;
        m.host_files = m
            .user_data
            .as_deref()
            .map(host::files_from_user_data)
            .unwrap_or_default();
        let boot = m.boot;
        let env = m
            .host_files
            .get(host::AGENT_ENV_PATH)
            .map(|e| host::parse_env(e));
        let behaviour = m.agent.clone();
        let (system_id, hostname) = (m.system_id.clone(), m.hostname.clone());
        let oob: Vec<_> = m
            .scenarios
            .iter()
            .filter(|r| r.scenario.is_out_of_band())
            .map(|r| (r.scenario, r.after))
            .collect();
        for (scenario, after) in oob {
            let due = now + scaled(after.as_secs_f64(), self.time_scale);
            self.schedule(due, TimerKind::OutOfBand(scenario), id, boot);
        }
        let Some(env) = env else {
            return;
        };
        let (Some(url), Some(token)) = (
            env.get("METALFORM_ENROLL_URL"),
            env.get("METALFORM_ENROLL_TOKEN"),
        ) else {
            return;
        };
        let extra = match behaviour {
            AgentBehaviour::Never => return,
            AgentBehaviour::Late { delay_secs } => delay_secs,
            _ => 0.0,
        };
        let delay = self.sim_duration(agent_delay_secs) + scaled(extra, self.time_scale);
        let token = if behaviour == AgentBehaviour::WrongToken {
            format!("wrong-{}", random_string(&mut self.rng, TOKEN_ALPHABET, 24))
        } else {
            token.clone()
        };
        self.outbox.push(AgentBoot {
            system_id,
            hostname: env.get("METALFORM_NODE").cloned().unwrap_or(hostname),
            boot,
            url: url.clone(),
            token,
            delay: delay.to_std().unwrap_or_default(),
            retry_base: scaled(2.0, self.time_scale).to_std().unwrap_or_default(),
        });
    }

    /// Whether the agent of `boot` still runs (the machine is Deployed, powered, same boot).
    /// The agent of this boot of the machine stops (out of band): it stops polling after its
    /// current request.
    pub fn stop_agent(&mut self, system_id: String, boot: u64) {
        self.stopped_agents.insert((system_id, boot));
    }

    pub fn agent_alive(&self, system_id: &str, boot: u64) -> bool {
        self.machine(system_id).is_some_and(|m| {
            m.boot == boot && m.status == Status::Deployed && m.power_state == PowerState::On
        }) && !self.stopped_agents.contains(&(system_id.to_owned(), boot))
    }

    // ----- enlistment ----------------------------------------------------------------------------

    /// IPMI stand-in (`POST /sim/v1/bmc/{ip}/power`): power a BMC's machine; a PXE boot of a
    /// machine MAAS does not know enlists it after a while.
    pub fn bmc_power(
        &mut self,
        ip: &str,
        action: &str,
        pxe: bool,
        now: DateTime<Utc>,
    ) -> Result<serde_json::Value, MaasError> {
        let Some(index) = self
            .hardware
            .iter()
            .position(|h| h.spec.bmc_ip.as_deref() == Some(ip))
        else {
            return Err(MaasError::NotFound(format!("No BMC at {ip}.")));
        };
        let state = match action {
            "on" | "cycle" => PowerState::On,
            "off" => PowerState::Off,
            other => {
                return Err(MaasError::BadRequest(format!(
                    "Unknown power action '{other}': expected on, off or cycle."
                )));
            }
        };
        let pxe_macs: Vec<String> = self.hardware[index]
            .spec
            .interfaces
            .iter()
            .map(|n| n.mac.to_ascii_lowercase())
            .collect();
        let known = self
            .machines
            .values()
            .find(|m| m.interfaces.iter().any(|i| pxe_macs.contains(&i.mac)))
            .map(|m| m.id);
        match known {
            Some(id) => {
                self.power(id, state, now);
                let sid = self.machines[&id].system_id.clone();
                Ok(
                    serde_json::json!({"bmc": ip, "power": state.as_str(), "system_id": sid, "enlisting": false}),
                )
            }
            None => {
                let enlisting = state == PowerState::On && pxe;
                if enlisting {
                    let d = self.sim_duration(self.config.timings.enlist_secs);
                    self.schedule(now + d, TimerKind::Enlist, index as u64, 0);
                }
                Ok(
                    serde_json::json!({"bmc": ip, "power": state.as_str(), "system_id": null, "enlisting": enlisting}),
                )
            }
        }
    }

    fn enlist(&mut self, index: usize, now: DateTime<Utc>) {
        let Some(hw) = self.hardware.get(index) else {
            return;
        };
        let spec = hw.spec.clone();
        let macs: Vec<String> = spec
            .interfaces
            .iter()
            .map(|n| n.mac.to_ascii_lowercase())
            .collect();
        if self
            .machines
            .values()
            .any(|m| m.interfaces.iter().any(|i| macs.contains(&i.mac)))
        {
            return;
        }
        let system_id = self.new_system_id();
        let hostname = self.petname();
        let mut m = self.blank_machine(&spec, system_id, hostname);
        m.power_parameters = Self::power_parameters_for(&spec);
        m.interfaces = self.hardware_interfaces(&spec);
        m.power_state = PowerState::Off;
        let id = self.insert_machine(m);
        self.event(id, Level::Info, "Performing PXE boot", "", "unknown", now);
        self.event(id, Level::Info, "Loading ephemeral", "", "unknown", now);
        self.event(
            id,
            Level::Info,
            "New",
            "Enlisted through PXE boot",
            "unknown",
            now,
        );
    }

    // ----- IP addresses ------------------------------------------------------------------------

    pub(super) fn ip_in_use(&self, ip: Ipv4Addr) -> bool {
        self.machines
            .values()
            .flat_map(|m| m.interfaces.iter())
            .flat_map(|i| i.links.iter())
            .any(|l| l.ip == Some(ip))
    }

    pub(super) fn free_ip(&self, subnet: &Subnet) -> Option<Ipv4Addr> {
        let used: BTreeSet<Ipv4Addr> = self
            .machines
            .values()
            .flat_map(|m| m.interfaces.iter())
            .flat_map(|i| i.links.iter())
            .filter(|l| l.subnet_id == Some(subnet.id))
            .filter_map(|l| l.ip)
            .collect();
        subnet
            .cidr
            .hosts()
            .filter(|ip| Some(*ip) != subnet.gateway_ip)
            // Leave the low addresses to routers and the rack controller.
            .skip(if subnet.cidr.prefix >= 31 { 0 } else { 9 })
            .find(|ip| !used.contains(ip))
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
        Some(m)
    }

    pub(super) fn erase_duration(&mut self, erase: Erase) -> Duration {
        let secs = match erase {
            Erase::Quick => self.config.timings.quick_erase_secs,
            Erase::Full => self.config.timings.erase_secs,
            Erase::Secure => self.config.timings.secure_erase_secs,
        };
        self.sim_duration(secs)
    }

    pub(super) fn finish_release(&mut self, id: u64, now: DateTime<Utc>) {
        let commissioned = self
            .machines
            .get(&id)
            .is_some_and(|m| m.commissioning_status >= 0);
        let target = if commissioned {
            Status::Ready
        } else {
            Status::New
        };
        if self.transition(id, target, now).is_err() {
            return;
        }
        self.release_auto_ips(id);
        self.power(id, PowerState::Off, now);
        if let Some(m) = self.machines.get_mut(&id) {
            m.erase = None;
            m.workload_annotations.clear();
            m.netboot = true;
        }
        self.event(id, Level::Info, "Released", "", "unknown", now);
    }

    /// Flat layout: EFI (and `/boot` with a `boot_size`) on the boot disk, root ext4 on
    /// `root` (or the boot disk), `root_size` or the rest of that disk. Sizes that do not fit
    /// are MAAS's `Failed to configure storage layout 'flat': …`.
    pub(super) fn apply_flat_layout(
        &mut self,
        id: u64,
        root: Option<u64>,
        sizes: super::ops::FlatSizes,
    ) -> Result<(), MaasError> {
        let uuids: Vec<String> = (0..6).map(|_| self.uuid()).collect();
        let (efi_id, boot_id, root_id) = (self.id(), self.id(), self.id());
        let m = self
            .machines
            .get_mut(&id)
            .ok_or_else(MaasError::no_machine)?;
        let boot = m
            .boot_disk_id
            .or(m.disks.first().map(|d| d.id))
            .ok_or_else(|| {
                MaasError::BadRequest(
                    "Machine is missing a boot disk; no storage layout can be applied.".to_string(),
                )
            })?;
        let root = root.unwrap_or(boot);
        let overhead = 8 * 1024 * 1024;
        let mut layout: Vec<(u64, Vec<Partition>)> = Vec::new();
        for disk in &m.disks {
            let mut partitions = Vec::new();
            if disk.id == boot {
                partitions.push(Partition {
                    id: efi_id,
                    uuid: uuids[0].clone(),
                    size: EFI_SIZE,
                    bootable: true,
                    fstype: "fat32",
                    label: "efi",
                    mount_point: "/boot/efi",
                    fs_uuid: uuids[1].clone(),
                });
                if let Some(size) = sizes.boot.map(|s| s.of(disk.size)).filter(|s| *s > 0) {
                    partitions.push(Partition {
                        id: boot_id,
                        uuid: uuids[2].clone(),
                        size,
                        bootable: true,
                        fstype: "ext4",
                        label: "boot",
                        mount_point: "/boot",
                        fs_uuid: uuids[3].clone(),
                    });
                }
            }
            if disk.id == root {
                let used: u64 = partitions.iter().map(|p| p.size).sum();
                let available = disk.size.saturating_sub(used + overhead);
                let size = sizes.root.map_or(available, |s| s.of(disk.size));
                partitions.push(Partition {
                    id: root_id,
                    uuid: uuids[4].clone(),
                    size,
                    bootable: false,
                    fstype: "ext4",
                    label: "root",
                    mount_point: "/",
                    fs_uuid: uuids[5].clone(),
                });
            }
            let needed: u64 = partitions.iter().map(|p| p.size).sum::<u64>()
                + if partitions.is_empty() { 0 } else { overhead };
            if needed > disk.size {
                return Err(MaasError::BadRequest(format!(
                    "Failed to configure storage layout 'flat': the partitions need {needed} bytes, \
                     {} has {}.",
                    disk.name, disk.size
                )));
            }
            layout.push((disk.id, partitions));
        }
        for (disk, (disk_id, partitions)) in m.disks.iter_mut().zip(layout) {
            debug_assert_eq!(disk.id, disk_id);
            disk.partitions = partitions;
        }
        Ok(())
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
