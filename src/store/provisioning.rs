//! Redfish provisioning's tables (seed 003 "Persistence Model", "Leasing", "Concurrency
//! Controls", "Idempotency and Duplicate Requests", webhook): servers, provisioning jobs and
//! their events.
//!
//! The job rows are read and advanced by the job engine's code path (`jobs.rs`, kind
//! `provisioning`); what is the seed's own lives here: creating a job (one active job per
//! server, held by a partial unique index; the idempotency key), the lease statements of
//! "Leasing" through the one lease implementation, the webhook's move, a controller-side
//! failure, and the job notes the seed's `job_events` carry.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::db::{Param, Row, Select, Tx, params};
use super::jobs::{
    Job, StageEvent, domain_event, insert_event, job_from_row, mark_superseded, read_job,
};
use super::leases::{
    Fence, Lease, LeaseSort, PROVISIONING_JOB, check_fence, read_lease_of, renew, take,
};
use super::records::write_outbox;
use super::{EventStatus, Store, StoreError, bump_serial, format_time, parse_opt_time, parse_uuid};
use crate::lifecycle::{
    JobKind, JobState, ProvisioningStage, ProvisioningStatus, WebhookReport, recommend,
};
use crate::secrets::SecretRef;

/// A server the provisioner may drive (seed 003 `servers`): serial → BMC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Server {
    pub serial: String,
    /// A host (`10.0.0.5`, HTTPS implied), `host:port`, or a URL.
    pub bmc_address: String,
    /// The BMC login `{user, pass}` in the secret store; never stored itself.
    pub credentials: SecretRef,
    /// `dell`, `hpe`, `lenovo`, `supermicro`, `generic`; `None`: detected.
    pub vendor: Option<String>,
    /// When a worker last reached the BMC.
    pub last_seen: Option<DateTime<Utc>>,
    /// The node of the manifests this server is.
    pub site: String,
    pub hostname: String,
}

/// A provisioning job to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewProvisioning {
    pub serial: String,
    /// Validated by the caller.
    pub recipe: Value,
    pub maintenance_iso_url: String,
    pub idempotency_key: Option<String>,
    pub requested_by: Option<String>,
    pub plan_id: Option<String>,
    /// The manifest's reimage generation (plan items); `None` for API requests.
    pub generation: Option<i64>,
}

/// What [`Store::create_provisioning`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    New(Job),
    /// The active job with the same idempotency key and server.
    Existing(Job),
}

impl Created {
    pub fn job(&self) -> &Job {
        match self {
            Created::New(job) | Created::Existing(job) => job,
        }
    }
}

/// What the status webhook did.
#[derive(Debug, Clone, PartialEq)]
pub enum WebhookOutcome {
    /// The server's provisioning job moved to succeeded or failed.
    Moved(Job),
    /// The server's latest job already had its report: nothing changed.
    Duplicate(Job),
    /// No job of the server is provisioning.
    NoActiveJob,
}

/// Filters of [`Store::list_provisioning`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProvisioningFilter {
    pub status: Option<ProvisioningStatus>,
    pub serial: Option<String>,
    /// At most this many, newest first.
    pub limit: Option<i64>,
}

/// One of a job's events as seed 003 shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobEvent {
    pub time: DateTime<Utc>,
    /// info, warn, error.
    pub level: String,
    pub message: String,
    pub step: Option<String>,
}

/// A job's image-relevant facts, for the task ISO garbage collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobMediaState {
    pub status: ProvisioningStatus,
    pub completed_at: Option<DateTime<Utc>>,
}

const ACTIVE: [ProvisioningStatus; 4] = [
    ProvisioningStatus::Queued,
    ProvisioningStatus::Provisioning,
    ProvisioningStatus::Succeeded,
    ProvisioningStatus::Failed,
];

/// `status IN (…)` over `statuses`, with their parameters.
fn status_in(statuses: &[ProvisioningStatus]) -> (String, Vec<Param>) {
    let marks = vec!["?"; statuses.len()].join(", ");
    let params = statuses.iter().map(|s| Param::from(s.as_str())).collect();
    (format!("status IN ({marks})"), params)
}

