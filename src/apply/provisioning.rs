//! The Redfish provisioning job kind (seed 003 "Job State Machine", "Workers and Concurrency",
//! "Worker Orchestration Flow") on the engine, its workers, and the request service the jobs
//! API and plan items call.
//!
//! A job is created `queued` (API request or plan item) and run by [`Workers`]: they poll for
//! jobs a worker may take (queued ones; active ones whose worker's lease expired or was
//! released), up to `WORKER_CONCURRENCY` at once, and hand each to the engine. The engine takes
//! the job row's own lease with the seed's `UPDATE … SET status='provisioning', worker_id, …
//! WHERE status='queued'` (or takes it over once expired), renews it, fences every journal
//! write with it, and runs the stages of `crate::stages::provision`. A stage that fails for
//! good fails the job (`→ failed`, its step recorded) and the engine continues at cleanup
//! ([`Kind::on_final_failure`]): the seed's any → failed → cleanup → complete.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use uuid::Uuid;

use super::engine::{Compensation, Continuing, Engine, Kind, Pass, Run, Stop};
use super::jobs::KindInfo;
use super::outcome::{ApplyReport, NodeOutcome, NodeResult};
use super::progress::Progress;
use super::{ExecutorOptions, StopSignal};
use crate::lifecycle::{
    FailureClass, JobKind, JobState, NodeState, Owner, ProvisioningStage, ProvisioningStatus,
};
use crate::plan::NodeTarget;
use crate::provider::redfish::media::{GcReport, JobMedia};
use crate::provider::redfish::recipe::{self, RecipeError};
use crate::stages::provision::{
    BmcSession, ProvisionCtx, ProvisionFacts, Provisioner, ProvisioningObserver, run_stage,
};
use crate::stages::{Next, StageDone, StageEnv, StageFailure, StageOutcome};
use crate::store::{
    Created, Job, JobSpec, LeaseTarget, NewProvisioning, Server, Store, StoreError,
};

/// One job to run.
pub struct ProvisioningWork {
    pub job: Uuid,
    /// The job's node, for progress lines.
    pub site: String,
    pub hostname: String,
    pub provisioner: Arc<Provisioner>,
    /// This run's BMC session.
    session: tokio::sync::Mutex<Option<BmcSession>>,
}

impl ProvisioningWork {
    pub fn new(job: &Job, provisioner: Arc<Provisioner>) -> Self {
        Self {
            job: job.id,
            site: job.site.clone(),
            hostname: job.hostname.clone(),
            provisioner,
            session: tokio::sync::Mutex::new(None),
        }
    }
}

/// The provisioning kind.
pub struct Provisioning;

/// Runs provisioning jobs; cheap to clone.
pub type ProvisioningEngine = Engine<Provisioning>;

pub(super) const INFO: KindInfo = KindInfo {
    kind: JobKind::Provisioning,
    plural: "provisionings",
    // The workers run every job to `complete`; nothing is left for an operator to recover.
    actions: &[],
    reason_example: "BMC firmware updated (ticket HW-3301)",
    column: Some(("SERVER (STATUS)", server_column)),
    request: request_lines,
    journal: journal_lines,
    extras,
    needs_manifests: false,
    cancel_with_store: None,
};

fn spec(job: &Job) -> Option<(&str, ProvisioningStatus, Option<&str>)> {
    match &job.spec {
        JobSpec::Provisioning {
            server_serial,
            status,
            failed_step,
            ..
        } => Some((server_serial, *status, failed_step.as_deref())),
        _ => None,
    }
}

fn server_column(job: &Job) -> String {
    spec(job)
        .map(|(serial, status, _)| format!("{serial} ({status})"))
        .unwrap_or_default()
}

