//! The job engine (DESIGN.md §4; seed 000 §4.3–§4.13; seed 003 "Workers and Concurrency"): one
//! executor loop for every kind of job. A kind ([`Kind`]) is its stage table and rules — how
//! work becomes a job, what each stage does, where a finished stage leads, how often a failure
//! class is retried (000 §4.6), what completion does to the node, how a cancel or a
//! restart-clean is compensated. Everything else is here, once:
//!
//! - **concurrency**: each work item on its own task, at most the profile's
//!   `concurrency.maxParallel` per (site, profile) in the stages that need a slot (a kind
//!   whose first stages only prepare admits as many nodes again ahead of the slots once every
//!   slot is taken, so a freed slot goes to a node ready to use it; a daemon's slots are also
//!   counted in the store across replicas, [`SharedSlots`]); one node's failure never blocks
//!   another;
//! - **lease and fencing**: the node lease first (`lease`: one per node, whatever the kind, so
//!   two jobs never work on a node at once), every journal write fenced by it;
//! - **journal**: one `started` event when a stage attempt begins and one `succeeded`,
//!   `skipped` or `failed` event when it ends, each in the same transaction as the job row
//!   (stage, attempt, state, facts, last observed state). Between the two a stage may wait
//!   (a poll writes only what it learnt) or checkpoint its facts (an intent before a call). A
//!   restarted executor finds the attempt open and continues it; timeouts run from the
//!   attempt's start as the journal recorded it;
//! - **retry** with capped exponential backoff and jitter (`backoff`), within the kind's
//!   budget, then the failure class's final state (000 §4.7, §4.8);
//! - **stop and resume**: a stopping executor rests each job at its next stage boundary; the
//!   journal says where, and the next executor continues from there;
//! - **compensation** under the same lease ([`Engine::compensate`], and a `compensating` job
//!   found on take-up);
//! - **progress events** (`progress`), which the daemon also counts as metrics.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use uuid::Uuid;

use super::backoff;
use super::lease::{LeaseKeeper, NodeLease};
use super::outcome::{ApplyReport, NodeOutcome, NodeResult};
use super::progress::{self, Progress, ProgressStatus};
use super::{ExecutorOptions, StopSignal};
use crate::lifecycle::{FailureClass, JobKind, JobState, NodeState, Owner, StageName};
use crate::stages::{
    Checkpoint, JournalFacts, NodeMemory, Retry, SlotStanding, StageClock, StageDone, StageEnv,
    StageFailure, StageOutcome,
};
use crate::store::{
    EventStatus, Fence, Job, JobFailure, JobUpdate, LeaseTarget, NodeTransition, RetryWait,
    StageEvent, Store, StoreError,
};

/// Which recovery action is being compensated (000 §4.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compensation {
    /// Stop and compensate; the job ends `cancelled`.
    Cancel,
    /// Compensate known progress and start again from the top (`pending`).
    RestartClean,
}

/// A job kind: its stage table and rules. Implementations are data over the shared loop; see
/// docs/architecture.md "How to add a job kind".
pub trait Kind: Send + Sync + Sized + 'static {
    /// The store's kind: its tables, labels and audit subjects.
    const KIND: JobKind;
    /// The kind's stage table.
    type Stage: StageName;
    /// What the kind's journal keeps between stages.
    type Facts: JournalFacts;
    /// One node's work: the node, what the manifests say of it, the job to run.
    type Item: Send + Sync + 'static;

    /// The item's node as (site, hostname): its lease and its progress label.
    fn node(item: &Self::Item) -> (&str, &str);

    /// The lease the item's work runs under: by default its node's, so two jobs never work on
    /// a node at once, whatever their kind.
    fn lease(item: &Self::Item) -> LeaseTarget {
        let (site, hostname) = Self::node(item);
        LeaseTarget::Named(super::lease::onboarding_lease_name(site, hostname))
    }

    /// How long to wait for a live holder of that lease to let it expire before leaving the
    /// item: a node lease is waited for (a killed executor's node is taken over); a kind
    /// whose workers poll for work may say zero and pick the job up at a later poll.
    fn lease_wait(ttl: Duration) -> Duration {
        ttl + ttl / 2
    }

    /// The work item that continues a recorded job (maybe moved by an operator). `Err`: why
    /// it cannot run.
    fn continue_job(asked: Continuing<'_>) -> Result<Self::Item, String>;

    /// The job to report for an item nothing was taken up for.
    fn job_of(_item: &Self::Item) -> Option<Uuid> {
        None
    }

    /// The item's concurrency group (site, profile) and its limit, if it has a profile.
    fn limit(item: &Self::Item) -> Option<((String, String), usize)>;

    /// Whether nodes of a group may run the stages [`Kind::needs_slot`] exempts while every
    /// slot is taken: once they all are, as many nodes as the limit are admitted ahead of the
    /// slots. `false` (the default): no more nodes run than the limit.
    const PREPARES_AHEAD: bool = false;

    /// Whether `stage` runs only under one of its group's slots, given what the node's run
    /// last saw. Once taken, a slot is kept until the node's run ends; a stage may also ask
    /// for one itself ([`NodeMemory::boot_allowed`]). The default: every stage.
    fn needs_slot(_stage: Self::Stage, _memory: &NodeMemory) -> bool {
        true
    }

    /// Find or create the job the item names and move it where it can run (`pending` or
    /// `running`); anything else ends the node's run with a reason.
    fn take_up<'a>(run: &'a mut Run<'_, Self>) -> BoxFuture<'a, Result<Job, Stop>>;

    /// Before each stage pass, on the facts just read from the journal.
    fn prepare(_run: &Run<'_, Self>, _facts: &mut Self::Facts) {}

    /// One pass of `stage`.
    fn run_stage<'a>(stage: Self::Stage, pass: Pass<'a, Self>) -> BoxFuture<'a, StageOutcome>;

    /// Where a finished `stage` of `job` leads (`done.next`): the next stage, `None` to
    /// complete, or a failure when it names a stage this job does not have.
    fn next(
        job: &Job,
        stage: Self::Stage,
        done: &StageDone,
    ) -> Result<Option<Self::Stage>, StageFailure>;

    /// Whether `stage` is the first of `job` (an operator's rerun starts over from it).
    fn is_first(job: &Job, stage: Self::Stage) -> bool;

    /// The node spec a `failed_retryable` end of the item's job happened under
    /// ([`crate::plan::NodeTarget::spec_hash`]), for a kind whose failed jobs the reconciler
    /// retries on its own: the job then backs off until its next try (or a change of that
    /// spec). `None` (the default): the kind's failed jobs wait for an operator.
    fn retry_spec(_item: &Self::Item) -> Option<String> {
        None
    }

    /// Automatic retries of a failure class at a stage (000 §4.6); `None`: until the stage's
    /// own timeout ends them.
    fn retry_budget(stage: Self::Stage, class: FailureClass) -> Option<u32>;

    /// Where a stage failure with no retry left leads instead of failing the job. A kind whose
    /// failures still owe cleanup (seed 003: any → failed → cleanup → complete) records the
    /// failure its own way and names its cleanup stage; the engine journals the failed attempt
    /// and continues there. `None` (the default): the job fails.
    fn on_final_failure<'a>(
        _run: &'a Run<'_, Self>,
        _job: &'a Job,
        _stage: Self::Stage,
        _failure: &'a StageFailure,
    ) -> BoxFuture<'a, Result<Option<Self::Stage>, StoreError>> {
        Box::pin(async { Ok(None) })
    }

    /// The node's coarse move that completes the job, written with the job's last journal
    /// write (001 §3.3).
    fn completion<'a>(
        run: &'a Run<'_, Self>,
        job: &'a Job,
    ) -> BoxFuture<'a, Result<Option<(NodeState, Owner)>, StoreError>>;

    /// After the completing write.
    fn completed<'a>(
        _run: &'a Run<'_, Self>,
        _job: &'a Job,
        _facts: &'a Self::Facts,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// Compensate a `compensating` job under the node lease (000 §4.6 "compensation on
    /// cancel", §4.9 restart_clean): it ends `cancelled`, `pending` (restart-clean) or
    /// `failed_manual_intervention` (the compensation itself failed).
    fn compensate<'a>(
        run: &'a Run<'_, Self>,
        job: &'a Job,
        how: Compensation,
    ) -> BoxFuture<'a, Result<NodeOutcome, StoreError>>;
}

