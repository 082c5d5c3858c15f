//! One node's executor (seed 000 §4.3–§4.13, DESIGN.md §4): take up the node's onboarding job
//! under the node lease, then run its stages as a durable journal until the job completes,
//! fails, or is taken away.
//!
//! Every stage attempt writes a `started` event when it begins and a `succeeded`, `skipped` or
//! `failed` event when it ends, each in the same transaction as the job row (stage, attempt,
//! state, facts, last observed MAAS state) and fenced by the lease. Between the two, a stage
//! may wait (polls write nothing) or checkpoint its facts (the deploy intent). A restarted
//! executor finds the attempt open and continues it; timeouts run from the attempt's start as
//! the journal recorded it.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use uuid::Uuid;

use super::backoff;
use super::compensate::{self, Compensation};
use super::lease::NodeLease;
use super::progress::{Progress, ProgressStatus};
use super::{ExecutorOptions, FromPlan, NodeOutcome, NodeResult, Work, WorkItem};
use crate::lifecycle::{JobKind, JobState, NodeState, OnboardingStage, Owner, RecoveryAction};
use crate::plan::NodeTarget;
use crate::stages::onboard::{
    Checkpoint, Facts, NodeMemory, StageClock, StageCtx, StageEnv, TakeOverFacts, run_stage,
};
use crate::stages::{Next, StageDone, StageFailure, StageOutcome, retry_budget};
use crate::store::{
    EventStatus, Job, JobFailure, JobFilter, JobUpdate, MaasStateUpdate, NewOnboarding,
    NodeTransition, StageEvent, StoreError,
};

/// What every node's executor shares.
pub(super) struct Shared {
    pub env: StageEnv,
    pub options: ExecutorOptions,
    pub progress: Arc<dyn Progress>,
}

/// Why a node's run stopped early (the onboarding and the decommission executors).
pub(super) enum Stop {
    /// The node ended (converged, failed, left alone).
    Result(NodeOutcome),
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

/// One node being worked on.
struct NodeRun<'a> {
    shared: &'a Shared,
    target: &'a NodeTarget,
    plan: Option<&'a FromPlan>,
    lease: &'a NodeLease,
    memory: NodeMemory,
    rng: ChaCha8Rng,
}

/// Take up one work item and drive it to a resting state.
pub(super) async fn run_item(shared: &Shared, item: WorkItem) -> NodeResult {
    let label = item.target.label();
    let lease = match NodeLease::acquire_node(
        &shared.env.store,
        item.target.site_name(),
        item.target.hostname(),
        &shared.options.holder,
        shared.options.lease_ttl,
    )
    .await
    {
        Ok(lease) => lease,
        Err(refusal) => {
            let reason = refusal.reason();
            report(shared, &label, "-", ProgressStatus::Left, &reason);
            return NodeResult {
                node: label,
                job_id: item.target.job_id,
                outcome: NodeOutcome::Left { reason },
            };
        }
    };
    let mut run = NodeRun {
        shared,
        target: &item.target,
        plan: item.plan.as_ref(),
        lease: &lease,
        memory: NodeMemory::default(),
        rng: backoff::node_rng(shared.options.seed, &label),
    };
    let (job_id, outcome) = run.drive(item.work).await;
    lease.release().await;
    let (status, message) = outcome.progress();
    report(shared, &label, "-", status, &message);
    NodeResult {
        node: label,
        job_id,
        outcome,
    }
}

/// An item a stopping executor did not take up.
pub(super) fn not_started(shared: &Shared, item: WorkItem) -> NodeResult {
    let label = item.target.label();
    let reason = "the executor is stopping: not started".to_owned();
    report(shared, &label, "-", ProgressStatus::Left, &reason);
    NodeResult {
        node: label,
        job_id: item.target.job_id,
        outcome: NodeOutcome::Aborted { reason },
    }
}

fn report(shared: &Shared, node: &str, stage: &str, status: ProgressStatus, message: &str) {
    super::progress::report(shared.progress.as_ref(), node, stage, status, message);
}

