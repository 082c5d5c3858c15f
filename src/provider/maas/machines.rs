//! Machines and nodes (API_REFERENCE §3, §5.4–5.15; seed 000 §4.3 CreateOrFindInMaas,
//! CommissionNode, DeployViaMaas, RecoverForDatasourceRetry; §6.3 FetchMaasMachines).
//!
//! The machine object is read tolerantly: fields MAAS added in 3.2–3.7 are optional, old
//! captures' extra fields are ignored, nulls read as empty. Operation parameters are typed
//! structs; `architecture` is always sent with `mac_addresses` because MAAS silently discards
//! the MACs of an IPMI machine created without it (§5.6 gotcha).

use std::collections::BTreeMap;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::secrets::Secret;

use super::client::MaasClient;
use super::de::{empty_as_none, null_default, opt_datetime};
use super::error::MaasError;
use super::interfaces::Interface;
use super::skim::{Member, Projection};
use super::storage::BlockDevice;
use super::stream::Decodable;
use super::transport::{Call, Params};
use super::types::{DomainRef, MachineStatus, NamedRef, NodeType, PowerState};

/// A MAAS machine (`GET machines/`, `GET machines/{id}/`, and every lifecycle operation's
/// answer). Field names are MAAS's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub system_id: String,
    pub hostname: String,
    #[serde(default, deserialize_with = "null_default")]
    pub fqdn: String,
    #[serde(default, deserialize_with = "null_default")]
    pub description: String,
    pub status: MachineStatus,
    /// MAAS's own name for `status` (kept for statuses this client does not know).
    #[serde(default, deserialize_with = "null_default")]
    pub status_name: String,
    /// The newest event of level INFO or above, e.g. `Deploying` or `Failed deployment - …`.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub status_message: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub status_action: Option<String>,
    #[serde(default)]
    pub owner: Option<String>,
    #[serde(default)]
    pub locked: bool,
    #[serde(default, deserialize_with = "null_default")]
    pub architecture: String,
    #[serde(default, deserialize_with = "null_default")]
    pub power_type: String,
    #[serde(default)]
    pub power_state: PowerState,
    /// `""` unless deployed.
    #[serde(default, deserialize_with = "null_default")]
    pub osystem: String,
    #[serde(default, deserialize_with = "null_default")]
    pub distro_series: String,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub hwe_kernel: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub min_hwe_kernel: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub ip_addresses: Vec<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub interface_set: Vec<Interface>,
    #[serde(default)]
    pub boot_interface: Option<Interface>,
    #[serde(default)]
    pub boot_disk: Option<BlockDevice>,
    #[serde(default, deserialize_with = "null_default")]
    pub blockdevice_set: Vec<BlockDevice>,
    #[serde(default, deserialize_with = "null_default")]
    pub physicalblockdevice_set: Vec<BlockDevice>,
    #[serde(default)]
    pub cpu_count: i64,
    /// MHz.
    #[serde(default)]
    pub cpu_speed: i64,
    /// MiB.
    #[serde(default)]
    pub memory: i64,
    /// MB (sum of physical disks / 10^6), a float in MAAS's output.
    #[serde(default)]
    pub storage: f64,
    #[serde(default)]
    pub zone: Option<NamedRef>,
    #[serde(default)]
    pub pool: Option<NamedRef>,
    #[serde(default)]
    pub domain: Option<DomainRef>,
    #[serde(default, deserialize_with = "null_default")]
    pub tag_names: Vec<String>,
    #[serde(default)]
    pub netboot: bool,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub hardware_uuid: Option<String>,
    /// `system_vendor`, `system_serial`, `mainboard_firmware_version`… (`"Unknown"` if unset).
    #[serde(default, deserialize_with = "null_default")]
    pub hardware_info: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub bios_boot_method: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub workload_annotations: BTreeMap<String, String>,
    /// Deprecated alias of `workload_annotations`, still emitted.
    #[serde(default, deserialize_with = "null_default")]
    pub owner_data: BTreeMap<String, String>,
    #[serde(default)]
    pub node_type: Option<NodeType>,
    /// 3.3+ (3.2 accepts the deploy parameter but does not emit the field).
    #[serde(default)]
    pub enable_hw_sync: Option<bool>,
    /// 3.2+.
    #[serde(default, deserialize_with = "opt_datetime")]
    pub last_sync: Option<DateTime<Utc>>,
    /// 3.2+: `last_sync + sync_interval`.
    #[serde(default, deserialize_with = "opt_datetime")]
    pub next_sync: Option<DateTime<Utc>>,
    /// 3.2+, seconds.
    #[serde(default)]
    pub sync_interval: Option<u64>,
    /// 3.3+.
    #[serde(default)]
    pub ephemeral_deploy: Option<bool>,
    /// 3.5+: the mark_broken comment.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub error_description: Option<String>,
    /// 3.6+.
    #[serde(default)]
    pub enable_kernel_crash_dump: Option<bool>,
    /// 3.7+.
    #[serde(default)]
    pub is_dpu: Option<bool>,
    /// Script status: -1 none, 0 pending, 1 running, 2 passed, 3 failed, 4 timed out…
    #[serde(default)]
    pub commissioning_status: Option<i64>,
    #[serde(default)]
    pub testing_status: Option<i64>,
    #[serde(default)]
    pub current_commissioning_result_id: Option<i64>,
    #[serde(default)]
    pub current_testing_result_id: Option<i64>,
    #[serde(default)]
    pub current_installation_result_id: Option<i64>,
    #[serde(default, deserialize_with = "null_default")]
    pub resource_uri: String,
}

