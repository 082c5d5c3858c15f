//! Plan items → executor work items, under the daemon's self-heal policy (DESIGN.md §4, §6).
//!
//! TEMPORARY adapter: `crate::apply::work_items(&Plan, allow_destructive)` (issue 5) replaces
//! the conversion once merged; the policy filter stays here.

use crate::apply::{NodeTarget, Work, WorkItem};
use crate::plan::{Action, Plan, PlanItem};

use super::config::SelfHealPolicy;

/// What the policy let through, and what it held back (with why).
#[derive(Debug, Default)]
pub struct Dispatch {
    pub items: Vec<WorkItem>,
    pub held: Vec<(String, &'static str)>,
}

fn target_of(target: &crate::plan::NodeTarget) -> NodeTarget {
    NodeTarget {
        site: target.site.clone(),
        profile: target.profile.clone(),
        node: target.node.clone(),
        power_credentials: target.power_credentials.clone(),
        system_id: target.system_id.clone(),
        node_id: target.node_id,
        job_id: target.job_id,
    }
}

fn work_of(item: &PlanItem) -> Option<Work> {
    Some(match &item.action {
        Action::Onboard => Work::Onboard,
        Action::Resume { job_id, .. } => Work::Resume { job_id: *job_id },
        Action::Rerun { job_id } => Work::Rerun { job_id: *job_id },
        Action::Adopt { job_id, system_id } => Work::Adopt {
            job_id: *job_id,
            system_id: system_id.clone(),
        },
        Action::Noop | Action::Blocked { .. } => return None,
    })
}

/// The change items of `plan` the policy lets the daemon apply on its own.
pub fn dispatch(plan: &Plan, policy: &SelfHealPolicy) -> Dispatch {
    let mut dispatch = Dispatch::default();
    for item in plan.changes() {
        let label = item.node.to_string();
        let allowed = match &item.action {
            Action::Onboard => policy
                .onboard
                .then_some(())
                .ok_or("self_heal.onboard is off"),
            Action::Resume { .. } => policy.resume.then_some(()).ok_or("self_heal.resume is off"),
            Action::Rerun { .. } => policy.rerun.then_some(()).ok_or("self_heal.rerun is off"),
            Action::Adopt { .. } => policy.adopt.then_some(()).ok_or("self_heal.adopt is off"),
            Action::Noop | Action::Blocked { .. } => continue,
        };
        let allowed = allowed.and_then(|()| {
            (!item.destructive || policy.allow_destructive)
                .then_some(())
                .ok_or("destructive, and self_heal.allow_destructive is off")
        });
        if let Err(why) = allowed {
            dispatch.held.push((label, why));
            continue;
        }
        match (work_of(item), &item.target) {
            (Some(work), Some(target)) => dispatch.items.push(WorkItem {
                target: target_of(target),
                work,
            }),
            _ => dispatch
                .held
                .push((label, "the plan item carries no target")),
        }
    }
    dispatch
}
