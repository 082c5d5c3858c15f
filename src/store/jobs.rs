//! Durable per-node stage journals: onboardings (000 §4.2.1, §4.5, §4.12) and decommissions
//! (000 §5.7), with their event rows, operator recovery actions (000 §4.9) and the domain
//! events of 000 §8.0.
//!
//! One code path serves both kinds; they differ only in their tables, their stage catalog and
//! their request fields. A job update is one transaction: the job-state move, the stage, the
//! failure fields, an event row, an optional coarse node transition, the node/job consistency
//! check of 001 §4.3/§5.3, the domain event and the store serial — all or nothing.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::lifecycle::{
    DecommissionMode, DecommissionStage, FailureClass, JobKind, JobState, NodeState,
    OnboardingStage, ProvisioningStage, ProvisioningStatus, RecoveryAction, check_job_node_state,
    recommend, status_for,
};

use super::db::{Backend, Param, Row, Select, Tx, params};
use super::leases::{Fence, check_fence};
use super::nodes::{NodeTransition, lock_node, open_jobs, read_node, transition_in};
use super::records::{Actor, AuditEntry, DomainEvent, write_audit, write_outbox};
use super::{
    Store, StoreError, bump_serial, format_time, parse_json, parse_name, parse_opt_time,
    parse_time, parse_uuid,
};

/// The request fields that differ between the two kinds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobSpec {
    Onboarding {
        batch_id: Option<String>,
        ipmi_ip: Option<String>,
        pxe_mac: Option<String>,
    },
    Decommission {
        mode: DecommissionMode,
        /// none | quick | secure
        erase: Option<String>,
        /// none | local | weka | all
        storage_cleanup: Option<String>,
        reason: Option<String>,
    },
    /// Redfish provisioning (seed 003 `jobs`): the server, the seed's status and what the
    /// worker recorded. The recipe is read on its own (`Store::provisioning_recipe`).
    Provisioning {
        server_serial: String,
        status: ProvisioningStatus,
        failed_step: Option<String>,
        maintenance_iso_url: String,
        task_iso_path: Option<String>,
        picked_at: Option<DateTime<Utc>>,
        worker_id: Option<String>,
        lease_expires_at: Option<DateTime<Utc>>,
        idempotency_key: Option<String>,
        /// The manifest's reimage generation the job provisions; `None`: an API request.
        generation: Option<i64>,
        /// When the maintenance OS reported.
        webhook_at: Option<DateTime<Utc>>,
    },
}

/// A failure as recorded on the job (000 §4.7, §4.12): the class is a field, never inferred.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobFailure {
    pub class: FailureClass,
    /// Stable machine-readable code, e.g. `failed_commission_timeout`, `boot_disk_not_found`.
    pub code: String,
    pub message: String,
    /// Stage-specific details (system id, interface, disk ids, token status…), bounded.
    pub details: Value,
}

/// Last observed MAAS facts to keep on the job for diagnostics (000 §4.12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Observed {
    pub status: Option<String>,
    pub power_state: Option<String>,
    pub ips: Vec<String>,
}

/// One job (onboarding or decommission) as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Job {
    pub id: Uuid,
    pub kind: JobKind,
    pub node_id: Option<Uuid>,
    pub site: String,
    pub hostname: String,
    pub maas_system_id: Option<String>,
    pub requested_by: Option<String>,
    pub stage: String,
    pub attempt: i64,
    pub state: JobState,
    pub failure_class: Option<FailureClass>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub error_details: Value,
    pub recommended_action: Option<String>,
    pub last_maas_status: Option<String>,
    pub last_maas_power_state: Option<String>,
    pub last_maas_ips: Vec<String>,
    pub stage_details: Value,
    /// An adopt action was taken: the job owns the deployment it adopted.
    pub adopted: bool,
    /// The job is being finished by adopting observed state: its success ends `reconciled`.
    /// A rerun or restart-clean of an adopted job clears it (its success is a normal one).
    pub ends_reconciled: bool,
    pub plan_id: Option<String>,
    pub requested_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    /// `failed_retryable` outcomes in a row: since the job last succeeded or its node's spec
    /// changed (an operator's retry does not reset it).
    pub retry_failures: i64,
    /// While the job is `failed_retryable`: the reconciler does not retry it before this
    /// (`None`: it may at once). An operator's retry does not wait.
    pub next_try_at: Option<DateTime<Utc>>,
    /// The node spec the last failure happened under ([`RetryWait::spec`]).
    pub retry_spec: Option<String>,
    pub spec: JobSpec,
}

/// A `failed_retryable` job's wait for its next try, as `status` and the API show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NextTry {
    pub at: DateTime<Utc>,
    /// The failures in a row so far; the next try is attempt `failures + 1`.
    pub failures: i64,
    pub attempt: i64,
    /// `next try in 4m (attempt 3)`; once due, `next try due (attempt 3)`.
    pub text: String,
}

impl Job {
    /// The reconciler's next try of this job, read at `now`: `None` unless the job is
    /// `failed_retryable` with a recorded wait (an operator's retry never waits).
    pub fn next_try(&self, now: DateTime<Utc>) -> Option<NextTry> {
        if self.state != JobState::FailedRetryable {
            return None;
        }
        let at = self.next_try_at?;
        let attempt = self.retry_failures.saturating_add(1);
        let text = if at > now {
            format!(
                "next try in {} (attempt {attempt})",
                crate::model::until(now, at)
            )
        } else {
            format!("next try due (attempt {attempt})")
        };
        Some(NextTry {
            at,
            failures: self.retry_failures,
            attempt,
            text,
        })
    }

    pub fn mode(&self) -> Option<DecommissionMode> {
        match self.spec {
            JobSpec::Decommission { mode, .. } => Some(mode),
            JobSpec::Onboarding { .. } | JobSpec::Provisioning { .. } => None,
        }
    }

    /// A provisioning job's seed status.
    pub fn provisioning_status(&self) -> Option<ProvisioningStatus> {
        match self.spec {
            JobSpec::Provisioning { status, .. } => Some(status),
            _ => None,
        }
    }

