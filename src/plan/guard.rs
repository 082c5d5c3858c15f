//! The mass-destruction guard (DESIGN.md §4 "empty/partial-source guard"): when a site's
//! desired set is empty or a read it depends on failed or came back suspiciously incomplete,
//! the planner plans nothing destructive there. A missing manifest directory, a truncated git
//! read or a MAAS answering for the wrong region must never turn into "destroy everything".
//!
//! The guard holds for a site when:
//! * its MAAS could not be read (every item is blocked anyway; the site says why);
//! * the manifests name no node of the site while the inventory holds nodes there or MAAS
//!   lists machines with a workload;
//! * MAAS listed none of the machines metalform's own jobs are bound to in the site.
//!
//! While it holds, each destructive item of the site becomes a blocked one that says what it
//! would have done.

use std::collections::HashSet;

use crate::model::{Node, Site};
use crate::observe::{ObservedMachine, SiteObservation, Snapshot};

use super::types::{Action, BlockCause, PlanItem};

/// Why the guard holds for `site`, or `None`.
pub(super) fn site_guard(
    site: &Site,
    observation: &SiteObservation,
    nodes: &[&Node],
    machines: &[ObservedMachine],
    snapshot: &Snapshot,
) -> Option<String> {
    if let SiteObservation::Unreadable { error, .. } = observation {
        return Some(format!(
            "MAAS could not be read ({error}); nothing is planned for this site"
        ));
    }
    let name = site.name.as_str();
    let inventory = snapshot.inventory.iter().filter(|n| n.site == name).count();
    let in_use = machines.iter().filter(|m| m.status.in_use()).count();
    if nodes.is_empty() && (inventory > 0 || in_use > 0) {
        return Some(format!(
            "the manifests name no node of site {name} while the inventory holds {inventory} and MAAS lists {in_use} machine(s) in use: treated as an incomplete read of the fleet"
        ));
    }
    let bound: HashSet<&str> = snapshot
        .jobs
        .iter()
        .filter(|j| j.site == name)
        .filter_map(|j| j.maas_system_id.as_deref())
        .collect();
    if !bound.is_empty()
        && !machines
            .iter()
            .any(|m| bound.contains(m.system_id.as_str()))
    {
        return Some(format!(
            "MAAS listed none of the {} machine(s) metalform's jobs are bound to in site {name}: treated as a partial read",
            bound.len()
        ));
    }
    None
}

/// Turn every destructive item into a blocked one while the guard holds.
pub(super) fn hold(items: &mut [PlanItem], guard: &str) {
    for item in items.iter_mut().filter(|i| i.destructive) {
        item.reason = format!(
            "the mass-destruction guard holds for this site; would {}: {}",
            item.action.name(),
            item.reason
        );
        item.action = Action::Blocked {
            cause: BlockCause::DestructionGuard {
                guard: guard.to_owned(),
            },
        };
        item.destructive = false;
        item.target = None;
    }
}