/// A recorded job to continue, and its node as the manifests resolve it, if they still do.
pub struct Continuing<'a> {
    pub job: &'a Job,
    pub target: Option<crate::plan::NodeTarget>,
    /// The job may be `compensating`, its compensation stopped: finish that first.
    pub resume: bool,
}

/// Stage passes (and job take-ups) running at once across an executor's nodes. A wave of
/// thousands of nodes (`maxParallel` 500 per site over 20 sites) puts every node in flight at
/// once; without this bound each one's requests and journal writes ran at the same time: ten
/// thousand MAAS connections open (gigabytes of buffers in both processes) and the store's
/// pool so contended that lease renewals timed out. A node that waits (a poll, a retry back-off)
/// holds no pass, so this bounds work on the CPU, never how many nodes are in flight.
const ACTIVE_PASSES: usize = 64;

/// How long a waiting node goes on from the job as it last read it before reading it again:
/// an operator's move (a cancel, a retry) is seen within this, or at the next poll when polls
/// are slower (the default poll interval is 10 s).
const JOB_REREAD: Duration = Duration::from_secs(2);

/// What every node's run shares.
pub(super) struct Shared {
    pub env: StageEnv,
    pub options: ExecutorOptions,
    pub progress: Arc<dyn Progress>,
    /// Permits of the [`ACTIVE_PASSES`] running at once.
    passes: Arc<tokio::sync::Semaphore>,
    /// The node leases held, renewed together.
    leases: LeaseKeeper,
}

impl Shared {
    /// One of the [`ACTIVE_PASSES`] for a pass of a `kind` job (never closed, so always granted
    /// in turn). Provisioning jobs are not bounded: their passes wait on BMCs inside, and one
    /// server's latency must never hold up another's job (seed 003).
    async fn pass(&self, kind: JobKind) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if kind == JobKind::Provisioning {
            return None;
        }
        self.passes.clone().acquire_owned().await.ok()
    }

    fn report(&self, node: &str, stage: &str, status: ProgressStatus, message: &str) {
        progress::report(self.progress.as_ref(), node, stage, status, message);
    }
}

/// The concurrency group of a node of the manifests — its (site, profile) — and the profile's
/// `concurrency.maxParallel`.
pub fn profile_limit(target: &crate::plan::NodeTarget) -> ((String, String), usize) {
    let profile = &target.profile;
    let group = (target.site_name().to_owned(), profile.name.to_string());
    (group, profile.concurrency.max_parallel as usize)
}

