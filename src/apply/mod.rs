//! Executor (DESIGN.md §4, seed 000 §4.4–§4.13): runs plan items as durable per-node stage
//! journals with retries, failure classes, compensation, leases and per-site concurrency.
//!
//! [`work_items`] turns a plan's change items into work items (`from_plan`); [`Executor::run`]
//! takes work items (onboard a node, resume, rerun or adopt its job, or continue a job an
//! operator recovered) and runs each on its own task: the node lease first
//! (`lease`), then the stage loop (`runner`) over the stages of `crate::stages::onboard`.
//! Nodes of one (site, profile) run at most `concurrency.maxParallel` at a time; one node's
//! failure never blocks another. [`Executor::compensate`] carries out an operator's cancel or
//! restart-clean (000 §4.6 "compensation on cancel", §4.9).

mod backoff;
mod compensate;
pub mod decommission;
mod from_plan;
mod lease;
mod maas;
pub mod progress;
pub mod recovery;
mod runner;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

pub use compensate::Compensation;
pub use from_plan::{
    FreshnessError, PlanRefused, PlanWork, destroys, plan_now, verify_plan_file, work_items,
};
pub use lease::onboarding_lease_name;
pub use maas::SiteMaas;
pub use progress::{
    MemoryProgress, NoProgress, Progress, ProgressEvent, ProgressStatus, StderrProgress,
};

use crate::lifecycle::{FailureClass, JobState};
use crate::plan::NodeTarget;
pub use crate::stages::onboard::StageEnv;

/// How the executor paces itself.
#[derive(Debug, Clone)]
pub struct ExecutorOptions {
    /// Between polls of a waiting stage (MAAS status, hardware sync, enrollment).
    pub poll_interval: Duration,
    /// First automatic retry delay; doubles per retry up to `retry_cap` (with jitter).
    pub retry_base: Duration,
    pub retry_cap: Duration,
    /// Node lease lifetime; renewed every third of it. A killed executor's nodes are taken
    /// over this long after it died.
    pub lease_ttl: Duration,
    /// This executor's name in leases (unique per process).
    pub holder: String,
    /// Seed of the retry jitter.
    pub seed: u64,
    /// Recorded on new jobs.
    pub batch_id: Option<String>,
    /// The audit reason of recovery actions the executor takes for work that does not come
    /// from a plan (a plan's items give their own).
    pub reason: Option<String>,
    /// Raised by a shutting-down daemon: nodes stop at the next stage boundary (the journal
    /// holds where they are) and items not started yet are not taken up.
    pub stop: StopSignal,
}

impl Default for ExecutorOptions {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_secs(10),
            retry_base: Duration::from_secs(2),
            retry_cap: Duration::from_secs(60),
            lease_ttl: Duration::from_secs(60),
            holder: default_holder(),
            seed: rand::random(),
            batch_id: None,
            reason: None,
            stop: StopSignal::default(),
        }
    }
}

/// A one-way "stop taking work" flag shared by an executor's node tasks (SIGTERM in the
/// daemon). Stopping between stages loses nothing: every stage boundary is journaled, and a
/// restarted executor continues from there.
#[derive(Debug, Clone)]
pub struct StopSignal {
    flag: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Default for StopSignal {
    fn default() -> Self {
        Self {
            flag: Arc::new(tokio::sync::watch::Sender::new(false)),
        }
    }
}

impl StopSignal {
    /// Ask every holder to stop at its next checkpoint.
    pub fn stop(&self) {
        self.flag.send_replace(true);
    }

    pub fn is_stopped(&self) -> bool {
        *self.flag.borrow()
    }

    /// Resolves once [`StopSignal::stop`] was called.
    pub async fn stopped(&self) {
        let mut rx = self.flag.subscribe();
        let _ = rx.wait_for(|stopped| *stopped).await;
    }

    /// Sleep for `duration`, or less when stopped meanwhile.
    pub async fn sleep(&self, duration: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(duration) => {}
            _ = self.stopped() => {}
        }
    }
}

/// `apply@HOST:PID:RANDOM`: unique per process, readable in `leases`.
pub fn default_holder() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into());
    format!(
        "apply@{host}:{}:{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// What to do for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// Start an onboarding (or continue the node's open, running one).
    Onboard,
    /// Continue an open job; a failed one is resumed (an audited recovery action).
    Resume { job_id: Uuid },
    /// Re-enter a failed job from the top with status-aware adoption.
    Rerun { job_id: Uuid },
    /// Accept a machine that is already deployed; success ends `reconciled`.
    Adopt {
        job_id: Option<Uuid>,
        system_id: String,
    },
    /// Run a job an operator already moved (`metalform onboardings resume|retry|…`).
    Continue { job_id: Uuid },
}

#[derive(Debug, Clone, PartialEq)]
pub struct WorkItem {
    pub target: NodeTarget,
    pub work: Work,
    /// The plan item this work comes from, if any.
    pub plan: Option<FromPlan>,
}

impl WorkItem {
    /// Work that no plan asked for (an operator's recovery action, a test).
    pub fn new(target: NodeTarget, work: Work) -> Self {
        Self {
            target,
            work,
            plan: None,
        }
    }
}