impl Machine {
    /// MAAS's status name, or this client's name for the code.
    pub fn status_label(&self) -> String {
        if self.status_name.is_empty() {
            self.status.to_string()
        } else {
            self.status_name.clone()
        }
    }

    /// MAC addresses of the machine's interfaces, lower-case as MAAS stores them.
    pub fn mac_addresses(&self) -> impl Iterator<Item = &str> {
        self.interface_set
            .iter()
            .filter_map(|interface| interface.mac_address.as_deref())
    }

    pub fn interface_named(&self, name: &str) -> Option<&Interface> {
        self.interface_set.iter().find(|i| i.name == name)
    }
}

/// The part of a machine a reconciler's periodic observation needs (seed 000 §6.3
/// FetchMaasMachines: `system_id, hostname, status_name, power_state, ip_addresses`, plus owner,
/// MACs and hardware-sync fields), read from the same `GET machines/` answer as [`Machine`].
/// Every other field — interfaces' links and VLANs, block devices, partitions — is skipped
/// while parsing instead of built: a site of thousands of machines answers with hundreds of
/// megabytes, and observation must stay cheap. Null-tolerant like [`Machine`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct MachineSummary {
    pub system_id: String,
    pub hostname: String,
    pub status: MachineStatus,
    #[serde(default, deserialize_with = "null_default")]
    pub status_name: String,
    #[serde(default)]
    pub owner: Option<String>,
    #[serde(default)]
    pub power_state: PowerState,
    #[serde(default, deserialize_with = "null_default")]
    pub ip_addresses: Vec<String>,
    /// Only each interface's MAC is read.
    #[serde(default, deserialize_with = "null_default")]
    pub interface_set: Vec<InterfaceMac>,
    #[serde(default)]
    pub enable_hw_sync: Option<bool>,
    #[serde(default, deserialize_with = "opt_datetime")]
    pub last_sync: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "opt_datetime")]
    pub next_sync: Option<DateTime<Utc>>,
    #[serde(default)]
    pub sync_interval: Option<u64>,
}

/// An interface of a [`MachineSummary`]: its MAC only.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct InterfaceMac {
    #[serde(default)]
    pub mac_address: Option<String>,
}

impl Decodable for Machine {}

/// The members of a machine that a [`MachineSummary`] reads: every other one is stepped over
/// unread (a test holds this list to the struct's fields).
static SUMMARY_READS: Projection = Projection {
    members: &[
        Member::whole("system_id"),
        Member::whole("hostname"),
        Member::whole("status"),
        Member::whole("status_name"),
        Member::whole("owner"),
        Member::whole("power_state"),
        Member::whole("ip_addresses"),
        Member::each("interface_set", &INTERFACE_MAC_READS),
        Member::whole("enable_hw_sync"),
        Member::whole("last_sync"),
        Member::whole("next_sync"),
        Member::whole("sync_interval"),
    ],
};

static INTERFACE_MAC_READS: Projection = Projection {
    members: &[Member::whole("mac_address")],
};

impl Decodable for MachineSummary {
    const READS: Option<&'static Projection> = Some(&SUMMARY_READS);
}

impl MachineSummary {
    /// MAAS's status name, or this client's name for the code.
    pub fn status_label(&self) -> String {
        if self.status_name.is_empty() {
            self.status.to_string()
        } else {
            self.status_name.clone()
        }
    }

    /// MAC addresses of the machine's interfaces.
    pub fn mac_addresses(&self) -> impl Iterator<Item = &str> {
        self.interface_set
            .iter()
            .filter_map(|interface| interface.mac_address.as_deref())
    }
}

/// Where a machine stands, as a stage that looks at nothing else decides on it: from a full
/// [`Machine`] or from a poll's [`MachineSummary`] (the same answer, its interfaces and disks
/// skipped while parsing).
pub trait MachineStanding {
    fn system_id(&self) -> &str;
    fn status(&self) -> MachineStatus;
    /// MAAS's status name, or this client's name for the code.
    fn status_label(&self) -> String;
    fn owner(&self) -> Option<&str>;
}

impl MachineStanding for Machine {
    fn system_id(&self) -> &str {
        &self.system_id
    }
    fn status(&self) -> MachineStatus {
        self.status
    }
    fn status_label(&self) -> String {
        Machine::status_label(self)
    }
    fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }
}