fn server_from_row(row: &Row) -> Result<Server, StoreError> {
    let password = row.text("bmc_password")?;
    let path = password
        .strip_prefix("vault:")
        .and_then(|p| p.strip_suffix("#pass"))
        .ok_or_else(|| {
            StoreError::Corrupt(format!(
                "servers.bmc_password of `{}` is not a secret reference",
                row.text("serial").unwrap_or_default()
            ))
        })?;
    Ok(Server {
        serial: row.text("serial")?,
        bmc_address: row.text("bmc_address")?,
        credentials: SecretRef::new(path, None),
        vendor: row.opt_text("vendor")?,
        last_seen: parse_opt_time(row.opt_text("last_seen")?)?,
        site: row.text("site")?,
        hostname: row.text("hostname")?,
    })
}

/// A job note: an event that is not a stage attempt's start or end.
pub fn note(step: Option<ProvisioningStage>, message: String, details: Value) -> StageEvent {
    StageEvent {
        stage: step.map(|s| s.as_str().to_owned()).unwrap_or_default(),
        attempt: 0,
        status: EventStatus::Note,
        message: Some(message),
        details,
    }
}

impl Store {
    /// Insert or update servers (the manifests' Redfish nodes): address, login reference,
    /// vendor and node. `last_seen` is kept.
    pub async fn upsert_servers(&self, servers: &[Server]) -> Result<(), StoreError> {
        let now = format_time(self.now());
        let mut tx = self.pool.write().await?;
        for server in servers {
            let path = &server.credentials.path;
            tx.execute(
                "INSERT INTO servers (serial, bmc_address, bmc_username, bmc_password, vendor,
                    site, hostname, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (serial) DO UPDATE SET bmc_address = excluded.bmc_address,
                    bmc_username = excluded.bmc_username, bmc_password = excluded.bmc_password,
                    vendor = excluded.vendor, site = excluded.site, hostname = excluded.hostname,
                    updated_at = excluded.updated_at",
                &params![
                    server.serial.clone(),
                    server.bmc_address.clone(),
                    format!("vault:{path}#user"),
                    format!("vault:{path}#pass"),
                    server.vendor.clone(),
                    server.site.clone(),
                    server.hostname.clone(),
                    now.clone(),
                ],
            )
            .await?;
        }
        tx.commit().await
    }

    pub async fn server(&self, serial: &str) -> Result<Server, StoreError> {
        let mut tx = self.pool.read().await?;
        let row = tx
            .fetch_optional("SELECT * FROM servers WHERE serial = $1", &params![serial])
            .await?
            .ok_or_else(|| StoreError::NotFound {
                kind: "server",
                id: serial.to_owned(),
            })?;
        server_from_row(&row)
    }

    pub async fn servers(&self) -> Result<Vec<Server>, StoreError> {
        let mut tx = self.pool.read().await?;
        Select::all_of("servers")
            .fetch(&mut tx, "serial")
            .await?
            .iter()
            .map(server_from_row)
            .collect()
    }

    /// A worker reached the server's BMC.
    pub async fn mark_server_seen(&self, serial: &str) -> Result<(), StoreError> {
        let mut tx = self.pool.write().await?;
        tx.execute(
            "UPDATE servers SET last_seen = $1 WHERE serial = $2",
            &params![format_time(self.now()), serial],
        )
        .await?;
        tx.commit().await
    }

    /// Create a provisioning job (`queued`) for a known server (seed 003 `POST /api/v1/jobs`).
    /// With an idempotency key, the server's active job with that key is returned instead
    /// (refused when its recipe differs). A server with another active job is refused with
    /// [`StoreError::ServerBusy`] — by the database's unique index too, when two requests race.
    pub async fn create_provisioning(&self, new: &NewProvisioning) -> Result<Created, StoreError> {
        match self.try_create_provisioning(new).await {
            Err(err) if err.is_unique_violation() => {
                // Lost a race: the other request's job is there now.
                let mut tx = self.pool.read().await?;
                if let Some(job) = same_key(&mut tx, new).await? {
                    return Ok(Created::Existing(job));
                }
                Err(busy(&mut tx, &new.serial).await?.unwrap_or(err))
            }
            other => other,
        }
    }