fn request_lines(job: &Job) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    if let JobSpec::Provisioning {
        server_serial,
        status,
        failed_step,
        maintenance_iso_url,
        generation,
        worker_id,
        ..
    } = &job.spec
    {
        lines.push(("server", server_serial.clone()));
        lines.push(("status", status.to_string()));
        if let Some(step) = failed_step {
            lines.push(("failed step", step.clone()));
        }
        lines.push(("maintenance ISO", maintenance_iso_url.clone()));
        if let Some(generation) = generation {
            lines.push(("manifest generation", generation.to_string()));
        }
        if let Some(worker) = worker_id {
            lines.push(("worker", worker.clone()));
        }
    }
    lines
}

fn journal_lines(job: &Job) -> Vec<(&'static str, String)> {
    use crate::stages::JournalFacts;
    let facts = ProvisionFacts::from_details(&job.stage_details);
    let mut lines = Vec::new();
    if let Some(iso) = &facts.iso {
        lines.push((
            "task ISO",
            format!("{} bytes, sha256 {}", iso.size, iso.sha256),
        ));
    }
    if let Some(expires) = facts.media_expires {
        lines.push(("media URL until", expires.to_rfc3339()));
    }
    if let Some(reset) = &facts.reset_outcome {
        lines.push(("reset", reset.clone()));
    }
    for warning in facts.warnings {
        lines.push(("warning", warning));
    }
    lines
}

fn extras(job: &Job) -> serde_json::Map<String, Value> {
    use crate::stages::JournalFacts;
    let facts = ProvisionFacts::from_details(&job.stage_details);
    let mut map = serde_json::Map::new();
    if let Some((serial, status, step)) = spec(job) {
        map.insert("server_serial".into(), json!(serial));
        map.insert("status".into(), json!(status));
        map.insert("failed_step".into(), json!(step));
    }
    map.insert("task_iso".into(), json!(facts.iso));
    map.insert("warnings".into(), json!(facts.warnings));
    map
}

impl Kind for Provisioning {
    const KIND: JobKind = JobKind::Provisioning;
    type Stage = ProvisioningStage;
    type Facts = ProvisionFacts;
    type Item = ProvisioningWork;

    fn node(item: &ProvisioningWork) -> (&str, &str) {
        (&item.site, &item.hostname)
    }

    /// The job row's own lease (seed 003 `worker_id`, `lease_expires_at`).
    fn lease(item: &ProvisioningWork) -> LeaseTarget {
        LeaseTarget::ProvisioningJob(item.job)
    }

    /// Workers poll: a job another worker holds is not waited for.
    fn lease_wait(_ttl: Duration) -> Duration {
        Duration::ZERO
    }

    fn continue_job(asked: Continuing<'_>) -> Result<ProvisioningWork, String> {
        Err(format!(
            "provisioning job {} is run by the provisioning workers (the daemon), not by a recovery action",
            asked.job.id
        ))
    }

    fn job_of(item: &ProvisioningWork) -> Option<Uuid> {
        Some(item.job)
    }

    /// `WORKER_CONCURRENCY` bounds the workers instead.
    fn limit(_item: &ProvisioningWork) -> Option<((String, String), usize)> {
        None
    }

    fn take_up<'a>(run: &'a mut Run<'_, Self>) -> BoxFuture<'a, Result<Job, Stop>> {
        Box::pin(async move {
            let job = run.store().job(JobKind::Provisioning, run.item.job).await?;
            if job.started_at.is_none() {
                run.item
                    .provisioner
                    .observer
                    .status(ProvisioningStatus::Provisioning);
            }
            match job.state {
                JobState::Pending | JobState::Running => Ok(job),
                other => Err(Stop::left(format!(
                    "provisioning job {} is {other}: nothing to run",
                    job.id
                ))),
            }
        })
    }