impl MachineStanding for MachineSummary {
    fn system_id(&self) -> &str {
        &self.system_id
    }
    fn status(&self) -> MachineStatus {
        self.status
    }
    fn status_label(&self) -> String {
        MachineSummary::status_label(self)
    }
    fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }
}

/// Any node (`GET nodes/{id}/`): machine, device or controller. Controllers and devices have
/// no `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub system_id: String,
    #[serde(default, deserialize_with = "null_default")]
    pub hostname: String,
    #[serde(default, deserialize_with = "null_default")]
    pub fqdn: String,
    pub node_type: NodeType,
    #[serde(default, deserialize_with = "null_default")]
    pub node_type_name: String,
    #[serde(default)]
    pub status: Option<MachineStatus>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub status_name: Option<String>,
    #[serde(default)]
    pub power_state: Option<PowerState>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub architecture: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub ip_addresses: Vec<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub interface_set: Vec<Interface>,
    #[serde(default, deserialize_with = "null_default")]
    pub tag_names: Vec<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub resource_uri: String,
}

/// Filters of `GET machines/` (all repeatable; "any of" within a filter, "all of" across).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineFilter {
    pub hostnames: Vec<String>,
    pub system_ids: Vec<String>,
    pub mac_addresses: Vec<String>,
}

impl MachineFilter {
    /// Every machine the key's user can see.
    pub fn all() -> Self {
        Self::default()
    }

    pub fn hostname(mut self, hostname: impl Into<String>) -> Self {
        self.hostnames.push(hostname.into());
        self
    }

    pub fn system_id(mut self, system_id: impl Into<String>) -> Self {
        self.system_ids.push(system_id.into());
        self
    }

    /// MAAS matches MACs exactly against its lower-case colon form; `AA-BB-…` is normalised.
    pub fn mac_address(mut self, mac: &str) -> Self {
        self.mac_addresses
            .push(mac.trim().to_ascii_lowercase().replace('-', ":"));
        self
    }

    fn params(&self) -> Params {
        let mut params = Params::new();
        params
            .each("hostname", &self.hostnames)
            .each("id", &self.system_ids)
            .each("mac_address", &self.mac_addresses);
        params
    }
}

/// IPMI power parameters (`power_parameters_*` of the IPMI driver, API_REFERENCE §5.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpmiPower {
    pub power_address: String,
    pub power_user: String,
    pub power_pass: Secret,
    /// `LAN` or `LAN_2_0` (MAAS's default).
    pub power_driver: Option<String>,
    /// `auto`, `legacy` or `efi`.
    pub power_boot_type: Option<String>,
    /// `17`, `3` (default), `8`, `12` or empty.
    pub cipher_suite_id: Option<String>,
    /// `USER`, `OPERATOR` (default) or `ADMIN`.
    pub privilege_level: Option<String>,
    pub k_g: Option<Secret>,
    pub mac_address: Option<String>,
}

impl IpmiPower {
    pub fn new(
        power_address: impl Into<String>,
        power_user: impl Into<String>,
        power_pass: Secret,
    ) -> Self {
        Self {
            power_address: power_address.into(),
            power_user: power_user.into(),
            power_pass,
            power_driver: None,
            power_boot_type: None,
            cipher_suite_id: None,
            privilege_level: None,
            k_g: None,
            mac_address: None,
        }
    }
}

/// A machine's power configuration: `power_type` plus its `power_parameters_*` fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PowerParameters {
    Ipmi(IpmiPower),
    /// No BMC: MAAS cannot power the machine.
    Manual,
    /// Another driver; every value is treated as secret material in `Debug`.
    Other {
        power_type: String,
        parameters: BTreeMap<String, Secret>,
    },
}

impl PowerParameters {
    fn add_to(&self, params: &mut Params) {
        const PREFIX: &str = "power_parameters_";
        match self {
            PowerParameters::Ipmi(ipmi) => {
                params
                    .text("power_type", "ipmi")
                    .text("power_parameters_power_address", &ipmi.power_address)
                    .text("power_parameters_power_user", &ipmi.power_user)
                    .secret("power_parameters_power_pass", &ipmi.power_pass)
                    .opt_text(
                        "power_parameters_power_driver",
                        ipmi.power_driver.as_deref(),
                    )
                    .opt_text(
                        "power_parameters_power_boot_type",
                        ipmi.power_boot_type.as_deref(),
                    )
                    .opt_text(
                        "power_parameters_cipher_suite_id",
                        ipmi.cipher_suite_id.as_deref(),
                    )
                    .opt_text(
                        "power_parameters_privilege_level",
                        ipmi.privilege_level.as_deref(),
                    )
                    .opt_text("power_parameters_mac_address", ipmi.mac_address.as_deref());
                if let Some(k_g) = &ipmi.k_g {
                    params.secret("power_parameters_k_g", k_g);
                }
            }
            PowerParameters::Manual => {
                params.text("power_type", "manual");
            }
            PowerParameters::Other {
                power_type,
                parameters,
            } => {
                params.text("power_type", power_type);
                for (name, value) in parameters {
                    params.secret(&format!("{PREFIX}{name}"), value);
                }
            }
        }
    }
}

