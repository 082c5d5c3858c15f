//! A node (seed 000 §4.1 onboarding input, §3.3 RoCE assignments, §5 decommission; seed 004
//! retirement): one machine of a site, from a Node document or one entry of a NodeGroup.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use super::keyword::keyword_enum;
use super::{
    EraseMode, GroupName, InterfaceAddr, MacAddr, NodeId, Profile, ProfileName, Provenance, Sku,
};

keyword_enum!(
    /// `lifecycle`: the declarative end of a node's life.
    Lifecycle {
        /// Onboard and keep converged.
        Active => "active",
        /// Out of service for good (seed 004): released and powered off, never handed out
        /// again. Needs a `retiredReason`.
        Retired => "retired",
        /// Full decommission (seed 000 §5.4): released with erase, powered off, removed from
        /// the inventory.
        Decommissioned => "decommissioned",
    }
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// Site and hostname.
    pub id: NodeId,
    /// The resolved profile: the node's own, else its site's default profile.
    pub profile: ProfileName,
    pub sku: Sku,
    pub gpus: u32,
    pub bmc: Bmc,
    /// The PXE MAC, when the operator knows it; otherwise MAAS discovery finds it (seed 000
    /// §4.1: not a normal onboarding input).
    pub pxe_mac: Option<MacAddr>,
    /// RoCE phase-2 assignments, ordered by interface (seed 000 §3.3).
    pub roce: Vec<RoceAssignment>,
    pub lifecycle: Lifecycle,
    pub retired_reason: Option<String>,
    pub reimage: Reimage,
    pub decommission: Decommission,
    /// Blocks reimage, decommission and release while true.
    pub protected: bool,
    /// The reconciler leaves this node alone while true.
    pub paused: bool,
    /// The NodeGroup this node is a member of, if it came from one.
    pub group: Option<GroupName>,
    /// Which provisioner installs the node (MAAS unless the manifest says otherwise).
    #[serde(default, skip_serializing_if = "Provisioner::is_default")]
    pub provisioner: Provisioner,
    #[serde(skip)]
    pub provenance: Provenance,
}

/// Which provisioner installs a node (`provisioner` in the manifest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Provisioner {
    /// MAAS commissions and deploys the node (seed 000), powering it through `power_driver`
    /// (`None`: the site's `power.type`).
    Maas {
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            rename = "powerDriver"
        )]
        power_driver: Option<super::PowerType>,
    },
    /// metalform's Redfish virtual-media provisioner (seed 003).
    Redfish(Box<RedfishProvisioner>),
}

impl Default for Provisioner {
    fn default() -> Self {
        Provisioner::Maas { power_driver: None }
    }
}

impl Provisioner {
    pub fn is_default(&self) -> bool {
        *self == Provisioner::default()
    }

    pub fn redfish(&self) -> Option<&RedfishProvisioner> {
        match self {
            Provisioner::Redfish(r) => Some(r.as_ref()),
            Provisioner::Maas { .. } => None,
        }
    }
}

/// A node the Redfish provisioner installs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RedfishProvisioner {
    /// The server's serial number (its system's `SerialNumber`).
    pub serial: String,
    /// The BMC's Redfish address (`https://<bmc.ipmiIp>` unless given).
    pub redfish_url: String,
    pub vendor: Option<String>,
    /// The BMC login; `None`: the site's power credentials for the node.
    pub credentials: Option<super::SecretRef>,
    /// CD1; `None`: the controller's `MAINTENANCE_ISO_URL`.
    pub maintenance_iso_url: Option<String>,
    /// The recipe, validated against its schema version.
    pub recipe: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bmc {
    /// The BMC address MAAS powers the machine through (`power_address`).
    pub ipmi_ip: Ipv4Addr,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoceAssignment {
    pub interface: String,
    pub address: InterfaceAddr,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reimage {
    /// Bumping this requests one reimage (seed 000 §5.3): a declarative one-shot trigger.
    pub generation: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decommission {
    /// Effective erase mode when this node is released: its own, else its profile's
    /// `release.erase`.
    pub erase: EraseMode,
    /// The node's own `decommission.erase`, if it sets one.
    pub erase_override: Option<EraseMode>,
    /// Delete the machine from MAAS at the end of a full decommission (seed 000 §5.4: default
    /// is to leave it for MAAS-side audit).
    pub remove_from_maas: bool,
}

/// What the manifests last said about how a node may be taken out of the fleet, as the store
/// records it (DESIGN.md §4 pruning): pruning a node that left the manifests uses this — its
/// profile, its erase mode (never a weaker one than it was given), and its protection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePolicy {
    pub profile: ProfileName,
    /// The node's effective `decommission.erase` (its own, else its profile's `release.erase`).
    pub erase: EraseMode,
    /// Its profile's `release.fallbackNoErase`.
    pub fallback_no_erase: bool,
    /// `decommission.removeFromMaas`.
    pub remove_from_maas: bool,
    /// `protected`: nothing destructive, pruning included, while set.
    pub protected: bool,
}

impl NodePolicy {
    /// The policy of a resolved node and its profile.
    pub fn of(node: &Node, profile: &Profile) -> Self {
        Self {
            profile: node.profile.clone(),
            erase: node.decommission.erase,
            fallback_no_erase: profile.release.fallback_no_erase,
            remove_from_maas: node.decommission.remove_from_maas,
            protected: node.protected,
        }
    }
}