/// The plan item a work item comes from: its plan id goes into the `plan_id` of the jobs it
/// creates, and the plan id and the item's reason into the audit of the recovery actions it
/// takes (resume, rerun, adopt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FromPlan {
    pub plan_id: String,
    pub reason: String,
    /// A destructive onboard item applied with `--allow-destructive`: the machine in use (its
    /// system id at plan time) the onboarding may release to take it over. Recorded in the
    /// job's journal, so a restarted apply keeps the permission and no other machine gets it.
    pub takes_over: Option<String>,
}

impl FromPlan {
    /// `plan sha256:0123456789ab: REASON`, the audit reason.
    pub fn audit_reason(&self) -> String {
        format!(
            "plan {}: {}",
            crate::plan::short_id(&self.plan_id),
            self.reason
        )
    }
}

/// Where one node ended up.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum NodeOutcome {
    /// The job completed (or was reconciled): the node is active.
    Converged { state: JobState },
    /// The job failed; its state says whether an automatic path remains.
    Failed {
        state: JobState,
        class: FailureClass,
        code: String,
        message: String,
    },
    /// Nothing was done (a live executor holds the node, a failed job awaits an operator).
    Left { reason: String },
    /// This executor stopped working on the node (lease taken over, store unusable).
    Aborted { reason: String },
}

impl NodeOutcome {
    /// The node's last progress line: its status and message.
    pub(crate) fn progress(&self) -> (ProgressStatus, String) {
        match self {
            NodeOutcome::Converged { state } => (ProgressStatus::Converged, format!("job {state}")),
            NodeOutcome::Failed {
                state,
                class,
                code,
                message,
            } => (
                ProgressStatus::Failed,
                format!("{state} ({class}, {code}): {message}"),
            ),
            NodeOutcome::Left { reason } | NodeOutcome::Aborted { reason } => {
                (ProgressStatus::Left, reason.clone())
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeResult {
    /// `site/hostname`.
    pub node: String,
    pub job_id: Option<Uuid>,
    #[serde(flatten)]
    pub outcome: NodeOutcome,
}

/// Every node's result, ordered by site and hostname.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ApplyReport {
    pub results: Vec<NodeResult>,
}

impl ApplyReport {
    pub fn converged(&self) -> usize {
        self.count(|o| matches!(o, NodeOutcome::Converged { .. }))
    }

    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, NodeOutcome::Failed { .. }))
    }

    pub fn not_run(&self) -> usize {
        self.count(|o| matches!(o, NodeOutcome::Left { .. } | NodeOutcome::Aborted { .. }))
    }

    fn count(&self, f: impl Fn(&NodeOutcome) -> bool) -> usize {
        self.results.iter().filter(|r| f(&r.outcome)).count()
    }

    /// Every node converged.
    pub fn all_converged(&self) -> bool {
        self.converged() == self.results.len()
    }

    pub fn result(&self, node: &str) -> Option<&NodeResult> {
        self.results.iter().find(|r| r.node == node)
    }
}

/// Runs work items; cheap to clone.
#[derive(Clone)]
pub struct Executor {
    shared: Arc<runner::Shared>,
}

impl Executor {
    pub fn new(env: StageEnv, options: ExecutorOptions, progress: Arc<dyn Progress>) -> Self {
        Self {
            shared: Arc::new(runner::Shared {
                env,
                options,
                progress,
            }),
        }
    }

    pub fn env(&self) -> &StageEnv {
        &self.shared.env
    }

    pub fn options(&self) -> &ExecutorOptions {
        &self.shared.options
    }

    /// Run every item to a resting state: converged, failed, or left alone.
    pub async fn run(&self, items: Vec<WorkItem>) -> ApplyReport {
        self.shared.progress.total(items.len());
        let mut limits: BTreeMap<(String, String), Arc<tokio::sync::Semaphore>> = BTreeMap::new();
        let mut tasks = tokio::task::JoinSet::new();
        for item in items {
            let key = (
                item.target.site_name().to_owned(),
                item.target.profile.name.to_string(),
            );
            let parallel = item.target.profile.concurrency.max_parallel.max(1) as usize;
            let limit = limits
                .entry(key)
                .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(parallel)))
                .clone();
            let shared = self.shared.clone();
            tasks.spawn(async move {
                let _permit = limit.acquire_owned().await;
                if shared.options.stop.is_stopped() {
                    return runner::not_started(&shared, item);
                }
                runner::run_item(&shared, item).await
            });
        }
        let mut results = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(result) => results.push(result),
                Err(err) => tracing::error!(target: "metalform::apply", "node task failed: {err}"),
            }
        }
        results.sort_by(|a, b| a.node.cmp(&b.node));
        self.shared.progress.finish();
        ApplyReport { results }
    }

    /// Carry out a cancel or restart-clean an operator requested (the job is `compensating`).
    pub async fn compensate(
        &self,
        target: &NodeTarget,
        job_id: Uuid,
        kind: Compensation,
    ) -> NodeResult {
        compensate::run(&self.shared, target, job_id, kind).await
    }
}
