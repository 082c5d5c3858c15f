//! Nodes the manifests no longer name (DESIGN.md §4; issue 18): left alone unless pruning is on
//! for their site (`reconcile.prune`) or for every site (the daemon's `[reconcile] prune`);
//! then each is fully decommissioned (000 §5.4) with the release policy recorded for it when the
//! manifests last had it — its profile and erase mode, never a weaker erase than it was given.
//! The guards metalform has for destruction hold here too: the mass-destruction guard (an
//! empty or partial read of the fleet or of MAAS), `--allow-destructive`, protection, pauses
//! and maintenance windows, plus a cap on the share of a site one pass may prune
//! (`reconcile.maxPrunePercent`): a pass over it prunes nothing.
//!
//! Also here: [`policy_updates`], the release policies the store should record for the nodes
//! the manifests have now.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::lifecycle::{JobKind, NodeState};
use crate::model::{
    Bmc, Decommission, Fleet, Lifecycle, Node, NodeId, NodePolicy, Profile, Provenance, Reimage,
    Site, Sku,
};
use crate::observe::InventoryNode;

use super::planner::{Clock, Decision, StoreView, open_decommission, short};
use super::types::{Action, BlockCause, NodeTarget, PauseSource, PlanItem, PlanOptions};

/// Items for the site's inventory rows and open onboardings that the manifests no longer name.
pub(super) fn orphans(
    fleet: &Fleet,
    site: &Site,
    view: &StoreView<'_>,
    options: &PlanOptions,
    clock: &Clock,
) -> Vec<PlanItem> {
    let name = site.name.as_str();
    let in_fleet = |hostname: &str| fleet.nodes.contains_key(&NodeId::new(name, hostname));
    let pruning = site.reconcile.prune || options.prune;
    let mut items: BTreeMap<NodeId, PlanItem> = BTreeMap::new();
    for inv in view
        .snapshot
        .inventory
        .iter()
        .filter(|n| n.site == name && !in_fleet(&n.hostname))
    {
        let id = NodeId::new(name, inv.hostname.as_str());
        let key = (name, inv.hostname.as_str());
        let target = prune_target(fleet, site, inv, view);
        let decision = match (
            view.open_onboarding.get(&key),
            view.open_decommission.get(&key),
        ) {
            (Some(job), _) => Decision::new(
                Action::Noop,
                format!(
                    "in the inventory ({}), onboarding {} is {} (cancel it with `metalform onboardings cancel {}`), but no longer in the manifests: left alone",
                    inv.status,
                    short(&job.id),
                    job.state,
                    job.id
                ),
            ),
            // Work already started finishes (a prune of an earlier pass, a runtime request),
            // when the node's target can still be resolved.
            (None, Some(job)) => {
                let decision = open_decommission(job);
                if decision.action.is_change() && target.is_none() {
                    left_alone(
                        inv,
                        pruning,
                        "its open decommission cannot be continued: no release policy was recorded for it",
                    )
                } else {
                    decision
                }
            }
            (None, None) if pruning => prune(inv, target.as_ref(), clock, site),
            (None, None) => left_alone(inv, false, ""),
        };
        let decision = Decision {
            node_id: Some(inv.id),
            ..decision
        };
        items.insert(id.clone(), item(id, decision, target));
    }
    for job in view.snapshot.jobs.iter().filter(|j| {
        j.site == name
            && j.kind == JobKind::Onboarding
            && j.state.is_open()
            && !in_fleet(&j.hostname)
    }) {
        let id = NodeId::new(name, job.hostname.as_str());
        items.entry(id.clone()).or_insert_with(|| {
            let decision = Decision::new(
                Action::Noop,
                format!(
                    "onboarding {} is {} (cancel it with `metalform onboardings cancel {}`), but no longer in the manifests: left alone",
                    short(&job.id),
                    job.state,
                    job.id
                ),
            );
            item(id, decision, None)
        });
    }
    items.into_values().collect()
}

fn left_alone(inv: &InventoryNode, pruning: bool, why: &str) -> Decision {
    let why = match (pruning, why.is_empty()) {
        (_, false) => format!(" ({why})"),
        (true, true) => format!(" (pruning does not take a node that is {})", inv.status),
        (false, true) => String::new(),
    };
    Decision::new(
        Action::Noop,
        format!(
            "in the inventory ({}), but no longer in the manifests: left alone{why}",
            inv.status
        ),
    )
}

/// Prune one node: a full decommission under its recorded policy, unless something holds it.
fn prune(inv: &InventoryNode, target: Option<&NodeTarget>, clock: &Clock, site: &Site) -> Decision {
    if !matches!(
        inv.status,
        NodeState::Active | NodeState::Offline | NodeState::Quarantined | NodeState::Retired
    ) {
        return left_alone(inv, true, "");
    }
    let policy = inv.policy.as_ref();
    let Some(target) = target else {
        let why = match policy {
            None => "no release policy was recorded for it (it was onboarded before metalform recorded them)".to_owned(),
            Some(p) => format!(
                "its recorded profile `{}` and the site's default profile are gone from the manifests",
                p.profile
            ),
        };
        return Decision::blocked(
            BlockCause::NoReleasePolicy,
            format!(
                "removed from the manifests and pruning is on, but {why}: metalform does not guess an erase mode; add it back with lifecycle: decommissioned to decommission it"
            ),
        );
    };
    let erase = target.node.decommission.erase;
    let what = format!(
        "removed from the manifests and pruning is on; the node is {}: decommission it (release with erase {erase} as its profile {} recorded, power off, remove the node record)",
        inv.status, target.profile.name
    );
    if inv.protected || policy.is_some_and(|p| p.protected) {
        return Decision::blocked(
            BlockCause::Protected {
                source: PauseSource::Inventory,
                would: "prune".into(),
            },
            format!("protected when it left the manifests; would prune: {what}"),
        );
    }
    if inv.paused {
        return Decision::blocked(
            BlockCause::Paused {
                source: PauseSource::Inventory,
                would: "prune".into(),
            },
            format!("paused in the inventory; would prune: {what}"),
        );
    }
    let mut decision = Decision::new(Action::Prune, what);
    decision.destructive = true;
    decision.system_id = target.system_id.clone();
    // The node's group is gone with its manifest: the site's windows apply.
    super::windows::gate(&site.maintenance_windows, decision, clock)
}

