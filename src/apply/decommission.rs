//! The decommission executor and its library services (seed 000 §5, §5.7, §5.8; seed 001 §5,
//! §8): runs soft resets, reimages, full decommissions, storage cleanups and retirements as
//! durable stage journals, like the onboarding runner — under the node's lease (the same one
//! onboarding takes, so the two never work on a node at once), one `started` and one closing
//! event per stage attempt, every write fenced, retries bounded per stage, and a restarted
//! executor continuing the open attempt where the journal left it.
//!
//! The services ([`request_soft_reset`], [`request_storage_cleanup`], [`retry_decommission`],
//! [`cancel_decommission`], [`list_decommissions`], [`show_decommission`]) are what the admin
//! API and `metalform decommissions` call; they record and audit, and the executor runs.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use super::backoff;
use super::lease::{LeaseRefusal, NodeLease};
use super::progress::{Progress, ProgressStatus};
use super::runner::{Stop, advance_retrying, done_event, failed_update, open_attempt};
use super::{ExecutorOptions, NodeOutcome, NodeResult};
use crate::lifecycle::{
    DecommissionMode, DecommissionStage, JobKind, JobState, NodeState, OnboardingStage, Owner,
    RecoveryAction,
};
use crate::stages::decommission::{
    DecommissionCheckpoint, DecommissionCtx, DecommissionFacts, DecommissionTarget,
    DecommissionTiming, onboarding_stage, retry_budget, run_stage,
};
use crate::stages::onboard::{NodeMemory, StageEnv};
use crate::stages::{Next, Retry, StageFailure, StageOutcome};
use crate::store::{
    Actor, EventStatus, Fence, Job, JobFilter, JobUpdate, NewDecommission, NodeTransition,
    StageEvent, StageEventRow, Store, StoreError,
};

/// What to run for one node.
#[derive(Debug, Clone, PartialEq)]
pub enum DecommissionJob {
    /// Start this decommission (or continue the node's open one of the same mode).
    New(NewDecommission),
    /// Continue a recorded job (pending, running, or moved by an operator's retry).
    Existing(Uuid),
}

#[derive(Debug, Clone, PartialEq)]
pub struct DecommissionWork {
    pub target: DecommissionTarget,
    pub job: DecommissionJob,
}

/// Runs decommission work; cheap to clone.
#[derive(Clone)]
pub struct DecommissionExecutor {
    inner: Arc<Inner>,
}

struct Inner {
    env: StageEnv,
    options: ExecutorOptions,
    progress: Arc<dyn Progress>,
}

impl DecommissionExecutor {
    pub fn new(env: StageEnv, options: ExecutorOptions, progress: Arc<dyn Progress>) -> Self {
        Self {
            inner: Arc::new(Inner {
                env,
                options,
                progress,
            }),
        }
    }

    pub fn env(&self) -> &StageEnv {
        &self.inner.env
    }

    /// Run every item to a resting state, each node on its own task.
    pub async fn run(&self, items: Vec<DecommissionWork>) -> super::ApplyReport {
        self.inner.progress.total(items.len());
        let mut tasks = tokio::task::JoinSet::new();
        for item in items {
            let inner = self.inner.clone();
            tasks.spawn(async move { run_item(&inner, item).await });
        }
        let mut results = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(result) => results.push(result),
                Err(err) => {
                    tracing::error!(target: "metalform::apply", "decommission task failed: {err}")
                }
            }
        }
        results.sort_by(|a, b| a.node.cmp(&b.node));
        self.inner.progress.finish();
        super::ApplyReport { results }
    }
}

fn report(inner: &Inner, node: &str, stage: &str, status: ProgressStatus, message: &str) {
    super::progress::report(inner.progress.as_ref(), node, stage, status, message);
}