    fn run_stage<'a>(
        stage: ProvisioningStage,
        pass: Pass<'a, Self>,
    ) -> BoxFuture<'a, StageOutcome> {
        Box::pin(async move {
            let mut ctx = ProvisionCtx {
                env: pass.env,
                provisioner: &pass.item.provisioner,
                job: pass.job,
                facts: pass.facts,
                journal: pass.journal,
                fence: pass.fence,
                now: pass.now,
                session: &pass.item.session,
            };
            run_stage(stage, &mut ctx).await
        })
    }

    fn next(
        _job: &Job,
        stage: ProvisioningStage,
        done: &StageDone,
    ) -> Result<Option<ProvisioningStage>, StageFailure> {
        match done.next {
            Next::Complete => Ok(None),
            Next::Normal => Ok(stage.next()),
            Next::Jump(to) => to
                .parse()
                .map(Some)
                .map_err(|e: crate::lifecycle::UnknownName| {
                    StageFailure::new(FailureClass::StateAmbiguity, "unknown_stage", e.to_string())
                        .never_retry()
                }),
        }
    }

    fn is_first(_job: &Job, stage: ProvisioningStage) -> bool {
        stage == ProvisioningStage::first()
    }

    /// The Redfish client retries each request itself (`REDFISH_RETRIES`); a stage gets two
    /// more tries for a transient failure, none for a terminal one.
    fn retry_budget(_stage: ProvisioningStage, class: FailureClass) -> Option<u32> {
        Some(match class {
            FailureClass::UpstreamTransient => 2,
            _ => 0,
        })
    }

    /// Seed 003 "Any → failed (controller)": the job fails with its step, and cleanup runs.
    fn on_final_failure<'a>(
        run: &'a Run<'_, Self>,
        job: &'a Job,
        stage: ProvisioningStage,
        failure: &'a StageFailure,
    ) -> BoxFuture<'a, Result<Option<ProvisioningStage>, StoreError>> {
        Box::pin(async move {
            if stage.is_cleanup() {
                return Ok(stage.next());
            }
            let moved = run
                .store()
                .fail_provisioning(job.id, stage.as_str(), &failure.message, &run.fence())
                .await?;
            if moved {
                run.item
                    .provisioner
                    .observer
                    .status(ProvisioningStatus::Failed);
            }
            Ok(Some(ProvisioningStage::cleanup()))
        })
    }

    /// A server is not a node of the inventory: nothing moves.
    fn completion<'a>(
        _run: &'a Run<'_, Self>,
        _job: &'a Job,
    ) -> BoxFuture<'a, Result<Option<(NodeState, Owner)>, StoreError>> {
        Box::pin(async { Ok(None) })
    }

    fn completed<'a>(
        run: &'a Run<'_, Self>,
        job: &'a Job,
        facts: &'a ProvisionFacts,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let observer = &run.item.provisioner.observer;
            observer.status(ProvisioningStatus::Complete);
            let took = job
                .completed_at
                .map(|end| (end - job.requested_at).to_std().unwrap_or_default())
                .unwrap_or_default();
            observer.finished(
                facts.outcome.unwrap_or(ProvisioningStatus::Failed),
                took.as_secs_f64(),
            );
        })
    }

    fn compensate<'a>(
        _run: &'a Run<'_, Self>,
        job: &'a Job,
        _how: Compensation,
    ) -> BoxFuture<'a, Result<NodeOutcome, StoreError>> {
        Box::pin(async move {
            Ok(NodeOutcome::Left {
                reason: format!(
                    "provisioning job {} is not cancelled: it runs to complete (cleanup included)",
                    job.id
                ),
            })
        })
    }
}

/// The provisioning workers (seed 003 "Workers and Concurrency"): a poll loop handing jobs to
/// the engine, at most `WORKER_CONCURRENCY` at once; queued jobs are not picked while the ISO
/// builder's queue is over `ISO_QUEUE_LIMIT` (backpressure). Cheap to clone.
#[derive(Clone)]
pub struct Workers {
    engine: ProvisioningEngine,
    provisioner: Arc<Provisioner>,
    slots: Arc<tokio::sync::Semaphore>,
    running: Arc<Mutex<BTreeSet<Uuid>>>,
    tasks: Arc<Mutex<tokio::task::JoinSet<ApplyReport>>>,
}