/// `POST machines/` (admin). `architecture` is required here because MAAS drops the MACs of
/// an IPMI machine created without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateMachineParams {
    /// `amd64/generic`, or `amd64` (MAAS adds `/generic`).
    pub architecture: String,
    pub mac_addresses: Vec<String>,
    pub hostname: Option<String>,
    pub description: Option<String>,
    pub domain: Option<String>,
    pub zone: Option<String>,
    pub pool: Option<String>,
    pub power: Option<PowerParameters>,
    /// `power_parameters_skip_check`: do not validate the power parameters against a rack.
    pub skip_power_check: bool,
    /// Start commissioning right away (MAAS's default is true; errors are silently ignored by
    /// MAAS, so the lifecycle passes `Some(false)` and commissions explicitly).
    pub commission: Option<bool>,
}

impl CreateMachineParams {
    pub fn new(architecture: impl Into<String>) -> Self {
        Self {
            architecture: architecture.into(),
            mac_addresses: Vec::new(),
            hostname: None,
            description: None,
            domain: None,
            zone: None,
            pool: None,
            power: None,
            skip_power_check: false,
            commission: None,
        }
    }

    fn params(&self) -> Result<Params, MaasError> {
        if self.architecture.trim().is_empty() {
            return Err(MaasError::Config {
                message: "create_machine: an architecture is required (MAAS discards the MAC \
                          addresses of an IPMI machine created without one)"
                    .to_owned(),
            });
        }
        let mut params = Params::new();
        params
            .text("architecture", &self.architecture)
            .each("mac_addresses", &self.mac_addresses)
            .opt_text("hostname", self.hostname.as_deref())
            .opt_text("description", self.description.as_deref())
            .opt_text("domain", self.domain.as_deref())
            .opt_text("zone", self.zone.as_deref())
            .opt_text("pool", self.pool.as_deref());
        if let Some(power) = &self.power {
            power.add_to(&mut params);
        }
        if self.skip_power_check {
            params.flag("power_parameters_skip_check", true);
        }
        params.opt_flag("commission", self.commission);
        Ok(params)
    }
}

/// `PUT machines/{id}/` (admin): omitted fields are left unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateMachineParams {
    pub hostname: Option<String>,
    pub description: Option<String>,
    pub domain: Option<String>,
    pub zone: Option<String>,
    pub pool: Option<String>,
    /// MAAS merges these over the existing power parameters.
    pub power: Option<PowerParameters>,
    pub skip_power_check: bool,
}

impl UpdateMachineParams {
    fn params(&self) -> Params {
        let mut params = Params::new();
        params
            .opt_text("hostname", self.hostname.as_deref())
            .opt_text("description", self.description.as_deref())
            .opt_text("domain", self.domain.as_deref())
            .opt_text("zone", self.zone.as_deref())
            .opt_text("pool", self.pool.as_deref());
        if let Some(power) = &self.power {
            power.add_to(&mut params);
        }
        if self.skip_power_check {
            params.flag("power_parameters_skip_check", true);
        }
        params
    }
}

/// `POST machines/{id}/?op=commission`; `None` leaves MAAS's default (false).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommissionParams {
    pub enable_ssh: Option<bool>,
    pub skip_bmc_config: Option<bool>,
    pub skip_networking: Option<bool>,
    pub skip_storage: Option<bool>,
    /// Script names or tags; sent comma-separated.
    pub commissioning_scripts: Vec<String>,
    /// Script names or tags, or `none`; sent comma-separated.
    pub testing_scripts: Vec<String>,
}

impl CommissionParams {
    fn params(&self) -> Params {
        let mut params = Params::new();
        params
            .opt_flag("enable_ssh", self.enable_ssh)
            .opt_flag("skip_bmc_config", self.skip_bmc_config)
            .opt_flag("skip_networking", self.skip_networking)
            .opt_flag("skip_storage", self.skip_storage)
            .comma_list("commissioning_scripts", &self.commissioning_scripts)
            .comma_list("testing_scripts", &self.testing_scripts);
        params
    }
}

/// `POST machines/{id}/?op=deploy`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeployParams {
    /// The cloud-init payload as text; the client base64-encodes it (MAAS stores the base64
    /// and serves it decoded). A `Secret` because it carries enrollment and machine tokens.
    pub user_data: Option<Secret>,
    /// `jammy`, `ubuntu/jammy`… (this alone selects the OS; MAAS does not read `osystem`).
    pub distro_series: Option<String>,
    pub hwe_kernel: Option<String>,
    /// 3.2+: MAAS sets `sync_interval` and starts tracking `last_sync`.
    pub enable_hw_sync: Option<bool>,
    pub ephemeral_deploy: Option<bool>,
    pub agent_name: Option<String>,
    pub comment: Option<String>,
}