    /// A provisioning job's server serial.
    pub fn server_serial(&self) -> Option<&str> {
        match &self.spec {
            JobSpec::Provisioning { server_serial, .. } => Some(server_serial),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewOnboarding {
    pub node_id: Option<Uuid>,
    pub site: String,
    pub hostname: String,
    pub ipmi_ip: Option<String>,
    pub pxe_mac: Option<String>,
    pub batch_id: Option<String>,
    pub requested_by: Option<String>,
    pub plan_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDecommission {
    pub node_id: Uuid,
    pub mode: DecommissionMode,
    pub erase: Option<String>,
    pub storage_cleanup: Option<String>,
    pub reason: Option<String>,
    pub requested_by: Option<String>,
    pub plan_id: Option<String>,
}

/// The status of one stage-attempt event row (000 §4.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventStatus {
    Started,
    Succeeded,
    Failed,
    Compensated,
    Skipped,
    /// Something that happened to the job outside a stage attempt (seed 003's job events: a
    /// worker picked it, the maintenance OS reported).
    Note,
}

impl EventStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EventStatus::Started => "started",
            EventStatus::Succeeded => "succeeded",
            EventStatus::Failed => "failed",
            EventStatus::Compensated => "compensated",
            EventStatus::Skipped => "skipped",
            EventStatus::Note => "note",
        }
    }
}

/// An event row to append with a job update.
#[derive(Debug, Clone, PartialEq)]
pub struct StageEvent {
    pub stage: String,
    pub attempt: i64,
    pub status: EventStatus,
    pub message: Option<String>,
    pub details: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageEventRow {
    pub id: i64,
    pub stage: String,
    pub attempt: i64,
    pub status: String,
    pub message: Option<String>,
    pub details: Value,
    pub occurred_at: DateTime<Utc>,
}

/// When a `failed_retryable` job may be tried again (written with the failure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryWait {
    /// `failed_retryable` outcomes in a row, this one included.
    pub failures: i64,
    pub next_try_at: DateTime<Utc>,
    /// What the node's spec was (a hash of its resolved manifests): when it changes, the
    /// reconciler retries at once and the count starts again.
    pub spec: String,
}

/// One step of the journal. `JobUpdate::new(state)` and set what changes.
#[derive(Debug, Clone, PartialEq)]
pub struct JobUpdate {
    pub state: JobState,
    /// The new current stage (validated against the kind's catalog / the mode's stages).
    pub stage: Option<String>,
    pub attempt: Option<i64>,
    /// Required when `state` is a failed state; cleared on any other state.
    pub failure: Option<JobFailure>,
    pub event: Option<StageEvent>,
    /// The next stage's `started` event, written after `event` in the same transaction: a
    /// finished stage and the opening of the next one's first attempt in one write.
    pub opened: Option<StageEvent>,
    /// Bind the job to its node (once; an onboarding learns its node at render_cloud_init).
    pub node_id: Option<Uuid>,
    /// Move the node's coarse state in the same transaction.
    pub node_transition: Option<NodeTransition>,
    pub maas_system_id: Option<String>,
    pub observed: Option<Observed>,
    pub stage_details: Option<Value>,
    /// Refuse unless this lease is still held (a stale executor's write is refused).
    pub fence: Option<Fence>,
    /// With a move to `failed_retryable`: when it may be tried again. Any other move clears
    /// the wait; a success also clears the count.
    pub retry: Option<RetryWait>,
}

impl JobUpdate {
    pub fn new(state: JobState) -> Self {
        Self {
            state,
            stage: None,
            attempt: None,
            failure: None,
            event: None,
            opened: None,
            node_id: None,
            node_transition: None,
            maas_system_id: None,
            observed: None,
            stage_details: None,
            fence: None,
            retry: None,
        }
    }
}

/// Filters for [`Store::list_jobs`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    pub node_id: Option<Uuid>,
    pub site: Option<String>,
    pub hostname: Option<String>,
    pub state: Option<JobState>,
    pub batch_id: Option<String>,
    /// Only jobs that are not terminal.
    pub open_only: bool,
}

/// Where a kind's journal lives. The provisioning kind keeps seed 003's column names where
/// the seed names them (`status` is the seed's status there, so the engine's job state has
/// a column of its own; `created_at`; events with `step` and `time`).
pub(super) struct Tables {
    pub jobs: &'static str,
    pub events: &'static str,
    pub label: &'static str,
    /// The column of the engine's job state.
    pub state: &'static str,
    /// The column of the request time.
    pub requested: &'static str,
    /// The events' stage and time columns.
    pub event_stage: &'static str,
    pub event_time: &'static str,
}

pub(super) fn tables(kind: JobKind) -> Tables {
    let journal = |jobs, events, label| Tables {
        jobs,
        events,
        label,
        state: "status",
        requested: "requested_at",
        event_stage: "stage",
        event_time: "occurred_at",
    };
    match kind {
        JobKind::Onboarding => journal("onboardings", "onboarding_events", "onboarding"),
        JobKind::Decommission => journal("decommissions", "decommission_events", "decommission"),
        JobKind::Provisioning => Tables {
            jobs: "provisioning_jobs",
            events: "provisioning_job_events",
            label: "provisioning",
            state: "job_state",
            requested: "created_at",
            event_stage: "step",
            event_time: "time",
        },
    }
}

pub(super) fn job_from_row(kind: JobKind, row: &Row) -> Result<Job, StoreError> {
    job_row(kind, row, Details::Parse)
}

/// Whether a job's `stage_details` document is parsed from its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Details {
    Parse,
    /// Left `Null`: the caller has the document (a journal write that carries its facts
    /// parsed ~2 KB of JSON twice per write only to drop it).
    Skip,
}

impl Details {
    /// A write that carries the facts replaces the row's: neither the row read before it nor
    /// the row written back needs its document parsed.
    fn of(update: &JobUpdate) -> Self {
        match update.stage_details {
            Some(_) => Details::Skip,
            None => Details::Parse,
        }
    }
}

