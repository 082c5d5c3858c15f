//! Typed manifest documents (DESIGN.md §2): the Rust mirror of schema/, field for field. A
//! document is deserialised only after its schema accepted it, so these types hold exactly what
//! was written — optional where the schema has a default — and `resolve` turns them into the
//! model. A test checks that schema and these types agree in both directions.

use serde::{Deserialize, Serialize};

use crate::model::{
    DataDisks, EraseMode, Lifecycle, PowerType, SiteStatus, StorageLayout, WindowOnboarding,
};

/// `apiVersion`, `kind`, `metadata`, `spec` — the frame every document shares.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Document<M, S> {
    pub api_version: String,
    pub kind: String,
    pub metadata: M,
    pub spec: S,
}

pub type SiteDocument = Document<Metadata, SiteSpec>;
pub type ProfileDocument = Document<ProfileMetadata, ProfileSpec>;
pub type NodeDocument = Document<Metadata, NodeSpec>;
pub type NodeGroupDocument = Document<Metadata, NodeGroupSpec>;

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Metadata {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ProfileMetadata {
    pub name: String,
    pub site: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct SecretRefSpec {
    pub vault: String,
    pub key: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteSpec {
    pub region: String,
    pub status: Option<SiteStatus>,
    pub maas: MaasSpec,
    pub power: PowerSpec,
    pub network: SiteNetworkSpec,
    pub deploy: DeploySpec,
    pub default_profile: Option<String>,
    pub reconcile: Option<ReconcileSpec>,
    pub maintenance_windows: Option<Vec<WindowSpec>>,
}

/// One maintenance window (`$defs/maintenanceWindows`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowSpec {
    pub name: String,
    pub schedule: String,
    pub duration: String,
    pub time_zone: String,
    pub onboarding: Option<WindowOnboarding>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MaasSpec {
    pub url: String,
    pub api_key: SecretRefSpec,
    pub allow_insecure_http: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PowerSpec {
    #[serde(rename = "type")]
    pub kind: Option<PowerType>,
    pub default_credentials: SecretRefSpec,
    pub overrides: Option<Vec<PowerOverrideSpec>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct PowerOverrideSpec {
    #[serde(rename = "match")]
    pub selector: PowerMatchSpec,
    pub credentials: SecretRefSpec,
}

/// Exactly one selector (the schema's `minProperties`/`maxProperties: 1`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PowerMatchSpec {
    PxeMac(String),
    IpmiIp(String),
    Hostname(String),
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteNetworkSpec {
    pub pxe_iface: String,
    pub pxe_vlan_vid: u16,
    pub node_pxe_iface: String,
    pub upstream_dns: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploySpec {
    pub user: Option<String>,
    pub password: Option<SecretRefSpec>,
    pub node_passwords: Option<SecretRefSpec>,
    pub ssh_keys: Option<Vec<String>>,
    pub ssh_iface: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReconcileSpec {
    pub prune: Option<bool>,
    pub max_prune_percent: Option<u8>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileSpec {
    pub image: Option<ImageSpec>,
    pub storage: StorageSpec,
    pub roce: Option<RoceSpec>,
    pub hardware_sync: Option<HardwareSyncSpec>,
    pub discovery: Option<DiscoverySpec>,
    pub deploy: Option<DeployPolicySpec>,
    pub deploy_user: Option<DeployUserSpec>,
    pub release: Option<ReleaseSpec>,
    pub preflight: Option<PreflightSpec>,
    pub concurrency: Option<ConcurrencySpec>,
    pub enrollment: Option<EnrollmentSpec>,
    pub timeouts: Option<TimeoutsSpec>,
    pub cloud_init: Option<CloudInitSpec>,
    pub network: Option<NetworkOverridesSpec>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageSpec {
    pub distro_series: Option<String>,
    pub architecture: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    pub boot_disk: Option<BootDiskSpec>,
    pub layout: Option<StorageLayout>,
    pub data_disks: DataDisks,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct BootDiskSpec {
    #[serde(rename = "match")]
    pub pattern: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct RoceSpec {
    pub enabled: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct HardwareSyncSpec {
    pub required: Option<bool>,
    pub interval: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverySpec {
    pub auto_claim_single_new_machine: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeployPolicySpec {
    pub retry_on_datasource_failure: Option<bool>,
    pub max_retry_attempts: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeployUserSpec {
    pub sudo: Option<crate::model::SudoPolicy>,
    pub password: Option<crate::model::DeployPassword>,
    pub ssh_password_login: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseSpec {
    pub erase: Option<EraseMode>,
    pub fallback_no_erase: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PreflightSpec {
    pub strict_pxe: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConcurrencySpec {
    pub max_parallel: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EnrollmentSpec {
    pub token_ttl: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimeoutsSpec {
    pub discovery: Option<String>,
    pub commission: Option<String>,
    pub deploy: Option<String>,
    pub hw_sync_seed: Option<String>,
    pub hw_sync_health: Option<String>,
    pub enrollment: Option<String>,
    pub agent_task: Option<String>,
    pub release: Option<String>,
    pub power_off: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudInitSpec {
    pub site_bundle: Option<SiteBundleSpec>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct SiteBundleSpec {
    #[serde(rename = "ref")]
    pub reference: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkOverridesSpec {
    pub pxe_iface: Option<String>,
    pub node_pxe_iface: Option<String>,
    pub pxe_vlan_vid: Option<u16>,
}

/// A Node document's spec: the group-level fields plus the per-node fields.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct NodeSpec {
    pub site: String,
    pub profile: Option<String>,
    pub sku: String,
    pub gpus: u32,
    #[serde(flatten)]
    pub fields: NodeFieldsSpec,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct NodeGroupSpec {
    pub site: String,
    pub profile: Option<String>,
    pub sku: String,
    pub gpus: u32,
    pub decommission: Option<DecommissionSpec>,
    pub protected: Option<bool>,
    pub paused: Option<bool>,
    #[serde(rename = "maintenanceWindows")]
    pub maintenance_windows: Option<Vec<WindowSpec>>,
    pub nodes: Vec<NodeGroupEntry>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct NodeGroupEntry {
    pub hostname: String,
    #[serde(flatten)]
    pub fields: NodeFieldsSpec,
}

/// The per-node fields shared by a Node spec and a NodeGroup entry (`$defs/nodeFields`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeFieldsSpec {
    pub bmc: BmcSpec,
    pub pxe_mac: Option<String>,
    pub roce: Option<Vec<RoceAssignmentSpec>>,
    pub lifecycle: Option<Lifecycle>,
    pub retired_reason: Option<String>,
    pub reimage: Option<ReimageSpec>,
    pub decommission: Option<DecommissionSpec>,
    pub protected: Option<bool>,
    pub paused: Option<bool>,
    pub provisioner: Option<ProvisionerSpec>,
}

/// `provisioner` (seed 003): MAAS, or metalform's Redfish provisioner with a recipe. Which
/// fields go with which type is checked when the node is resolved (`manifest::provisioner`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionerSpec {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub power_driver: Option<PowerType>,
    pub serial: Option<String>,
    pub redfish_url: Option<String>,
    pub vendor: Option<String>,
    pub credentials: Option<SecretRefSpec>,
    pub maintenance_iso_url: Option<String>,
    pub recipe: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BmcSpec {
    pub ipmi_ip: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct RoceAssignmentSpec {
    pub interface: String,
    pub address: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ReimageSpec {
    pub generation: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecommissionSpec {
    pub erase: Option<EraseMode>,
    pub remove_from_maas: Option<bool>,
}