impl DeployParams {
    fn params(&self) -> Params {
        let mut params = Params::new();
        if let Some(user_data) = &self.user_data {
            let encoded = base64::engine::general_purpose::STANDARD.encode(user_data.expose());
            params.secret("user_data", &Secret::new(encoded));
        }
        params
            .opt_text("distro_series", self.distro_series.as_deref())
            .opt_text("hwe_kernel", self.hwe_kernel.as_deref())
            .opt_flag("enable_hw_sync", self.enable_hw_sync)
            .opt_flag("ephemeral_deploy", self.ephemeral_deploy)
            .opt_text("agent_name", self.agent_name.as_deref())
            .opt_text("comment", self.comment.as_deref());
        params
    }
}

/// How disks are wiped on release (seed 000 §5: erase none/quick/secure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EraseMode {
    /// `erase=false`.
    None,
    /// `erase=true&quick_erase=true`: wipe the start and end of each disk.
    Quick,
    /// `erase=true&secure_erase=true`: the drive's secure erase (MAAS falls back to a full
    /// wipe unless told otherwise).
    Secure,
    /// `erase=true`: overwrite every disk completely.
    Full,
}

/// `POST machines/{id}/?op=release`; `None` leaves MAAS's default (false).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleaseParams {
    pub erase: Option<bool>,
    pub quick_erase: Option<bool>,
    pub secure_erase: Option<bool>,
    pub force: Option<bool>,
    pub comment: Option<String>,
}

impl ReleaseParams {
    pub fn erasing(mode: EraseMode) -> Self {
        let (erase, quick, secure) = match mode {
            EraseMode::None => (false, None, None),
            EraseMode::Quick => (true, Some(true), None),
            EraseMode::Secure => (true, None, Some(true)),
            EraseMode::Full => (true, None, None),
        };
        Self {
            erase: Some(erase),
            quick_erase: quick,
            secure_erase: secure,
            ..Self::default()
        }
    }

    fn params(&self) -> Params {
        let mut params = Params::new();
        params
            .opt_flag("erase", self.erase)
            .opt_flag("quick_erase", self.quick_erase)
            .opt_flag("secure_erase", self.secure_erase)
            .opt_flag("force", self.force)
            .opt_text("comment", self.comment.as_deref());
        params
    }
}

/// One machine's power parameters as `GET machines/?op=power_parameters` returns them: the BMC
/// address in the clear (discovery matches machines on it, seed 000 §4.16), every other value
/// (user, password, k_g…) as a [`Secret`], since the dict carries BMC passwords.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachinePowerParameters {
    /// `power_address` (IPMI: the BMC's IP or hostname); `None` when the driver has none
    /// (`manual`) or it is empty.
    pub power_address: Option<String>,
    /// Every other parameter by name; non-string values as their JSON text.
    pub others: BTreeMap<String, Secret>,
}

impl MachinePowerParameters {
    fn from_dict(dict: BTreeMap<String, serde_json::Value>) -> Self {
        let mut parameters = MachinePowerParameters::default();
        for (name, value) in dict {
            if name == "power_address" {
                parameters.power_address = address_text(value);
                continue;
            }
            let text = match value {
                serde_json::Value::String(text) => text,
                serde_json::Value::Null => continue,
                other => other.to_string(),
            };
            parameters.others.insert(name, Secret::new(text));
        }
        parameters
    }
}

/// A `power_address` as [`MachinePowerParameters`] keeps it: `None` when null or blank, and a
/// value that is not a string as its JSON text.
pub(super) fn address_text(value: serde_json::Value) -> Option<String> {
    let text = match value {
        serde_json::Value::String(text) => text,
        serde_json::Value::Null => return None,
        other => other.to_string(),
    };
    Some(text).filter(|a| !a.trim().is_empty())
}

/// `GET machines/?op=power_parameters` for `system_ids` (every machine when empty).
pub(super) fn power_parameters_call(system_ids: &[String]) -> Call {
    let mut params = Params::new();
    params.each("id", system_ids);
    Call::get("power_parameters", &["machines"])
        .op("power_parameters")
        .params(params)
        .expects("power parameters by system id")
        // The answer holds BMC passwords: never quote it in a decode error.
        .sensitive_response()
}

fn comment(comment: Option<&str>) -> Params {
    let mut params = Params::new();
    params.opt_text("comment", comment);
    params
}

impl MaasClient {
    /// `GET machines/` with filters: every matching machine the key's user can see, in
    /// MAAS's id order. MAAS does not paginate, so the answer is decoded machine by machine
    /// while it arrives, on a blocking thread (see [`MaasClient::list_machine_summaries`]).
    pub async fn list_machines(&self, filter: &MachineFilter) -> Result<Vec<Machine>, MaasError> {
        self.transport()
            .json_array(
                Call::get("list_machines", &["machines"])
                    .params(filter.params())
                    .expects("a list of machines"),
            )
            .await
    }

