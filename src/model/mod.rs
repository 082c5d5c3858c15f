//! The resolved desired fleet (DESIGN.md §2; seed 000 §3.1–§3.7 sites, secrets and profiles,
//! §4.1 onboarding input, §5 decommission; seed 004 retirement).
//!
//! This is what the planner, the cloud-init renderer, the executor and the daemon consume: every
//! value is resolved here (profile defaults applied, site network overrides folded in, NodeGroup
//! members expanded to nodes, references checked), so no consumer re-reads manifests or guesses
//! a default. Secrets appear only as [`SecretRef`]s. Maps are ordered so output is deterministic.
//! The model is built by `crate::manifest`; `diff` compares two models field by field.

mod address;
pub mod diff;
pub mod duration;
mod ids;
mod keyword;
mod node;
mod profile;
mod revision;
mod secret_ref;
mod site;
mod window;

use std::collections::BTreeMap;
use std::fmt;

pub use address::{InterfaceAddr, InterfaceAddrError, MacAddr, MacAddrError};
pub use ids::{GroupName, Hostname, NodeId, ProfileName, SiteName, Sku};
pub use node::{
    Bmc, Decommission, Lifecycle, Node, NodePolicy, Provisioner, RedfishProvisioner, Reimage,
    RoceAssignment,
};
pub use profile::{
    BootDiskMatch, CloudInit, Concurrency, DataDisks, DeployPassword, DeployPolicy,
    DeployUserPolicy, Discovery, Enrollment, EraseMode, HardwareSync, Image, NetworkOverrides,
    Preflight, Profile, ProfileNetwork, ReleasePolicy, RocePolicy, SiteBundle, Storage,
    StorageLayout, SudoPolicy, Timeouts,
};
pub use revision::Revision;
pub use secret_ref::SecretRef;
pub use site::{
    DEFAULT_MAX_PRUNE_PERCENT, DeployIdentity, MaasEndpoint, Power, PowerOverride, PowerSelector,
    PowerType, ReconcilePolicy, Site, SiteNetwork, SiteStatus,
};
pub use window::{
    MaintenanceWindow, Schedule, TimeZone, WindowError, WindowOnboarding, WindowState, until,
    window_state,
};

/// The whole desired state read from one revision of a fleet repository.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    /// Where this fleet was read from; plan files record it.
    pub revision: Revision,
    pub sites: BTreeMap<SiteName, Site>,
    pub profiles: BTreeMap<ProfileName, Profile>,
    pub nodes: BTreeMap<NodeId, Node>,
    /// What NodeGroups set for their members as a group (maintenance windows).
    pub groups: BTreeMap<GroupName, GroupPolicy>,
}

/// A NodeGroup's own policy for its members.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupPolicy {
    /// When the group's nodes may be disrupted; when set, they replace the site's.
    pub maintenance_windows: Vec<MaintenanceWindow>,
}

impl Fleet {
    /// The nodes of one site, ordered by hostname.
    pub fn nodes_of_site<'a>(&'a self, site: &'a SiteName) -> impl Iterator<Item = &'a Node> + 'a {
        let start = NodeId {
            site: site.clone(),
            hostname: Hostname::new(""),
        };
        self.nodes
            .range(start..)
            .take_while(move |(id, _)| &id.site == site)
            .map(|(_, node)| node)
    }

    /// The site a node belongs to. Always present in a fleet built by `crate::manifest`.
    pub fn site_of(&self, node: &Node) -> Option<&Site> {
        self.sites.get(&node.id.site)
    }

    /// The resolved profile of a node. Always present in a fleet built by `crate::manifest`.
    pub fn profile_of(&self, node: &Node) -> Option<&Profile> {
        self.profiles.get(&node.profile)
    }

    /// The maintenance windows that apply to a node: its NodeGroup's, when the group has any,
    /// else its site's.
    pub fn windows_of(&self, node: &Node) -> &[MaintenanceWindow] {
        let group = node
            .group
            .as_ref()
            .and_then(|g| self.groups.get(g))
            .filter(|g| !g.maintenance_windows.is_empty());
        match group {
            Some(group) => &group.maintenance_windows,
            None => self
                .site_of(node)
                .map(|s| s.maintenance_windows.as_slice())
                .unwrap_or(&[]),
        }
    }

    /// The power credentials a node's BMC is driven with (seed 000 §3.2.1 selection order).
    pub fn power_credentials_of(&self, node: &Node) -> Option<&SecretRef> {
        self.site_of(node).map(|site| {
            site.power_credentials_for(&node.id.hostname, node.bmc.ipmi_ip, node.pxe_mac)
        })
    }
}

/// Where a document or node was written: the file as the operator names it (the fleet path
/// they passed, joined with the path inside the fleet), and the 1-based line and column.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Provenance {
    pub file: String,
    pub line: u32,
    pub column: u32,
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}