/// Runs one kind's work items; cheap to clone. `Executor` and `DecommissionExecutor` are this
/// engine over the onboarding and the decommission kinds.
pub struct Engine<K> {
    shared: Arc<Shared>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Engine<K> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: Kind> Engine<K> {
    pub fn new(env: StageEnv, options: ExecutorOptions, progress: Arc<dyn Progress>) -> Self {
        Self {
            shared: Arc::new(Shared {
                leases: LeaseKeeper::new(&env.store, options.lease_ttl),
                env,
                options,
                progress,
                passes: Arc::new(tokio::sync::Semaphore::new(ACTIVE_PASSES)),
            }),
            kind: PhantomData,
        }
    }

    /// The engine of another kind over the same environment, options and progress.
    pub fn of<J: Kind>(&self) -> Engine<J> {
        Engine {
            shared: self.shared.clone(),
            kind: PhantomData,
        }
    }

    pub fn env(&self) -> &StageEnv {
        &self.shared.env
    }

    pub fn options(&self) -> &ExecutorOptions {
        &self.shared.options
    }

    pub(super) fn progress(&self) -> &Arc<dyn Progress> {
        &self.shared.progress
    }

    /// Run every item to a resting state: converged, failed, or left alone. The report holds
    /// one result per item, ordered by node.
    pub async fn run(&self, items: Vec<K::Item>) -> ApplyReport {
        self.shared.progress.total(items.len());
        let mut limits: BTreeMap<(String, String), GroupLimit> = BTreeMap::new();
        let mut tasks = tokio::task::JoinSet::new();
        for item in items {
            let limit = K::limit(&item).map(|(group, parallel)| {
                let limit = limits
                    .entry(group.clone())
                    .or_insert_with(|| GroupLimit::new(parallel, K::PREPARES_AHEAD))
                    .clone();
                (group, limit)
            });
            let shared = self.shared.clone();
            tasks.spawn(async move {
                let _admitted = match &limit {
                    Some((_, limit)) => limit.admit.clone().acquire_owned().await.ok(),
                    None => None,
                };
                if shared.options.stop.is_stopped() {
                    return not_started::<K>(&shared, &item);
                }
                run_item::<K>(&shared, &item, limit).await
            });
        }
        let mut results = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(result) => results.push(result),
                Err(err) => tracing::error!(
                    target: "metalform::apply",
                    kind = K::KIND.as_str(),
                    "node task failed: {err}"
                ),
            }
        }
        results.sort_by(|a, b| a.node.cmp(&b.node));
        self.shared.progress.finish();
        ApplyReport { results }
    }

    /// Carry out a cancel or restart-clean an operator requested (the job is `compensating`)
    /// under the node lease; a live executor holding the node is left to finish it.
    pub async fn compensate(&self, item: K::Item, job_id: Uuid, how: Compensation) -> NodeResult {
        let shared = &*self.shared;
        let label = label::<K>(&item);
        let outcome = match acquire::<K>(shared, &item).await {
            Err(_) => NodeOutcome::Left {
                reason: "another executor holds the node; the job stays compensating and is \
                         compensated when that executor sees it"
                    .into(),
            },
            Ok(lease) => {
                let run = Run::<K>::new(shared, &item, &lease, None);
                let outcome = run.compensate_job(job_id, how).await;
                lease.release().await;
                outcome.unwrap_or_else(|err| NodeOutcome::Aborted {
                    reason: err.to_string(),
                })
            }
        };
        let (status, message) = outcome.progress();
        shared.report(&label, "-", status, &message);
        NodeResult {
            node: label,
            job_id: Some(job_id),
            outcome,
        }
    }
}

/// One (site, profile) group's limit in an executor: `maxParallel` slots, and the nodes
/// admitted to run: the slots' holders, and when the kind prepares ahead, as many again once
/// every slot is taken. Until then the first nodes prepare alone, so the first deploys are
/// not slowed by the nodes that follow them.
#[derive(Clone)]
struct GroupLimit {
    parallel: usize,
    admit: Arc<tokio::sync::Semaphore>,
    slots: Arc<tokio::sync::Semaphore>,
    /// The nodes ahead are admitted (or never will be: the kind does not prepare ahead).
    ahead: Arc<std::sync::atomic::AtomicBool>,
}

impl GroupLimit {
    fn new(parallel: usize, prepares_ahead: bool) -> Self {
        let parallel = parallel.max(1);
        Self {
            parallel,
            admit: Arc::new(tokio::sync::Semaphore::new(parallel)),
            slots: Arc::new(tokio::sync::Semaphore::new(parallel)),
            ahead: Arc::new(std::sync::atomic::AtomicBool::new(!prepares_ahead)),
        }
    }

    async fn take_slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let held = self.slots.clone().acquire_owned().await.ok();
        if self.slots.available_permits() == 0
            && !self.ahead.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            self.admit.add_permits(self.parallel);
        }
        held
    }
}

/// How long a stopping executor waits for a shared slot to deploy a payload it rendered.
const STOPPING_SHARED_SLOT_WAIT: Duration = Duration::from_secs(10);

/// Slots counted beyond one executor: the daemon's, in the store, shared by every replica.
/// The executor asks for one of these after its own, at the same point of a node's run.
pub trait SharedSlots: Send + Sync {
    /// Wait for a slot of `group` (`site/profile`) for the node `label` (`site/hostname`), at
    /// most `parallel` held at once. `None`: the node is no longer this process's to run (its
    /// site went to another replica while it waited).
    fn take<'a>(
        &'a self,
        group: &'a str,
        parallel: usize,
        label: &'a str,
    ) -> BoxFuture<'a, Option<Box<dyn HeldSlot>>>;
}

/// A slot of [`SharedSlots`], held until released.
pub trait HeldSlot: Send + Sync {
    fn release(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// The executor's [`SharedSlots`], if any (`ExecutorOptions::shared_slots`).
#[derive(Clone, Default)]
pub struct SharedSlotSource(pub Option<Arc<dyn SharedSlots>>);

impl std::fmt::Debug for SharedSlotSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "shared" } else { "none" })
    }
}

/// The limit of a node's group (none for an item without one) and the slot this run holds,
/// from the first stage that needs it to the run's end.
struct Slot {
    group: Option<((String, String), GroupLimit)>,
    held: Option<tokio::sync::OwnedSemaphorePermit>,
    shared: Option<Box<dyn HeldSlot>>,
}

/// Why a node's run stopped early.
pub enum Stop {
    /// The node ended (converged, failed, left alone, aborted).
    Result(NodeOutcome),
}