fn job_row(kind: JobKind, row: &Row, details: Details) -> Result<Job, StoreError> {
    let t = tables(kind);
    let ips: Vec<String> = serde_json::from_value(parse_json(&row.text("last_maas_ips")?)?)
        .map_err(|e| StoreError::Corrupt(format!("last_maas_ips: {e}")))?;
    let spec = match kind {
        JobKind::Onboarding => JobSpec::Onboarding {
            batch_id: row.opt_text("batch_id")?,
            ipmi_ip: row.opt_text("ipmi_ip")?,
            pxe_mac: row.opt_text("pxe_mac")?,
        },
        JobKind::Decommission => JobSpec::Decommission {
            mode: parse_name(&row.text("mode")?)?,
            erase: row.opt_text("erase")?,
            storage_cleanup: row.opt_text("storage_cleanup")?,
            reason: row.opt_text("reason")?,
        },
        JobKind::Provisioning => JobSpec::Provisioning {
            server_serial: row.text("server_serial")?,
            status: parse_name(&row.text("status")?)?,
            failed_step: row.opt_text("failed_step")?,
            maintenance_iso_url: row.text("maintenance_iso_url")?,
            task_iso_path: row.opt_text("task_iso_path")?,
            picked_at: parse_opt_time(row.opt_text("picked_at")?)?,
            worker_id: row.opt_text("worker_id")?,
            lease_expires_at: parse_opt_time(row.opt_text("lease_expires_at")?)?,
            idempotency_key: row.opt_text("idempotency_key")?,
            generation: row.opt_int("generation")?,
            webhook_at: parse_opt_time(row.opt_text("webhook_at")?)?,
        },
    };
    Ok(Job {
        id: parse_uuid(&row.text("id")?)?,
        kind,
        node_id: row
            .opt_text("node_id")?
            .as_deref()
            .map(parse_uuid)
            .transpose()?,
        site: row.text("site")?,
        hostname: row.text("hostname")?,
        maas_system_id: row.opt_text("maas_system_id")?,
        requested_by: row.opt_text("requested_by")?,
        stage: row.text("current_stage")?,
        attempt: row.int("current_attempt")?,
        state: parse_name(&row.text(t.state)?)?,
        adopted: row.bool("adopted")?,
        // A provisioning job never ends as a reconciled machine: its table has no such column.
        ends_reconciled: kind != JobKind::Provisioning && row.bool("ends_reconciled")?,
        failure_class: row
            .opt_text("failure_class")?
            .as_deref()
            .map(parse_name)
            .transpose()?,
        error_code: row.opt_text("error_code")?,
        error_message: row.opt_text("error_message")?,
        error_details: parse_json(&row.text("error_details")?)?,
        recommended_action: row.opt_text("recommended_action")?,
        last_maas_status: row.opt_text("last_maas_status")?,
        last_maas_power_state: row.opt_text("last_maas_power_state")?,
        last_maas_ips: ips,
        stage_details: match details {
            Details::Parse => parse_json(&row.text("stage_details")?)?,
            Details::Skip => serde_json::Value::Null,
        },
        plan_id: row.opt_text("plan_id")?,
        requested_at: parse_time(&row.text(t.requested)?)?,
        started_at: parse_opt_time(row.opt_text("started_at")?)?,
        completed_at: parse_opt_time(row.opt_text("completed_at")?)?,
        updated_at: parse_time(&row.text("updated_at")?)?,
        retry_failures: row.int("retry_failures")?,
        next_try_at: parse_opt_time(row.opt_text("next_try_at")?)?,
        retry_spec: row.opt_text("retry_spec")?,
        spec,
    })
}

/// The job a write transaction is about to move. On PostgreSQL its node's row is locked first
/// (with `node`, the node the write gives the job, when it has none yet) and the job read again
/// under the lock, since another transaction may have moved it meanwhile. A SQLite writer holds
/// the whole database from `BEGIN IMMEDIATE` on, so its one read stands to the end: the lock
/// and the second read would be two more statements per job write, for nothing.
async fn read_job_for_write(
    tx: &mut Tx,
    kind: JobKind,
    id: Uuid,
    node: Option<Uuid>,
    details: Details,
) -> Result<Job, StoreError> {
    let job = read_job_as(tx, kind, id, details).await?;
    if tx.backend() == Backend::Sqlite {
        return Ok(job);
    }
    match job.node_id.or(node) {
        Some(node) => {
            lock_node(tx, node).await?;
            read_job_as(tx, kind, id, details).await
        }
        None => Ok(job),
    }
}

pub(super) async fn read_job(tx: &mut Tx, kind: JobKind, id: Uuid) -> Result<Job, StoreError> {
    read_job_as(tx, kind, id, Details::Parse).await
}

async fn read_job_as(
    tx: &mut Tx,
    kind: JobKind,
    id: Uuid,
    details: Details,
) -> Result<Job, StoreError> {
    let t = tables(kind);
    let row = tx.fetch_by_id(t.jobs, t.label, id).await?;
    job_row(kind, &row, details)
}

/// The retry columns after `update`: a failure's wait is written as given; a success clears
/// the count and the wait; any other move clears the wait and keeps the count (a resumed job
/// that fails again has failed twice in a row).
fn retry_columns(
    job: &Job,
    update: &JobUpdate,
) -> Result<(i64, Option<String>, Option<String>), StoreError> {
    match &update.retry {
        Some(_) if update.state != JobState::FailedRetryable => Err(StoreError::Invalid(format!(
            "{} {}: only a failed_retryable job waits for its next try, not a {} one",
            tables(job.kind).label,
            job.id,
            update.state
        ))),
        Some(wait) if wait.failures < 1 => Err(StoreError::Invalid(format!(
            "{} {}: a retry wait counts at least the failure it follows",
            tables(job.kind).label,
            job.id
        ))),
        Some(wait) => Ok((
            wait.failures,
            Some(format_time(wait.next_try_at)),
            Some(wait.spec.clone()),
        )),
        None if matches!(update.state, JobState::Completed | JobState::Reconciled) => {
            Ok((0, None, None))
        }
        None if update.state == job.state => Ok((
            job.retry_failures,
            job.next_try_at.map(format_time),
            job.retry_spec.clone(),
        )),
        None => Ok((job.retry_failures, None, job.retry_spec.clone())),
    }
}

/// Refuse a stage name outside the kind's catalog (and, for decommissions, the mode's list).
fn check_stage(
    kind: JobKind,
    mode: Option<DecommissionMode>,
    stage: &str,
) -> Result<(), StoreError> {
    match kind {
        JobKind::Onboarding => {
            stage.parse::<OnboardingStage>()?;
        }
        JobKind::Provisioning => {
            stage.parse::<ProvisioningStage>()?;
        }
        JobKind::Decommission => {
            let parsed: DecommissionStage = stage.parse()?;
            if let Some(mode) = mode
                && !mode.stages().contains(&parsed)
            {
                return Err(StoreError::Invalid(format!(
                    "stage `{stage}` is not part of a {mode} decommission"
                )));
            }
        }
    }
    Ok(())
}

fn first_stage(kind: JobKind, mode: Option<DecommissionMode>) -> &'static str {
    match (kind, mode) {
        (JobKind::Decommission, Some(mode)) => mode.first_stage().as_str(),
        (JobKind::Decommission, None) => DecommissionStage::DisableNode.as_str(),
        (JobKind::Onboarding, _) => OnboardingStage::first().as_str(),
        (JobKind::Provisioning, _) => ProvisioningStage::first().as_str(),
    }
}

