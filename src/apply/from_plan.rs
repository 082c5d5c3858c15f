//! From a plan to executor work (DESIGN.md §4 "the executor runs each plan item as a durable
//! stage journal"; seed 000 §4.9, §4.13, §5): observe and plan now ([`plan_now`]), check that
//! a saved plan is trusted and still describes the world ([`verify_plan_file`]: its signature,
//! its freshness, and that planning now gives the same plan — which is then what runs), turn
//! the plan's change items into the work of both executors ([`work_items`]: onboardings, and
//! reimages, decommissions and retirements), refusing destructive ones unless the operator
//! allowed them, and run it all ([`Executor::run_plan`]). `metalform apply`, `metalform demo`
//! and the daemon share these.

use std::sync::Arc;

use crate::lifecycle::DecommissionMode;
use crate::model::{Fleet, NodeId};
use crate::observe::{self, MaasClients, ObserveError, SiteFilter, Snapshot};
use crate::plan::{
    self, Action, NodeTarget, Plan, PlanItem, PlanOptions, StalePlan, UntrustedPlan,
};
use crate::secrets::SecretStore;
use crate::stages::decommission::DecommissionTarget;
use crate::store::{NewDecommission, Store, StoreError};

use super::decommission::{DecommissionExecutor, DecommissionJob, DecommissionWork};
use super::progress::{Progress, ProgressEvent};
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
    /// from a fleet that could not resolve a node's site or profile has none), or a
    /// decommission item names no inventory node.
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

/// What a plan asks the executors to do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanWork {
    /// Onboard, resume, rerun, adopt: run by [`Executor::run`].
    pub onboarding: Vec<WorkItem>,
    /// Reimage, decommission, retire, or continue an open decommission: run by
    /// [`DecommissionExecutor::run`].
    pub decommissions: Vec<DecommissionWork>,
    /// Redfish provisionings: queued for the provisioning workers
    /// ([`super::provisioning::queue`]).
    pub provisions: Vec<super::provisioning::ProvisionItem>,
}

