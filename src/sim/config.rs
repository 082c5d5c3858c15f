//! Simulator configuration and the hardware inventory (DESIGN.md §5; seed 000 §4.3
//! CreateOrFindInMaas / ConfigureStorage / ApplyRoCEPhase2).
//!
//! A [`SimConfig`] names everything that varies between runs: the seed, the time scale, the
//! fault spec, the API key, and per machine its BMC, NICs, disks, initial MAAS state and how its
//! node agent behaves. [`SimConfig::generated`] builds a GPU-node fleet deterministically from a
//! seed; tests build inventories by hand.

use std::time::Duration;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::status::Status;

/// The API key the simulator accepts when none is given (`consumer:token:secret`).
pub const DEFAULT_API_KEY: &str =
    "simconsumer0000000:simtoken00000000000:simsecret0000000000000000000000";

/// Everything a simulator run is made of.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// Seed of every random draw (system ids, MACs, timings, fault draws).
    pub seed: u64,
    /// Simulated seconds per real second: MAAS durations (commissioning ~4 min, deployment
    /// ~10 min) are divided by it.
    pub time_scale: f64,
    /// Fault spec (docs/simulator.md "Faults"); empty = none.
    pub faults: String,
    /// The admin user's API key `consumer:token:secret`.
    pub api_key: String,
    /// The admin user's name.
    pub username: String,
    /// Additional, non-admin users (for permission answers).
    pub users: Vec<UserSpec>,
    /// Durations of MAAS's own background work, in simulated time.
    pub timings: Timings,
    /// The hardware: machines MAAS knows and BMCs it does not know yet.
    pub machines: Vec<MachineSpec>,
    /// The PXE subnet that commissioning links boot interfaces to.
    pub pxe_cidr: String,
    /// Its gateway.
    pub pxe_gateway: String,
    /// `version` reported by `GET version/`.
    pub maas_version: String,
    /// Agent task failures to inject (docs/simulator.md "Agent tasks"); also settable at run
    /// time through `PUT /sim/v1/agents/task-faults`.
    pub agent_task_faults: Vec<TaskFault>,
}

/// One injected failure of the simulated node agent's task runner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskFault {
    /// The task type (`node.gpu_scrub`, …), or `*` for every type.
    pub task: String,
    /// A system id or hostname; absent = every machine.
    #[serde(default)]
    pub machine: Option<String>,
    /// How many executions it hits before tasks succeed again; absent = every one.
    #[serde(default)]
    pub times: Option<u32>,
    #[serde(default)]
    pub mode: TaskFaultMode,
    /// The failure message the agent reports.
    #[serde(default)]
    pub message: Option<String>,
}

/// What an injected task fault does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskFaultMode {
    /// The agent reports the task `failed`.
    #[default]
    Fail,
    /// The agent takes the task and never reports: its lease goes stale.
    Hang,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            time_scale: 1.0,
            faults: String::new(),
            api_key: DEFAULT_API_KEY.to_string(),
            username: "admin".to_string(),
            users: Vec::new(),
            timings: Timings::default(),
            machines: Vec::new(),
            pxe_cidr: "10.176.46.0/24".to_string(),
            pxe_gateway: "10.176.46.1".to_string(),
            maas_version: "3.6.1".to_string(),
            agent_task_faults: Vec::new(),
        }
    }
}

/// A non-admin MAAS user.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UserSpec {
    pub username: String,
    pub api_key: String,
}

/// How long MAAS's own work takes, in simulated seconds (divided by the time scale).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timings {
    pub enlist_secs: f64,
    pub commissioning_secs: f64,
    pub testing_secs: f64,
    pub deploying_secs: f64,
    pub releasing_secs: f64,
    /// Per disk: `wipefs` and 2 MiB zeroed at each end (`quick_erase`).
    pub quick_erase_secs: f64,
    /// Per disk: the drive's own secure erase (`secure_erase`).
    pub secure_erase_secs: f64,
    /// Full wipe throughput of SATA/SAS disks, MB/s (`dd` of zeros).
    pub zero_mb_per_sec: f64,
    /// Full wipe throughput of NVMe disks, MB/s (`nvme write-zeroes`).
    pub nvme_zero_mb_per_sec: f64,
    /// `hardware_sync_interval` (MAAS default 15 min).
    pub hw_sync_interval_secs: f64,
    /// Delay between the machine reaching Deployed and its agent calling the enrollment URL.
    pub agent_boot_secs: f64,
    /// How long the agent takes to run one task (drain, scrub, cleanup, …).
    pub agent_task_secs: f64,
    /// `node_timeout`: a machine stuck in a monitored state fails after it.
    pub node_timeout_secs: f64,
    /// Each duration is drawn uniformly in `[d * (1 - jitter), d * (1 + jitter)]`.
    pub jitter: f64,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            enlist_secs: 120.0,
            commissioning_secs: 240.0,
            testing_secs: 60.0,
            deploying_secs: 600.0,
            releasing_secs: 10.0,
            quick_erase_secs: 12.0,
            secure_erase_secs: 120.0,
            zero_mb_per_sec: 400.0,
            nvme_zero_mb_per_sec: 4000.0,
            hw_sync_interval_secs: 900.0,
            agent_boot_secs: 30.0,
            agent_task_secs: 5.0,
            node_timeout_secs: 1800.0,
            jitter: 0.2,
        }
    }
}

