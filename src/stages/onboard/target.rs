//! What the executor needs to onboard one node, resolved before it runs (DESIGN.md §4: "every
//! value the executor needs resolved"). Mirrors the planner's `NodeTarget` (issue 5 design);
//! built from the model here until the planner's plan items carry it.

use uuid::Uuid;

use crate::model::{Fleet, Node, Profile, SecretRef, Site};

#[derive(Debug, Clone, PartialEq)]
pub struct NodeTarget {
    pub site: Site,
    pub profile: Profile,
    pub node: Node,
    /// The node's BMC login, with the override order of 000 §3.2.1 applied.
    pub power_credentials: SecretRef,
    /// The machine, when the plan matched one in MAAS.
    pub system_id: Option<String>,
    /// The inventory row, when present.
    pub node_id: Option<Uuid>,
    pub job_id: Option<Uuid>,
}

impl NodeTarget {
    /// Resolve a node of a fleet (site, profile, power credentials).
    pub fn from_fleet(fleet: &Fleet, node: &Node) -> Option<NodeTarget> {
        Some(NodeTarget {
            site: fleet.site_of(node)?.clone(),
            profile: fleet.profile_of(node)?.clone(),
            power_credentials: fleet.power_credentials_of(node)?.clone(),
            node: node.clone(),
            system_id: None,
            node_id: None,
            job_id: None,
        })
    }

    /// `site/hostname`.
    pub fn label(&self) -> String {
        self.node.id.to_string()
    }

    pub fn hostname(&self) -> &str {
        self.node.id.hostname.as_str()
    }

    pub fn site_name(&self) -> &str {
        self.node.id.site.as_str()
    }
}