    async fn try_create_provisioning(&self, new: &NewProvisioning) -> Result<Created, StoreError> {
        let id = Uuid::new_v4();
        let now = self.now();
        let mut tx = self.pool.write().await?;
        let server = tx
            .fetch_optional(
                "SELECT * FROM servers WHERE serial = $1",
                &params![new.serial.clone()],
            )
            .await?
            .ok_or_else(|| StoreError::NotFound {
                kind: "server",
                id: new.serial.clone(),
            })
            .and_then(|row| server_from_row(&row))?;
        if let Some(job) = same_key(&mut tx, new).await? {
            return Ok(Created::Existing(job));
        }
        if let Some(err) = busy(&mut tx, &new.serial).await? {
            return Err(err);
        }
        tx.execute(
            "INSERT INTO provisioning_jobs (id, server_serial, status, recipe_json, created_at,
                updated_at, maintenance_iso_url, idempotency_key, generation, site, hostname,
                requested_by, current_stage, job_state, recommended_action, plan_id)
             VALUES ($1, $2, $3, $4, $5, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
            &params![
                id.to_string(),
                new.serial.clone(),
                ProvisioningStatus::Queued.as_str(),
                new.recipe.to_string(),
                format_time(now),
                new.maintenance_iso_url.clone(),
                new.idempotency_key.clone(),
                new.generation,
                server.site.clone(),
                server.hostname.clone(),
                new.requested_by.clone(),
                ProvisioningStage::first().as_str(),
                JobState::Pending.as_str(),
                recommend(JobState::Pending, None, None).text,
                new.plan_id.clone(),
            ],
        )
        .await?;
        mark_superseded(
            &mut tx,
            JobKind::Provisioning,
            &server.site,
            &server.hostname,
            None,
        )
        .await?;
        let by = new.requested_by.as_deref().unwrap_or("an unnamed caller");
        let why = match new.generation {
            Some(generation) => format!("queued by {by} (manifest generation {generation})"),
            None => format!("queued by {by}"),
        };
        insert_event(
            &mut tx,
            JobKind::Provisioning,
            id,
            &note(None, why, json!({})),
            now,
        )
        .await?;
        bump_serial(&mut tx).await?;
        let job = read_job(&mut tx, JobKind::Provisioning, id).await?;
        tx.commit().await?;
        Ok(Created::New(job))
    }

