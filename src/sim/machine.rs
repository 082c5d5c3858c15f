//! The machine record and its MAAS 3.6 JSON object (API_REFERENCE.md §3.1).

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use super::config::AgentBehaviour;
use super::faults::ScenarioRule;
use super::network::{Interface, InterfaceView, NetworkLookup};
use super::status::Status;
use super::storage::{BlockDevice, BlockDeviceView, MIN_BOOT_SIZE, VolumeGroup, VolumeGroupRef};

/// `power_state` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerState {
    On,
    Off,
    Unknown,
}

impl PowerState {
    pub fn as_str(self) -> &'static str {
        match self {
            PowerState::On => "on",
            PowerState::Off => "off",
            PowerState::Unknown => "unknown",
        }
    }
}

/// The machine's metadata OAuth token (NodeKey), one per ownership.
#[derive(Debug, Clone, Serialize)]
pub struct NodeToken {
    pub token_key: String,
    pub token_secret: String,
    pub consumer_key: String,
}

/// Erase modes of `release`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Erase {
    Full,
    Quick,
    Secure,
}

/// Background work MAAS does on its own, due at a time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pending {
    /// Commissioning scripts finish; `testing` = tests follow.
    CommissioningDone,
    /// Tests finish; the status to return to on success.
    TestingDone { back_to: Status },
    /// The installed OS fetches its user_data (or installation fails).
    DeploymentDone,
    /// A deployment that cannot proceed (its AUTO addresses could not be claimed) reaches
    /// MAAS's deployment timeout.
    DeploymentTimedOut,
    /// The power-off of a release is observed.
    ReleaseDone,
    /// wipe-disks finishes.
    EraseDone,
    /// The rescue environment booted (Entering rescue mode -> Rescue mode).
    RescueDone,
    /// The machine left rescue mode, back to the status before it.
    ExitRescueDone { back_to: Status },
}

/// One machine as the simulator keeps it.
#[derive(Debug, Clone)]
pub struct Machine {
    /// Internal id: list order (MAAS orders by id).
    pub id: u64,
    pub system_id: String,
    pub hostname: String,
    pub description: String,
    pub hardware_uuid: String,
    pub status: Status,
    pub previous_status: Status,
    pub owner: Option<String>,
    pub locked: bool,
    pub architecture: String,
    pub cpu_count: u32,
    pub memory: u64,
    pub hardware_vendor: String,
    pub hardware_product: String,
    pub hardware_serial: String,
    pub power_type: String,
    pub power_parameters: BTreeMap<String, String>,
    pub power_state: PowerState,
    pub osystem: String,
    pub distro_series: String,
    pub hwe_kernel: Option<String>,
    pub min_hwe_kernel: String,
    pub netboot: bool,
    pub ephemeral_deploy: bool,
    pub enable_kernel_crash_dump: bool,
    pub user_data: Option<String>,
    pub enable_hw_sync: bool,
    pub sync_interval: Option<u64>,
    pub last_sync: Option<DateTime<Utc>>,
    /// Next hardware-sync post of the deployed OS (simulator schedule, not MAAS's next_sync).
    pub sync_due: Option<DateTime<Utc>>,
    /// The deployed host has a hardware-sync timer installed and started.
    pub sync_timer: bool,
    /// Its sync stopped (the `hwsync_stale` scenario) until the units are restarted.
    pub sync_stalled: bool,
    pub error_description: String,
    pub interfaces: Vec<Interface>,
    pub disks: Vec<BlockDevice>,
    /// LVM volume groups a layout made (their logical volumes are virtual block devices).
    pub volume_groups: Vec<VolumeGroup>,
    /// The boot disk an operator set (`set_boot_disk`); see [`Machine::boot_disk`].
    pub boot_disk_id: Option<u64>,
    /// The link chosen with `link_subnet default_gateway=true` (`gateway_link_ipv4`); ignored
    /// once that link is gone, as MAAS's foreign key is nulled with it.
    pub gateway_link: Option<u64>,
    pub token: Option<NodeToken>,
    pub commissioning_status: i32,
    pub testing_status: i32,
    pub status_message: Option<String>,
    pub zone: String,
    pub pool: String,
    pub tag_names: Vec<String>,
    pub workload_annotations: BTreeMap<String, String>,
    /// Current background work and when it completes.
    pub pending: Option<(Pending, DateTime<Utc>)>,
    /// Bumped whenever `pending` changes, so stale timeline entries are ignored.
    pub generation: u64,
    /// Scenario rules that selected this machine.
    pub scenarios: Vec<ScenarioRule>,
    /// Deployments started (datasource_failure hits only the first).
    pub deployments: u64,
    /// Erase mode of the release in progress.
    pub erase: Option<Erase>,
    /// Files of the deployed host (from user_data write_files, and host/files writes).
    pub host_files: BTreeMap<String, String>,
    /// Boot generation of the deployed OS; an agent of an older boot gives up.
    pub boot: u64,
    pub agent: AgentBehaviour,
    /// Commissioning options of the run in progress.
    pub skip_networking: bool,
    pub skip_storage: bool,
    /// The hardware commissioning discovers (kept for re-commissioning).
    pub hardware_disks: Vec<BlockDevice>,
}