impl Stop {
    pub fn left(reason: impl Into<String>) -> Self {
        Stop::Result(NodeOutcome::Left {
            reason: reason.into(),
        })
    }
}

impl From<StoreError> for Stop {
    fn from(err: StoreError) -> Self {
        Stop::Result(match err {
            StoreError::LeaseLost { .. } => NodeOutcome::Aborted {
                reason: "another executor took the node's lease over; it continues the job".into(),
            },
            other => NodeOutcome::Aborted {
                reason: format!("state store: {other}"),
            },
        })
    }
}

impl From<StageFailure> for NodeOutcome {
    fn from(failure: StageFailure) -> Self {
        NodeOutcome::Failed {
            state: failure.final_state(),
            class: failure.class,
            code: failure.code,
            message: failure.message,
        }
    }
}

fn label<K: Kind>(item: &K::Item) -> String {
    let (site, hostname) = K::node(item);
    format!("{site}/{hostname}")
}

async fn acquire<K: Kind>(
    shared: &Shared,
    item: &K::Item,
) -> Result<NodeLease, super::lease::LeaseRefusal> {
    let ttl = shared.options.lease_ttl;
    shared
        .leases
        .acquire(&K::lease(item), &shared.options.holder, K::lease_wait(ttl))
        .await
}

/// An item a stopping executor did not take up.
fn not_started<K: Kind>(shared: &Shared, item: &K::Item) -> NodeResult {
    let label = label::<K>(item);
    let reason = "the executor is stopping: not started".to_owned();
    shared.report(&label, "-", ProgressStatus::Left, &reason);
    NodeResult {
        node: label,
        job_id: K::job_of(item),
        outcome: NodeOutcome::Aborted { reason },
    }
}

/// Take up one work item under the node lease and drive it to a resting state.
///
/// Each node in flight is one task that lives as long as the node's run, and a task's future
/// is as large as the largest state it can be in. The store calls and the lease's are boxed
/// below, so that size is what a waiting node keeps (its job, facts and sleep), not the
/// largest store call's: unboxed, every node of a 10,000-node wave held ~25 KB for calls
/// it was not making.
async fn run_item<K: Kind>(
    shared: &Shared,
    item: &K::Item,
    limit: Option<((String, String), GroupLimit)>,
) -> NodeResult {
    let label = label::<K>(item);
    let lease = match Box::pin(acquire::<K>(shared, item)).await {
        Ok(lease) => lease,
        Err(refusal) => {
            let reason = refusal.reason();
            shared.report(&label, "-", ProgressStatus::Left, &reason);
            return NodeResult {
                node: label,
                job_id: K::job_of(item),
                outcome: NodeOutcome::Left { reason },
            };
        }
    };
    let mut run = Run::<K>::new(shared, item, &lease, limit);
    let taken = {
        let _pass = shared.pass(K::KIND).await;
        K::take_up(&mut run).await
    };
    let (job_id, outcome) = match taken {
        Ok(job) => {
            let id = job.id;
            match run.run_stages(id).await {
                Ok(outcome) | Err(Stop::Result(outcome)) => (Some(id), outcome),
            }
        }
        Err(Stop::Result(outcome)) => (K::job_of(item), outcome),
    };
    if let Some(slot) = run.slot.shared.take() {
        Box::pin(slot.release()).await;
    }
    drop(run);
    Box::pin(lease.release()).await;
    let (status, message) = outcome.progress();
    progress::report(shared.progress.as_ref(), &label, "-", status, &message);
    NodeResult {
        node: label,
        job_id,
        outcome,
    }
}

/// One node being worked on, under its lease.
pub struct Run<'a, K: Kind> {
    shared: &'a Shared,
    /// The work item.
    pub item: &'a K::Item,
    lease: &'a NodeLease,
    label: String,
    memory: NodeMemory,
    rng: ChaCha8Rng,
    slot: Slot,
}

/// One pass of one stage: what the kind's stage functions get.
pub struct Pass<'a, K: Kind> {
    pub env: &'a StageEnv,
    pub item: &'a K::Item,
    pub job: &'a Job,
    pub facts: &'a mut K::Facts,
    pub memory: &'a mut NodeMemory,
    /// The mid-stage checkpoint: the same fenced journal write, facts only.
    pub journal: &'a dyn Checkpoint<K::Facts>,
    /// The node lease's fence (node transitions made by stages carry it).
    pub fence: Fence,
    pub now: DateTime<Utc>,
}

impl<'a, K: Kind> Run<'a, K> {
    fn new(
        shared: &'a Shared,
        item: &'a K::Item,
        lease: &'a NodeLease,
        limit: Option<((String, String), GroupLimit)>,
    ) -> Self {
        let label = label::<K>(item);
        Self {
            shared,
            item,
            lease,
            rng: backoff::node_rng(shared.options.seed, &label),
            label,
            memory: NodeMemory {
                slot: if limit.is_some() {
                    SlotStanding::Without
                } else {
                    SlotStanding::Held
                },
                ..NodeMemory::default()
            },
            slot: Slot {
                group: limit,
                held: None,
                shared: None,
            },
        }
    }

    /// Whether `stage` must wait for a slot first.
    fn waits_for_slot(&self, stage: K::Stage) -> bool {
        self.memory.slot != SlotStanding::Held && K::needs_slot(stage, &self.memory)
    }