async fn run_item(inner: &Inner, item: DecommissionWork) -> NodeResult {
    let label = item.target.label();
    let lease = match NodeLease::acquire_node(
        &inner.env.store,
        &item.target.site,
        &item.target.hostname,
        &inner.options.holder,
        inner.options.lease_ttl,
    )
    .await
    {
        Ok(lease) => lease,
        Err(refusal) => {
            let reason = refusal.reason();
            report(inner, &label, "-", ProgressStatus::Left, &reason);
            return NodeResult {
                node: label,
                job_id: None,
                outcome: NodeOutcome::Left { reason },
            };
        }
    };
    let mut run = Run {
        inner,
        target: &item.target,
        fence: lease.fence(),
        lease: &lease,
        memory: NodeMemory::default(),
        rng: backoff::node_rng(inner.options.seed, &label),
    };
    let (job_id, outcome) = match run.take_up(&item.job).await {
        Ok(job) => {
            let id = job.id;
            match run.run_stages(id).await {
                Ok(outcome) | Err(Stop::Result(outcome)) => (Some(id), outcome),
            }
        }
        Err(Stop::Result(outcome)) => (None, outcome),
    };
    lease.release().await;
    let (status, message) = outcome.progress();
    report(inner, &label, "-", status, &message);
    NodeResult {
        node: label,
        job_id,
        outcome,
    }
}

struct Run<'a> {
    inner: &'a Inner,
    target: &'a DecommissionTarget,
    lease: &'a NodeLease,
    fence: Fence,
    memory: NodeMemory,
    rng: ChaCha8Rng,
}

/// The journal write of a mid-stage checkpoint (facts only), fenced by the lease.
struct Journal {
    store: Store,
    job: Uuid,
    fence: Fence,
}

impl DecommissionCheckpoint for Journal {
    fn checkpoint<'a>(
        &'a self,
        facts: &'a DecommissionFacts,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut update = JobUpdate::new(JobState::Running);
            update.stage_details = Some(facts.to_details());
            update.maas_system_id = facts.base.system_id.clone();
            update.fence = Some(self.fence.clone());
            self.store
                .advance_job(JobKind::Decommission, self.job, &update)
                .await
                .map(|_| ())
        })
    }
}