impl Workers {
    /// `options.holder` names this worker in the jobs' `worker_id`; `options.stop` stops it.
    pub fn new(
        env: StageEnv,
        options: ExecutorOptions,
        progress: Arc<dyn Progress>,
        provisioner: Arc<Provisioner>,
    ) -> Self {
        let options = ExecutorOptions {
            lease_ttl: provisioner.settings.lease_ttl,
            poll_interval: provisioner.settings.poll_interval,
            ..options
        };
        Self {
            slots: Arc::new(tokio::sync::Semaphore::new(
                provisioner.settings.worker_concurrency.max(1),
            )),
            engine: Engine::new(env, options, progress),
            provisioner,
            running: Arc::default(),
            tasks: Arc::default(),
        }
    }

    pub fn provisioner(&self) -> &Arc<Provisioner> {
        &self.provisioner
    }

    pub fn store(&self) -> &Store {
        &self.engine.env().store
    }

    fn stop(&self) -> &StopSignal {
        &self.engine.options().stop
    }

    /// Jobs this worker is running now.
    pub fn running(&self) -> usize {
        self.running.lock().expect("lock").len()
    }

    /// One poll: start the jobs a worker may take, as many as free slots (and, for queued
    /// jobs, the ISO builder's allowance) allow. Returns how many started.
    pub async fn poll(&self) -> Result<usize, StoreError> {
        let free = self.slots.available_permits();
        if free == 0 || self.stop().is_stopped() {
            return Ok(0);
        }
        let candidates = self
            .store()
            .claimable_provisioning(free + self.running())
            .await?;
        let mut allowance = self.provisioner.pick_allowance();
        let mut started = 0;
        for job in candidates {
            if self.running.lock().expect("lock").contains(&job.id) {
                continue;
            }
            let queued = job.provisioning_status() == Some(ProvisioningStatus::Queued);
            if queued {
                if allowance == 0 {
                    continue;
                }
                allowance -= 1;
            }
            let Ok(permit) = self.slots.clone().try_acquire_owned() else {
                break;
            };
            self.running.lock().expect("lock").insert(job.id);
            let work = ProvisioningWork::new(&job, self.provisioner.clone());
            let engine = self.engine.clone();
            let running = self.running.clone();
            let id = job.id;
            self.tasks.lock().expect("lock").spawn(async move {
                let report = engine.run(vec![work]).await;
                running.lock().expect("lock").remove(&id);
                drop(permit);
                report
            });
            started += 1;
        }
        Ok(started)
    }

    /// Poll until stopped; then wait for the running jobs to rest (each stops at its next
    /// stage boundary and releases its lease, so the next worker takes it over at once).
    /// Task ISOs past their retention are collected every ten minutes.
    pub async fn run(&self) {
        let interval = self.provisioner.settings.poll_interval;
        let gc_every = Duration::from_secs(600);
        let mut last_gc: Option<tokio::time::Instant> = None;
        while !self.stop().is_stopped() {
            if let Err(err) = self.poll().await {
                tracing::warn!(target: "metalform::provisioning", error = %err, "cannot look for provisioning jobs");
            }
            self.reap();
            if last_gc.is_none_or(|at| at.elapsed() >= gc_every) {
                last_gc = Some(tokio::time::Instant::now());
                match self.collect_garbage().await {
                    Ok(report) if !report.removed.is_empty() => tracing::info!(
                        target: "metalform::provisioning",
                        removed = report.removed.len(),
                        bytes = report.bytes_freed,
                        "task ISOs collected"
                    ),
                    Ok(_) => {}
                    Err(err) => {
                        tracing::warn!(target: "metalform::provisioning", error = %err, "task ISO collection failed")
                    }
                }
            }
            self.stop().sleep(interval).await;
        }
        self.wait().await;
    }