    /// Wait for one of the group's slots (no pass held), then for one of the shared ones when
    /// the executor counts its slots with other processes; kept until the run ends. `Err`: the
    /// node is no longer this process's to run.
    async fn take_slot(&mut self) -> Result<(), NodeOutcome> {
        if let Some(((site, profile), limit)) = &self.slot.group {
            self.slot.held = limit.take_slot().await;
            if let Some(shared) = &self.shared.options.shared_slots.0 {
                let group = format!("{site}/{profile}");
                match shared.take(&group, limit.parallel, &self.label).await {
                    Some(slot) => self.slot.shared = Some(slot),
                    None => {
                        self.slot.held = None;
                        return Err(NodeOutcome::Left {
                            reason: "its site went to another replica while it waited for a \
                                     free place under the profile's maxParallel"
                                .into(),
                        });
                    }
                }
            }
        }
        self.memory.slot = SlotStanding::Held;
        Ok(())
    }

    pub fn env(&self) -> &StageEnv {
        &self.shared.env
    }

    pub fn store(&self) -> &Store {
        &self.shared.env.store
    }

    pub fn options(&self) -> &ExecutorOptions {
        &self.shared.options
    }

    /// The node lease's fence, as renewed by its heartbeat.
    pub fn fence(&self) -> Fence {
        self.lease.fence()
    }

    /// What one node's run keeps in memory only.
    pub fn memory(&self) -> &NodeMemory {
        &self.memory
    }

    /// One progress line of this node (`stage` is `-` for whole-node events).
    pub fn report(&self, stage: &str, status: ProgressStatus, message: &str) {
        self.shared.report(&self.label, stage, status, message);
    }

    /// A journal write under the lease, carrying the facts and what they learnt (node,
    /// machine, last observed state). Transient store errors are retried a few times.
    pub async fn write(
        &self,
        job: &Job,
        mut update: JobUpdate,
        facts: &K::Facts,
    ) -> Result<Job, StoreError> {
        update.fence = Some(self.fence());
        update.stage_details = Some(facts.to_details());
        if update.observed.is_none() {
            update.observed = self.memory.observed.clone();
        }
        if job.node_id.is_none() {
            update.node_id = facts.node_id();
        }
        if update.maas_system_id.is_none() {
            update.maas_system_id = facts.system_id();
        }
        if update.state == JobState::FailedRetryable
            && update.retry.is_none()
            && let Some(spec) = K::retry_spec(self.item)
        {
            update.retry = Some(self.retry_wait(job, spec));
        }
        advance_retrying(self.store(), K::KIND, job.id, &update).await
    }

    /// [`Run::write`] of a job the stage loop keeps for its next pass, with the facts beside
    /// it: the row's copy of them (its `stage_details`) is not kept twice.
    async fn write_kept(
        &self,
        job: &Job,
        update: JobUpdate,
        facts: &K::Facts,
    ) -> Result<Job, StoreError> {
        let mut written = self.write(job, update, facts).await?;
        written.stage_details = serde_json::Value::Null;
        Ok(written)
    }

    /// When the reconciler may try a job failing retryably now again: after the failures in a
    /// row under the same node spec (this one included), by the executor's failed-job backoff,
    /// with jitter drawn from the node and the count (the same wait on every run).
    fn retry_wait(&self, job: &Job, spec: String) -> RetryWait {
        let failures = if job.retry_spec.as_deref() == Some(spec.as_str()) {
            job.retry_failures.saturating_add(1).max(1)
        } else {
            1
        };
        let count = u32::try_from(failures).unwrap_or(u32::MAX);
        let delay = self.shared.options.failed_retry_wait(&self.label, count);
        let now = self.shared.env.clock.now();
        RetryWait {
            failures,
            next_try_at: now + chrono::TimeDelta::from_std(delay).unwrap_or(chrono::TimeDelta::MAX),
            spec,
        }
    }

    /// Complete an interrupted compensation (the one the job's last recovery action asked
    /// for). A cancel ends the node's run; a restart-clean leaves the job pending, to run.
    pub async fn finish_compensation(&self, job: &Job) -> Result<Job, Stop> {
        let Some(how) = requested(self.store(), K::KIND, job.id).await? else {
            return Err(Stop::left(format!(
                "{} {} is compensating, but no cancel or restart-clean was recorded",
                K::KIND,
                job.id
            )));
        };
        self.report(
            &job.stage,
            ProgressStatus::Begin,
            &format!(
                "finishing the interrupted {how:?} of {} {}",
                K::KIND,
                job.id
            ),
        );
        let outcome = K::compensate(self, job, how).await?;
        match how {
            Compensation::Cancel => Err(Stop::Result(outcome)),
            Compensation::RestartClean => Ok(self.store().job(K::KIND, job.id).await?),
        }
    }

    async fn compensate_job(
        &self,
        job_id: Uuid,
        how: Compensation,
    ) -> Result<NodeOutcome, StoreError> {
        let job = self.store().job(K::KIND, job_id).await?;
        if job.state != JobState::Compensating {
            return Ok(NodeOutcome::Left {
                reason: format!("{} {job_id} is {}, not compensating", K::KIND, job.state),
            });
        }
        K::compensate(self, &job, how).await
    }