/// The 000 §8.0 event a job-state change announces, if any.
pub(super) fn domain_event(kind: JobKind, job: &Job) -> Option<DomainEvent> {
    let suffix = match job.state {
        JobState::Running => "started",
        JobState::Completed | JobState::Reconciled => "completed",
        JobState::FailedRetryable => "failed",
        JobState::FailedManualIntervention => "manual_intervention_required",
        JobState::Pending | JobState::Cancelled | JobState::Compensating => return None,
    };
    Some(DomainEvent {
        event_type: format!("node.{}.{suffix}", kind.as_str()),
        subject_id: job.id.to_string(),
        payload: json!({
            "job_id": job.id,
            "node_id": job.node_id,
            "site": job.site,
            "hostname": job.hostname,
            "state": job.state,
            "stage": job.stage,
            "attempt": job.attempt,
            "failure_class": job.failure_class,
            "error_code": job.error_code,
        }),
    })
}

/// Append one event row of a job. Seed 003's events also carry a level and always a
/// message: a failure is an error, a failure that is retried or compensated a warning, and a
/// stage may say `"level"` in its details (a best-effort cleanup step that did not work).
pub(super) async fn insert_event(
    tx: &mut Tx,
    kind: JobKind,
    job: Uuid,
    event: &StageEvent,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let t = tables(kind);
    if kind != JobKind::Provisioning {
        tx.execute(
            format!(
                "INSERT INTO {} (job_id, stage, attempt, status, message, details, occurred_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                t.events
            ),
            &params![
                job.to_string(),
                event.stage.clone(),
                event.attempt,
                event.status.as_str(),
                event.message.clone(),
                event.details.to_string(),
                format_time(now),
            ],
        )
        .await?;
        return Ok(());
    }
    let level = match event.details.get("level").and_then(Value::as_str) {
        Some(level @ ("info" | "warn" | "error")) => level,
        _ => match event.status {
            EventStatus::Failed if event.details.get("retry_in_secs").is_some() => "warn",
            EventStatus::Failed => "error",
            EventStatus::Compensated => "warn",
            EventStatus::Started
            | EventStatus::Succeeded
            | EventStatus::Skipped
            | EventStatus::Note => "info",
        },
    };
    let message = event
        .message
        .clone()
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| format!("{} {}", event.stage, event.status.as_str()));
    tx.execute(
        format!(
            "INSERT INTO {} (job_id, step, attempt, status, message, details, time, level)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            t.events
        ),
        &params![
            job.to_string(),
            (!event.stage.is_empty()).then(|| event.stage.clone()),
            event.attempt,
            event.status.as_str(),
            message,
            event.details.to_string(),
            format_time(now),
            level,
        ],
    )
    .await?;
    Ok(())
}

impl Store {
    /// Start an onboarding journal (pending, first stage, attempt 0). Refused with
    /// [`StoreError::JobOpen`] when the node (or the site/hostname) already has an open
    /// onboarding — by the database's unique index too, when two writers race to create a
    /// node's first one.
    pub async fn create_onboarding(&self, new: &NewOnboarding) -> Result<Job, StoreError> {
        match self.try_create_onboarding(new).await {
            Err(err) if err.is_unique_violation() => {
                // Lost a race: the other writer's onboarding is committed now.
                let mut tx = self.pool.read().await?;
                match open_onboarding(&mut tx, new).await? {
                    Some(open) => Err(open),
                    None => Err(err),
                }
            }
            other => other,
        }
    }