impl Run<'_> {
    fn store(&self) -> &Store {
        &self.inner.env.store
    }

    fn report(&self, stage: &str, status: ProgressStatus, message: &str) {
        report(self.inner, &self.target.label(), stage, status, message);
    }

    async fn take_up(&mut self, work: &DecommissionJob) -> Result<Job, Stop> {
        let left = |reason: String| Stop::Result(NodeOutcome::Left { reason });
        let job = match work {
            DecommissionJob::Existing(id) => self.store().job(JobKind::Decommission, *id).await?,
            DecommissionJob::New(new) => {
                match open_decommission(self.store(), new.node_id).await? {
                    Some(job) if job.mode() == Some(new.mode) => job,
                    Some(job) => {
                        return Err(left(format!(
                            "a {} decommission ({}) of the node is {}: it ends first",
                            job.mode().map(|m| m.as_str()).unwrap_or("?"),
                            job.id,
                            job.state
                        )));
                    }
                    None => {
                        let job = self.store().create_decommission(new).await?;
                        self.report(
                            "-",
                            ProgressStatus::Begin,
                            &format!("{} {} created", new.mode, job.id),
                        );
                        job
                    }
                }
            }
        };
        if job.state == JobState::Compensating {
            compensate(self.store(), &self.inner.env.actor, &job, &self.fence).await?;
            return Err(Stop::Result(NodeOutcome::Left {
                reason: format!("decommission {} cancelled", job.id),
            }));
        }
        match job.state {
            JobState::Pending | JobState::Running => Ok(job),
            other => Err(left(format!(
                "decommission {} is {other} at {}: recover it with `metalform decommissions`",
                job.id, job.stage
            ))),
        }
    }

    async fn write(
        &self,
        job: &Job,
        mut update: JobUpdate,
        facts: &DecommissionFacts,
    ) -> Result<Job, StoreError> {
        update.fence = Some(self.fence.clone());
        update.stage_details = Some(facts.to_details());
        if update.observed.is_none() {
            update.observed = self.memory.observed.clone();
        }
        if update.maas_system_id.is_none() {
            update.maas_system_id = facts.base.system_id.clone();
        }
        advance_retrying(self.store(), JobKind::Decommission, job.id, &update).await
    }

    async fn run_stages(&mut self, id: Uuid) -> Result<NodeOutcome, Stop> {
        let poll = self.inner.options.poll_interval;
        let mut waiting: Option<(String, i64)> = None;
        loop {
            // Refreshed each pass: the lease heartbeat may have renewed it.
            self.fence = self.lease.fence();
            let job = self.store().job(JobKind::Decommission, id).await?;
            if !matches!(job.state, JobState::Pending | JobState::Running) {
                return Ok(NodeOutcome::Left {
                    reason: format!(
                        "decommission {id} is {} (changed outside this run)",
                        job.state
                    ),
                });
            }
            let mode = job.mode().unwrap_or(DecommissionMode::FullDecommission);
            let stage: DecommissionStage = job.stage.parse().map_err(|e| {
                Stop::Result(NodeOutcome::Aborted {
                    reason: format!("journal of {id}: {e}"),
                })
            })?;
            let mut facts = DecommissionFacts::from_details(&job.stage_details);
            let job = self.begin_attempt(&job, stage, &mut facts).await?;
            let journal = Journal {
                store: self.store().clone(),
                job: job.id,
                fence: self.fence.clone(),
            };
            let outcome = {
                let mut ctx = DecommissionCtx {
                    env: &self.inner.env,
                    target: self.target,
                    job: &job,
                    facts: &mut facts,
                    memory: &mut self.memory,
                    journal: &journal,
                    fence: self.fence.clone(),
                    timing: DecommissionTiming::for_target(self.target),
                    now: self.inner.env.clock.now(),
                };
                run_stage(stage, &mut ctx).await
            };
            let outcome = match outcome {
                // A jump out of the mode's stages (the onboarding's deploy-failure branch) is
                // a failed redeploy here.
                StageOutcome::Done(done) if jump_target(mode, done.next).is_err() => {
                    StageOutcome::Failed(
                        StageFailure::new(
                            crate::lifecycle::FailureClass::DeployCloudInitFailure,
                            "redeploy_failed",
                            format!("the reimage's redeploy failed: {}", done.message),
                        )
                        .details(done.details)
                        .never_retry()
                        .state(JobState::FailedManualIntervention),
                    )
                }
                other => other,
            };
            match outcome {
                StageOutcome::Wait(wait) => {
                    let key = (job.stage.clone(), job.attempt);
                    if waiting.as_ref() != Some(&key) {
                        self.report(stage.as_str(), ProgressStatus::Waiting, &wait.reason);
                        waiting = Some(key);
                    }
                    // A wait may have learnt something worth keeping (a release confirmed).
                    let mut update = JobUpdate::new(JobState::Running);
                    update.stage_details = Some(facts.to_details());
                    if Some(&update.stage_details.clone().unwrap_or_default())
                        != Some(&job.stage_details)
                    {
                        self.write(&job, update, &facts).await?;
                    }
                    tokio::time::sleep(wait.poll.unwrap_or(poll)).await;
                }
                StageOutcome::Done(done) => {
                    let (event, progress) = done_event(stage.as_str(), job.attempt, &done);
                    self.report(stage.as_str(), progress, &done.message);
                    facts.base.clock = None;
                    facts.base.retries = 0;
                    let next = match done.next {
                        Next::Complete => None,
                        Next::Normal => mode.next_stage(stage),
                        jump @ Next::Jump(_) => jump_target(mode, jump).ok().flatten(),
                    };
                    match next {
                        Some(next) => {
                            let mut update = JobUpdate::new(JobState::Running);
                            update.stage = Some(next.as_str().into());
                            update.attempt = Some(0);
                            update.event = Some(event);
                            self.write(&job, update, &facts).await?;
                        }
                        None => return self.complete(&job, mode, event, &facts).await,
                    }
                }
                StageOutcome::Failed(failure) => {
                    let budget = retry_budget(stage, failure.class);
                    if failure.retry == Retry::Budget && facts.base.retries < budget {
                        facts.base.retries += 1;
                        if let Some(clock) = facts.base.clock.as_mut() {
                            clock.open = false;
                        }
                        let delay = backoff::delay(
                            facts.base.retries,
                            self.inner.options.retry_base,
                            self.inner.options.retry_cap,
                            &mut self.rng,
                        );
                        let message = format!(
                            "{} ({}); retry {} of {budget} in {:.1}s",
                            failure.message,
                            failure.class,
                            facts.base.retries,
                            delay.as_secs_f64()
                        );
                        let mut update = JobUpdate::new(JobState::Running);
                        update.event = Some(StageEvent {
                            stage: stage.as_str().into(),
                            attempt: job.attempt,
                            status: EventStatus::Failed,
                            message: Some(message.clone()),
                            details: json!({"class": failure.class, "code": failure.code,
                                "details": failure.details}),
                        });
                        self.write(&job, update, &facts).await?;
                        self.report(stage.as_str(), ProgressStatus::Retrying, &message);
                        tokio::time::sleep(delay).await;
                        continue;
                    }
                    return self.fail(&job, stage, failure, &facts).await;
                }
            }
        }
    }

    async fn fail(
        &mut self,
        job: &Job,
        stage: DecommissionStage,
        failure: StageFailure,
        facts: &DecommissionFacts,
    ) -> Result<NodeOutcome, Stop> {
        let (update, line) = failed_update(stage.as_str(), job.attempt, &failure);
        self.write(job, update, facts).await?;
        self.report(stage.as_str(), ProgressStatus::Failed, &line);
        Ok(failure.into())
    }

    /// Open a stage attempt, unless one is open (a restarted executor continues it).
    async fn begin_attempt(
        &mut self,
        job: &Job,
        stage: DecommissionStage,
        facts: &mut DecommissionFacts,
    ) -> Result<Job, Stop> {
        let now = self.inner.env.clock.now();
        let Some(opened) = open_attempt(job, &mut facts.base, now) else {
            return Ok(job.clone());
        };
        let updated = self.write(job, opened.update, facts).await?;
        self.report(stage.as_str(), ProgressStatus::Started, &opened.note);
        Ok(updated)
    }

    /// The last stage is done: the job completes and the node reaches the mode's end state in
    /// the same transaction (001 §5.3): back in service (soft reset, reimage, storage cleanup),
    /// deleted (full decommission), retired (retire: already there).
    async fn complete(
        &mut self,
        job: &Job,
        mode: DecommissionMode,
        event: StageEvent,
        facts: &DecommissionFacts,
    ) -> Result<NodeOutcome, Stop> {
        let state = JobState::on_success(job.adopted);
        let node = self.store().node(self.target.node_id).await?;
        let to = match mode {
            DecommissionMode::FullDecommission => {
                Some((NodeState::Deleted, Owner::DecommissionWorkflow))
            }
            DecommissionMode::Retire => None,
            // 001 §3.3 gives quarantined -> active to "explicit operator recovery": the
            // operator's request (API call or manifest change) is what runs this job.
            _ if node.status != NodeState::Active => Some((NodeState::Active, Owner::Operator)),
            _ => None,
        };
        let mut update = JobUpdate::new(state);
        update.event = Some(event);
        if let Some((to, by)) = to {
            let mut transition = NodeTransition::new(to, by, self.inner.env.actor.clone());
            transition.reason = Some(format!("{mode} {} {state}", job.id));
            transition.fence = Some(self.fence.clone());
            update.node_transition = Some(transition);
        }
        self.write(job, update, facts).await?;
        Ok(NodeOutcome::Converged { state })
    }
}