    /// The stage loop: one pass at a time until the job completes, fails, or is taken away.
    /// Each pass runs in a box of its own: between passes (a node waiting, most of its
    /// time) the node's task holds only what [`Between`] keeps and its sleep.
    async fn run_stages(&mut self, id: Uuid) -> Result<NodeOutcome, Stop> {
        let stop: StopSignal = self.shared.options.stop.clone();
        let mut between = Box::new(Between {
            waiting_reported: None,
            deploy_grace: true,
            known: None,
        });
        loop {
            // The permit is taken before the pass's box: the nodes queued for one hold
            // nothing of a pass yet.
            let permit = self.shared.pass(K::KIND).await;
            let after = Box::pin(self.stage_pass(id, &mut between)).await;
            drop(permit);
            let after = match after? {
                // A stage asked for a slot before booting the machine.
                AfterPass::Sleep(..) if self.memory.slot == SlotStanding::Wanted => AfterPass::Slot,
                other => other,
            };
            match after {
                AfterPass::Again => {}
                AfterPass::Sleep(sleep, None) => stop.sleep(sleep).await,
                // Woken by the node's agent (an enrollment this process recorded), else at
                // the stage's fallback poll.
                AfterPass::Sleep(sleep, Some(watch)) => tokio::select! {
                    () = stop.sleep(sleep) => {}
                    () = watch.wait(sleep) => {}
                },
                AfterPass::End(outcome) => return Ok(outcome),
                // Waited for with no pass held. A rendered payload is deployed once its place
                // frees, even by a stopping executor: the slots' holders end at their next
                // pass, so it comes soon. Slots shared with other replicas may not free that
                // soon, so for one of those a stopping executor waits a little only; the next
                // executor renders the payload again. Any other node of a stopping executor
                // ends at its next pass instead.
                AfterPass::Slot => {
                    let shared = self.shared.options.shared_slots.0.is_some();
                    let grace = match self.memory.user_data {
                        Some(_) if shared => STOPPING_SHARED_SLOT_WAIT,
                        Some(_) => Duration::MAX,
                        None => Duration::ZERO,
                    };
                    let taken = tokio::select! {
                        taken = self.take_slot() => taken,
                        () = async {
                            stop.stopped().await;
                            tokio::time::sleep(grace).await;
                        } => Ok(()),
                    };
                    if let Err(left) = taken {
                        return Ok(left);
                    }
                }
            }
        }
    }

    /// One pass of the job's current stage, with its journal writes, under one of the
    /// executor's pass permits (given back before the loop sleeps).
    async fn stage_pass(
        &mut self,
        id: Uuid,
        between: &mut Between<K::Facts>,
    ) -> Result<AfterPass, Stop> {
        let poll = self.shared.options.poll_interval;
        let stop: StopSignal = self.shared.options.stop.clone();
        let Between {
            waiting_reported,
            deploy_grace,
            known,
        } = between;
        let (job, read_at, stored) = match known.take() {
            Some(known) if known.1.elapsed() < JOB_REREAD => known,
            _ => {
                let mut job = self.store().job(K::KIND, id).await?;
                let facts = K::Facts::from_details(&job.stage_details);
                // The facts are what the run keeps of the journal document.
                job.stage_details = serde_json::Value::Null;
                (job, std::time::Instant::now(), facts)
            }
        };
        // A rendered payload lives in memory only: stopping before it is deployed would
        // make the next executor render again (a new token), so one more stage pass
        // deploys it first.
        if stop.is_stopped()
            && (self.memory.user_data.is_none() || !std::mem::replace(deploy_grace, false))
        {
            // A stage boundary: the journal says where the job is; the next executor
            // continues the open attempt from there.
            return Ok(AfterPass::End(NodeOutcome::Aborted {
                reason: format!(
                    "the executor is stopping: {} {id} rests at {} (attempt {})",
                    K::KIND,
                    job.stage,
                    job.attempt
                ),
            }));
        }
        if !matches!(job.state, JobState::Pending | JobState::Running) {
            // Moved by someone else (an operator's cancel, another executor's failure).
            return Ok(AfterPass::End(NodeOutcome::Left {
                reason: format!(
                    "{} {id} is {} (changed outside this run)",
                    K::KIND,
                    job.state
                ),
            }));
        }
        let stage: K::Stage = job.stage.parse().map_err(|e| {
            Stop::Result(NodeOutcome::Aborted {
                reason: format!("journal of {id}: {e}"),
            })
        })?;
        if self.waits_for_slot(stage) {
            // This pass runs no stage: a stopping executor's one more pass, to deploy a
            // rendered payload, is still to come.
            if stop.is_stopped() {
                *deploy_grace = true;
            }
            *known = Some((job, read_at, stored));
            return Ok(AfterPass::Slot);
        }
        let mut facts = stored.clone();
        K::prepare(self, &mut facts);
        let (job, stored) = match self.begin_attempt(&job, stage, &mut facts).await? {
            Some(opened) => (opened, facts.clone()),
            None => (job, stored),
        };
        let outcome = {
            let journal = JournalCheckpoint::<K> {
                store: self.store().clone(),
                job: job.clone(),
                fence: self.fence(),
                kind: PhantomData,
            };
            let pass = Pass::<K> {
                env: &self.shared.env,
                item: self.item,
                job: &job,
                facts: &mut facts,
                memory: &mut self.memory,
                journal: &journal,
                fence: self.lease.fence(),
                now: self.shared.env.clock.now(),
            };
            K::run_stage(stage, pass).await
        };
        // Where a finished stage leads; a jump out of the job's stages is a failure.
        let outcome = match outcome {
            StageOutcome::Done(done) => match K::next(&job, stage, &done) {
                Ok(next) => Passed::Done(done, next),
                Err(failure) => Passed::Failed(failure),
            },
            StageOutcome::Wait(wait) => Passed::Wait(wait.reason, wait.poll, wait.wake),
            StageOutcome::Failed(failure) => Passed::Failed(failure),
        };
        match outcome {
            Passed::Wait(reason, poll_in, wake) => {
                let key = (job.stage.clone(), job.attempt);
                if waiting_reported.as_ref() != Some(&key) {
                    self.report(stage.name(), ProgressStatus::Waiting, &reason);
                    *waiting_reported = Some(key);
                }
                self.memory.last_wait = Some(reason);
                // A wait may have learnt something worth keeping (a release confirmed).
                *known = if facts != stored {
                    let update = JobUpdate::new(JobState::Running);
                    let written = self.write_kept(&job, update, &facts).await?;
                    Some((written, std::time::Instant::now(), facts))
                } else {
                    Some((job, read_at, stored))
                };
                Ok(AfterPass::Sleep(poll_in.unwrap_or(poll), wake))
            }
            Passed::Done(done, next) => {
                self.memory.last_wait = None;
                let (event, progress) = done_event(stage.name(), job.attempt, &done);
                *facts.clock() = None;
                *facts.retries() = 0;
                self.report(stage.name(), progress, &done.message);
                match next {
                    Some(next) => {
                        let mut update = JobUpdate::new(JobState::Running);
                        update.stage = Some(next.name().into());
                        update.attempt = Some(0);
                        update.event = Some(event);
                        // The next stage's first attempt opens in the same write (its
                        // `started` record is durable before it runs, as when written on
                        // its own); a stopping executor leaves it unopened.
                        // Nor one that waits for a slot first: its attempt (and its timeouts)
                        // start when it can run.
                        let opening = !stop.is_stopped() && !self.waits_for_slot(next);
                        if opening {
                            K::prepare(self, &mut facts);
                            let now = self.shared.env.clock.now();
                            let started = open_attempt::<K>(next.name(), 1, now, None, &mut facts);
                            update.attempt = Some(1);
                            update.opened = Some(started);
                        }
                        let written = self.write_kept(&job, update, &facts).await?;
                        if opening {
                            self.report(next.name(), ProgressStatus::Started, "");
                        }
                        *known = Some((written, std::time::Instant::now(), facts));
                        Ok(AfterPass::Again)
                    }
                    None => self.complete(&job, event, &facts).await.map(AfterPass::End),
                }
            }
            Passed::Failed(failure) => {
                let budget = K::retry_budget(stage, failure.class);
                let retries_left = failure.retry == Retry::Budget
                    && budget.is_none_or(|max| *facts.retries() < max);
                if let Some(clock) = facts.clock().as_mut() {
                    clock.open = false;
                }
                if !retries_left {
                    let (mut update, line) = failed_update(stage.name(), job.attempt, &failure);
                    let Some(next) = K::on_final_failure(self, &job, stage, &failure).await? else {
                        self.write(&job, update, &facts).await?;
                        self.report(stage.name(), ProgressStatus::Failed, &line);
                        return Ok(AfterPass::End(failure.into()));
                    };
                    // The kind continues at `next`: the failed attempt is journaled, the
                    // job stays running.
                    update.state = JobState::Running;
                    update.failure = None;
                    update.stage = Some(next.name().into());
                    update.attempt = Some(0);
                    *facts.clock() = None;
                    *facts.retries() = 0;
                    self.write(&job, update, &facts).await?;
                    self.report(stage.name(), ProgressStatus::Failed, &line);
                    return Ok(AfterPass::Again);
                }
                *facts.retries() += 1;
                let retry = *facts.retries();
                let delay = crate::backoff::Backoff::new(
                    self.shared.options.retry_base,
                    self.shared.options.retry_cap,
                )
                .jittered(retry, rand::RngExt::random::<f64>(&mut self.rng));
                let message = format!(
                    "{} ({}); retry {retry}{} in {:.1}s",
                    failure.message,
                    failure.class,
                    budget.map(|b| format!(" of {b}")).unwrap_or_default(),
                    delay.as_secs_f64()
                );
                let mut update = JobUpdate::new(JobState::Running);
                update.event = Some(StageEvent {
                    stage: stage.name().into(),
                    attempt: job.attempt,
                    status: EventStatus::Failed,
                    message: Some(message.clone()),
                    details: json!({
                        "class": failure.class,
                        "code": failure.code,
                        "details": failure.details,
                        "retry_in_secs": delay.as_secs_f64(),
                    }),
                });
                // Read again after the back-off: an operator may act on a retrying job.
                self.write(&job, update, &facts).await?;
                self.report(stage.name(), ProgressStatus::Retrying, &message);
                Ok(AfterPass::Sleep(delay, None))
            }
        }
    }