/// A finished stage's journal event and progress status.
pub(super) fn done_event(
    stage: &str,
    attempt: i64,
    done: &StageDone,
) -> (StageEvent, ProgressStatus) {
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
pub(super) fn failed_update(
    stage: &str,
    attempt: i64,
    failure: &StageFailure,
) -> (JobUpdate, String) {
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

/// A journal write, retried a few times on a transient store error (a busy SQLite, a dropped
/// PostgreSQL connection): the stage's work is done, losing its record would redo it.
pub(super) async fn advance_retrying(
    store: &crate::store::Store,
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

/// A stage attempt opened by [`open_attempt`].
pub(super) struct OpenedAttempt {
    /// The journal write that records it started.
    pub update: JobUpdate,
    /// An operator moved the job (retry, resume, rerun): retry budgets and the deadline were
    /// reset.
    pub moved: bool,
    /// The progress message (`attempt N` after the first).
    pub note: String,
}

/// Open a stage attempt on the facts' clock (000 §4.10), shared by the onboarding and the
/// decommission executors: `None` when the journal's attempt is still open (after a crash the
/// attempt goes on, and so does its deadline); else the next attempt, keeping the stage's
/// deadline, or — when an operator moved the job — a fresh attempt with fresh budgets.
pub(super) fn open_attempt(
    job: &Job,
    facts: &mut Facts,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<OpenedAttempt> {
    let (attempt, started_at, moved) = match &facts.clock {
        Some(clock) if clock.stage == job.stage && clock.attempt == job.attempt => {
            if clock.open {
                return None;
            }
            (job.attempt + 1, clock.started_at, false)
        }
        Some(_) => {
            facts.retries = 0;
            facts.enrollment.token_refreshes = 0;
            (job.attempt.max(1), now, true)
        }
        None => (job.attempt + 1, now, false),
    };
    facts.clock = Some(StageClock {
        stage: job.stage.clone(),
        attempt,
        started_at,
        open: true,
    });
    let mut update = JobUpdate::new(JobState::Running);
    update.attempt = Some(attempt);
    update.event = Some(StageEvent {
        stage: job.stage.clone(),
        attempt,
        status: EventStatus::Started,
        message: moved.then(|| "after an operator's recovery action".to_owned()),
        details: json!({}),
    });
    Some(OpenedAttempt {
        update,
        moved,
        note: if attempt > 1 {
            format!("attempt {attempt}")
        } else {
            String::new()
        },
    })
}

/// The open onboarding of a site/hostname, if any.
pub(super) async fn open_onboarding(
    env: &StageEnv,
    site: &str,
    hostname: &str,
) -> Result<Option<Job>, StoreError> {
    let jobs = env
        .store
        .list_jobs(
            JobKind::Onboarding,
            &JobFilter {
                site: Some(site.to_owned()),
                open_only: true,
                ..JobFilter::default()
            },
        )
        .await?;
    Ok(jobs.into_iter().find(|j| j.hostname == hostname))
}

impl NodeRun<'_> {
    fn label(&self) -> String {
        self.target.label()
    }

    fn report(&self, stage: &str, status: ProgressStatus, message: &str) {
        report(self.shared, &self.label(), stage, status, message);
    }

    fn store(&self) -> &crate::store::Store {
        &self.shared.env.store
    }

    /// Why the executor takes a recovery action (resume, rerun, adopt): the plan item's
    /// reason, else the executor's.
    fn audit_reason(&self) -> Option<String> {
        self.plan
            .map(FromPlan::audit_reason)
            .or_else(|| self.shared.options.reason.clone())
    }

    async fn drive(&mut self, work: Work) -> (Option<Uuid>, NodeOutcome) {
        let job = match self.take_up(work).await {
            Ok(job) => job,
            Err(Stop::Result(outcome)) => return (self.target.job_id, outcome),
        };
        let id = job.id;
        match self.run_stages(id).await {
            Ok(outcome) | Err(Stop::Result(outcome)) => (Some(id), outcome),
        }
    }

    /// Find or create the job the work item names, and move it to where it can run.
    async fn take_up(&mut self, work: Work) -> Result<Job, Stop> {
        let env = &self.shared.env;
        let actor = &env.actor;
        let reason = self.audit_reason();
        let left = |reason: String| Stop::Result(NodeOutcome::Left { reason });
        let job = match work {
            Work::Onboard => {
                match open_onboarding(env, self.target.site_name(), self.target.hostname()).await? {
                    Some(job) if matches!(job.state, JobState::Pending | JobState::Running) => {
                        self.report(
                            "-",
                            ProgressStatus::Begin,
                            &format!(
                                "continuing onboarding {} at {} (an earlier run stopped)",
                                job.id, job.stage
                            ),
                        );
                        job
                    }
                    Some(job) => {
                        return Err(left(format!(
                            "onboarding {} is {} at {}: recover it with `metalform onboardings`",
                            job.id, job.state, job.stage
                        )));
                    }
                    None => {
                        // Another executor (a second apply, a daemon replica) may have finished
                        // the node while this one waited for the lease: nothing to onboard then.
                        if let Some(node) = self
                            .store()
                            .find_node(self.target.site_name(), self.target.hostname())
                            .await?
                            .filter(|n| n.status != NodeState::Enrolling)
                        {
                            return Err(left(format!(
                                "node {} is {}: nothing to onboard",
                                node.id, node.status
                            )));
                        }
                        let job = self
                            .store()
                            .create_onboarding(&self.new_onboarding())
                            .await?;
                        self.report(
                            "-",
                            ProgressStatus::Begin,
                            &format!("onboarding {} created", job.id),
                        );
                        job
                    }
                }
            }
            Work::Resume { job_id } | Work::Rerun { job_id } => {
                let action = if matches!(work, Work::Rerun { .. }) {
                    RecoveryAction::Rerun
                } else {
                    RecoveryAction::Resume
                };
                let job = self.store().job(JobKind::Onboarding, job_id).await?;
                let job = if job.state == JobState::Compensating {
                    // An operator's cancel or restart-clean whose executor stopped: finish it.
                    self.finish_compensation(&job).await?
                } else if job.state.is_failed() {
                    self.store()
                        .recover_job(
                            JobKind::Onboarding,
                            job_id,
                            action,
                            actor,
                            reason.as_deref(),
                        )
                        .await?
                } else {
                    job
                };
                self.report(
                    "-",
                    ProgressStatus::Begin,
                    &format!("{action} onboarding {} at {}", job.id, job.stage),
                );
                job
            }
            Work::Adopt { job_id, system_id } => self.take_up_adoption(job_id, &system_id).await?,
            Work::Continue { job_id } => {
                let job = self.store().job(JobKind::Onboarding, job_id).await?;
                self.report(
                    "-",
                    ProgressStatus::Begin,
                    &format!("onboarding {} {} at {}", job.id, job.state, job.stage),
                );
                job
            }
        };
        match job.state {
            JobState::Pending | JobState::Running => Ok(job),
            other => Err(left(format!(
                "onboarding {} is {other}; nothing to run",
                job.id
            ))),
        }
    }

    /// Complete an interrupted compensation (the one the job's last recovery action asked
    /// for). A cancel ends the node's run; a restart-clean leaves the job pending, to run.
    async fn finish_compensation(&mut self, job: &Job) -> Result<Job, Stop> {
        let Some(kind) = compensate::requested(self.store(), job.id).await? else {
            return Err(Stop::Result(NodeOutcome::Left {
                reason: format!(
                    "onboarding {} is compensating, but no cancel or restart-clean was recorded",
                    job.id
                ),
            }));
        };
        self.report(
            &job.stage,
            ProgressStatus::Begin,
            &format!(
                "finishing the interrupted {kind:?} of onboarding {}",
                job.id
            ),
        );
        let outcome =
            compensate::compensate_under_lease(self.shared, self.target, job.id, kind, self.lease)
                .await?;
        match kind {
            Compensation::Cancel => Err(Stop::Result(outcome)),
            Compensation::RestartClean => Ok(self.store().job(JobKind::Onboarding, job.id).await?),
        }
    }

    fn new_onboarding(&self) -> NewOnboarding {
        let options = &self.shared.options;
        NewOnboarding {
            node_id: self.target.node_id,
            site: self.target.site_name().to_owned(),
            hostname: self.target.hostname().to_owned(),
            ipmi_ip: Some(self.target.node.bmc.ipmi_ip.to_string()),
            pxe_mac: self.target.node.pxe_mac.map(|m| m.to_string()),
            batch_id: options.batch_id.clone(),
            requested_by: Some(self.shared.env.actor.name.clone()),
            plan_id: self.plan.map(|p| p.plan_id.clone()),
        }
    }

    /// Accept a machine that is already deployed (and enrolled): bind it and let the stages
    /// check it; success ends `reconciled` (000 §4.9 adopt_observed_state).
    async fn take_up_adoption(
        &mut self,
        job_id: Option<Uuid>,
        system_id: &str,
    ) -> Result<Job, Stop> {
        let env = &self.shared.env;
        let job = match job_id {
            Some(id) => self.store().job(JobKind::Onboarding, id).await?,
            None => {
                match open_onboarding(env, self.target.site_name(), self.target.hostname()).await? {
                    Some(job) => job,
                    None => {
                        self.store()
                            .create_onboarding(&self.new_onboarding())
                            .await?
                    }
                }
            }
        };
        if job.state.is_terminal() || job.state == JobState::Compensating {
            return Err(Stop::Result(NodeOutcome::Left {
                reason: format!("onboarding {} is {}; nothing to adopt", job.id, job.state),
            }));
        }
        // A failed job is recovered first (failed -> running, audited); a pending or running
        // one is bound to the machine first, then marked adopted.
        let job = if job.state.is_failed() {
            self.mark_adopted(job).await?
        } else {
            job
        };
        let mut facts = Facts::from_details(&job.stage_details);
        facts.system_id = Some(system_id.to_owned());
        facts.matched_by = Some("adopted".into());
        let node = match job.node_id.or(self.target.node_id) {
            Some(id) => Some(id),
            None => self
                .store()
                .find_node(self.target.site_name(), self.target.hostname())
                .await?
                .map(|n| n.id),
        };
        facts.node_id = node;
        let mut update = JobUpdate::new(JobState::Running);
        update.stage_details = Some(facts.to_details());
        update.maas_system_id = Some(system_id.to_owned());
        update.node_id = job.node_id.is_none().then_some(node).flatten();
        update.fence = Some(self.lease.fence());
        let job = self
            .store()
            .advance_job(JobKind::Onboarding, job.id, &update)
            .await?;
        let job = self.mark_adopted(job).await?;
        self.report(
            "-",
            ProgressStatus::Begin,
            &format!("adopting {system_id} (onboarding {})", job.id),
        );
        Ok(job)
    }

    /// Record the plan's permission to release a machine in use (journaled by the next write,
    /// before any stage acts on it).
    fn grant_take_over(&self, facts: &mut Facts) {
        if facts.take_over.is_some() {
            return;
        }
        if let Some(plan) = self.plan
            && let Some(system_id) = &plan.takes_over
        {
            facts.take_over = Some(TakeOverFacts {
                system_id: system_id.clone(),
                plan_id: plan.plan_id.clone(),
                released_at: None,
                was: None,
            });
        }
    }

    /// The audited adopt_observed_state recovery action (000 §4.9) on a job not adopted yet,
    /// or failed.
    async fn mark_adopted(&self, job: Job) -> Result<Job, StoreError> {
        if job.adopted && !job.state.is_failed() {
            return Ok(job);
        }
        let reason = self
            .audit_reason()
            .unwrap_or_else(|| "adopting a machine that is already deployed".into());
        self.store()
            .recover_job(
                JobKind::Onboarding,
                job.id,
                RecoveryAction::AdoptObservedState,
                &self.shared.env.actor,
                Some(&reason),
            )
            .await
    }

    /// A journal write under the lease. Transient store errors are retried a few times.
    async fn write(
        &self,
        job: &Job,
        mut update: JobUpdate,
        facts: &Facts,
    ) -> Result<Job, StoreError> {
        update.fence = Some(self.lease.fence());
        update.stage_details = Some(facts.to_details());
        if update.observed.is_none() {
            update.observed = self.memory.observed.clone();
        }
        if job.node_id.is_none() {
            update.node_id = facts.node_id;
        }
        if update.maas_system_id.is_none() {
            update.maas_system_id = facts.system_id.clone();
        }
        advance_retrying(self.store(), JobKind::Onboarding, job.id, &update).await
    }

    async fn run_stages(&mut self, id: Uuid) -> Result<NodeOutcome, Stop> {
        let poll = self.shared.options.poll_interval;
        let mut waiting_reported: Option<(String, i64)> = None;
        let shared: &Shared = self.shared;
        let stop = &shared.options.stop;
        let mut deploy_grace = true;
        loop {
            let job = self.store().job(JobKind::Onboarding, id).await?;
            // A rendered payload lives in memory only: stopping before it is deployed would
            // make the next executor render again (a new token), so one more stage pass
            // deploys it first.
            if stop.is_stopped()
                && (self.memory.user_data.is_none() || !std::mem::replace(&mut deploy_grace, false))
            {
                // A stage boundary: the journal says where the job is; the next executor
                // continues the open attempt from there.
                return Ok(NodeOutcome::Aborted {
                    reason: format!(
                        "the executor is stopping: onboarding {id} rests at {} (attempt {})",
                        job.stage, job.attempt
                    ),
                });
            }
            match job.state {
                JobState::Pending | JobState::Running => {}
                // Moved by someone else (an operator's cancel, another executor's failure).
                other => {
                    return Ok(NodeOutcome::Left {
                        reason: format!("onboarding {id} is {other} (changed outside this run)"),
                    });
                }
            }
            let stage: OnboardingStage = job.stage.parse().map_err(|e| {
                Stop::Result(NodeOutcome::Aborted {
                    reason: format!("journal of {id}: {e}"),
                })
            })?;
            let mut facts = Facts::from_details(&job.stage_details);
            self.grant_take_over(&mut facts);
            let job = self.begin_attempt(&job, stage, &mut facts).await?;
            let now = self.shared.env.clock.now();
            let journal = JournalCheckpoint {
                store: self.store().clone(),
                job: job.clone(),
                fence: self.lease.fence(),
            };
            let outcome = {
                let mut ctx = StageCtx {
                    env: &self.shared.env,
                    target: self.target,
                    job: &job,
                    facts: &mut facts,
                    memory: &mut self.memory,
                    journal: &journal,
                    now,
                };
                run_stage(stage, &mut ctx).await
            };
            match outcome {
                StageOutcome::Wait(wait) => {
                    let key = (job.stage.clone(), job.attempt);
                    if waiting_reported.as_ref() != Some(&key) {
                        self.report(stage.as_str(), ProgressStatus::Waiting, &wait.reason);
                        waiting_reported = Some(key);
                    }
                    self.memory.last_wait = Some(wait.reason);
                    stop.sleep(wait.poll.unwrap_or(poll)).await;
                }
                StageOutcome::Done(done) => {
                    self.memory.last_wait = None;
                    let (event, progress) = done_event(stage.as_str(), job.attempt, &done);
                    facts.clock = None;
                    facts.retries = 0;
                    let next = match done.next {
                        Next::Normal => stage.next(),
                        Next::Jump(to) => Some(to),
                        Next::Complete => None,
                    };
                    self.report(stage.as_str(), progress, &done.message);
                    match next {
                        Some(next) => {
                            let mut update = JobUpdate::new(JobState::Running);
                            update.stage = Some(next.as_str().into());
                            update.attempt = Some(0);
                            update.event = Some(event);
                            self.write(&job, update, &facts).await?;
                        }
                        None => return self.complete(&job, event, &facts).await,
                    }
                }
                StageOutcome::Failed(failure) => {
                    let budget = retry_budget(stage, failure.class);
                    let retries_left = failure.retry == crate::stages::Retry::Budget
                        && budget.is_none_or(|max| facts.retries < max);
                    if let Some(clock) = facts.clock.as_mut() {
                        clock.open = false;
                    }
                    if retries_left {
                        facts.retries += 1;
                        let delay = backoff::delay(
                            facts.retries,
                            self.shared.options.retry_base,
                            self.shared.options.retry_cap,
                            &mut self.rng,
                        );
                        let message = format!(
                            "{} ({}); retry {}{} in {:.1}s",
                            failure.message,
                            failure.class,
                            facts.retries,
                            budget.map(|b| format!(" of {b}")).unwrap_or_default(),
                            delay.as_secs_f64()
                        );
                        let mut update = JobUpdate::new(JobState::Running);
                        update.event = Some(StageEvent {
                            stage: stage.as_str().into(),
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
                        self.write(&job, update, &facts).await?;
                        self.report(stage.as_str(), ProgressStatus::Retrying, &message);
                        stop.sleep(delay).await;
                        continue;
                    }
                    let (update, line) = failed_update(stage.as_str(), job.attempt, &failure);
                    self.write(&job, update, &facts).await?;
                    self.report(stage.as_str(), ProgressStatus::Failed, &line);
                    return Ok(failure.into());
                }
            }
        }
    }

    /// Open a stage attempt in the journal, unless one is open already (a restarted executor
    /// continues it). An attempt or stage moved by an operator starts a new clock.
    async fn begin_attempt(
        &mut self,
        job: &Job,
        stage: OnboardingStage,
        facts: &mut Facts,
    ) -> Result<Job, Stop> {
        let now = self.shared.env.clock.now();
        let Some(opened) = open_attempt(job, facts, now) else {
            return Ok(job.clone());
        };
        if opened.moved && stage == OnboardingStage::first() {
            // Rerun from the top: the bounded datasource redeploy is available again.
            facts.datasource_retries = 0;
        }
        let updated = self.write(job, opened.update, facts).await?;
        self.report(stage.as_str(), ProgressStatus::Started, &opened.note);
        Ok(updated)
    }

    /// The last stage is done: the job completes (or is reconciled, when it was adopted) and
    /// the node becomes active, in one transaction (001 §3.3).
    async fn complete(
        &mut self,
        job: &Job,
        event: StageEvent,
        facts: &Facts,
    ) -> Result<NodeOutcome, Stop> {
        let state = JobState::on_success(job.adopted);
        let env = &self.shared.env;
        let mut update = JobUpdate::new(state);
        update.event = Some(event);
        let mut transition = NodeTransition::new(
            NodeState::Active,
            Owner::OnboardingWorkflow,
            env.actor.clone(),
        );
        transition.reason = Some(format!("onboarding {} {state}", job.id));
        transition.fence = Some(self.lease.fence());
        update.node_transition = Some(transition);
        let done = self.write(job, update, facts).await?;
        if let (Some(node), Some(system_id), Some(observed)) = (
            done.node_id,
            facts.system_id.clone(),
            self.memory.observed.clone(),
        ) {
            // The runtime MAAS binding of an active node (000 §6.5); a failure here does not
            // undo the onboarding, the reconciler records it again.
            let _ = env
                .store
                .upsert_maas_state(&MaasStateUpdate {
                    node_id: node,
                    site: self.target.site_name().to_owned(),
                    maas_system_id: system_id,
                    status: observed.status,
                    power_state: observed.power_state,
                    ips: observed.ips,
                    drift: None,
                })
                .await;
        }
        Ok(NodeOutcome::Converged { state })
    }
}

/// The stages' mid-stage checkpoint: the same fenced journal write, facts only.
struct JournalCheckpoint {
    store: crate::store::Store,
    job: Job,
    fence: crate::store::Fence,
}

impl Checkpoint for JournalCheckpoint {
    fn checkpoint<'a>(&'a self, facts: &'a Facts) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut update = JobUpdate::new(JobState::Running);
            update.stage_details = Some(facts.to_details());
            update.fence = Some(self.fence.clone());
            if self.job.node_id.is_none() {
                update.node_id = facts.node_id;
            }
            update.maas_system_id = facts.system_id.clone();
            self.store
                .advance_job(JobKind::Onboarding, self.job.id, &update)
                .await
                .map(|_| ())
        })
    }
}