/// Where a `Next` leads in `mode`: `Err` when it jumps out of the mode's stages.
fn jump_target(mode: DecommissionMode, next: Next) -> Result<Option<DecommissionStage>, ()> {
    match next {
        Next::Jump(to) => {
            let stage = decommission_stage(to).filter(|s| mode.stages().contains(s));
            stage.map(Some).ok_or(())
        }
        _ => Ok(None),
    }
}

fn decommission_stage(stage: OnboardingStage) -> Option<DecommissionStage> {
    DecommissionStage::ALL
        .iter()
        .copied()
        .find(|d| onboarding_stage(*d) == Some(stage))
}

/// The node's open decommission, if any.
pub async fn open_decommission(store: &Store, node: Uuid) -> Result<Option<Job>, StoreError> {
    Ok(store
        .list_jobs(
            JobKind::Decommission,
            &JobFilter {
                node_id: Some(node),
                open_only: true,
                ..JobFilter::default()
            },
        )
        .await?
        .into_iter()
        .next())
}

/// Carry out a cancel (the job is `compensating`): close the job's open agent tasks, give the
/// node back when nothing destructive happened (quarantined → active; draining → offline), and
/// end `cancelled`. MAAS is left as it is: a release that reached MAAS is not undone.
async fn compensate(
    store: &Store,
    actor: &Actor,
    job: &Job,
    fence: &Fence,
) -> Result<(), StoreError> {
    let facts = DecommissionFacts::from_details(&job.stage_details);
    let touched_maas =
        !facts.decommission.releases.is_empty() || facts.decommission.power_off.is_some();
    let mut update = JobUpdate::new(JobState::Cancelled);
    update.fence = Some(fence.clone());
    if let Some(node_id) = job.node_id {
        store
            .close_open_tasks(node_id, "the decommission was cancelled")
            .await?;
        let node = store.node(node_id).await?;
        let back = match node.status {
            NodeState::Quarantined if !touched_maas => Some((NodeState::Active, Owner::Operator)),
            NodeState::Draining => Some((NodeState::Offline, Owner::DecommissionWorkflow)),
            _ => None,
        };
        if let Some((to, by)) = back {
            let mut transition = NodeTransition::new(to, by, actor.clone());
            transition.reason = Some(format!("decommission {} cancelled", job.id));
            transition.fence = Some(fence.clone());
            update.node_transition = Some(transition);
        }
    }
    update.event = Some(StageEvent {
        stage: job.stage.clone(),
        attempt: job.attempt,
        status: EventStatus::Compensated,
        message: Some(if touched_maas {
            "cancelled; MAAS left as it is (a release that reached MAAS is not undone)".into()
        } else {
            "cancelled before MAAS was touched; the node is back in service".into()
        }),
        details: json!({}),
    });
    store
        .advance_job(JobKind::Decommission, job.id, &update)
        .await?;
    Ok(())
}