    /// Open a stage attempt in the journal, unless one is open already (a restarted executor
    /// continues it, and its deadline): the job as written, `None` when it was open. An
    /// attempt or stage an operator moved starts a new clock with fresh budgets; else the next
    /// attempt keeps the stage's deadline.
    async fn begin_attempt(
        &mut self,
        job: &Job,
        stage: K::Stage,
        facts: &mut K::Facts,
    ) -> Result<Option<Job>, Stop> {
        let now = self.shared.env.clock.now();
        let (attempt, started_at, moved) = match facts.clock() {
            Some(clock) if clock.stage == job.stage && clock.attempt == job.attempt => {
                if clock.open {
                    return Ok(None);
                }
                (job.attempt + 1, clock.started_at, false)
            }
            Some(_) => (job.attempt.max(1), now, true),
            None => (job.attempt + 1, now, false),
        };
        if moved {
            facts.operator_moved(K::is_first(job, stage));
        }
        let message = moved.then(|| "after an operator's recovery action".to_owned());
        let mut update = JobUpdate::new(JobState::Running);
        update.attempt = Some(attempt);
        update.event = Some(open_attempt::<K>(
            &job.stage, attempt, started_at, message, facts,
        ));
        let updated = self.write_kept(job, update, facts).await?;
        let note = if attempt > 1 {
            format!("attempt {attempt}")
        } else {
            String::new()
        };
        self.report(stage.name(), ProgressStatus::Started, &note);
        Ok(Some(updated))
    }

    /// The last stage is done: the job completes (or is reconciled, when an adopt finishes it) and
    /// the node makes the kind's move, in one transaction (001 §3.3).
    async fn complete(
        &mut self,
        job: &Job,
        event: StageEvent,
        facts: &K::Facts,
    ) -> Result<NodeOutcome, Stop> {
        let state = JobState::on_success(job.ends_reconciled);
        let mut update = JobUpdate::new(state);
        update.event = Some(event);
        if let Some((to, by)) = K::completion(self, job).await? {
            let mut transition = NodeTransition::new(to, by, self.shared.env.actor.clone());
            transition.reason = Some(format!("{} {} {state}", completion_name(job), job.id));
            transition.fence = Some(self.fence());
            update.node_transition = Some(transition);
        }
        let done = self.write(job, update, facts).await?;
        K::completed(self, &done, facts).await;
        Ok(NodeOutcome::Converged { state })
    }
}

