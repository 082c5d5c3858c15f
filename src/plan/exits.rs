//! The way out of an inventory state that onboarding must not touch, for a node the manifests
//! keep in service (`lifecycle: active`; issue 18, docs/recovery.md): a node flagged retired
//! (seed 004) or `retired` is reactivated — the flag cleared (audited), the machine cleaned and
//! redeployed with the same node id (001 §3.2 retired -> active); a quarantined node is
//! reimaged when its `reimage.generation` is bumped, and otherwise waits for an operator, told
//! which manifest change or command gets it out. Nodes whose manifest retires or decommissions
//! them are handled by the planner's `leaving`.

use crate::lifecycle::NodeState;
use crate::observe::InventoryNode;

use super::planner::{Decision, Facts, reimage, short};
use super::types::{Action, BlockCause};

/// A decision for a node the inventory holds out of service, or `None` when it is in service
/// (or being onboarded) and the normal rules apply.
pub(super) fn out_of_service(f: &Facts<'_>, inv: &InventoryNode) -> Option<Decision> {
    let held = |reason: String| {
        Decision::blocked(
            BlockCause::InventoryState {
                node_id: inv.id,
                state: inv.status,
                retired: inv.retired,
            },
            reason,
        )
    };
    match inv.status {
        // Owned by a lifecycle operation; one that is open decided already (the planner looks
        // at open decommissions first), so this one lost it.
        NodeState::Draining | NodeState::Removing => Some(held(format!(
            "the inventory holds it {} with no open decommission: `metalform decommissions list --node {}` shows the last one; retry it, or set lifecycle: retired or decommissioned",
            inv.status, f.node.id.hostname
        ))),
        // Only a node retirement flagged: one left Retired by a cancelled decommission is the
        // drift rules' to judge.
        _ if inv.retired => Some(reactivate(f, inv)),
        NodeState::Quarantined => Some(match inv.reimage_generation {
            Some(applied) if f.node.reimage.generation > applied => reimage(f, inv, applied),
            _ => {
                let deployed = f.machine().and_then(|m| m.status.maas())
                    == Some(crate::lifecycle::MaasStatus::Deployed);
                held(format!(
                    "the inventory holds it quarantined; {}: bump reimage.generation to reimage it, set lifecycle: retired or decommissioned to release it, or {} with `metalform drift resolve {} --site {} --action reactivate --reason …`",
                    f.machine_text(),
                    if deployed {
                        "return it to service as it is"
                    } else {
                        "once MAAS shows it Deployed again, return it to service"
                    },
                    f.node.id.hostname,
                    f.node.id.site
                ))
            }
        }),
        _ => None,
    }
}

/// `lifecycle: active` on a retired node: the way back (seed 004: "the retired field needs to
/// be set to False first"; 001 §3.3 "explicit reactivate/reuse flow").
fn reactivate(f: &Facts<'_>, inv: &InventoryNode) -> Decision {
    if let Some(job) = f.open {
        return Decision::blocked(
            BlockCause::OnboardingInProgress {
                job_id: job.id,
                state: job.state,
            },
            format!(
                "lifecycle active on a retired node, but onboarding {} is {}: cancel it first (`metalform onboardings cancel {}`)",
                short(&job.id),
                job.state,
                job.id
            ),
        );
    }
    let why = inv
        .retired_reason
        .as_deref()
        .map(|r| format!(" ({r:?})"))
        .unwrap_or_default();
    let in_use = f.machine().is_some_and(|m| m.status.in_use());
    let clean = if in_use {
        format!(
            "release it (erase {}, destroying what runs there)",
            f.node.decommission.erase
        )
    } else {
        "clean it".to_owned()
    };
    let mut decision = Decision::new(
        Action::Reactivate,
        format!(
            "lifecycle active, but the node is {} and flagged retired{why}; {}: clear the flag, {clean} and redeploy it with the same node id",
            inv.status,
            f.machine_text()
        ),
    );
    decision.destructive = in_use;
    decision
}