    /// `GET machines/?op=power_parameters` (admin): the power parameters of many machines in
    /// one request, by system id. An empty `system_ids` asks for every machine (a list of ids
    /// travels in the query string, so keep it short). Non-admins get 403 `Forbidden`.
    pub async fn power_parameters(
        &self,
        system_ids: &[String],
    ) -> Result<BTreeMap<String, MachinePowerParameters>, MaasError> {
        let dicts: BTreeMap<String, Option<BTreeMap<String, serde_json::Value>>> = self
            .transport()
            .json(power_parameters_call(system_ids))
            .await?;
        Ok(dicts
            .into_iter()
            .map(|(id, dict)| {
                (
                    id,
                    MachinePowerParameters::from_dict(dict.unwrap_or_default()),
                )
            })
            .collect())
    }

    /// `GET machines/` with filters, read as [`MachineSummary`]s: the same request as
    /// [`MaasClient::list_machines`] (counted as `list_machines`), parsed for observation only.
    /// Like every machines list, the answer is decoded machine by machine while it arrives, on
    /// a blocking thread: a site's list of tens of megabytes is never held whole, and several
    /// sites' lists decode in parallel.
    pub async fn list_machine_summaries(
        &self,
        filter: &MachineFilter,
    ) -> Result<Vec<MachineSummary>, MaasError> {
        self.transport()
            .json_array(
                Call::get("list_machines", &["machines"])
                    .params(filter.params())
                    .expects("a list of machines"),
            )
            .await
    }

    /// `GET machines/{id}/`. 404 `NotFound` when it does not exist.
    pub async fn read_machine(&self, system_id: &str) -> Result<Machine, MaasError> {
        self.transport()
            .json(Call::get("read_machine", &["machines", system_id]).expects("a machine object"))
            .await
    }

    /// `GET machines/{id}/` read as a [`MachineSummary`] (counted as `read_machine`): the
    /// same answer, its interfaces' links, block devices and the rest skipped while parsing —
    /// for polls that look at the status.
    pub async fn read_machine_summary(&self, system_id: &str) -> Result<MachineSummary, MaasError> {
        self.transport()
            .json_object(
                Call::get("read_machine", &["machines", system_id]).expects("a machine object"),
            )
            .await
    }

    /// `GET nodes/{id}/`: any node type (controllers and devices have no status).
    pub async fn read_node(&self, system_id: &str) -> Result<Node, MaasError> {
        self.transport()
            .json(Call::get("read_node", &["nodes", system_id]).expects("a node object"))
            .await
    }

    /// `POST machines/` (admin).
    pub async fn create_machine(&self, params: &CreateMachineParams) -> Result<Machine, MaasError> {
        let params = params.params()?;
        self.transport()
            .json(
                Call::post("create_machine", &["machines"])
                    .params(params)
                    .expects("a machine object"),
            )
            .await
    }

    /// `PUT machines/{id}/` (admin).
    pub async fn update_machine(
        &self,
        system_id: &str,
        params: &UpdateMachineParams,
    ) -> Result<Machine, MaasError> {
        self.transport()
            .json(
                Call::put("update_machine", &["machines", system_id])
                    .params(params.params())
                    .expects("a machine object"),
            )
            .await
    }

    /// `DELETE machines/{id}/` (admin); MAAS answers 204.
    pub async fn delete_machine(&self, system_id: &str) -> Result<(), MaasError> {
        self.transport()
            .unit(Call::delete("delete_machine", &["machines", system_id]))
            .await
    }

    /// `POST machines/?op=accept`: New machines start commissioning; Ready and Commissioning
    /// ones are skipped. Returns the machines that actually transitioned.
    pub async fn accept(&self, system_ids: &[&str]) -> Result<Vec<Machine>, MaasError> {
        let mut params = Params::new();
        params.each("machines", system_ids);
        self.transport()
            .json(
                Call::post("accept", &["machines"])
                    .op("accept")
                    .params(params)
                    .expects("a list of machines"),
            )
            .await
    }

    /// `POST machines/{id}/?op=commission` (admin). From New, Failed commissioning, Ready or
    /// Broken; otherwise 400 `Commission is not available because of the current state…`.
    pub async fn commission(
        &self,
        system_id: &str,
        params: &CommissionParams,
    ) -> Result<Machine, MaasError> {
        self.transport()
            .json(
                Call::post("commission", &["machines", system_id])
                    .op("commission")
                    .params(params.params())
                    .expects("a machine object"),
            )
            .await
    }

    /// `POST machines/{id}/?op=abort`: Commissioning → New, Deploying → Allocated, Disk
    /// erasing → Failed disk erasing, Testing → previous. The answer may still show the old
    /// status (MAAS changes it after commit).
    pub async fn abort(
        &self,
        system_id: &str,
        comment_text: Option<&str>,
    ) -> Result<Machine, MaasError> {
        self.transport()
            .json(
                Call::post("abort", &["machines", system_id])
                    .op("abort")
                    .params(comment(comment_text))
                    .expects("a machine object"),
            )
            .await
    }