// ----- library services (the admin API and `metalform decommissions` call these) ----------

/// Why a service refused.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{kind} `{id}` not found")]
    NotFound { kind: &'static str, id: String },
    /// The request conflicts with the node's or the job's state.
    #[error("{message}")]
    Conflict {
        reason: ConflictReason,
        message: String,
    },
    /// The manifests own this change: edit them instead.
    #[error("{message}")]
    OwnedByGit { file: String, message: String },
    #[error(transparent)]
    Store(StoreError),
}

/// The typed reason of a conflict (the API maps each to a 409 body).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConflictReason {
    /// The node already has an open decommission.
    DecommissionOpen,
    /// The node is not in a state this action works from.
    NodeState,
    /// The job is not in a state this action works from.
    JobState,
    /// The node is protected.
    Protected,
}

impl From<StoreError> for ServiceError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound { kind, id } => ServiceError::NotFound { kind, id },
            StoreError::JobOpen { .. } => ServiceError::Conflict {
                reason: ConflictReason::DecommissionOpen,
                message: err.to_string(),
            },
            StoreError::Provision { .. } => ServiceError::Conflict {
                reason: ConflictReason::Protected,
                message: err.to_string(),
            },
            StoreError::Recovery { .. } => ServiceError::Conflict {
                reason: ConflictReason::JobState,
                message: err.to_string(),
            },
            StoreError::JobState { .. } | StoreError::Transition { .. } => ServiceError::Conflict {
                reason: ConflictReason::NodeState,
                message: err.to_string(),
            },
            other => ServiceError::Store(other),
        }
    }
}

async fn request_runtime(
    store: &Store,
    node: Uuid,
    mode: DecommissionMode,
    storage_cleanup: Option<&str>,
    actor: &Actor,
    reason: Option<&str>,
) -> Result<Job, ServiceError> {
    if let Some(scope) = storage_cleanup
        && !matches!(scope, "none" | "local" | "weka" | "all")
    {
        return Err(ServiceError::Conflict {
            reason: ConflictReason::JobState,
            message: format!("storage_cleanup `{scope}`: expected none, local, weka or all"),
        });
    }
    let job = store
        .create_decommission(&NewDecommission {
            node_id: node,
            mode,
            erase: None,
            storage_cleanup: storage_cleanup.map(str::to_owned),
            reason: reason.map(str::to_owned),
            requested_by: Some(actor.name.clone()),
            plan_id: None,
        })
        .await?;
    store
        .audit(&crate::store::AuditEntry {
            actor: actor.clone(),
            reason: reason.map(str::to_owned),
            action: format!("decommission.request_{mode}"),
            subject_kind: "decommission".into(),
            subject_id: job.id.to_string(),
            prior_state: None,
            expected_target: Some(JobState::Pending.as_str().into()),
            correlation_ids: json!({"job_id": job.id, "node_id": node}),
            details: json!({"mode": mode, "storage_cleanup": storage_cleanup}),
        })
        .await?;
    Ok(job)
}