/// The target a prune (or a continued decommission) of a removed node runs with: the site, the
/// recorded profile (else the site's default), and a node made from the inventory row whose
/// erase mode is the recorded one. `None` without a recorded policy or a profile.
fn prune_target(
    fleet: &Fleet,
    site: &Site,
    inv: &InventoryNode,
    view: &StoreView<'_>,
) -> Option<NodeTarget> {
    let policy = inv.policy.as_ref()?;
    let profile = fleet
        .profiles
        .get(&policy.profile)
        .filter(|p| p.site == site.name)
        .or_else(|| {
            site.default_profile
                .as_ref()
                .and_then(|name| fleet.profiles.get(name))
        })?;
    let ipmi_ip = inv.ipmi_ip.as_deref()?.parse().ok()?;
    let hostname = crate::model::Hostname::new(inv.hostname.as_str());
    let node = Node {
        id: NodeId::new(site.name.as_str(), inv.hostname.as_str()),
        profile: profile.name.clone(),
        sku: Sku::new(inv.sku.clone().unwrap_or_default()),
        gpus: inv.gpus.unwrap_or(0),
        bmc: Bmc { ipmi_ip },
        pxe_mac: None,
        roce: Vec::new(),
        lifecycle: Lifecycle::Decommissioned,
        provisioner: Default::default(),
        retired_reason: None,
        reimage: Reimage {
            generation: inv.reimage_generation.unwrap_or(0),
        },
        decommission: Decommission {
            erase: policy.erase,
            erase_override: Some(policy.erase),
            remove_from_maas: policy.remove_from_maas,
        },
        protected: policy.protected,
        paused: inv.paused,
        group: None,
        provenance: Provenance::default(),
    };
    let system_id = view
        .latest_onboarding
        .get(&(site.name.as_str(), inv.hostname.as_str()))
        .and_then(|job| job.maas_system_id.clone());
    Some(NodeTarget {
        site: Site {
            provenance: Provenance::default(),
            ..site.clone()
        },
        profile: Profile {
            provenance: Provenance::default(),
            ..profile.clone()
        },
        power_credentials: site.power_credentials_for(&hostname, ipmi_ip, None).clone(),
        node,
        system_id,
        node_id: Some(inv.id),
        job_id: None,
    })
}

fn item(node: NodeId, decision: Decision, target: Option<NodeTarget>) -> PlanItem {
    let target = if decision.action.is_change() {
        target.map(|t| NodeTarget {
            job_id: decision.job_id,
            ..t
        })
    } else {
        None
    };
    PlanItem {
        node,
        in_manifests: false,
        action: decision.action,
        reason: decision.reason,
        destructive: decision.destructive,
        settled: false,
        drift: None,
        window_ignored: decision.window_ignored,
        user_data: None,
        target: target.map(Box::new),
    }
}

/// Hold every prune of the site when there are more than `reconcile.maxPrunePercent` of its
/// nodes allows in one pass: that many nodes leaving the manifests at once is more likely a bad
/// read or a bad commit than a decision.
pub(super) fn limit(site: &Site, items: &mut [PlanItem], view: &StoreView<'_>) {
    let candidates = items.iter().filter(|i| i.action == Action::Prune).count();
    let nodes = view
        .snapshot
        .inventory
        .iter()
        .filter(|n| n.site == site.name.as_str())
        .count();
    let allowed = site.reconcile.prune_allowance(nodes);
    if candidates <= allowed {
        return;
    }
    let max_percent = site.reconcile.max_prune_percent;
    for item in items.iter_mut().filter(|i| i.action == Action::Prune) {
        item.reason = format!(
            "pruning {candidates} of site {}'s {nodes} nodes in one pass is more than its reconcile.maxPrunePercent {max_percent}% allows ({allowed}): nothing is pruned; would prune: {}",
            site.name, item.reason
        );
        item.action = Action::Blocked {
            cause: BlockCause::PruneLimit {
                candidates,
                allowed,
                nodes,
                max_percent,
            },
        };
        item.destructive = false;
        item.target = None;
    }
}

/// A release policy to record for a node (pruning uses it once the node leaves the manifests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyUpdate {
    pub node_id: Uuid,
    pub node: NodeId,
    pub policy: NodePolicy,
}

/// The policies the manifests give the inventory's nodes now, where they differ from what is
/// recorded. Pure; `apply` and the daemon write them.
pub fn policy_updates(fleet: &Fleet, inventory: &[InventoryNode]) -> Vec<PolicyUpdate> {
    inventory
        .iter()
        .filter(|inv| inv.status != NodeState::Deleted)
        .filter_map(|inv| {
            let node = fleet
                .nodes
                .get(&NodeId::new(inv.site.as_str(), inv.hostname.as_str()))?;
            let policy = NodePolicy::of(node, fleet.profile_of(node)?);
            (inv.policy.as_ref() != Some(&policy)).then(|| PolicyUpdate {
                node_id: inv.id,
                node: node.id.clone(),
                policy,
            })
        })
        .collect()
}