    async fn try_create_onboarding(&self, new: &NewOnboarding) -> Result<Job, StoreError> {
        let id = Uuid::new_v4();
        let now = format_time(self.now());
        let mut tx = self.pool.write().await?;
        if let Some(node) = new.node_id {
            lock_node(&mut tx, node).await?;
            let node = read_node(&mut tx, node).await?;
            check_job_node_state(JobKind::Onboarding, None, JobState::Pending, node.status)
                .map_err(|source| StoreError::JobState {
                    kind: "onboarding",
                    job: id.to_string(),
                    source,
                })?;
        }
        if let Some(open) = open_onboarding(&mut tx, new).await? {
            return Err(open);
        }
        tx.execute(
            "INSERT INTO onboardings (id, node_id, site, hostname, requested_by, current_stage,
                status, recommended_action, plan_id, requested_at, updated_at, batch_id, ipmi_ip,
                pxe_mac)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11, $12, $13)",
            &params![
                id.to_string(),
                new.node_id.map(|n| n.to_string()),
                new.site.clone(),
                new.hostname.clone(),
                new.requested_by.clone(),
                OnboardingStage::first().as_str(),
                JobState::Pending.as_str(),
                recommend(JobState::Pending, None, None).text,
                new.plan_id.clone(),
                now,
                new.batch_id.clone(),
                new.ipmi_ip.clone(),
                new.pxe_mac.clone(),
            ],
        )
        .await?;
        mark_superseded(
            &mut tx,
            JobKind::Onboarding,
            &new.site,
            &new.hostname,
            new.node_id,
        )
        .await?;
        bump_serial(&mut tx).await?;
        let job = read_job(&mut tx, JobKind::Onboarding, id).await?;
        tx.commit().await?;
        Ok(job)
    }

    /// Start a decommission journal. Refused for a deleted node, for a node with an open
    /// decommission, and for reimage/full decommission of a protected node (seed 004).
    pub async fn create_decommission(&self, new: &NewDecommission) -> Result<Job, StoreError> {
        let id = Uuid::new_v4();
        let now = format_time(self.now());
        let mut tx = self.pool.write().await?;
        lock_node(&mut tx, new.node_id).await?;
        let node = read_node(&mut tx, new.node_id).await?;
        if node.status == NodeState::Deleted {
            return Err(StoreError::Invalid(format!(
                "node {} is deleted; re-onboarding creates a new node",
                node.id
            )));
        }
        if node.protected && new.mode.is_destructive() {
            return Err(StoreError::Provision {
                node: node.id.to_string(),
                source: crate::lifecycle::IronicError::Protected {
                    verb: if new.mode == DecommissionMode::Reimage {
                        crate::lifecycle::Verb::Rebuild
                    } else {
                        crate::lifecycle::Verb::Delete
                    },
                },
            });
        }
        if let Some((_, _, state, job)) = open_jobs(&mut tx, node.id)
            .await?
            .into_iter()
            .find(|(kind, ..)| *kind == JobKind::Decommission)
        {
            return Err(StoreError::JobOpen {
                node: node.id.to_string(),
                kind: "decommission",
                job,
                state: state.as_str().into(),
            });
        }
        check_job_node_state(
            JobKind::Decommission,
            Some(new.mode),
            JobState::Pending,
            node.status,
        )
        .map_err(|source| StoreError::JobState {
            kind: "decommission",
            job: id.to_string(),
            source,
        })?;
        tx.execute(
            "INSERT INTO decommissions (id, node_id, site, hostname, requested_by, current_stage,
                status, recommended_action, plan_id, requested_at, updated_at, mode, erase,
                storage_cleanup, reason)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11, $12, $13, $14)",
            &params![
                id.to_string(),
                node.id.to_string(),
                node.site.clone(),
                node.hostname.clone(),
                new.requested_by.clone(),
                new.mode.first_stage().as_str(),
                JobState::Pending.as_str(),
                recommend(JobState::Pending, None, None).text,
                new.plan_id.clone(),
                now,
                new.mode.as_str(),
                new.erase.clone(),
                new.storage_cleanup.clone(),
                new.reason.clone(),
            ],
        )
        .await?;
        mark_superseded(
            &mut tx,
            JobKind::Decommission,
            &node.site,
            &node.hostname,
            Some(node.id),
        )
        .await?;
        bump_serial(&mut tx).await?;
        let job = read_job(&mut tx, JobKind::Decommission, id).await?;
        tx.commit().await?;
        Ok(job)
    }

    pub async fn job(&self, kind: JobKind, id: Uuid) -> Result<Job, StoreError> {
        // One statement needs no transaction around it: every stage pass reads its job.
        let t = tables(kind);
        job_from_row(
            kind,
            &self.pool.fetch_by_id_once(t.jobs, t.label, id).await?,
        )
    }

    /// Jobs of one kind, newest request first.
    pub async fn list_jobs(
        &self,
        kind: JobKind,
        filter: &JobFilter,
    ) -> Result<Vec<Job>, StoreError> {
        let t = tables(kind);
        let mut select = Select::all_of(t.jobs);
        if let Some(node) = filter.node_id {
            select.and("node_id =", node.to_string());
        }
        if let Some(site) = &filter.site {
            select.and("site =", site);
        }
        if let Some(hostname) = &filter.hostname {
            select.and("hostname =", hostname);
        }
        if let Some(state) = filter.state {
            select.and(&format!("{} =", t.state), state.as_str());
        }
        if let Some(batch) = &filter.batch_id
            && kind == JobKind::Onboarding
        {
            select.and("batch_id =", batch);
        }
        if filter.open_only {
            for state in JobState::ALL.iter().filter(|s| s.is_terminal()) {
                select.and(&format!("{} <>", t.state), state.as_str());
            }
        }
        let mut tx = self.pool.read().await?;
        select
            .fetch(&mut tx, &format!("{} DESC, id", t.requested))
            .await?
            .iter()
            .map(|row| job_from_row(kind, row))
            .collect()
    }

    /// The jobs that still matter for deciding about nodes, newest request first: every open
    /// job, the latest job of each (site, hostname), and each node's latest job that names a
    /// MAAS machine. Observe and the drift pass read these instead of every job ever recorded:
    /// a node's history of finished jobs costs nothing once a newer one exists.
    pub async fn current_jobs(
        &self,
        kind: JobKind,
        site: Option<&str>,
    ) -> Result<Vec<Job>, StoreError> {
        let mut tx = self.pool.read().await?;
        current_jobs_in(&mut tx, kind, site, 0).await
    }

    /// A site's (or every site's) inventory rows and current jobs of every kind, with the
    /// store serial read first, in one read transaction: what a reconcile's observation and
    /// its drift pass both decide on, read once for the two.
    pub async fn site_rows(&self, site: Option<&str>) -> Result<SiteRows, StoreError> {
        let (serial, nodes, jobs) = self
            .site_rows_into(site, |nodes| nodes, |jobs| jobs)
            .await?;
        Ok(SiteRows {
            serial,
            nodes,
            jobs,
        })
    }

    /// [`Store::site_rows`], each part handed to its own conversion as soon as it is read: the
    /// inventory rows are converted (and dropped) before the jobs are read, so a caller that
    /// keeps less than the rows never holds both sets of rows at once.
    pub async fn site_rows_into<N, J>(
        &self,
        site: Option<&str>,
        nodes: impl FnOnce(Vec<super::Node>) -> N + Send + 'static,
        jobs: impl FnOnce(Vec<(JobKind, Vec<Job>)>) -> J + Send + 'static,
    ) -> Result<(i64, N, J), StoreError>
    where
        N: Send + 'static,
        J: Send + 'static,
    {
        let site = site.map(str::to_owned);
        self.pool
            .read_bulk(move |mut tx| async move {
                let serial = super::serial_in(&mut tx).await?;
                let filter = super::NodeFilter {
                    site: site.clone(),
                    ..super::NodeFilter::default()
                };
                let rows = super::nodes::list_nodes_in(&mut tx, &filter).await?;
                // Room for one current job of each kind per node: a kind with fewer jobs never
                // touches the rest of it, and a converged fleet's jobs are not copied from one
                // buffer to the next as the vector grows.
                let expected = rows.len();
                let nodes = nodes(rows);
                let mut current = Vec::with_capacity(JobKind::ALL.len());
                for kind in JobKind::ALL {
                    current.push((
                        *kind,
                        current_jobs_in(&mut tx, *kind, site.as_deref(), expected).await?,
                    ));
                }
                Ok((serial, nodes, jobs(current)))
            })
            .await
    }

    /// How many jobs of one kind (of one site) are in each state: one counting query.
    pub async fn job_counts(
        &self,
        kind: JobKind,
        site: Option<&str>,
    ) -> Result<BTreeMap<JobState, usize>, StoreError> {
        let t = tables(kind);
        let mut sql = format!(
            "SELECT {} AS status, COUNT(*) AS n FROM {} WHERE 1 = 1",
            t.state, t.jobs
        );
        let mut values = Vec::new();
        if let Some(site) = site {
            values.push(Param::from(site));
            sql.push_str(" AND site = $1");
        }
        sql.push_str(&format!(" GROUP BY {}", t.state));
        let mut tx = self.pool.read().await?;
        let mut counts = BTreeMap::new();
        for row in tx.fetch_all(sql, &values).await? {
            let state: JobState = parse_name(&row.text("status")?)?;
            counts.insert(state, usize::try_from(row.int("n")?).unwrap_or(0));
        }
        Ok(counts)
    }

    /// The node's most recent job of either kind (the lifecycle detail view, 001 §9.2).
    pub async fn latest_job_for_node(&self, node: Uuid) -> Result<Option<Job>, StoreError> {
        let mut latest: Option<Job> = None;
        for kind in JobKind::ALL {
            let filter = JobFilter {
                node_id: Some(node),
                ..JobFilter::default()
            };
            if let Some(job) = self.list_jobs(*kind, &filter).await?.into_iter().next()
                && latest
                    .as_ref()
                    .is_none_or(|l| job.requested_at > l.requested_at)
            {
                latest = Some(job);
            }
        }
        Ok(latest)
    }

    /// A job's event rows, oldest first (at most `limit`, the most recent ones).
    pub async fn job_events(
        &self,
        kind: JobKind,
        id: Uuid,
        limit: i64,
    ) -> Result<Vec<StageEventRow>, StoreError> {
        let t = tables(kind);
        let mut tx = self.pool.read().await?;
        let mut rows = tx
            .fetch_all(
                format!(
                    "SELECT * FROM {} WHERE job_id = $1 ORDER BY id DESC LIMIT $2",
                    t.events
                ),
                &params![id.to_string(), limit],
            )
            .await?
            .iter()
            .map(|row| {
                Ok(StageEventRow {
                    id: row.int("id")?,
                    // Seed 003 events may be about the whole job (no step).
                    stage: row.opt_text(t.event_stage)?.unwrap_or_default(),
                    attempt: row.int("attempt")?,
                    status: row.text("status")?,
                    message: row.opt_text("message")?,
                    details: parse_json(&row.text("details")?)?,
                    occurred_at: parse_time(&row.text(t.event_time)?)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        rows.reverse();
        Ok(rows)
    }

    /// Write one journal step (see the module doc). Refused as a whole, changing nothing, when
    /// any rule breaks.
    pub async fn advance_job(
        &self,
        kind: JobKind,
        id: Uuid,
        update: &JobUpdate,
    ) -> Result<Job, StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        let job =
            read_job_for_write(&mut tx, kind, id, update.node_id, Details::of(update)).await?;
        if let Some(fence) = &update.fence {
            check_fence(&mut tx, fence).await?;
        }
        let label = tables(kind).label;
        let job_err = |source| StoreError::JobState {
            kind: label,
            job: id.to_string(),
            source,
        };
        job.state.check_move(update.state).map_err(job_err)?;
        if update.state.is_failed() && update.failure.is_none() {
            return Err(StoreError::Invalid(format!(
                "{label} {id}: a failed job needs a failure class"
            )));
        }
        if let Some(stage) = &update.stage {
            check_stage(kind, job.mode(), stage)?;
        }
        let node_id = match (job.node_id, update.node_id) {
            (Some(a), Some(b)) if a != b => {
                return Err(StoreError::Invalid(format!(
                    "{label} {id} belongs to node {a}, not {b}"
                )));
            }
            (a, b) => a.or(b),
        };
        if let Some(node) = update.node_id
            && update.node_transition.is_some()
        {
            // The node must exist before it moves (without a move, it is read below).
            read_node(&mut tx, node).await?;
        }
        if let Some(transition) = &update.node_transition {
            let node = node_id.ok_or_else(|| {
                StoreError::Invalid(format!("{label} {id} has no node to transition"))
            })?;
            // The job row is not written yet: check the node against the job's new state.
            transition_in(
                &mut tx,
                now,
                node,
                transition,
                Some((&id.to_string(), update.state)),
            )
            .await?;
        }
        if let Some(node) = node_id {
            let node = read_node(&mut tx, node).await?;
            check_job_node_state(kind, job.mode(), update.state, node.status).map_err(job_err)?;
        }
        let mut updated = self
            .write_job_row(&mut tx, kind, &job, update, node_id, now)
            .await?;
        if let Some(written) = &update.stage_details {
            updated.stage_details = written.clone();
        }
        if update.state != job.state
            && let Some(event) = domain_event(kind, &updated)
        {
            write_outbox(&mut tx, now, &event).await?;
        }
        bump_serial(&mut tx).await?;
        tx.commit().await?;
        Ok(updated)
    }

    async fn write_job_row(
        &self,
        tx: &mut Tx,
        kind: JobKind,
        job: &Job,
        update: &JobUpdate,
        node_id: Option<Uuid>,
        now: DateTime<Utc>,
    ) -> Result<Job, StoreError> {
        let t = tables(kind);
        let stage = update.stage.clone().unwrap_or_else(|| job.stage.clone());
        let attempt = update.attempt.unwrap_or(job.attempt);
        let failure = if update.state.is_failed() {
            update.failure.clone()
        } else {
            None
        };
        let recommendation = recommend(
            update.state,
            Some(&stage),
            failure.as_ref().map(|f| f.class),
        );
        let started = job
            .started_at
            .map(format_time)
            .or_else(|| (update.state == JobState::Running).then(|| format_time(now)));
        let completed = update.state.is_terminal().then(|| format_time(now));
        let (retry_failures, next_try_at, retry_spec) = retry_columns(job, update)?;
        let (status_obs, power_obs, ips_obs) = match &update.observed {
            Some(o) => (
                o.status.clone(),
                o.power_state.clone(),
                json!(o.ips).to_string(),
            ),
            None => (
                job.last_maas_status.clone(),
                job.last_maas_power_state.clone(),
                json!(job.last_maas_ips).to_string(),
            ),
        };
        // A provisioning job's seed status follows the engine's completion and give-ups
        // (`status_for`); the lease, the webhook and the stages move it otherwise.
        let seed_status = match job.provisioning_status() {
            Some(current) => format!(
                ", status = '{}'",
                status_for(update.state, current).as_str()
            ),
            None => String::new(),
        };
        let sql = format!(
            "UPDATE {jobs} SET {state} = $1, current_stage = $2, current_attempt = $3,
                failure_class = $4, error_code = $5, error_message = $6, error_details = $7,
                recommended_action = $8, node_id = $9, maas_system_id = $10,
                last_maas_status = $11, last_maas_power_state = $12, last_maas_ips = $13,
                stage_details = $14, started_at = $15, completed_at = $16, updated_at = $17,
                retry_failures = $22, next_try_at = $23, retry_spec = $24
                {seed_status}
             WHERE id = $18 AND {state} = $19 AND current_stage = $20 AND current_attempt = $21
             RETURNING *",
            jobs = t.jobs,
            state = t.state,
        );
        // The row as written comes back with the write: one statement fewer per job write.
        let written = tx
            .fetch_optional(
                sql,
                &params![
                    update.state.as_str(),
                    stage,
                    attempt,
                    failure.as_ref().map(|f| f.class.as_str()),
                    failure.as_ref().map(|f| f.code.clone()),
                    failure.as_ref().map(|f| f.message.clone()),
                    failure
                        .as_ref()
                        .map(|f| f.details.to_string())
                        .unwrap_or_else(|| "{}".into()),
                    recommendation.text,
                    node_id.map(|n| n.to_string()),
                    update
                        .maas_system_id
                        .clone()
                        .or_else(|| job.maas_system_id.clone()),
                    status_obs,
                    power_obs,
                    ips_obs,
                    update
                        .stage_details
                        .as_ref()
                        .unwrap_or(&job.stage_details)
                        .to_string(),
                    started,
                    completed,
                    format_time(now),
                    job.id.to_string(),
                    job.state.as_str(),
                    job.stage.clone(),
                    job.attempt,
                    retry_failures,
                    next_try_at,
                    retry_spec,
                ],
            )
            .await?;
        let Some(written) = written else {
            return Err(StoreError::Concurrent {
                kind: t.label,
                id: job.id.to_string(),
            });
        };
        let superseding = update.state.is_terminal() != job.state.is_terminal()
            || node_id != job.node_id
            || update
                .maas_system_id
                .as_ref()
                .is_some_and(|id| job.maas_system_id.as_ref() != Some(id));
        if superseding {
            mark_superseded(tx, kind, &job.site, &job.hostname, node_id).await?;
        }
        for event in update.event.iter().chain(&update.opened) {
            check_stage(kind, job.mode(), &event.stage)?;
            insert_event(tx, kind, job.id, event, now).await?;
        }
        job_row(kind, &written, Details::of(update))
    }

    /// Apply an operator recovery action (000 §4.9) and audit it (actor, role, reason, prior
    /// state and stage, action, expected target, correlation ids).
    pub async fn recover_job(
        &self,
        kind: JobKind,
        id: Uuid,
        action: RecoveryAction,
        actor: &Actor,
        reason: Option<&str>,
    ) -> Result<Job, StoreError> {
        let now = self.now();
        let label = tables(kind).label;
        let mut tx = self.pool.write().await?;
        let job = read_job_for_write(&mut tx, kind, id, None, Details::Parse).await?;
        let target = action
            .target(job.state)
            .map_err(|source| StoreError::Recovery {
                kind: label,
                job: id.to_string(),
                source,
            })?;
        let mut update = JobUpdate::new(target);
        match action {
            RecoveryAction::RetryStage | RecoveryAction::Resume => {
                update.attempt = Some(job.attempt + 1);
            }
            RecoveryAction::Rerun => {
                update.stage = Some(first_stage(kind, job.mode()).to_owned());
                update.attempt = Some(0);
            }
            RecoveryAction::MarkManualInterventionRequired => {
                update.failure = Some(JobFailure {
                    class: job.failure_class.unwrap_or(FailureClass::StateAmbiguity),
                    code: job
                        .error_code
                        .clone()
                        .unwrap_or_else(|| "marked_manual_intervention".into()),
                    message: job.error_message.clone().unwrap_or_else(|| {
                        format!(
                            "marked for manual intervention by {}{}",
                            actor.name,
                            reason.map(|r| format!(": {r}")).unwrap_or_default()
                        )
                    }),
                    details: job.error_details.clone(),
                });
            }
            RecoveryAction::Cancel
            | RecoveryAction::RestartClean
            | RecoveryAction::AdoptObservedState => {}
        }
        if let Some(node) = job.node_id {
            let node = read_node(&mut tx, node).await?;
            check_job_node_state(kind, job.mode(), target, node.status).map_err(|source| {
                StoreError::JobState {
                    kind: label,
                    job: id.to_string(),
                    source,
                }
            })?;
        }
        self.write_job_row(&mut tx, kind, &job, &update, job.node_id, now)
            .await?;
        // Adopting makes the job own what it adopted and end `reconciled`; running the
        // workflow again (rerun, restart-clean) keeps the ownership, but its success is a
        // normal one (001 §4.3: `reconciled` is success *after an adopt*).
        let sets = match action {
            RecoveryAction::AdoptObservedState => Some("adopted = $1, ends_reconciled = $1"),
            RecoveryAction::Rerun | RecoveryAction::RestartClean => Some("ends_reconciled = $1"),
            _ => None,
        };
        if let Some(sets) = sets {
            tx.execute(
                format!("UPDATE {} SET {sets} WHERE id = $2", tables(kind).jobs),
                &params![action == RecoveryAction::AdoptObservedState, id.to_string()],
            )
            .await?;
        }
        write_audit(
            &mut tx,
            now,
            &AuditEntry {
                actor: actor.clone(),
                reason: reason.map(str::to_owned),
                action: format!("{label}.{action}"),
                subject_kind: label.into(),
                subject_id: id.to_string(),
                prior_state: Some(format!("{} at {}#{}", job.state, job.stage, job.attempt)),
                expected_target: Some(target.as_str().into()),
                correlation_ids: json!({"job_id": id, "node_id": job.node_id, "plan_id": job.plan_id}),
                details: json!({}),
            },
        )
        .await?;
        let updated = read_job(&mut tx, kind, id).await?;
        if updated.state != job.state
            && let Some(event) = domain_event(kind, &updated)
        {
            write_outbox(&mut tx, now, &event).await?;
        }
        bump_serial(&mut tx).await?;
        tx.commit().await?;
        Ok(updated)
    }
}

/// [`Store::current_jobs`] inside a read or write transaction.
async fn current_jobs_in(
    tx: &mut Tx,
    kind: JobKind,
    site: Option<&str>,
    expected: usize,
) -> Result<Vec<Job>, StoreError> {
    let values: Vec<Param> = site.map(Param::from).into_iter().collect();
    // One job per node of the fleet: each row becomes its job as it arrives.
    tx.fetch_map_expecting(
        current_jobs_sql(kind, site.is_some()),
        &values,
        expected,
        |row| job_from_row(kind, &row),
    )
    .await
}

/// The current jobs of `kind`, of the site `$1` when `one_site`: the rows not marked
/// `superseded`, from the partial index of them (migration 18).
fn current_jobs_sql(kind: JobKind, one_site: bool) -> String {
    let t = tables(kind);
    let mut sql = format!("SELECT * FROM {} j WHERE NOT j.superseded", t.jobs);
    if one_site {
        sql.push_str(" AND j.site = $1");
    }
    sql.push_str(&format!(" ORDER BY j.{} DESC, j.id", t.requested));
    sql
}

/// Whether the job `j` is current: open, or the newest of its node name, or the newest of its
/// node that reached MAAS. Each "is there a newer one" is answered from an index alone
/// (migration 17).
fn is_current_sql(kind: JobKind) -> String {
    let t = tables(kind);
    let (table, state, requested) = (t.jobs, t.state, t.requested);
    let terminal: Vec<String> = JobState::ALL
        .iter()
        .filter(|s| s.is_terminal())
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    // `n` is newer than `j` in the order the listings use (request time DESC, id).
    let newer = format!(
        "(n.{requested} > j.{requested} OR (n.{requested} = j.{requested} AND n.id < j.id))"
    );
    format!(
        "(j.{state} NOT IN ({terminal})
            OR NOT EXISTS (SELECT 1 FROM {table} n WHERE n.site = j.site
                AND n.hostname = j.hostname AND {newer})
            OR (j.maas_system_id IS NOT NULL AND j.node_id IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM {table} n WHERE n.node_id = j.node_id
                AND n.maas_system_id IS NOT NULL AND {newer})))",
        terminal = terminal.join(", ")
    )
}