/// Soft reset (000 §5.2, tenant turnover), requested through the API: recorded `pending` and
/// audited; an executor (the daemon) runs it.
pub async fn request_soft_reset(
    store: &Store,
    node: Uuid,
    storage_cleanup: Option<&str>,
    actor: &Actor,
    reason: Option<&str>,
) -> Result<Job, ServiceError> {
    request_runtime(
        store,
        node,
        DecommissionMode::SoftReset,
        storage_cleanup,
        actor,
        reason,
    )
    .await
}

/// Storage-only cleanup (000 §5.5): cleanup + validation; `scope` local | weka | all.
pub async fn request_storage_cleanup(
    store: &Store,
    node: Uuid,
    scope: &str,
    actor: &Actor,
    reason: Option<&str>,
) -> Result<Job, ServiceError> {
    request_runtime(
        store,
        node,
        DecommissionMode::StorageCleanup,
        Some(scope),
        actor,
        reason,
    )
    .await
}

/// Retry a failed decommission from its failed stage (000 §5.7 `…/retry`): audited, the job
/// `running` at the next attempt; the executor then continues it.
pub async fn retry_decommission(
    store: &Store,
    job: Uuid,
    actor: &Actor,
    reason: Option<&str>,
) -> Result<Job, ServiceError> {
    Ok(store
        .recover_job(
            JobKind::Decommission,
            job,
            RecoveryAction::RetryStage,
            actor,
            reason,
        )
        .await?)
}

/// Cancel a decommission (000 §5.7 `…/cancel`, best effort): audited, then compensated under
/// the node lease (see [`compensate`]); ends `cancelled`. A live executor holding the node is
/// waited for up to `lease_ttl` × 1.5; it stops at its next step since the job moved.
pub async fn cancel_decommission(
    store: &Store,
    job: Uuid,
    actor: &Actor,
    reason: Option<&str>,
    lease_ttl: Duration,
) -> Result<Job, ServiceError> {
    let moved = store
        .recover_job(
            JobKind::Decommission,
            job,
            RecoveryAction::Cancel,
            actor,
            reason,
        )
        .await?;
    let holder = format!("cancel:{}", super::default_holder());
    let lease = NodeLease::acquire_node(store, &moved.site, &moved.hostname, &holder, lease_ttl)
    .await
    .map_err(|refusal| match refusal {
        LeaseRefusal::Busy { holder, until } => ServiceError::Conflict {
            reason: ConflictReason::JobState,
            message: format!(
                "decommission {job} is compensating, but executor {holder} holds the node until {until}; it finishes the cancel"
            ),
        },
        LeaseRefusal::Store(err) => ServiceError::Store(err),
    })?;
    let result = compensate(store, actor, &moved, &lease.fence()).await;
    lease.release().await;
    result?;
    Ok(store.job(JobKind::Decommission, job).await?)
}

/// Decommissions, newest first (000 §5.7 `GET …/decommissions?node_id=…&status=…`).
pub async fn list_decommissions(
    store: &Store,
    filter: &JobFilter,
) -> Result<Vec<Job>, ServiceError> {
    Ok(store.list_jobs(JobKind::Decommission, filter).await?)
}

/// One decommission with its stage events (000 §5.7 `GET …/decommissions/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecommissionView {
    pub job: Job,
    pub events: Vec<StageEventRow>,
    /// Follow-up work recorded by the job (000 §5.8).
    pub follow_ups: Vec<String>,
}

pub async fn show_decommission(store: &Store, job: Uuid) -> Result<DecommissionView, ServiceError> {
    let job = store.job(JobKind::Decommission, job).await?;
    let events = store.job_events(JobKind::Decommission, job.id, 500).await?;
    let follow_ups = DecommissionFacts::from_details(&job.stage_details)
        .decommission
        .follow_ups;
    Ok(DecommissionView {
        job,
        events,
        follow_ups,
    })
}
