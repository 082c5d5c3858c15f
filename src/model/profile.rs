//! A profile (seed 000 §3.6 site policy knobs, §3.7 site profiles): an operational policy bundle
//! bound to one site, with every knob resolved — the seed's defaults applied and the site's
//! network values overridden where the profile says so.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::keyword::keyword_enum;
use super::{ProfileName, Provenance, SiteName, duration};

keyword_enum!(
    /// `spec.storage.layout`: the MAAS storage layout applied before deploy (seed 000 §4.3
    /// ConfigureStorage: flat).
    StorageLayout {
        Flat => "flat",
        Lvm => "lvm",
    }
);

keyword_enum!(
    /// `spec.storage.dataDisks`: whether first boot partitions, formats and mounts every non-root
    /// disk as /shareN. Destructive, so a profile must say it explicitly (seed 000 §4.3: "must
    /// stay explicit ... never be implicit").
    DataDisks {
        Initialize => "initialize",
        Skip => "skip",
    }
);

keyword_enum!(
    /// Erase mode of a MAAS release (seed 000 §5.1: none | quick | secure).
    EraseMode {
        None => "none",
        Quick => "quick",
        Secure => "secure",
    }
);

keyword_enum!(
    /// `spec.deployUser.sudo`: what the site's deploy user may do as root on a deployed node.
    SudoPolicy {
        /// Only what metalform itself runs there (write the hardware-sync credentials, restart
        /// its units), without a password. The default.
        Restricted => "restricted",
        /// Anything, with the user's password (needs `password: perNode` or `site`), plus the
        /// restricted commands without one.
        Password => "password",
        /// Anything, without a password (what the deploy user had before issue 16).
        Passwordless => "passwordless",
    }
);

keyword_enum!(
    /// `spec.deployUser.password`: whether the deploy user has a password at all.
    DeployPassword {
        /// No password: the account logs in with SSH keys only. The default.
        None => "none",
        /// A random password per node, made when the node is first rendered and kept in the
        /// secret store under the site's `deploy.nodePasswords` path.
        PerNode => "perNode",
        /// The site's shared `deploy.password` (one leaked hash exposes every node).
        Site => "site",
    }
);

/// How the site's deploy user is set up on this profile's nodes (seed 000 §9; issue 16):
/// keys-only SSH, no password and only metalform's own commands as root unless the profile
/// says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeployUserPolicy {
    pub sudo: SudoPolicy,
    pub password: DeployPassword,
    /// SSH password login (`ssh_pwauth`); needs a password. Default false.
    pub ssh_password_login: bool,
}

impl Default for DeployUserPolicy {
    fn default() -> Self {
        Self {
            sudo: SudoPolicy::Restricted,
            password: DeployPassword::None,
            ssh_password_login: false,
        }
    }
}

impl DeployUserPolicy {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    pub name: ProfileName,
    /// The one site this profile belongs to (`metadata.site`).
    pub site: SiteName,
    pub image: Image,
    pub storage: Storage,
    pub roce: RocePolicy,
    pub hardware_sync: HardwareSync,
    pub discovery: Discovery,
    pub deploy: DeployPolicy,
    /// Written only when not the default, so plans of profiles without it read as before.
    #[serde(default, skip_serializing_if = "DeployUserPolicy::is_default")]
    pub deploy_user: DeployUserPolicy,
    pub release: ReleasePolicy,
    pub preflight: Preflight,
    pub concurrency: Concurrency,
    pub enrollment: Enrollment,
    pub timeouts: Timeouts,
    pub cloud_init: CloudInit,
    /// The network values nodes of this profile use: the site's, with this profile's overrides.
    pub network: ProfileNetwork,
    /// What this profile itself overrides (for review output; `network` has the effective values).
    pub network_overrides: NetworkOverrides,
    #[serde(skip)]
    pub provenance: Provenance,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    /// e.g. `ubuntu/noble`, or a custom image name (the MAAS client adds `custom/`).
    pub distro_series: String,
    /// e.g. `amd64/generic`.
    pub architecture: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Storage {
    pub boot_disk: BootDiskMatch,
    pub layout: StorageLayout,
    pub data_disks: DataDisks,
}

/// The pattern that picks the boot disk among a machine's block devices by model, name or
/// id_path (seed 000 §4.3 ConfigureStorage: `boss|boot optimized|m.2`). Compiled at load time.
/// Shared, not cloned: every node of a profile carries the profile, and each clone of a
/// `Regex` fills a search cache of its own (~5 KB per node of a wave).
#[derive(Debug, Clone)]
pub struct BootDiskMatch {
    regex: std::sync::Arc<regex::Regex>,
}

impl BootDiskMatch {
    /// The seed's default: Dell BOSS cards, "boot optimized" storage and M.2 devices.
    pub const DEFAULT_PATTERN: &'static str = r"(?i)boss|boot optimized|m\.2";