/// The statement that marks `superseded` anew where the answer changed, for the jobs matching
/// `scope` (a condition on `j`; every job when `None`).
fn mark_superseded_sql(kind: JobKind, scope: Option<&str>) -> String {
    let current = is_current_sql(kind);
    let mut sql = format!(
        "UPDATE {} AS j SET superseded = NOT {current} WHERE j.superseded = {current}",
        tables(kind).jobs
    );
    if let Some(scope) = scope {
        sql.push_str(&format!(" AND ({scope})"));
    }
    sql
}

/// The jobs [`mark_superseded`] marks again: those of the node name `$1`/`$2` and of the node `$3`.
const ONE_NODES_JOBS: &str = "(j.site = $1 AND j.hostname = $2) OR j.node_id = $3";

/// After a write that may change which jobs are current (a job created, a job ending, a job
/// given its node or its MAAS machine): mark again the jobs of the same node name and of the
/// same node, the only ones whose answer such a write can change.
///
/// A mark only ever goes from current to superseded: a finished job stays finished, a newer
/// job is never deleted, and a job's node and machine are never taken back. So two PostgreSQL
/// writers racing on one node's jobs can at worst leave a superseded job marked current until
/// the node's next such write (one more row read, which observation sorts out as before),
/// never hide a current one.
pub(super) async fn mark_superseded(
    tx: &mut Tx,
    kind: JobKind,
    site: &str,
    hostname: &str,
    node: Option<Uuid>,
) -> Result<(), StoreError> {
    let sql = mark_superseded_sql(kind, Some(ONE_NODES_JOBS));
    tx.execute(sql, &params![site, hostname, node.map(|n| n.to_string())])
        .await?;
    Ok(())
}