impl Machine {
    pub fn bmc_ip(&self) -> Option<&str> {
        self.power_parameters
            .get("power_address")
            .map(String::as_str)
    }

    pub fn has_scenario(&self, scenario: super::faults::Scenario) -> bool {
        self.scenarios.iter().any(|r| r.scenario == scenario)
    }

    /// `Node.get_boot_disk()`: the one set, else the first physical disk (by id) big enough.
    pub fn boot_disk(&self) -> Option<&BlockDevice> {
        if let Some(set) = self
            .boot_disk_id
            .and_then(|id| self.disks.iter().find(|d| d.id == id))
        {
            return Some(set);
        }
        self.disks
            .iter()
            .filter(|d| d.size >= MIN_BOOT_SIZE)
            .min_by_key(|d| d.id)
    }

    pub fn ip_addresses(&self) -> Vec<String> {
        self.interfaces
            .iter()
            .flat_map(|i| i.links.iter())
            .filter_map(|l| l.ip.map(|ip| ip.to_string()))
            .collect()
    }

    pub fn storage_mb(&self) -> f64 {
        self.disks.iter().map(|d| d.size as f64).sum::<f64>() / 1e6
    }

    pub fn next_sync(&self) -> Option<DateTime<Utc>> {
        let last = self.last_sync?;
        let interval = self.sync_interval?;
        Some(last + chrono::Duration::seconds(interval as i64))
    }
}

/// `{name, description, id, resource_uri}` of zone and pool.
#[derive(Debug, Serialize)]
pub struct NamedRef {
    pub name: String,
    pub description: String,
    pub id: u64,
    pub resource_uri: String,
}

#[derive(Debug, Serialize)]
pub struct DomainView {
    pub authoritative: bool,
    pub ttl: Option<u32>,
    pub resource_record_count: u64,
    pub name: &'static str,
    pub id: u64,
    pub is_default: bool,
    pub resource_uri: &'static str,
}

#[derive(Debug, Serialize)]
pub struct GatewayView {
    pub gateway_ip: Option<String>,
    pub link_id: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct DefaultGateways {
    pub ipv4: GatewayView,
    pub ipv6: GatewayView,
}

#[derive(Debug, Serialize)]
pub struct NumaNodeView {
    pub index: u32,
    pub memory: u64,
    pub cores: Vec<u32>,
    pub hugepages_set: Vec<serde_json::Value>,
}

/// `DISPLAYED_MACHINE_FIELDS` of MAAS 3.6 (list and detail share it).
#[derive(Debug, Serialize)]
pub struct MachineView {
    pub system_id: String,
    pub hostname: String,
    pub description: String,
    pub hardware_uuid: String,
    pub domain: DomainView,
    pub fqdn: String,
    pub owner: Option<String>,
    pub owner_data: BTreeMap<String, String>,
    pub workload_annotations: BTreeMap<String, String>,
    pub locked: bool,
    pub cache_sets: Vec<serde_json::Value>,
    pub bcaches: Vec<serde_json::Value>,
    pub raids: Vec<serde_json::Value>,
    pub volume_groups: Vec<VolumeGroupRef>,
    pub bios_boot_method: &'static str,
    pub boot_interface: Option<InterfaceView>,
    pub architecture: String,
    pub min_hwe_kernel: String,
    pub hwe_kernel: Option<String>,
    pub cpu_count: u32,
    pub cpu_speed: u32,
    pub memory: u64,
    pub swap_size: Option<u64>,
    pub storage: f64,
    pub status: u8,
    pub status_name: &'static str,
    pub status_message: Option<String>,
    pub status_action: String,
    pub osystem: String,
    pub distro_series: String,
    pub ephemeral_deploy: bool,
    pub error_description: String,
    pub netboot: bool,
    pub power_type: String,
    pub power_state: &'static str,
    pub tag_names: Vec<String>,
    pub address_ttl: Option<u32>,
    pub ip_addresses: Vec<String>,
    pub interface_set: Vec<InterfaceView>,
    pub zone: NamedRef,
    pub pool: NamedRef,
    pub disable_ipv4: bool,
    pub boot_disk: Option<BlockDeviceView>,
    pub blockdevice_set: Vec<BlockDeviceView>,
    pub physicalblockdevice_set: Vec<BlockDeviceView>,
    pub virtualblockdevice_set: Vec<BlockDeviceView>,
    pub special_filesystems: Vec<serde_json::Value>,
    pub commissioning_status: i32,
    pub commissioning_status_name: &'static str,
    pub testing_status: i32,
    pub testing_status_name: &'static str,
    pub cpu_test_status: i32,
    pub cpu_test_status_name: &'static str,
    pub memory_test_status: i32,
    pub memory_test_status_name: &'static str,
    pub network_test_status: i32,
    pub network_test_status_name: &'static str,
    pub storage_test_status: i32,
    pub storage_test_status_name: &'static str,
    pub other_test_status: i32,
    pub other_test_status_name: &'static str,
    pub interface_test_status: i32,
    pub interface_test_status_name: &'static str,
    pub current_commissioning_result_id: Option<u64>,
    pub current_testing_result_id: Option<u64>,
    pub current_installation_result_id: Option<u64>,
    pub node_type: u8,
    pub node_type_name: &'static str,
    pub parent: Option<serde_json::Value>,
    pub pod: Option<serde_json::Value>,
    pub virtualmachine_id: Option<u64>,
    pub default_gateways: DefaultGateways,
    pub hardware_info: BTreeMap<&'static str, String>,
    pub numanode_set: Vec<NumaNodeView>,
    pub last_sync: Option<String>,
    pub next_sync: Option<String>,
    pub sync_interval: Option<u64>,
    pub enable_hw_sync: bool,
    pub enable_kernel_crash_dump: bool,
    pub resource_uri: String,
}

/// `SCRIPT_STATUS` names (`-1` = no results).
pub fn script_status_name(status: i32) -> &'static str {
    match status {
        0 => "Pending",
        1 => "Running",
        2 => "Passed",
        3 => "Failed",
        4 => "Timed out",
        5 => "Aborted",
        6 => "Degraded",
        7 => "Installing dependencies",
        8 => "Failed installing dependencies",
        9 => "Skipped",
        10 => "Applying custom network configuration",
        11 => "Failed to apply custom network configuration",
        _ => "Unknown",
    }
}