    pub fn new(pattern: &str) -> Result<Self, regex::Error> {
        Ok(Self {
            regex: std::sync::Arc::new(regex::Regex::new(pattern)?),
        })
    }

    pub fn pattern(&self) -> &str {
        self.regex.as_str()
    }

    pub fn is_match(&self, text: &str) -> bool {
        self.regex.is_match(text)
    }
}

impl PartialEq for BootDiskMatch {
    fn eq(&self, other: &Self) -> bool {
        self.pattern() == other.pattern()
    }
}

impl Serialize for BootDiskMatch {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Shape<'a> {
            #[serde(rename = "match")]
            pattern: &'a str,
        }
        Shape {
            pattern: self.pattern(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for BootDiskMatch {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Shape {
            #[serde(rename = "match")]
            pattern: String,
        }
        let shape = Shape::deserialize(deserializer)?;
        BootDiskMatch::new(&shape.pattern).map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RocePolicy {
    /// Apply RoCE phase-2 assignments (`enable_phase2_roce`, default true).
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HardwareSync {
    /// `require_hw_sync`, default true (seed 000 §9.1: a required invariant in v1).
    pub required: bool,
    /// `hardware_sync_interval`, default 15m.
    #[serde(with = "duration")]
    pub interval: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Discovery {
    /// Claim the sole `New` machine when nothing stronger matches (seed 000 §4.16); default
    /// false: ambiguous discovery fails closed.
    pub auto_claim_single_new_machine: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeployPolicy {
    /// Allow a bounded redeploy after a datasource/cloud-init class failure (default true).
    pub retry_on_datasource_failure: bool,
    /// How many such redeploys (default 1).
    pub max_retry_attempts: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleasePolicy {
    /// Erase mode when a node of this profile is released (reimage, decommission); a node may
    /// override it in `decommission.erase`. Default quick.
    pub erase: EraseMode,
    /// When the erase fails, release without erasing (`release_fallback_no_erase`, default true).
    pub fallback_no_erase: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preflight {
    /// Fail when the node PXE interface has no valid subnet link (`strict_pxe_preflight`,
    /// default true).
    pub strict_pxe: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Concurrency {
    /// Nodes of this profile worked on at once per site (`batch_max_parallel`, default 10).
    pub max_parallel: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Enrollment {
    /// Lifetime of a node's enrollment token (`enrollment_token_ttl_seconds`, default 2h). Must
    /// outlast deploy plus first boot.
    #[serde(with = "duration")]
    pub token_ttl: Duration,
}

/// Policy timeouts of seed 000 §4.14, each mapped by the executor to a failure class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeouts {
    #[serde(with = "duration")]
    pub discovery: Duration,
    #[serde(with = "duration")]
    pub commission: Duration,
    #[serde(with = "duration")]
    pub deploy: Duration,
    #[serde(with = "duration")]
    pub hw_sync_seed: Duration,
    #[serde(with = "duration")]
    pub hw_sync_health: Duration,
    #[serde(with = "duration")]
    pub enrollment: Duration,
    /// A decommission's node-agent task (drain, scrub, storage cleanup …) must finish within
    /// this; then the agent counts as unreachable (000 §5.8).
    #[serde(with = "duration")]
    pub agent_task: Duration,
    /// MAAS must finish a release, erase included, within this.
    #[serde(with = "duration")]
    pub release: Duration,
    /// MAAS must report a machine off within this.
    #[serde(with = "duration")]
    pub power_off: Duration,
}

impl Timeouts {
    /// The defaults when a profile names none (DESIGN.md §2).
    pub fn defaults() -> Self {
        let minutes = |m: u64| Duration::from_secs(m * 60);
        Timeouts {
            discovery: minutes(20),
            commission: minutes(40),
            deploy: minutes(60),
            hw_sync_seed: minutes(15),
            hw_sync_health: minutes(30),
            enrollment: minutes(30),
            agent_task: minutes(10),
            release: minutes(60),
            power_off: minutes(10),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudInit {
    /// The infra-owned, versioned site bootstrap bundle delivered before metalform's own
    /// bootstrap (seed 000 §3.6 site_bootstrap_bundle_ref, §9). None: no site layer.
    pub site_bundle: Option<SiteBundle>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteBundle {
    #[serde(rename = "ref")]
    pub reference: String,
    pub version: String,
}

/// Effective network values for nodes of a profile (seed 000 §3.6: pxe_iface, node_pxe_iface and
/// pxe_vlan_vid are site defaults with profile-level overrides).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileNetwork {
    pub pxe_iface: String,
    pub node_pxe_iface: String,
    pub pxe_vlan_vid: u16,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkOverrides {
    pub pxe_iface: Option<String>,
    pub node_pxe_iface: Option<String>,
    pub pxe_vlan_vid: Option<u16>,
}