    /// One task ISO collection (seed 003 "Task ISO Lifecycle"): the images of jobs complete
    /// for longer than `TASK_ISO_RETENTION`, and of unknown jobs older than it, are removed.
    pub async fn collect_garbage(&self) -> Result<GcReport, String> {
        let states = self
            .store()
            .provisioning_media_states()
            .await
            .map_err(|e| e.to_string())?;
        let media: BTreeMap<Uuid, JobMedia> = states
            .into_iter()
            .map(|(id, state)| {
                let media = match (state.status, state.completed_at) {
                    (ProvisioningStatus::Complete, Some(at)) => JobMedia::CompletedAt(at),
                    (ProvisioningStatus::Complete, None) => {
                        JobMedia::CompletedAt(chrono::DateTime::UNIX_EPOCH)
                    }
                    _ => JobMedia::Active,
                };
                (id, media)
            })
            .collect();
        let now = self.store().clock().now();
        self.provisioner
            .media
            .collect_garbage(now, self.provisioner.settings.retention, &media)
            .await
            .map_err(|e| e.to_string())
    }

    /// Abandon every running job at once, as a killed process would: leases are not
    /// released (they expire), nothing is journaled.
    pub fn abort(&self) {
        self.tasks.lock().expect("lock").abort_all();
    }

    /// Collect finished runs.
    fn reap(&self) {
        let mut tasks = self.tasks.lock().expect("lock");
        while tasks.try_join_next().is_some() {}
    }

    /// Wait for every running job's run to end.
    pub async fn wait(&self) -> ApplyReport {
        let mut report = ApplyReport::default();
        loop {
            let next = {
                let mut tasks = self.tasks.lock().expect("lock");
                if tasks.is_empty() {
                    break;
                }
                std::mem::take(&mut *tasks)
            };
            let mut next = next;
            while let Some(done) = next.join_next().await {
                if let Ok(run) = done {
                    report.results.extend(run.results);
                }
            }
        }
        report
    }

    /// Poll and run until no job is left to take or running (tests, `metalform demo`), or
    /// `limit` passed.
    pub async fn drain(&self, limit: Duration) -> Result<ApplyReport, StoreError> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut report = ApplyReport::default();
        loop {
            self.poll().await?;
            let idle = self.running() == 0;
            if idle && self.store().claimable_provisioning(1).await?.is_empty() {
                report.results.extend(self.wait().await.results);
                return Ok(report);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(report);
            }
            tokio::time::sleep(
                self.provisioner
                    .settings
                    .poll_interval
                    .min(Duration::from_millis(200)),
            )
            .await;
            let finished = {
                let mut tasks = self.tasks.lock().expect("lock");
                let mut out = Vec::new();
                while let Some(done) = tasks.try_join_next() {
                    out.extend(done.ok().map(|r| r.results).unwrap_or_default());
                }
                out
            };
            report.results.extend(finished);
        }
    }
}

/// A plan's Redfish provisioning item: its node, the generation it provisions, the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct ProvisionItem {
    pub target: NodeTarget,
    pub generation: u64,
    pub plan_id: String,
}

/// The server record of a Redfish node of the manifests: its serial, Redfish address, login
/// reference (its own, else the site's power credentials for it) and vendor.
pub fn server_of(target: &NodeTarget) -> Option<Server> {
    let redfish = target.node.provisioner.redfish()?;
    Some(Server {
        serial: redfish.serial.clone(),
        bmc_address: redfish.redfish_url.clone(),
        credentials: {
            let model = redfish
                .credentials
                .as_ref()
                .unwrap_or(&target.power_credentials);
            crate::secrets::SecretRef::new(model.path.clone(), model.key.as_deref())
        },
        vendor: redfish.vendor.clone(),
        last_seen: None,
        site: target.site_name().to_owned(),
        hostname: target.hostname().to_owned(),
    })
}