    /// A job's events, oldest first (at most `limit`, the most recent ones).
    pub async fn provisioning_events(
        &self,
        id: Uuid,
        limit: i64,
    ) -> Result<Vec<JobEvent>, StoreError> {
        let mut tx = self.pool.read().await?;
        let mut events = tx
            .fetch_all(
                "SELECT time, level, message, step FROM provisioning_job_events
                 WHERE job_id = $1 ORDER BY time DESC, id DESC LIMIT $2",
                &params![id.to_string(), limit],
            )
            .await?
            .iter()
            .map(|row| {
                Ok(JobEvent {
                    time: super::parse_time(&row.text("time")?)?,
                    level: row.text("level")?,
                    message: row.text("message")?,
                    step: row.opt_text("step")?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        events.reverse();
        Ok(events)
    }

    /// The recipe of a job, as it was accepted.
    pub async fn provisioning_recipe(&self, id: Uuid) -> Result<Value, StoreError> {
        let mut tx = self.pool.read().await?;
        let row = tx
            .fetch_by_id("provisioning_jobs", "provisioning job", id)
            .await?;
        super::parse_json(&row.text("recipe_json")?)
    }

    /// Provisioning jobs, newest first.
    pub async fn list_provisioning(
        &self,
        filter: &ProvisioningFilter,
    ) -> Result<Vec<Job>, StoreError> {
        let mut select = Select::all_of("provisioning_jobs");
        if let Some(status) = filter.status {
            select.and("status =", status.as_str());
        }
        if let Some(serial) = &filter.serial {
            select.and("server_serial =", serial);
        }
        let order = match filter.limit {
            Some(limit) => format!("created_at DESC, id LIMIT {}", limit.clamp(1, 10_000)),
            None => "created_at DESC, id".to_owned(),
        };
        let mut tx = self.pool.read().await?;
        select
            .fetch(&mut tx, &order)
            .await?
            .iter()
            .map(|row| job_from_row(JobKind::Provisioning, row))
            .collect()
    }

    /// Jobs a worker may take now, oldest first: queued ones, and active ones whose lease is
    /// free or expired (a worker that died, or one that stopped and released it).
    pub async fn claimable_provisioning(&self, limit: usize) -> Result<Vec<Job>, StoreError> {
        let now = format_time(self.now());
        let mut tx = self.pool.read().await?;
        let rows = tx
            .fetch_all(
                format!(
                    "SELECT * FROM provisioning_jobs
                     WHERE job_state IN ('pending', 'running')
                       AND (status = 'queued'
                        OR (status IN ('provisioning', 'succeeded', 'failed')
                            AND (worker_id IS NULL OR lease_expires_at <= $1)))
                     ORDER BY created_at, id LIMIT {}",
                    limit.clamp(1, 10_000)
                ),
                &params![now],
            )
            .await?;
        rows.iter()
            .map(|row| job_from_row(JobKind::Provisioning, row))
            .collect()
    }

    /// Take a provisioning job's lease for `holder` (seed 003 "Leasing"): a queued job is
    /// taken and moved to `provisioning` in one statement (`… SET status='provisioning',
    /// worker_id, picked_at, lease_expires_at … WHERE id AND status='queued'`); an active job
    /// whose lease expired (or was released) is taken over (`… WHERE id AND status IN
    /// (provisioning, succeeded, failed) AND lease_expires_at < now`); the holder re-taking
    /// its live lease renews it. Every take bumps the fencing generation, so the previous
    /// holder's writes are refused from then on.
    pub(crate) async fn take_provisioning_job(
        &self,
        id: Uuid,
        holder: &str,
        ttl: chrono::Duration,
    ) -> Result<Lease, StoreError> {
        let now = self.now();
        let now_s = format_time(now);
        let key = id.to_string();
        let mut tx = self.pool.write().await?;
        let before = tx
            .fetch_by_id("provisioning_jobs", "provisioning job", id)
            .await?;
        let previous = before.opt_text("worker_id")?;
        let from_queue = take(PROVISIONING_JOB, key.clone(), holder, now, ttl)
            .set("status", ProvisioningStatus::Provisioning.as_str())
            .set("picked_at", now_s.clone())
            .set("updated_at", now_s.clone())
            .when("status = ?", params![ProvisioningStatus::Queued.as_str()])
            .when("job_state IN (?, ?)", params!["pending", "running"])
            .execute(&mut tx)
            .await?
            == 1;
        let (active, active_params) = status_in(&ACTIVE[1..]);
        let taken_over = !from_queue && {
            let [a, b, c] = <[Param; 3]>::try_from(active_params.clone()).expect("three");
            take(PROVISIONING_JOB, key.clone(), holder, now, ttl)
                .set("picked_at", now_s.clone())
                .set("updated_at", now_s.clone())
                .when(&active, [a, b, c])
                .when("job_state IN (?, ?)", params!["pending", "running"])
                .execute(&mut tx)
                .await?
                == 1
        };
        let renewed = !from_queue
            && !taken_over
            && renew(PROVISIONING_JOB, key.clone(), holder, None, now, ttl)
                .execute(&mut tx)
                .await?
                == 1;
        if !(from_queue || taken_over || renewed) {
            let row = tx
                .fetch_by_id("provisioning_jobs", "provisioning job", id)
                .await?;
            let job = job_from_row(JobKind::Provisioning, &row)?;
            let status = job
                .provisioning_status()
                .unwrap_or(ProvisioningStatus::Complete);
            return Err(match row.opt_text("worker_id")? {
                Some(worker) if status.is_active() && job.state.is_open() => {
                    StoreError::LeaseHeld {
                        name: format!("provisioning:{id}"),
                        holder: worker,
                        expires_at: row.opt_text("lease_expires_at")?.unwrap_or_default(),
                    }
                }
                _ => StoreError::Invalid(format!(
                    "provisioning job {id} is {status} ({}): nothing to run",
                    job.state
                )),
            });
        }
        if from_queue || taken_over {
            let message = match (from_queue, previous) {
                (true, _) => format!("picked by worker {holder}"),
                (false, Some(old)) if old != holder => {
                    format!("taken over by worker {holder}: the lease of {old} expired")
                }
                (false, _) => format!("resumed by worker {holder}"),
            };
            insert_event(
                &mut tx,
                JobKind::Provisioning,
                id,
                &note(None, message, json!({"worker_id": holder})),
                now,
            )
            .await?;
            bump_serial(&mut tx).await?;
        }
        let lease = read_lease_of(&mut tx, LeaseSort::ProvisioningJob, &key).await?;
        tx.commit().await?;
        Ok(lease)
    }

    /// The maintenance OS reported (seed 003 `POST /api/v1/status-webhook/{server_serial}`):
    /// the server's `provisioning` job moves to succeeded or failed. A report for a server
    /// whose latest job already has one is a duplicate and changes nothing.
    pub async fn report_webhook(
        &self,
        serial: &str,
        report: &WebhookReport,
    ) -> Result<WebhookOutcome, StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        let provisioning = tx
            .fetch_optional(
                "SELECT * FROM provisioning_jobs WHERE server_serial = $1 AND status = $2",
                &params![serial, ProvisioningStatus::Provisioning.as_str()],
            )
            .await?;
        let Some(row) = provisioning else {
            let latest = tx
                .fetch_optional(
                    "SELECT * FROM provisioning_jobs WHERE server_serial = $1
                     ORDER BY created_at DESC, id LIMIT 1",
                    &params![serial],
                )
                .await?;
            return match latest {
                Some(row) if row.opt_text("webhook_at")?.is_some() => Ok(
                    WebhookOutcome::Duplicate(job_from_row(JobKind::Provisioning, &row)?),
                ),
                _ => Ok(WebhookOutcome::NoActiveJob),
            };
        };
        let job = job_from_row(JobKind::Provisioning, &row)?;
        let to = report.status();
        let moved = tx
            .execute(
                "UPDATE provisioning_jobs SET status = $1, failed_step = $2, webhook_at = $3,
                    updated_at = $3
                 WHERE id = $4 AND status = $5",
                &params![
                    to.as_str(),
                    report.failed_step(),
                    format_time(now),
                    job.id.to_string(),
                    ProvisioningStatus::Provisioning.as_str(),
                ],
            )
            .await?;
        if moved != 1 {
            return Err(StoreError::Concurrent {
                kind: "provisioning job",
                id: job.id.to_string(),
            });
        }
        let (message, level) = match report {
            WebhookReport::Success => ("the maintenance OS reported success".to_owned(), "info"),
            WebhookReport::Failed { step: Some(step) } => (
                format!("the maintenance OS reported a failure at {step}"),
                "error",
            ),
            WebhookReport::Failed { step: None } => {
                ("the maintenance OS reported a failure".to_owned(), "error")
            }
        };
        insert_event(
            &mut tx,
            JobKind::Provisioning,
            job.id,
            &note(None, message, json!({"level": level, "status": to})),
            now,
        )
        .await?;
        bump_serial(&mut tx).await?;
        let job = read_job(&mut tx, JobKind::Provisioning, job.id).await?;
        if let Some(mut event) = domain_event(JobKind::Provisioning, &job) {
            event.event_type = format!("node.provisioning.{to}");
            write_outbox(&mut tx, now, &event).await?;
        }
        tx.commit().await?;
        Ok(WebhookOutcome::Moved(job))
    }

    /// The controller gives up on a job (seed 003 "Any → failed": a terminal error, the
    /// webhook timeout): `queued | provisioning → failed` with the step, under the worker's
    /// fence. `Ok(false)` when the job already has an outcome (the webhook came first).
    pub async fn fail_provisioning(
        &self,
        id: Uuid,
        step: &str,
        message: &str,
        fence: &Fence,
    ) -> Result<bool, StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        check_fence(&mut tx, fence).await?;
        let moved = tx
            .execute(
                "UPDATE provisioning_jobs SET status = $1, failed_step = $2, updated_at = $3
                 WHERE id = $4 AND status IN ($5, $6)",
                &params![
                    ProvisioningStatus::Failed.as_str(),
                    step,
                    format_time(now),
                    id.to_string(),
                    ProvisioningStatus::Queued.as_str(),
                    ProvisioningStatus::Provisioning.as_str(),
                ],
            )
            .await?
            == 1;
        if moved {
            insert_event(
                &mut tx,
                JobKind::Provisioning,
                id,
                &note(
                    step.parse().ok(),
                    format!("failed: {message}"),
                    json!({"level": "error", "failed_step": step}),
                ),
                now,
            )
            .await?;
            bump_serial(&mut tx).await?;
        }
        tx.commit().await?;
        Ok(moved)
    }

    /// Record the job's task ISO (seed 003 `jobs.task_iso_path`), under the worker's fence.
    pub async fn set_task_iso_path(
        &self,
        id: Uuid,
        path: &str,
        fence: &Fence,
    ) -> Result<(), StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        check_fence(&mut tx, fence).await?;
        tx.execute(
            "UPDATE provisioning_jobs SET task_iso_path = $1, updated_at = $2 WHERE id = $3",
            &params![path, format_time(now), id.to_string()],
        )
        .await?;
        tx.commit().await
    }

    /// Add a note to a job's events, under the worker's fence when given.
    pub async fn provisioning_note(
        &self,
        id: Uuid,
        event: &StageEvent,
        fence: Option<&Fence>,
    ) -> Result<(), StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        if let Some(fence) = fence {
            check_fence(&mut tx, fence).await?;
        }
        insert_event(&mut tx, JobKind::Provisioning, id, event, now).await?;
        tx.commit().await
    }