/// MAAS 3.6 datetimes: aware UTC, Django's encoder (milliseconds, `Z`).
pub fn format_datetime(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

impl Machine {
    pub fn view(&self, net: &dyn NetworkLookup, gateway: Option<String>) -> MachineView {
        let sid = self.system_id.as_str();
        let virtual_devices = || {
            self.volume_groups
                .iter()
                .flat_map(|vg| vg.device_views(sid))
        };
        let disks: Vec<BlockDeviceView> = self
            .disks
            .iter()
            .map(|d| d.generic_view(sid))
            .chain(virtual_devices())
            .collect();
        let physical: Vec<BlockDeviceView> = self.disks.iter().map(|d| d.view(sid)).collect();
        let tested = |s: i32| (s, script_status_name(s));
        let (cs, csn) = tested(self.commissioning_status);
        let (ts, tsn) = tested(self.testing_status);
        let (ss, ssn) = tested(self.testing_status);
        let hardware_info = BTreeMap::from([
            ("system_vendor", self.hardware_vendor.clone()),
            ("system_product", self.hardware_product.clone()),
            ("system_family", "PowerEdge".to_string()),
            ("system_version", "Unknown".to_string()),
            ("system_sku", "Unknown".to_string()),
            ("system_serial", self.hardware_serial.clone()),
            ("cpu_model", "AMD EPYC 9454 48-Core Processor".to_string()),
            ("mainboard_vendor", self.hardware_vendor.clone()),
            ("mainboard_product", "0R8MGJ".to_string()),
            ("mainboard_serial", self.hardware_serial.clone()),
            ("mainboard_version", "A00".to_string()),
            ("mainboard_firmware_vendor", self.hardware_vendor.clone()),
            ("mainboard_firmware_date", "03/04/2025".to_string()),
            ("mainboard_firmware_version", "2.4.4".to_string()),
            ("chassis_vendor", self.hardware_vendor.clone()),
            ("chassis_type", "Rack Mount Chassis".to_string()),
            ("chassis_serial", self.hardware_serial.clone()),
            ("chassis_version", "Unknown".to_string()),
        ]);
        let auto_link = self.interfaces.first().and_then(|i| {
            i.links
                .iter()
                .find(|l| l.mode == super::network::LinkMode::Auto)
        });
        // The chosen gateway link, if it still exists and its subnet has a gateway; otherwise
        // MAAS's own pick (the boot interface's AUTO link on the PXE subnet).
        let chosen = self.gateway_link.and_then(|link_id| {
            let link = self
                .interfaces
                .iter()
                .flat_map(|i| i.links.iter())
                .find(|l| l.id == link_id)?;
            let gateway = net.subnet(link.subnet_id?)?.gateway_ip?;
            Some((gateway.to_string(), link_id))
        });
        let (gateway_ip, gateway_link) = match chosen {
            Some((ip, link)) => (Some(ip), Some(link)),
            None => (gateway.filter(|_| auto_link.is_some()), None),
        };
        MachineView {
            system_id: self.system_id.clone(),
            hostname: self.hostname.clone(),
            description: self.description.clone(),
            hardware_uuid: self.hardware_uuid.clone(),
            domain: DomainView {
                authoritative: true,
                ttl: None,
                resource_record_count: 0,
                name: "maas",
                id: 0,
                is_default: true,
                resource_uri: "/MAAS/api/2.0/domains/0/",
            },
            fqdn: format!("{}.maas", self.hostname),
            owner: self.owner.clone(),
            owner_data: self.workload_annotations.clone(),
            workload_annotations: self.workload_annotations.clone(),
            locked: self.locked,
            cache_sets: Vec::new(),
            bcaches: Vec::new(),
            raids: Vec::new(),
            volume_groups: self
                .volume_groups
                .iter()
                .map(|vg| VolumeGroupRef {
                    system_id: self.system_id.clone(),
                    id: vg.id,
                    __incomplete__: true,
                })
                .collect(),
            bios_boot_method: "uefi",
            boot_interface: self.interfaces.first().map(|i| i.view(sid, net)),
            architecture: self.architecture.clone(),
            min_hwe_kernel: self.min_hwe_kernel.clone(),
            hwe_kernel: self.hwe_kernel.clone(),
            cpu_count: self.cpu_count,
            cpu_speed: 2750,
            memory: self.memory,
            swap_size: None,
            storage: self.storage_mb(),
            status: self.status.code(),
            status_name: self.status.name(),
            status_message: self.status_message.clone(),
            status_action: String::new(),
            osystem: self.osystem.clone(),
            distro_series: self.distro_series.clone(),
            ephemeral_deploy: self.ephemeral_deploy,
            error_description: self.error_description.clone(),
            netboot: self.netboot,
            power_type: self.power_type.clone(),
            power_state: self.power_state.as_str(),
            tag_names: self.tag_names.clone(),
            address_ttl: None,
            ip_addresses: self.ip_addresses(),
            interface_set: self.interfaces.iter().map(|i| i.view(sid, net)).collect(),
            zone: NamedRef {
                name: self.zone.clone(),
                description: String::new(),
                id: net.zone_id(&self.zone).unwrap_or(1),
                resource_uri: format!("/MAAS/api/2.0/zones/{}/", self.zone),
            },
            pool: NamedRef {
                name: self.pool.clone(),
                description: if self.pool == "default" {
                    "Default pool".to_string()
                } else {
                    String::new()
                },
                id: net.pool_id(&self.pool).unwrap_or(0),
                resource_uri: format!(
                    "/MAAS/api/2.0/resourcepool/{}/",
                    net.pool_id(&self.pool).unwrap_or(0)
                ),
            },
            disable_ipv4: false,
            boot_disk: self.boot_disk().map(|d| d.view(sid)),
            blockdevice_set: disks,
            physicalblockdevice_set: physical,
            virtualblockdevice_set: virtual_devices().collect(),
            special_filesystems: Vec::new(),
            commissioning_status: cs,
            commissioning_status_name: csn,
            testing_status: ts,
            testing_status_name: tsn,
            cpu_test_status: -1,
            cpu_test_status_name: "Unknown",
            memory_test_status: -1,
            memory_test_status_name: "Unknown",
            network_test_status: -1,
            network_test_status_name: "Unknown",
            storage_test_status: ss,
            storage_test_status_name: ssn,
            other_test_status: -1,
            other_test_status_name: "Unknown",
            interface_test_status: -1,
            interface_test_status_name: "Unknown",
            current_commissioning_result_id: (cs >= 0).then_some(self.id * 10 + 1),
            current_testing_result_id: (ts >= 0).then_some(self.id * 10 + 2),
            current_installation_result_id: (self.deployments > 0).then_some(self.id * 10 + 3),
            node_type: 0,
            node_type_name: "Machine",
            parent: None,
            pod: None,
            virtualmachine_id: None,
            default_gateways: DefaultGateways {
                ipv4: GatewayView {
                    gateway_ip,
                    link_id: gateway_link,
                },
                ipv6: GatewayView {
                    gateway_ip: None,
                    link_id: None,
                },
            },
            hardware_info,
            numanode_set: vec![NumaNodeView {
                index: 0,
                memory: self.memory,
                cores: (0..self.cpu_count).collect(),
                hugepages_set: Vec::new(),
            }],
            last_sync: self.last_sync.map(format_datetime),
            next_sync: self.next_sync().map(format_datetime),
            sync_interval: self.sync_interval,
            enable_hw_sync: self.enable_hw_sync,
            enable_kernel_crash_dump: self.enable_kernel_crash_dump,
            resource_uri: format!("/MAAS/api/2.0/machines/{sid}/"),
        }
    }
}