impl PlanWork {
    pub fn len(&self) -> usize {
        self.onboarding.len() + self.decommissions.len() + self.provisions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The only difference between a plan file and the plan made now is how long the items that
/// wait for a maintenance window or a failed job's next try still wait ("opens in 3h12m",
/// "next try in 4m" read at another moment): the same items, actions and summaries, and every
/// differing item waits.
fn only_window_clock_moved(file: &Plan, now: &Plan) -> bool {
    file.sites == now.sites
        && file.items.len() == now.items.len()
        && file.items.iter().zip(&now.items).all(|(f, n)| {
            f == n
                || (f.node == n.node
                    && f.action == n.action
                    && f.destructive == n.destructive
                    && matches!(
                        &f.action,
                        Action::Blocked {
                            cause: plan::BlockCause::MaintenanceWindow { .. }
                                | plan::BlockCause::RetryBackoff { .. },
                        }
                    ))
        })
}

/// Whether running `item` destroys something. Every new reimage, decommission and retirement
/// does, whatever the item's flag says. Where it depends on what is observed — an onboarding
/// of a machine running a workload metalform did not deploy, the continuation of an open
/// decommission (not while it compensates) — the flag decides, and it comes from a plan made
/// against the current state (`verify_plan_file` makes sure of that for plan files).
pub fn destroys(item: &PlanItem) -> bool {
    item.destructive
        || match &item.action {
            Action::Reimage { .. } | Action::Decommission | Action::Retire | Action::Prune => true,
            // Cleaning a retired machine destroys only when it runs something (the flag).
            Action::Reactivate
            | Action::ResumeDecommission { .. }
            | Action::Onboard
            | Action::Resume { .. }
            | Action::Rerun { .. }
            | Action::Adopt { .. }
            // The flag: set when the server was provisioned before (its disk is rewritten).
            | Action::Provision { .. }
            | Action::Noop
            | Action::Blocked { .. } => false,
        }
}

/// The executors' work for a plan: one item per change item, in plan order, each carrying the
/// plan's id (recorded on the jobs it creates) and its reason (the audit reason of the recovery
/// actions it takes, the request reason of a decommission). Noop and blocked items are nothing
/// to do. Destructive change items ([`destroys`]) — onboarding a machine in use, every reimage,
/// decommission and retirement — are refused, all of them named, unless `allow_destructive`.
pub fn work_items(plan: &Plan, allow_destructive: bool) -> Result<PlanWork, PlanRefused> {
    let destructive: Vec<(NodeId, String)> = plan
        .changes()
        .filter(|item| destroys(item))
        .map(|item| (item.node.clone(), item.reason.clone()))
        .collect();
    if !destructive.is_empty() && !allow_destructive {
        return Err(PlanRefused::Destructive {
            plan_id: plan.id.clone(),
            items: destructive,
        });
    }
    let mut work = PlanWork::default();
    for item in &plan.items {
        let onboarding = match &item.action {
            Action::Onboard => Work::Onboard,
            Action::Resume { job_id, .. } => Work::Resume { job_id: *job_id },
            Action::Rerun { job_id } => Work::Rerun { job_id: *job_id },
            Action::Adopt { job_id, system_id } => Work::Adopt {
                job_id: *job_id,
                system_id: system_id.clone(),
            },
            Action::Reimage { .. }
            | Action::Decommission
            | Action::Retire
            | Action::Reactivate
            | Action::Prune
            | Action::ResumeDecommission { .. } => {
                work.decommissions.push(decommission_work(plan, item)?);
                continue;
            }
            Action::Provision { generation, .. } => {
                work.provisions.push(super::provisioning::ProvisionItem {
                    target: target_of(plan, item)?,
                    generation: *generation,
                    plan_id: plan.id.clone(),
                });
                continue;
            }
            Action::Noop | Action::Blocked { .. } => continue,
        };
        let target = target_of(plan, item)?;
        // Only destructive onboardings take a machine over, and only reach here when allowed.
        let takes_over = (item.destructive && onboarding == Work::Onboard)
            .then(|| target.system_id.clone())
            .flatten();
        work.onboarding.push(WorkItem {
            target,
            work: onboarding,
            plan: Some(FromPlan {
                plan_id: plan.id.clone(),
                reason: item.reason.clone(),
                takes_over,
            }),
        });
    }
    Ok(work)
}

/// The item's resolved target, which every change carries.
fn target_of(plan: &Plan, item: &PlanItem) -> Result<NodeTarget, PlanRefused> {
    item.target
        .as_deref()
        .cloned()
        .ok_or_else(|| unresolved(plan, item))
}

fn unresolved(plan: &Plan, item: &PlanItem) -> PlanRefused {
    PlanRefused::Unresolved {
        plan_id: plan.id.clone(),
        node: item.node.clone(),
        action: item.action.name(),
    }
}

/// A decommission item's work: a new job of the item's mode, or the open job it continues.
fn decommission_work(plan: &Plan, item: &PlanItem) -> Result<DecommissionWork, PlanRefused> {
    let target = target_of(plan, item)?;
    let node_id = target.node_id.ok_or_else(|| unresolved(plan, item))?;
    let new = |mode: DecommissionMode| {
        DecommissionJob::New(NewDecommission {
            node_id,
            mode,
            // The stages take the node's own erase mode (manifest, else its profile's).
            erase: None,
            storage_cleanup: None,
            reason: Some(item.reason.clone()),
            requested_by: None,
            plan_id: Some(plan.id.clone()),
        })
    };
    let job = match &item.action {
        Action::Reimage { .. } => new(DecommissionMode::Reimage),
        Action::Decommission => new(DecommissionMode::FullDecommission),
        Action::Retire => new(DecommissionMode::Retire),
        Action::Reactivate => new(DecommissionMode::Reactivate),
        Action::Prune => new(DecommissionMode::FullDecommission),
        Action::ResumeDecommission { job_id, .. } => DecommissionJob::Existing(*job_id),
        _ => unreachable!("only decommission actions reach here"),
    };
    Ok(DecommissionWork {
        target: DecommissionTarget {
            node_id,
            site: item.node.site.to_string(),
            hostname: item.node.hostname.to_string(),
            resolved: Some(target),
        },
        job,
    })
}

/// Progress shared by the two executors of one run: they report into it, and the run sets the
/// total and finishes it once.
struct Shared(Arc<dyn Progress>);

impl Progress for Shared {
    fn report(&self, event: ProgressEvent) {
        self.0.report(event);
    }
}

impl super::Executor {
    /// Run a plan: [`work_items`], then the onboarding and the decommission work side by side
    /// (each node under its own lease). Refused (nothing
    /// run) when the plan has destructive items and `allow_destructive` is false. The report
    /// holds every node of both, ordered by node.
    pub async fn run_plan(
        &self,
        plan: &Plan,
        allow_destructive: bool,
    ) -> Result<ApplyReport, PlanRefused> {
        let work = work_items(plan, allow_destructive)?;
        Ok(self.run_work(work).await)
    }

    /// Run what [`work_items`] made of a plan: onboardings by this executor, decommissions by
    /// a [`DecommissionExecutor`] over the same stage environment, options and progress.
    pub async fn run_work(&self, work: PlanWork) -> ApplyReport {
        let progress = self.progress().clone();
        progress.total(work.len());
        let shared: Arc<dyn Progress> = Arc::new(Shared(progress.clone()));
        let onboarding = Executor::new(self.env().clone(), self.options().clone(), shared.clone());
        let decommission =
            DecommissionExecutor::new(self.env().clone(), self.options().clone(), shared);
        let actor = self.env().actor.name.clone();
        let decommissions = work
            .decommissions
            .into_iter()
            .map(|mut item| {
                if let DecommissionJob::New(new) = &mut item.job {
                    new.requested_by.get_or_insert_with(|| actor.clone());
                }
                item
            })
            .collect();
        let (mut report, other) = tokio::join!(
            onboarding.run(work.onboarding),
            decommission.run(decommissions)
        );
        let queued = super::provisioning::queue(
            &self.env().store,
            &crate::stages::provision::NoObserver,
            &work.provisions,
            self.options().maintenance_iso_url.as_deref(),
            &actor,
        )
        .await;
        progress.finish();
        report.results.extend(other.results);
        report.results.extend(queued.results);
        report.results.sort_by(|a, b| a.node.cmp(&b.node));
        report
    }
}

/// Observe the selected sites now (one MAAS list per site, the inventory and the jobs), each
/// site's MAAS waited for with `patience`, and plan them. The snapshot comes back too: its
/// unreadable sites say why, with a hint.
pub async fn plan_now(
    fleet: &Fleet,
    sites: &SiteFilter,
    store: &Store,
    secrets: &dyn SecretStore,
    clients: &MaasClients,
    patience: &observe::Patience,
) -> Result<(Snapshot, Plan), ObserveError> {
    let snapshot = observe::observe_within(fleet, sites, store, secrets, clients, patience).await?;
    let plan = plan::plan(
        fleet,
        &snapshot,
        &PlanOptions {
            sites: sites.clone(),
            ..PlanOptions::default()
        },
    );
    Ok((snapshot, plan))
}

/// Why a saved plan cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum FreshnessError {
    /// It was not written by `metalform plan` against this store, or it says something that
    /// planning now does not.
    #[error(transparent)]
    Untrusted(#[from] UntrustedPlan),
    /// It no longer describes the world; it says what moved.
    #[error(transparent)]
    Stale(#[from] StalePlan),
    #[error(transparent)]
    Observe(#[from] ObserveError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The plan to run for a plan file, or why none is. In order, each refusal before anything
/// is changed: the file's signature under the store's key ([`plan::verify`]); its freshness
/// (fleet revision, each planned site's MAAS, the inventory, the jobs, the parent plan and
/// the store serial, [`plan::check_fresh`]); and planning again from `fleet` and the
/// observation just made, which must give the same plan ([`plan::differences`]). The plan
/// returned is that new plan: what to connect to, which secrets to read and what is
/// destructive come from the fleet and the store now, never from the file.
pub async fn verify_plan_file(
    plan: &Plan,
    fleet: &Fleet,
    store: &Store,
    secrets: &dyn SecretStore,
    clients: &MaasClients,
) -> Result<Plan, FreshnessError> {
    plan::verify(plan, &store.plan_signing_key().await?)?;
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
    // Planned again as the file was: with the windows it overrode ignored again.
    let options = PlanOptions {
        sites,
        ignore_windows: plan.items.iter().any(|i| i.window_ignored.is_some()),
        ..PlanOptions::default()
    };
    let now = plan::plan(fleet, &snapshot, &options);
    let differences = plan::differences(plan, &now);
    if !differences.is_empty() && !only_window_clock_moved(plan, &now) {
        return Err(UntrustedPlan::Differs {
            plan_id: plan.id.clone(),
            differences,
        }
        .into());
    }
    Ok(now)
}