    /// `POST machines/{id}/?op=deploy`: from Ready (auto-allocated) or Allocated. Never
    /// retried on a guess: a timeout or 5xx comes back as an outcome-unknown transient error.
    pub async fn deploy(
        &self,
        system_id: &str,
        params: &DeployParams,
    ) -> Result<Machine, MaasError> {
        self.transport()
            .json(
                Call::post("deploy", &["machines", system_id])
                    .op("deploy")
                    .params(params.params())
                    .expects("a machine object"),
            )
            .await
    }

    /// `POST machines/{id}/?op=release`. Ready and Releasing are 200 no-ops.
    pub async fn release(
        &self,
        system_id: &str,
        params: &ReleaseParams,
    ) -> Result<Machine, MaasError> {
        self.transport()
            .json(
                Call::post("release", &["machines", system_id])
                    .op("release")
                    .params(params.params())
                    .expects("a machine object"),
            )
            .await
    }

    /// `POST machines/{id}/?op=mark_broken`. MAAS requires the caller to *own* the machine
    /// (403 otherwise, even for admins).
    pub async fn mark_broken(
        &self,
        system_id: &str,
        comment_text: Option<&str>,
    ) -> Result<Machine, MaasError> {
        self.transport()
            .json(
                Call::post("mark_broken", &["machines", system_id])
                    .op("mark_broken")
                    .params(comment(comment_text))
                    .expects("a machine object"),
            )
            .await
    }

    /// `POST machines/?op=allocate` with `system_id`: a Ready machine becomes Allocated to
    /// the caller (409 when it is not Ready or belongs to someone else).
    pub async fn allocate(&self, system_id: &str) -> Result<Machine, MaasError> {
        let mut params = Params::new();
        params.each("system_id", [system_id]);
        self.transport()
            .json(
                Call::post("allocate", &["machines"])
                    .op("allocate")
                    .params(params),
            )
            .await
    }

    /// `POST machines/{id}/?op=rescue_mode` (admin): boot the rescue environment.
    pub async fn rescue_mode(&self, system_id: &str) -> Result<Machine, MaasError> {
        self.transport()
            .json(Call::post("rescue_mode", &["machines", system_id]).op("rescue_mode"))
            .await
    }

    /// `POST machines/{id}/?op=exit_rescue_mode` (admin): back to the status before rescue.
    pub async fn exit_rescue_mode(&self, system_id: &str) -> Result<Machine, MaasError> {
        self.transport()
            .json(Call::post("exit_rescue_mode", &["machines", system_id]).op("exit_rescue_mode"))
            .await
    }

    /// `POST machines/{id}/?op=mark_fixed` (admin): Broken → Ready (or Deployed).
    pub async fn mark_fixed(
        &self,
        system_id: &str,
        comment_text: Option<&str>,
    ) -> Result<Machine, MaasError> {
        self.transport()
            .json(
                Call::post("mark_fixed", &["machines", system_id])
                    .op("mark_fixed")
                    .params(comment(comment_text))
                    .expects("a machine object"),
            )
            .await
    }