/// Open attempt `attempt` of `stage` in the facts' clock, started at `started_at` (now, or the
/// stage's first attempt's start when it keeps its deadline): the journal's `started` event to
/// write with them.
fn open_attempt<K: Kind>(
    stage: &str,
    attempt: i64,
    started_at: DateTime<Utc>,
    message: Option<String>,
    facts: &mut K::Facts,
) -> StageEvent {
    *facts.clock() = Some(StageClock {
        stage: stage.to_owned(),
        attempt,
        started_at,
        open: true,
    });
    StageEvent {
        stage: stage.to_owned(),
        attempt,
        status: EventStatus::Started,
        message,
        details: json!({}),
    }
}

/// What the node transition of a completed job calls it: the kind, or a decommission's mode.
fn completion_name(job: &Job) -> String {
    match job.mode() {
        Some(mode) => mode.to_string(),
        None => job.kind.to_string(),
    }
}

/// What the stage loop keeps between passes.
struct Between<F> {
    /// The (stage, attempt) whose wait was reported (a wait is reported once).
    waiting_reported: Option<(String, i64)>,
    /// A stopping executor's one more pass, to deploy a payload rendered in memory.
    deploy_grace: bool,
    /// The job as this run last read or wrote it, when, and the facts its journal holds: the
    /// next pass reuses them for up to JOB_REREAD (nothing of this run changed them since),
    /// so thousands of nodes polling fast neither read their job nor parse its facts every
    /// step, and a stage boundary costs one write.
    known: Option<(Job, std::time::Instant, F)>,
}

/// What the stage loop does after a pass.
enum AfterPass {
    /// Run the next pass now.
    Again,
    /// Sleep this long (a poll, a retry's back-off), or until the node's agent is heard from.
    Sleep(Duration, Option<crate::agent::AgentWatch>),
    /// The node's run ends.
    End(NodeOutcome),
    /// The stage needs one of the group's slots: wait for it, then pass again.
    Slot,
}

/// A stage pass, with where a finished stage leads.
enum Passed<S> {
    Done(StageDone, Option<S>),
    Wait(String, Option<Duration>, Option<crate::agent::AgentWatch>),
    Failed(StageFailure),
}

/// The stages' mid-stage checkpoint: the fenced journal write, facts only.
struct JournalCheckpoint<K> {
    store: Store,
    job: Job,
    fence: Fence,
    kind: PhantomData<fn() -> K>,
}

impl<K: Kind> Checkpoint<K::Facts> for JournalCheckpoint<K> {
    fn checkpoint<'a>(&'a self, facts: &'a K::Facts) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut update = JobUpdate::new(JobState::Running);
            update.stage_details = Some(facts.to_details());
            update.fence = Some(self.fence.clone());
            if self.job.node_id.is_none() {
                update.node_id = facts.node_id();
            }
            update.maas_system_id = facts.system_id();
            self.store
                .advance_job(K::KIND, self.job.id, &update)
                .await
                .map(|_| ())
        })
    }
}

/// A finished stage's journal event and progress status.
fn done_event(stage: &str, attempt: i64, done: &StageDone) -> (StageEvent, ProgressStatus) {
    let (status, progress) = if done.skipped {
        (EventStatus::Skipped, ProgressStatus::Skipped)
    } else {
        (EventStatus::Succeeded, ProgressStatus::Succeeded)
    };
    let event = StageEvent {
        stage: stage.into(),
        attempt,
        status,
        message: Some(done.message.clone()),
        details: done.details.clone(),
    };
    (event, progress)
}

/// A stage that failed for good: the journal write (the job's failure and the stage's failed
/// event), and the progress line.
fn failed_update(stage: &str, attempt: i64, failure: &StageFailure) -> (JobUpdate, String) {
    let mut update = JobUpdate::new(failure.final_state());
    update.failure = Some(JobFailure {
        class: failure.class,
        code: failure.code.clone(),
        message: failure.message.clone(),
        details: (*failure.details).clone(),
    });
    update.event = Some(StageEvent {
        stage: stage.into(),
        attempt,
        status: EventStatus::Failed,
        message: Some(failure.message.clone()),
        details: json!({"class": failure.class, "code": failure.code, "details": failure.details}),
    });
    let line = format!("{} ({}, {})", failure.message, failure.class, failure.code);
    (update, line)
}

/// A journal write, retried a few times on a transient store error (a busy SQLite, a dropped
/// PostgreSQL connection): the stage's work is done, losing its record would redo it.
async fn advance_retrying(
    store: &Store,
    kind: JobKind,
    job: Uuid,
    update: &JobUpdate,
) -> Result<Job, StoreError> {
    let mut tries = 0;
    loop {
        match store.advance_job(kind, job, update).await {
            Err(err) if err.is_transient() && tries < 4 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50 * (1 << tries))).await;
            }
            other => return other,
        }
    }
}

/// The compensation a `compensating` job owes: the last cancel or restart-clean in its audit
/// trail.
pub(super) async fn requested(
    store: &Store,
    kind: JobKind,
    job_id: Uuid,
) -> Result<Option<Compensation>, StoreError> {
    let audit = store.audit_log(kind.as_str(), &job_id.to_string()).await?;
    let cancel = format!("{kind}.cancel");
    let restart = format!("{kind}.restart_clean");
    Ok(audit.iter().rev().find_map(|entry| {
        if entry.action == cancel {
            Some(Compensation::Cancel)
        } else if entry.action == restart {
            Some(Compensation::RestartClean)
        } else {
            None
        }
    }))
}