/// Mark `superseded` anew on every job of every kind (the migration that adds the column).
pub(super) async fn mark_all_superseded(tx: &mut Tx) -> Result<(), StoreError> {
    for kind in JobKind::ALL {
        tx.execute(mark_superseded_sql(*kind, None), &[]).await?;
    }
    Ok(())
}

/// What [`Store::site_rows`] reads.
#[derive(Debug, Clone)]
pub struct SiteRows {
    /// The store serial, read before the rows.
    pub serial: i64,
    /// Live inventory rows, ordered by site then hostname.
    pub nodes: Vec<super::Node>,
    /// Per kind, in [`JobKind::ALL`] order: the current jobs, newest request first.
    pub jobs: Vec<(JobKind, Vec<Job>)>,
}

/// The open onboarding of the new one's site and hostname, as the refusal to create another.
async fn open_onboarding(
    tx: &mut Tx,
    new: &NewOnboarding,
) -> Result<Option<StoreError>, StoreError> {
    let open = tx
        .fetch_optional(
            "SELECT id, status FROM onboardings WHERE site = $1 AND hostname = $2
                AND status NOT IN ($3, $4, $5)",
            &params![
                new.site.clone(),
                new.hostname.clone(),
                JobState::Completed.as_str(),
                JobState::Cancelled.as_str(),
                JobState::Reconciled.as_str()
            ],
        )
        .await?;
    open.map(|row| {
        Ok(StoreError::JobOpen {
            node: format!("{}/{}", new.site, new.hostname),
            kind: "onboarding",
            job: row.text("id")?,
            state: row.text("status")?,
        })
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::SystemClock;

    /// The current-jobs read takes only the current rows, from their partial index. Marking a
    /// node's jobs again searches indexes only: each "is there a newer job" in an index that
    /// holds all it compares (a scan there costs every job ever recorded, on every write that
    /// marks), and the node's jobs by their node name and node.
    #[tokio::test]
    async fn current_jobs_are_read_and_marked_from_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("state.db").display());
        let store = Store::open(&url, Arc::new(SystemClock)).await.unwrap();
        let plan = |sql: String, values: Vec<Param>| {
            let store = &store;
            async move {
                let rows = store
                    .pool
                    .fetch_all_once(format!("EXPLAIN QUERY PLAN {sql}"), &values)
                    .await
                    .unwrap();
                rows.iter()
                    .map(|r| r.text("detail").unwrap())
                    .collect::<Vec<String>>()
            }
        };
        for kind in JobKind::ALL {
            let table = tables(*kind).jobs;
            for one_site in [false, true] {
                let values: Vec<Param> = one_site.then(|| Param::from("dc1")).into_iter().collect();
                let steps = plan(current_jobs_sql(*kind, one_site), values).await;
                assert!(
                    steps[0].starts_with(&format!("SEARCH j USING INDEX {table}_current"))
                        || steps[0] == format!("SCAN j USING INDEX {table}_current"),
                    "{kind:?} (one site: {one_site}): {steps:#?}"
                );
            }
            let steps = plan(
                mark_superseded_sql(*kind, Some(ONE_NODES_JOBS)),
                params!["dc1", "h1", "n1"].to_vec(),
            )
            .await;
            assert!(
                !steps.iter().any(|s| s.starts_with("SCAN")),
                "{kind:?}: {steps:#?}"
            );
            let newer: Vec<&String> = steps.iter().filter(|s| s.contains(" n ")).collect();
            // Each subquery appears twice: once in the new value and once in the condition.
            assert_eq!(newer.len(), 4, "{kind:?}: {steps:#?}");
            for step in newer {
                assert!(
                    step.starts_with("SEARCH n USING COVERING INDEX"),
                    "{kind:?}: {step}"
                );
            }
        }
    }
}