    /// Status and completion time of every provisioning job (the task ISO collection).
    pub async fn provisioning_media_states(
        &self,
    ) -> Result<std::collections::BTreeMap<Uuid, JobMediaState>, StoreError> {
        let mut tx = self.pool.read().await?;
        let rows = tx
            .fetch_all(
                "SELECT id, status, completed_at FROM provisioning_jobs",
                &[],
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    parse_uuid(&row.text("id")?)?,
                    JobMediaState {
                        status: super::parse_name(&row.text("status")?)?,
                        completed_at: parse_opt_time(row.opt_text("completed_at")?)?,
                    },
                ))
            })
            .collect()
    }
}

/// The server's active job with the request's idempotency key: refused when its recipe is
/// another one.
async fn same_key(tx: &mut Tx, new: &NewProvisioning) -> Result<Option<Job>, StoreError> {
    let Some(key) = &new.idempotency_key else {
        return Ok(None);
    };
    let row = tx
        .fetch_optional(
            "SELECT * FROM provisioning_jobs WHERE server_serial = $1 AND idempotency_key = $2
                AND status IN ($3, $4)",
            &params![
                new.serial.clone(),
                key.clone(),
                ProvisioningStatus::Queued.as_str(),
                ProvisioningStatus::Provisioning.as_str(),
            ],
        )
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let recipe = super::parse_json(&row.text("recipe_json")?)?;
    let job = job_from_row(JobKind::Provisioning, &row)?;
    if recipe != new.recipe {
        return Err(StoreError::IdempotencyConflict {
            key: key.clone(),
            job: job.id.to_string(),
        });
    }
    Ok(Some(job))
}

/// [`StoreError::ServerBusy`] when the server has an active job.
async fn busy(tx: &mut Tx, serial: &str) -> Result<Option<StoreError>, StoreError> {
    let [q, p, s, f] = ACTIVE.map(|s| s.as_str());
    let row = tx
        .fetch_optional(
            "SELECT id, status FROM provisioning_jobs WHERE server_serial = $1
                AND status IN ($2, $3, $4, $5)",
            &params![serial, q, p, s, f],
        )
        .await?;
    row.map(|row| {
        Ok(StoreError::ServerBusy {
            serial: serial.to_owned(),
            job: row.text("id")?,
            status: row.text("status")?,
        })
    })
    .transpose()
}
