//! Plan items → executor work items, under the daemon's self-heal policy (DESIGN.md §4, §6):
//! the policy decides which change items the daemon applies on its own; the conversion is
//! `crate::apply::work_items`, the same as `metalform apply`.

use crate::apply::decommission::DecommissionWork;
use crate::apply::{PlanRefused, WorkItem, work_items};
use crate::plan::{Action, Plan};

use super::config::SelfHealPolicy;

/// What the policy let through, and what it held back (with why).
#[derive(Debug, Default)]
pub struct Dispatch {
    pub items: Vec<WorkItem>,
    /// Reimages, decommissions and retirements the manifests declare, and open
    /// decommissions to continue.
    pub decommissions: Vec<DecommissionWork>,
    /// Redfish provisionings to queue for the provisioning workers.
    pub provisions: Vec<crate::apply::provisioning::ProvisionItem>,
    pub held: Vec<(String, &'static str)>,
}

/// Why the policy holds an item back, if it does.
fn held_by(policy: &SelfHealPolicy, action: &Action, destructive: bool) -> Option<&'static str> {
    let allowed = match action {
        Action::Onboard => policy
            .onboard
            .then_some(())
            .ok_or("self_heal.onboard is off"),
        Action::Resume { .. } => policy.resume.then_some(()).ok_or("self_heal.resume is off"),
        Action::Rerun { .. } => policy.rerun.then_some(()).ok_or("self_heal.rerun is off"),
        Action::Adopt { .. } => policy.adopt.then_some(()).ok_or("self_heal.adopt is off"),
        Action::Reimage { .. }
        | Action::Decommission
        | Action::Retire
        | Action::Reactivate
        | Action::Prune
        | Action::ResumeDecommission { .. } => policy
            .decommission
            .then_some(())
            .ok_or("self_heal.decommission is off"),
        Action::Provision { .. } => policy
            .provision
            .then_some(())
            .ok_or("self_heal.provision is off"),
        Action::Noop | Action::Blocked { .. } => Ok(()),
    };
    allowed
        .and_then(|()| {
            (!destructive || policy.allow_destructive)
                .then_some(())
                .ok_or("destructive, and self_heal.allow_destructive is off")
        })
        .err()
}

/// The change items of `plan` the policy lets the daemon apply on its own.
pub fn dispatch(plan: &Plan, policy: &SelfHealPolicy) -> Dispatch {
    let mut dispatch = Dispatch::default();
    let mut allowed = plan.clone();
    allowed.items.retain(|item| {
        if !item.action.is_change() {
            return false;
        }
        match held_by(policy, &item.action, item.destructive) {
            Some(why) => {
                dispatch.held.push((item.node.to_string(), why));
                false
            }
            None => true,
        }
    });
    // Destructive items left in `allowed` are ones the policy allows.
    match work_items(&allowed, true) {
        Ok(work) => {
            dispatch.items = work.onboarding;
            dispatch.decommissions = work.decommissions;
            dispatch.provisions = work.provisions;
        }
        Err(PlanRefused::Unresolved { node, .. }) => {
            // The planner resolves every change item; hold the whole plan rather than run part.
            dispatch
                .held
                .push((node.to_string(), "the plan item carries no target"));
        }
        Err(refused) => dispatch.held.push((refused.to_string(), "refused")),
    }
    dispatch
}