/// One machine of the hardware inventory.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MachineSpec {
    /// BMC (IPMI) address; the `power_address` MAAS learns.
    pub bmc_ip: Option<String>,
    /// Hostname if MAAS already knows the machine; enlistment names it otherwise.
    pub hostname: Option<String>,
    /// Fixed system id (a real export's); drawn from the seed otherwise.
    pub system_id: Option<String>,
    /// NICs, the first one is the PXE/boot interface.
    pub interfaces: Vec<NicSpec>,
    pub disks: Vec<DiskSpec>,
    pub initial: InitialState,
    pub agent: AgentBehaviour,
    pub cpu_count: u32,
    pub memory_mib: u64,
    pub architecture: String,
    pub hardware_vendor: String,
    pub hardware_product: String,
    /// IPMI credentials MAAS already has for a known machine.
    pub power_user: String,
    pub power_pass: String,
}

impl Default for MachineSpec {
    fn default() -> Self {
        Self {
            bmc_ip: None,
            hostname: None,
            system_id: None,
            interfaces: Vec::new(),
            disks: Vec::new(),
            initial: InitialState::Ready,
            agent: AgentBehaviour::OnTime,
            cpu_count: 192,
            memory_mib: 2_097_152,
            architecture: "amd64/generic".to_string(),
            hardware_vendor: "Dell Inc.".to_string(),
            hardware_product: "PowerEdge XE9680".to_string(),
            power_user: "root".to_string(),
            power_pass: "calvin".to_string(),
        }
    }
}

/// A network interface as commissioning discovers it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NicSpec {
    pub name: String,
    /// Lower-case, colon-separated.
    pub mac: String,
    #[serde(default = "default_speed")]
    pub speed_mbps: u64,
}

fn default_speed() -> u64 {
    25_000
}

/// A physical disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiskSpec {
    pub name: String,
    pub model: String,
    pub serial: String,
    pub size_bytes: u64,
    /// `/dev/disk/by-id/...`
    pub id_path: String,
}

impl DiskSpec {
    /// A Dell BOSS-N1 M.2 boot disk (what seed 000 §4.3 ConfigureStorage looks for).
    pub fn boss(name: &str, serial: &str) -> Self {
        Self {
            name: name.to_string(),
            model: "Dell BOSS-N1".to_string(),
            serial: serial.to_string(),
            size_bytes: 479_559_942_144,
            id_path: format!("/dev/disk/by-id/ata-Dell_BOSS-N1_{serial}"),
        }
    }

    /// A data NVMe disk.
    pub fn nvme(name: &str, serial: &str) -> Self {
        Self {
            name: name.to_string(),
            model: "Dell Ent NVMe CM7 RI 3.84TB".to_string(),
            serial: serial.to_string(),
            size_bytes: 3_840_755_982_336,
            id_path: format!("/dev/disk/by-id/nvme-Dell_Ent_NVMe_CM7_RI_3.84TB_{serial}"),
        }
    }
}

/// Where a machine starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InitialState {
    /// MAAS does not know it: it appears (as New) only when its BMC power-cycles it into PXE.
    Unknown,
    New,
    /// Commissioned (interfaces linked, storage discovered), no owner.
    Ready,
    /// Allocated to the admin user.
    Allocated,
    /// Deployed (ubuntu/noble) to the admin user, with hardware sync on.
    Deployed,
    Broken,
    FailedCommissioning,
}

impl InitialState {
    /// The MAAS status a known machine starts in.
    pub fn status(self) -> Option<Status> {
        Some(match self {
            InitialState::Unknown => return None,
            InitialState::New => Status::New,
            InitialState::Ready => Status::Ready,
            InitialState::Allocated => Status::Allocated,
            InitialState::Deployed => Status::Deployed,
            InitialState::Broken => Status::Broken,
            InitialState::FailedCommissioning => Status::FailedCommissioning,
        })
    }

    pub fn parse(text: &str) -> Option<InitialState> {
        Some(match text {
            "unknown" => InitialState::Unknown,
            "new" => InitialState::New,
            "ready" => InitialState::Ready,
            "allocated" => InitialState::Allocated,
            "deployed" => InitialState::Deployed,
            "broken" => InitialState::Broken,
            "failed_commissioning" => InitialState::FailedCommissioning,
            _ => return None,
        })
    }
}

