//! Typed node-agent tasks with dispatch leases (seed 001 §8, 000 §4.8/§5.6).
//!
//! Ensuring a task is idempotent: a fresh queued task or a live dispatched one is returned as
//! is, a dispatched task whose lease expired is re-queued, and only when none is open is a new
//! one created. Claiming is an atomic conditional update, so two pollers never get the same
//! task while its lease is live.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::db::{Row, Tx, params};
use super::leases::{self, LeaseWrite, TASK};
use super::nodes::{lock_node, read_node};
use super::{Store, StoreError, format_time, parse_json, parse_opt_time, parse_time, parse_uuid};

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Queued,
    Dispatched,
    Succeeded,
    Failed,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Dispatched => "dispatched",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Result<Self, StoreError> {
        Ok(match s {
            "queued" => TaskStatus::Queued,
            "dispatched" => TaskStatus::Dispatched,
            "succeeded" => TaskStatus::Succeeded,
            "failed" => TaskStatus::Failed,
            other => return Err(StoreError::Corrupt(format!("task status `{other}`"))),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentTask {
    pub id: Uuid,
    pub node_id: Uuid,
    /// e.g. `node.drain`, `node.uninstall`, `node.gpu_scrub`.
    pub task_type: String,
    pub params: Value,
    /// The job (decommission id) that owns the task, if any.
    pub owner_job: Option<String>,
    pub status: TaskStatus,
    pub lease_holder: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// How many times the task has been handed out.
    pub dispatch_count: i64,
    pub result_message: Option<String>,
    pub result_details: Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

/// What [`Store::ensure_task`] did (001 §8's three cases, plus creation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EnsureOutcome {
    /// A fresh queued task already existed: nothing duplicated.
    AlreadyQueued,
    /// A dispatched task still holds a live lease: nothing duplicated.
    LiveLease,
    /// The dispatched task's lease expired: re-queued.
    Requeued,
    /// No open task: created.
    Created,
}

/// A task's result as reported by the agent.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskOutcome {
    pub succeeded: bool,
    pub message: Option<String>,
    pub details: Value,
}

fn task_from_row(row: &Row) -> Result<AgentTask, StoreError> {
    Ok(AgentTask {
        id: parse_uuid(&row.text("id")?)?,
        node_id: parse_uuid(&row.text("node_id")?)?,
        task_type: row.text("task_type")?,
        params: parse_json(&row.text("params")?)?,
        owner_job: row.opt_text("owner_job")?,
        status: TaskStatus::parse(&row.text("status")?)?,
        lease_holder: row.opt_text("lease_holder")?,
        lease_expires_at: parse_opt_time(row.opt_text("lease_expires_at")?)?,
        dispatch_count: row.int("dispatch_count")?,
        result_message: row.opt_text("result_message")?,
        result_details: parse_json(&row.text("result_details")?)?,
        created_at: parse_time(&row.text("created_at")?)?,
        updated_at: parse_time(&row.text("updated_at")?)?,
        completed_at: parse_opt_time(row.opt_text("completed_at")?)?,
    })
}

async fn read_task(tx: &mut Tx, id: Uuid) -> Result<AgentTask, StoreError> {
    task_from_row(&tx.fetch_by_id(TASKS, "agent task", id).await?)
}

const TASKS: &str = "agent_tasks";

/// Back to the queue: a dispatched task whose holder let its lease expire.
fn requeue_stale(id: Uuid, now: DateTime<Utc>) -> LeaseWrite {
    leases::free_stale(TASK, id.to_string(), now)
        .set("status", TaskStatus::Queued.as_str())
        .set("updated_at", format_time(now))
        .when("status = ?", params![TaskStatus::Dispatched.as_str()])
}

/// A lease write on a dispatched task by its holder, committed with `tx`; refused as a lost
/// lease when the task is no longer dispatched to `holder`.
async fn write_dispatched(
    mut tx: Tx,
    id: Uuid,
    holder: &str,
    write: LeaseWrite,
) -> Result<AgentTask, StoreError> {
    let written = write
        .when("status = ?", params![TaskStatus::Dispatched.as_str()])
        .execute(&mut tx)
        .await?;
    if written == 0 {
        return Err(StoreError::LeaseLost {
            name: format!("task:{id}"),
            holder: holder.to_owned(),
            fencing: 0,
        });
    }
    let task = read_task(&mut tx, id).await?;
    tx.commit().await?;
    Ok(task)
}

impl Store {
    /// Make sure one open task of `task_type` exists for the node, without duplicating a live
    /// one (001 §8).
    pub async fn ensure_task(
        &self,
        node: Uuid,
        task_type: &str,
        params: &Value,
        owner_job: Option<&str>,
    ) -> Result<(AgentTask, EnsureOutcome), StoreError> {
        let now = self.now();
        let now_s = format_time(now);
        let mut tx = self.pool.write().await?;
        // Two writers ensuring the same task take turns on the node's row: on PostgreSQL the
        // second would otherwise not see the first's uncommitted task and queue another.
        lock_node(&mut tx, node).await?;
        read_node(&mut tx, node).await?;
        let open = tx
            .fetch_optional(
                "SELECT * FROM agent_tasks WHERE node_id = $1 AND task_type = $2
                    AND status IN ($3, $4) ORDER BY created_at DESC LIMIT 1",
                &params![
                    node.to_string(),
                    task_type,
                    TaskStatus::Queued.as_str(),
                    TaskStatus::Dispatched.as_str()
                ],
            )
            .await?
            .as_ref()
            .map(task_from_row)
            .transpose()?;
        let (id, outcome) = match open {
            Some(task) if task.status == TaskStatus::Queued => {
                (task.id, EnsureOutcome::AlreadyQueued)
            }
            Some(task) if task.lease_expires_at.is_some_and(|t| t > now) => {
                (task.id, EnsureOutcome::LiveLease)
            }
            Some(task) => {
                requeue_stale(task.id, now).execute(&mut tx).await?;
                (task.id, EnsureOutcome::Requeued)
            }
            None => {
                let id = Uuid::new_v4();
                tx.execute(
                    "INSERT INTO agent_tasks (id, node_id, task_type, params, owner_job, status,
                        created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7)",
                    &params![
                        id.to_string(),
                        node.to_string(),
                        task_type,
                        params.to_string(),
                        owner_job,
                        TaskStatus::Queued.as_str(),
                        now_s,
                    ],
                )
                .await?;
                (id, EnsureOutcome::Created)
            }
        };
        let task = read_task(&mut tx, id).await?;
        tx.commit().await?;
        Ok((task, outcome))
    }

    /// Hand the oldest claimable task of a node to `holder` for `ttl`: a queued task, or a
    /// dispatched one whose lease expired. `None` when there is nothing to do.
    pub async fn claim_task(
        &self,
        node: Uuid,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<AgentTask>, StoreError> {
        let now = self.now();
        let now_s = format_time(now);
        let mut tx = self.pool.write().await?;
        let candidates = tx
            .fetch_all(
                "SELECT id FROM agent_tasks WHERE node_id = $1
                    AND (status = $2 OR (status = $3 AND lease_expires_at <= $4))
                 ORDER BY created_at, id",
                &params![
                    node.to_string(),
                    TaskStatus::Queued.as_str(),
                    TaskStatus::Dispatched.as_str(),
                    now_s.clone()
                ],
            )
            .await?;
        for row in candidates {
            let id = row.text("id")?;
            // A queued task has no holder; a dispatched one is taken once its lease expired.
            let claimed = leases::take(TASK, id.clone(), holder, now, ttl)
                .set("status", TaskStatus::Dispatched.as_str())
                .set("updated_at", now_s.clone())
                .when(
                    "status IN (?, ?)",
                    params![TaskStatus::Queued.as_str(), TaskStatus::Dispatched.as_str()],
                )
                .execute(&mut tx)
                .await?;
            if claimed == 1 {
                let task = read_task(&mut tx, parse_uuid(&id)?).await?;
                tx.commit().await?;
                return Ok(Some(task));
            }
        }
        tx.commit().await?;
        Ok(None)
    }

    /// Re-queue one task if (and only if) it is dispatched with a stale lease; returns the
    /// task as it is afterwards. Unlike [`Store::ensure_task`] it never creates one, so an
    /// owner that raced the task's completion does not start a second copy.
    pub async fn requeue_if_stale(&self, id: Uuid) -> Result<(AgentTask, bool), StoreError> {
        let mut tx = self.pool.write().await?;
        let requeued = requeue_stale(id, self.now()).execute(&mut tx).await?;
        let task = read_task(&mut tx, id).await?;
        tx.commit().await?;
        Ok((task, requeued == 1))
    }

    /// Whether [`Store::claim_task`] would find something for the node: one read, so a waiting
    /// long-poll does not take the write lock every time it looks.
    pub async fn has_claimable_task(&self, node: Uuid) -> Result<bool, StoreError> {
        let now_s = format_time(self.now());
        let mut tx = self.pool.read().await?;
        Ok(tx
            .fetch_optional(
                "SELECT id FROM agent_tasks WHERE node_id = $1
                    AND (status = $2 OR (status = $3 AND lease_expires_at <= $4)) LIMIT 1",
                &params![
                    node.to_string(),
                    TaskStatus::Queued.as_str(),
                    TaskStatus::Dispatched.as_str(),
                    now_s
                ],
            )
            .await?
            .is_some())
    }

    /// Extend the dispatch lease of a task the holder is still working on.
    pub async fn renew_task(
        &self,
        id: Uuid,
        holder: &str,
        ttl: Duration,
    ) -> Result<AgentTask, StoreError> {
        let now = self.now();
        let renew = leases::renew(TASK, id.to_string(), holder, None, now, ttl)
            .set("updated_at", format_time(now));
        write_dispatched(self.pool.write().await?, id, holder, renew).await
    }

    /// Record a task's result. Only the current lease holder may report; a report from a
    /// holder whose lease expired and was handed to another is refused. Reporting the same
    /// result twice is a no-op.
    pub async fn complete_task(
        &self,
        id: Uuid,
        holder: &str,
        outcome: &TaskOutcome,
    ) -> Result<AgentTask, StoreError> {
        let now_s = format_time(self.now());
        let status = if outcome.succeeded {
            TaskStatus::Succeeded
        } else {
            TaskStatus::Failed
        };
        let mut tx = self.pool.write().await?;
        let task = read_task(&mut tx, id).await?;
        if task.status == status && task.lease_holder.as_deref() == Some(holder) {
            tx.commit().await?;
            return Ok(task);
        }
        // The holder of record may report after its lease expired, as long as nobody took the
        // task over meanwhile.
        let report = LeaseWrite::row(TASK, id.to_string())
            .set("status", status.as_str())
            .set("result_message", outcome.message.clone())
            .set("result_details", outcome.details.to_string())
            .set("completed_at", now_s.clone())
            .set("updated_at", now_s)
            .held_by(holder, None);
        write_dispatched(tx, id, holder, report).await
    }

    pub async fn task(&self, id: Uuid) -> Result<AgentTask, StoreError> {
        self.by_id(TASKS, "agent task", id, task_from_row).await
    }

    /// A node's tasks, oldest first.
    pub async fn tasks_for_node(&self, node: Uuid) -> Result<Vec<AgentTask>, StoreError> {
        let mut tx = self.pool.read().await?;
        tx.fetch_all(
            "SELECT * FROM agent_tasks WHERE node_id = $1 ORDER BY created_at, id",
            &params![node.to_string()],
        )
        .await?
        .iter()
        .map(task_from_row)
        .collect()
    }

    /// Close every open task of a node as failed with `message` (the node is going away; a
    /// result arriving later is refused). Returns how many were closed.
    pub async fn close_open_tasks(&self, node: Uuid, message: &str) -> Result<u64, StoreError> {
        let now_s = format_time(self.now());
        let mut tx = self.pool.write().await?;
        let n = tx
            .execute(
                "UPDATE agent_tasks SET status = $1, result_message = $2, completed_at = $3,
                    updated_at = $3, lease_holder = NULL, lease_expires_at = NULL
                 WHERE node_id = $4 AND status IN ($5, $6)",
                &params![
                    TaskStatus::Failed.as_str(),
                    message,
                    now_s,
                    node.to_string(),
                    TaskStatus::Queued.as_str(),
                    TaskStatus::Dispatched.as_str()
                ],
            )
            .await?;
        tx.commit().await?;
        Ok(n)
    }
}