/// Record the manifests' Redfish servers (seed 003 `servers`): every node of `fleet` the
/// Redfish provisioner installs. Returns how many.
pub async fn sync_servers(store: &Store, fleet: &crate::model::Fleet) -> Result<usize, StoreError> {
    let servers: Vec<Server> = fleet
        .nodes
        .values()
        .filter(|n| n.provisioner.redfish().is_some())
        .filter_map(|n| NodeTarget::resolve(fleet, n))
        .filter_map(|t| server_of(&t))
        .collect();
    store.upsert_servers(&servers).await?;
    Ok(servers.len())
}

/// Queue a plan's provisioning items: each node's server recorded, a job created at the
/// item's generation with the node's recipe; the provisioning workers run it. CD1 is the
/// node's `maintenanceIsoUrl`, else `default_maintenance`.
pub async fn queue(
    store: &Store,
    observer: &dyn ProvisioningObserver,
    items: &[ProvisionItem],
    default_maintenance: Option<&str>,
    actor: &str,
) -> ApplyReport {
    let mut report = ApplyReport::default();
    for item in items {
        let outcome = queue_one(store, observer, item, default_maintenance, actor).await;
        let (job_id, outcome) = match outcome {
            Ok(job) => (
                Some(job.id),
                NodeOutcome::Queued {
                    reason: format!(
                        "provisioning job queued for server {}: the provisioning workers run it",
                        job.server_serial().unwrap_or_default()
                    ),
                },
            ),
            Err(reason) => (None, NodeOutcome::Left { reason }),
        };
        report.results.push(NodeResult {
            node: item.target.label(),
            job_id,
            outcome,
        });
    }
    report
}

async fn queue_one(
    store: &Store,
    observer: &dyn ProvisioningObserver,
    item: &ProvisionItem,
    default_maintenance: Option<&str>,
    actor: &str,
) -> Result<Job, String> {
    let target = &item.target;
    let (Some(redfish), Some(server)) = (target.node.provisioner.redfish(), server_of(target))
    else {
        return Err("the node is not a Redfish node".into());
    };
    let Some(maintenance) = redfish
        .maintenance_iso_url
        .as_deref()
        .or(default_maintenance)
    else {
        return Err(
            "no maintenance OS image: set provisioner.maintenanceIsoUrl on the node, or MAINTENANCE_ISO_URL"
                .into(),
        );
    };
    store
        .upsert_servers(std::slice::from_ref(&server))
        .await
        .map_err(|e| e.to_string())?;
    let new = NewProvisioning {
        serial: server.serial.clone(),
        recipe: redfish.recipe.clone(),
        maintenance_iso_url: maintenance.to_owned(),
        // One job per plan item, however often the plan is applied.
        idempotency_key: Some(format!("{}#{}", item.plan_id, item.generation)),
        requested_by: Some(actor.to_owned()),
        plan_id: Some(item.plan_id.clone()),
        generation: Some(item.generation as i64),
    };
    match request(store, observer, &new).await {
        Ok(created) => Ok(created.job().clone()),
        Err(RequestError::InvalidRecipe(errors)) => Err(format!(
            "the node's recipe is not valid: {}",
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )),
        Err(RequestError::Store(err)) => Err(err.to_string()),
    }
}

/// Why a provisioning request was refused (the API classifies these once).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("the recipe is not valid ({} problem(s))", .0.len())]
    InvalidRecipe(Vec<RecipeError>),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A provisioning request (seed 003 `POST /api/v1/jobs`; a plan item): the recipe validated
/// against its schema version, the server resolved, the job created `queued` — or, with an
/// idempotency key, the server's active job with that key.
pub async fn request(
    store: &Store,
    observer: &dyn ProvisioningObserver,
    new: &NewProvisioning,
) -> Result<Created, RequestError> {
    recipe::validate(&new.recipe).map_err(RequestError::InvalidRecipe)?;
    let created = store.create_provisioning(new).await?;
    if matches!(created, Created::New(_)) {
        observer.status(ProvisioningStatus::Queued);
    }
    Ok(created)
}