/// What the simulated node agent does once the deployed OS boots (docs/contracts.md §4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentBehaviour {
    /// Enrolls right after boot.
    OnTime,
    /// Enrolls this many simulated seconds after boot.
    Late { delay_secs: f64 },
    /// Never calls.
    Never,
    /// Calls with a token that is not the one in user_data.
    WrongToken,
}

impl AgentBehaviour {
    pub fn delay(&self, timings: &Timings) -> Option<Duration> {
        match self {
            AgentBehaviour::Never => None,
            AgentBehaviour::OnTime | AgentBehaviour::WrongToken => {
                Some(Duration::from_secs_f64(timings.agent_boot_secs.max(0.0)))
            }
            AgentBehaviour::Late { delay_secs } => Some(Duration::from_secs_f64(
                (timings.agent_boot_secs + delay_secs).max(0.0),
            )),
        }
    }
}

/// Options of [`SimConfig::generated`].
#[derive(Debug, Clone)]
pub struct FleetOptions {
    pub machines: usize,
    pub initial: InitialState,
    /// Every n-th machine (1-based) has no BOSS/M.2 boot disk; 0 = all have one.
    pub no_boss_every: usize,
    /// Number of extra BMCs MAAS does not know (discovered through PXE).
    pub unknown: usize,
}

impl SimConfig {
    /// A deterministic GPU fleet: hostnames `gpu00001…`, BMCs in 10.176.16.0/20, NICs
    /// `eno8303` (PXE) + two RoCE ports `enp28s0np0`/`enp41s0np0`, a BOSS boot disk and four
    /// NVMe data disks.
    pub fn generated(seed: u64, options: &FleetOptions) -> SimConfig {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5EED_F1EE7);
        let mut config = SimConfig {
            seed,
            ..SimConfig::default()
        };
        let total = options.machines + options.unknown;
        if total > 200 {
            // A /24 PXE subnet cannot give every machine of a large fleet an address.
            config.pxe_cidr = "10.176.64.0/18".to_string();
            config.pxe_gateway = "10.176.64.1".to_string();
        }
        for index in 0..total {
            let known = index < options.machines;
            let number = index + 1;
            let mut mac = || {
                let b: [u8; 3] = [rng.random(), rng.random(), rng.random()];
                format!("b0:7b:25:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2])
            };
            let interfaces = vec![
                NicSpec {
                    name: "eno8303".to_string(),
                    mac: mac(),
                    speed_mbps: 1000,
                },
                NicSpec {
                    name: "enp28s0np0".to_string(),
                    mac: mac(),
                    speed_mbps: 400_000,
                },
                NicSpec {
                    name: "enp41s0np0".to_string(),
                    mac: mac(),
                    speed_mbps: 400_000,
                },
            ];
            let serial = |rng: &mut ChaCha8Rng| format!("S{:010X}", rng.random::<u64>() >> 24);
            let mut disks = Vec::new();
            let boss = options.no_boss_every == 0 || number % options.no_boss_every != 0;
            if boss {
                disks.push(DiskSpec::boss("sda", &serial(&mut rng)));
            }
            for n in 0..4 {
                disks.push(DiskSpec::nvme(&format!("nvme{n}n1"), &serial(&mut rng)));
            }
            let bmc = 16 * 256 + index + 10;
            config.machines.push(MachineSpec {
                bmc_ip: Some(format!("10.176.{}.{}", bmc / 256, bmc % 256)),
                hostname: known.then(|| format!("gpu{number:05}")),
                interfaces,
                disks,
                initial: if known {
                    options.initial
                } else {
                    InitialState::Unknown
                },
                ..MachineSpec::default()
            });
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_fleet_is_deterministic_and_has_the_asked_shape() {
        let options = FleetOptions {
            machines: 5,
            initial: InitialState::Ready,
            no_boss_every: 5,
            unknown: 2,
        };
        let a = SimConfig::generated(7, &options);
        let b = SimConfig::generated(7, &options);
        let c = SimConfig::generated(8, &options);
        assert_eq!(a.machines.len(), 7);
        assert_eq!(
            a.machines[0].interfaces[0].mac,
            b.machines[0].interfaces[0].mac
        );
        assert_ne!(
            a.machines[0].interfaces[0].mac,
            c.machines[0].interfaces[0].mac
        );
        assert_eq!(a.machines[4].disks.len(), 4, "5th machine has no BOSS disk");
        assert_eq!(a.machines[0].disks[0].model, "Dell BOSS-N1");
        assert_eq!(a.machines[5].initial, InitialState::Unknown);
        assert_eq!(a.machines[5].hostname, None);
        assert_eq!(a.machines[0].bmc_ip.as_deref(), Some("10.176.16.10"));
    }
}