    /// `POST machines/{id}/?op=set_workload_annotations` (the caller must own the machine:
    /// 409 `Cannot set workload annotation: it hasn't been acquired.` otherwise). A `None`
    /// value removes the key. `owner_data` is the deprecated alias MAAS still renders.
    pub async fn set_workload_annotations(
        &self,
        system_id: &str,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<Machine, MaasError> {
        let mut params = Params::new();
        for (key, value) in annotations {
            params.text(key, value.as_deref().unwrap_or(""));
        }
        self.transport()
            .json(
                Call::post("set_workload_annotations", &["machines", system_id])
                    .op("set_workload_annotations")
                    .params(params)
                    .expects("a machine object"),
            )
            .await
    }

    /// `GET machines/{id}/?op=power_parameters` (admin): one machine's power parameters,
    /// the BMC address in the clear and every other value a [`Secret`].
    pub async fn machine_power_parameters(
        &self,
        system_id: &str,
    ) -> Result<MachinePowerParameters, MaasError> {
        let dict: Option<BTreeMap<String, serde_json::Value>> = self
            .transport()
            .json(
                Call::get("machine_power_parameters", &["machines", system_id])
                    .op("power_parameters")
                    .sensitive_response()
                    .expects("a power parameters object"),
            )
            .await?;
        Ok(MachinePowerParameters::from_dict(dict.unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field names `T`'s derived `Deserialize` asks for.
    fn fields_of<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
        struct Fields(&'static [&'static str]);
        impl<'de> serde::Deserializer<'de> for &mut Fields {
            type Error = serde::de::value::Error;
            fn deserialize_any<V: serde::de::Visitor<'de>>(
                self,
                _: V,
            ) -> Result<V::Value, Self::Error> {
                Err(serde::de::Error::custom("not a struct"))
            }
            fn deserialize_struct<V: serde::de::Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Self::Error> {
                self.0 = fields;
                Err(serde::de::Error::custom("fields taken"))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
                identifier ignored_any
            }
        }
        let mut fields = Fields(&[]);
        let _ = T::deserialize(&mut fields);
        fields.0
    }

    #[test]
    fn a_summary_reads_what_its_struct_has() {
        let names = |p: &Projection| p.members.iter().map(|m| m.name).collect::<Vec<_>>();
        assert_eq!(names(&SUMMARY_READS), fields_of::<MachineSummary>());
        assert_eq!(names(&INTERFACE_MAC_READS), fields_of::<InterfaceMac>());
        let interfaces = SUMMARY_READS
            .members
            .iter()
            .find(|m| m.name == "interface_set");
        assert!(interfaces.and_then(|m| m.each).is_some());
    }

    /// Every object with a `system_id` in `value`.
    fn machines_in(value: &serde_json::Value, found: &mut Vec<serde_json::Value>) {
        match value {
            serde_json::Value::Object(members) => {
                if members.contains_key("system_id") && members.contains_key("hostname") {
                    found.push(value.clone());
                }
                members.values().for_each(|v| machines_in(v, found));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| machines_in(v, found)),
            _ => {}
        }
    }

    #[test]
    fn a_summary_skimmed_from_real_maas_machines_is_the_summary_decoded_whole() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/maas");
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let text = std::fs::read(entry.unwrap().path()).unwrap();
            if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&text) {
                machines_in(&value, &mut found);
            }
        }
        let mut decoded = 0;
        for machine in &found {
            for text in [
                serde_json::to_string_pretty(machine).unwrap(),
                machine.to_string(),
            ] {
                let whole =
                    serde_json::from_str::<MachineSummary>(&text).map_err(|e| e.to_string());
                let skimmed =
                    super::super::stream::decode_object::<MachineSummary>(text.as_bytes())
                        .map_err(|e| e.to_string());
                assert_eq!(skimmed, whole, "{text}");
                decoded += usize::from(whole.is_ok());
            }
        }
        assert!(
            decoded >= 40,
            "only {decoded} machines decoded from the fixtures"
        );
    }

    #[test]
    fn create_refuses_to_send_macs_without_an_architecture() {
        let mut params = CreateMachineParams::new("  ");
        params.mac_addresses.push("aa:bb:cc:dd:ee:ff".into());
        let err = params.params().unwrap_err();
        assert_eq!(
            err.to_string(),
            "MAAS client configuration: create_machine: an architecture is required (MAAS \
             discards the MAC addresses of an IPMI machine created without one)"
        );
    }

    #[test]
    fn release_erase_modes() {
        let flags = |mode| {
            let p = ReleaseParams::erasing(mode);
            (p.erase, p.quick_erase, p.secure_erase)
        };
        assert_eq!(flags(EraseMode::None), (Some(false), None, None));
        assert_eq!(flags(EraseMode::Quick), (Some(true), Some(true), None));
        assert_eq!(flags(EraseMode::Secure), (Some(true), None, Some(true)));
        assert_eq!(flags(EraseMode::Full), (Some(true), None, None));
    }

    #[test]
    fn mac_filters_are_normalised_to_maas_form() {
        let filter = MachineFilter::all().mac_address(" AA-BB-CC-DD-EE-0F ");
        assert_eq!(filter.mac_addresses, ["aa:bb:cc:dd:ee:0f"]);
    }

    #[test]
    fn bulk_power_parameters_keep_only_the_address_in_the_clear() {
        let dict: BTreeMap<String, serde_json::Value> = serde_json::from_value(serde_json::json!({
            "power_address": "10.176.16.20",
            "power_user": "root",
            "power_pass": "calvin-secret",
            "workaround_flags": ["opensesspriv"],
            "k_g": null,
        }))
        .unwrap();
        let parameters = MachinePowerParameters::from_dict(dict);
        assert_eq!(parameters.power_address.as_deref(), Some("10.176.16.20"));
        assert_eq!(
            parameters.others.keys().collect::<Vec<_>>(),
            ["power_pass", "power_user", "workaround_flags"]
        );
        assert_eq!(
            parameters.others["workaround_flags"].expose(),
            "[\"opensesspriv\"]"
        );
        assert!(!format!("{parameters:?}").contains("calvin-secret"));
        let empty = MachinePowerParameters::from_dict(
            serde_json::from_value(serde_json::json!({"power_address": " "})).unwrap(),
        );
        assert_eq!(empty.power_address, None);
    }

    #[test]
    fn power_parameters_never_show_passwords_in_debug() {
        let power =
            PowerParameters::Ipmi(IpmiPower::new("10.0.0.5", "admin", Secret::new("pw-123")));
        assert!(!format!("{power:?}").contains("pw-123"));
        let deploy = DeployParams {
            user_data: Some(Secret::new("#cloud-config\ntoken: abc")),
            ..DeployParams::default()
        };
        assert!(!format!("{deploy:?}").contains("token: abc"));
    }
}
