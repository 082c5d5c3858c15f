//! From a plan to executor work (DESIGN.md §4 "the executor runs each plan item as a durable
//! stage journal"; seed 000 §4.9, §4.13): observe and plan now ([`plan_now`]), check that a
//! saved plan still describes the world ([`check_plan_fresh`]), and turn the plan's change
//! items into work items ([`work_items`]), refusing destructive ones unless the operator allowed
//! them. `metalform apply`, `metalform demo` and the daemon share these.

use crate::model::{Fleet, NodeId};
use crate::observe::{self, MaasClients, ObserveError, SiteFilter, Snapshot};
use crate::plan::{self, Action, Plan, PlanOptions, StalePlan};
use crate::secrets::SecretStore;
use crate::store::{Store, StoreError};

use super::{ApplyReport, Executor, FromPlan, Work, WorkItem};

/// Why a plan is not run. Nothing has been changed when this is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanRefused {
    /// The plan has destructive change items and the operator did not allow them.
    #[error(
        "the plan {} has {} destructive item(s): {}",
        plan::short_id(plan_id),
        items.len(),
        describe(items)
    )]
    Destructive {
        plan_id: String,
        /// Each item's node and reason.
        items: Vec<(NodeId, String)>,
    },
    /// A change item carries no target (the planner resolves every change's target; a plan
    /// from a fleet that could not resolve a node's site or profile has none).
    #[error(
        "the plan {} would {} {node}, but carries no target for it (its site or profile was not resolved)",
        plan::short_id(plan_id),
        action
    )]
    Unresolved {
        plan_id: String,
        node: NodeId,
        action: &'static str,
    },
}

fn describe(items: &[(NodeId, String)]) -> String {
    items
        .iter()
        .map(|(node, reason)| format!("{node} ({reason})"))
        .collect::<Vec<_>>()
        .join("; ")
}

impl PlanRefused {
    /// What to do.
    pub fn hint(&self) -> &'static str {
        match self {
            PlanRefused::Destructive { .. } => {
                "review each destructive item; to go ahead, apply again with --allow-destructive"
            }
            PlanRefused::Unresolved { .. } => {
                "validate the fleet (`metalform validate`) and make a new plan"
            }
        }
    }
}

/// The executor's work for a plan: one item per change item (onboard, resume, rerun, adopt),
/// in plan order, each carrying the plan's id (recorded on the jobs it creates) and its
/// reason (the audit reason of the recovery actions it takes). Noop and blocked items are
/// nothing to do. Destructive change items are refused — all of them named — unless
/// `allow_destructive`.
pub fn work_items(plan: &Plan, allow_destructive: bool) -> Result<Vec<WorkItem>, PlanRefused> {
    let destructive: Vec<(NodeId, String)> = plan
        .changes()
        .filter(|item| item.destructive)
        .map(|item| (item.node.clone(), item.reason.clone()))
        .collect();
    if !destructive.is_empty() && !allow_destructive {
        return Err(PlanRefused::Destructive {
            plan_id: plan.id.clone(),
            items: destructive,
        });
    }
    let mut items = Vec::new();
    for item in &plan.items {
        let work = match &item.action {
            Action::Onboard => Work::Onboard,
            Action::Resume { job_id, .. } => Work::Resume { job_id: *job_id },
            Action::Rerun { job_id } => Work::Rerun { job_id: *job_id },
            Action::Adopt { job_id, system_id } => Work::Adopt {
                job_id: *job_id,
                system_id: system_id.clone(),
            },
            Action::Noop | Action::Blocked { .. } => continue,
        };
        let target = item.target.clone().ok_or_else(|| PlanRefused::Unresolved {
            plan_id: plan.id.clone(),
            node: item.node.clone(),
            action: item.action.name(),
        })?;
        items.push(WorkItem {
            target,
            work,
            plan: Some(FromPlan {
                plan_id: plan.id.clone(),
                reason: item.reason.clone(),
            }),
        });
    }
    Ok(items)
}

impl Executor {
    /// Run a plan: [`work_items`], then [`Executor::run`]. Refused (nothing run) when the plan
    /// has destructive items and `allow_destructive` is false.
    pub async fn run_plan(
        &self,
        plan: &Plan,
        allow_destructive: bool,
    ) -> Result<ApplyReport, PlanRefused> {
        let items = work_items(plan, allow_destructive)?;
        Ok(self.run(items).await)
    }
}

/// Observe the selected sites now (one MAAS list per site, the inventory and the jobs) and
/// plan them. The snapshot comes back too: its unreadable sites say why, with a hint.
pub async fn plan_now(
    fleet: &Fleet,
    sites: &SiteFilter,
    store: &Store,
    secrets: &dyn SecretStore,
    clients: &MaasClients,
) -> Result<(Snapshot, Plan), ObserveError> {
    let snapshot = observe::observe(fleet, sites, store, secrets, clients).await?;
    let plan = plan::plan(
        fleet,
        &snapshot,
        &PlanOptions {
            sites: sites.clone(),
        },
    );
    Ok((snapshot, plan))
}

/// Why a saved plan cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum FreshnessError {
    /// It no longer describes the world; it says what moved.
    #[error(transparent)]
    Stale(#[from] StalePlan),
    #[error(transparent)]
    Observe(#[from] ObserveError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Is a saved plan still what planning now would start from? `fleet` is the fleet read now
/// the way the plan's was (a git commit, or the files on disk); the plan's sites are observed
/// again (those the fleet still has) and the store's serial read after that.
pub async fn check_plan_fresh(
    plan: &Plan,
    fleet: &Fleet,
    store: &Store,
    secrets: &dyn SecretStore,
    clients: &MaasClients,
) -> Result<(), FreshnessError> {
    // A site the fleet no longer has is not observed; `check_fresh` reports it as planned but
    // not observed (and the fleet revision as moved).
    let sites = SiteFilter::Only(
        plan.site_names()
            .filter(|site| fleet.sites.contains_key(*site))
            .cloned()
            .collect(),
    );
    let snapshot = observe::observe(fleet, &sites, store, secrets, clients).await?;
    let serial = store.serial().await?;
    plan::check_fresh(plan, &plan::revision_id(&fleet.revision), &snapshot, serial)?;
    Ok(())
}
