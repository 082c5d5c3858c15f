//! The agent task API (seed 000 §5.6 task catalog, §6.3 "the agent polls …/tasks/wait: this is
//! effectively a heartbeat"; seed 001 §8 idempotent task leases; docs/contracts.md §5).
//!
//! `GET <tasks_url>/wait?wait=S` long-polls for the node's next task and hands it out under a
//! dispatch lease; `POST <tasks_url>/{id}/lease` renews the lease of a long task;
//! `POST <tasks_url>/{id}/result` reports how it went. The bearer token is the per-node agent
//! token issued at enrollment: unknown or revoked → 401, another node's → 403. The caller is
//! checked before a byte of a body is read (a declared length over the limit is refused even
//! before that). Every authenticated call is agent contact (the heartbeat, noted in memory and
//! written in batches); a refused call is none. The store does the leasing
//! (`Store::claim_task`, `Store::renew_task`, `Store::complete_task`): two polls never get the
//! same task while its lease is live, a task whose lease went stale is handed out again, and
//! only the current lease holder may renew it or report its result. No time the agent sends is
//! used: leases are the server's clock, and the agent is told their length in seconds.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::AgentChannel;
use crate::listener::{declared_length, error_response as error, read_body};
use crate::secrets::Secret;
use crate::store::{
    AgentContact, AgentCredential, AgentIdentity, AgentTask, StoreError, TaskOutcome,
};

/// The typed tasks a node agent runs (000 §5.6 and the existing catalog it names, plus the
/// heartbeat check of §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TaskType {
    /// Mark the node unschedulable on the host side and wait for running work to stop.
    NodeDrain,
    /// Remove tenant users (`force: true` also ends their allocations: full decommission).
    AllocationRevokeUser,
    /// Close interactive terminal sessions.
    TerminalClose,
    /// Reset GPU memory/VRAM (vendor tool: `rocm-smi --resetgpu`, `nvidia-smi --gpu-reset`).
    NodeGpuScrub,
    /// Scrub local scratch and/or unmount and clean Weka (`scope`: local | weka | all).
    NodeStorageCleanup,
    /// Verify no tenant users, processes, mounts or GPU memory remain.
    NodeValidateClean,
    /// Reinstall and restart the MAAS hardware-sync credentials and timer (000 §9.1).
    NodeHwSyncReseed,
    /// The agent removes itself from the host.
    NodeUninstall,
    /// Answer at once: the control plane measures the round trip.
    NodeHeartbeatCheck,
}

impl TaskType {
    pub const ALL: &'static [TaskType] = &[
        TaskType::NodeDrain,
        TaskType::AllocationRevokeUser,
        TaskType::TerminalClose,
        TaskType::NodeGpuScrub,
        TaskType::NodeStorageCleanup,
        TaskType::NodeValidateClean,
        TaskType::NodeHwSyncReseed,
        TaskType::NodeUninstall,
        TaskType::NodeHeartbeatCheck,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskType::NodeDrain => "node.drain",
            TaskType::AllocationRevokeUser => "allocation.revoke_user",
            TaskType::TerminalClose => "terminal.close",
            TaskType::NodeGpuScrub => "node.gpu_scrub",
            TaskType::NodeStorageCleanup => "node.storage_cleanup",
            TaskType::NodeValidateClean => "node.validate_clean",
            TaskType::NodeHwSyncReseed => "node.hw_sync_reseed",
            TaskType::NodeUninstall => "node.uninstall",
            TaskType::NodeHeartbeatCheck => "node.heartbeat_check",
        }
    }
}

impl fmt::Display for TaskType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown agent task type `{0}` (expected one of: {list})", list = TaskType::ALL.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", "))]
pub struct UnknownTaskType(pub String);

impl FromStr for TaskType {
    type Err = UnknownTaskType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskType::ALL
            .iter()
            .copied()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| UnknownTaskType(s.to_owned()))
    }
}

impl Serialize for TaskType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TaskType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The longest long-poll a request may ask for; longer waits are cut to this.
pub const MAX_WAIT_SECONDS: u64 = 60;
/// The long-poll when `wait` is not given.
pub const DEFAULT_WAIT_SECONDS: u64 = 30;
/// Largest result body accepted.
pub const MAX_RESULT_BYTES: usize = 64 * 1024;
const MAX_MESSAGE_CHARS: usize = 4096;

/// How the task endpoints lease and poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskTiming {
    /// The dispatch lease of a handed-out task: a result must come within it, else the task
    /// is handed out again (to the next poll, or by the owning stage's re-queue).
    pub lease: Duration,
    /// How often a waiting poll looks for a new task in the store.
    pub poll_step: Duration,
}

impl Default for TaskTiming {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(120),
            poll_step: Duration::from_millis(250),
        }
    }
}

/// A task as handed to an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskBody {
    pub id: Uuid,
    #[serde(rename = "type")]
    pub task_type: String,
    pub params: Value,
    /// When the lease ends, by the server's clock (for people and logs).
    pub lease_expires_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The lease's length from now: what an agent schedules its renewal by, so its own clock
    /// never matters.
    #[serde(default)]
    pub lease_seconds: u64,
}

impl TaskBody {
    pub fn of(task: &AgentTask, lease: Duration) -> Self {
        Self {
            id: task.id,
            task_type: task.task_type.clone(),
            params: task.params.clone(),
            lease_expires_at: task.lease_expires_at,
            lease_seconds: lease.as_secs().max(1),
        }
    }
}

/// `{"task": …}`, the 200 answer of a poll.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PollAnswer {
    pub task: TaskBody,
}

/// How a task went, as the agent reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultStatus {
    Succeeded,
    Failed,
}

/// The body of `POST …/tasks/{id}/result`. Unknown fields are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultBody {
    pub status: ResultStatus,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub details: Value,
}

/// The 200 answer of a result report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultAnswer {
    pub id: Uuid,
    pub status: String,
}

/// The 200 answer of a lease renewal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseAnswer {
    pub id: Uuid,
    pub lease_expires_at: Option<chrono::DateTime<chrono::Utc>>,
    pub lease_seconds: u64,
}

#[derive(Debug, Deserialize)]
struct WaitQuery {
    wait: Option<String>,
}

pub(super) fn routes() -> axum::Router<AgentChannel> {
    axum::Router::new()
        .route(
            "/agent/v1/nodes/{node_id}/tasks/wait",
            get(wait).fallback(|| method_not_allowed("GET")),
        )
        .route(
            "/agent/v1/nodes/{node_id}/tasks/{task_id}/result",
            post(result).fallback(|| method_not_allowed("POST")),
        )
        .route(
            "/agent/v1/nodes/{node_id}/tasks/{task_id}/lease",
            post(renew).fallback(|| method_not_allowed("POST")),
        )
}

async fn method_not_allowed(allow: &'static str) -> Response {
    let mut response = error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("this task route takes {allow} (docs/agent-protocol.md)"),
    );
    response
        .headers_mut()
        .insert(header::ALLOW, header::HeaderValue::from_static(allow));
    response
}

fn store_failure(err: &StoreError) -> Response {
    if err.is_transient() {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the state store is busy or unreachable; retry",
        )
    } else {
        tracing::error!(error = %err, "agent task API: store error");
        error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the task API failed on the server; retry later",
        )
    }
}

/// Check the bearer token for `node`; only then is the call agent contact (noted for the next
/// flush; the first use of a token is written at once).
async fn authenticate(
    channel: &AgentChannel,
    headers: &HeaderMap,
    node: &str,
) -> Result<(Uuid, AgentIdentity), Response> {
    authenticated(channel, headers, node)
        .await
        .map(|(node, credential)| (node, credential.identity))
}

/// [`authenticate`], with the credential (and whether the node has a task to claim).
async fn authenticated(
    channel: &AgentChannel,
    headers: &HeaderMap,
    node: &str,
) -> Result<(Uuid, AgentCredential), Response> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            error(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "no bearer token: send `Authorization: Bearer <agent_token>` from the enrollment answer",
            )
        })?;
    let node = Uuid::parse_str(node).map_err(|_| {
        error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("`{node}` is not a node id"),
        )
    })?;
    let store = channel.store();
    let known = &channel.inner.known;
    let hash = crate::store::token_hash(&Secret::new(token.to_owned()));
    let serial = known.current_serial();
    let credential = match known.token(&hash) {
        // Checked before under the same serial: no read.
        Some((identity, claimable)) => AgentCredential {
            identity,
            token_hash: hash,
            used: true,
            claimable,
        },
        None => store
            .agent_credential(&Secret::new(token.to_owned()))
            .await
            .map_err(|e| store_failure(&e))?
            .ok_or_else(|| {
                error(
                    StatusCode::UNAUTHORIZED,
                    "invalid_token",
                    "unknown or revoked agent token: enroll again",
                )
            })?,
    };
    if credential.identity.node_id != node {
        return Err(error(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("the agent token belongs to another node, not {node}"),
        ));
    }
    let at = store.clock().now();
    if credential.used {
        // The credential is known to be in use: only the node's contact moves.
        channel.inner.contacts.note(AgentContact {
            node_id: node,
            credential: None,
            at,
        });
    } else {
        store
            .record_agent_contacts(&[AgentContact {
                node_id: node,
                credential: Some(credential.token_hash.clone()),
                at,
            }])
            .await
            .map_err(|e| store_failure(&e))?;
    }
    known.remember(
        credential.token_hash.clone(),
        credential.identity.clone(),
        serial,
    );
    Ok((node, credential))
}

/// The lease holder name of an agent: one per enrollment, so a re-enrolled agent (after a
/// reimage) does not inherit the leases of its predecessor.
pub fn holder_of(identity: &AgentIdentity) -> String {
    format!("agent:{}#{}", identity.node_id, identity.enrollment_id)
}

fn lease_of(channel: &AgentChannel) -> (Duration, chrono::Duration) {
    let lease = channel.inner.options.timing.lease;
    (
        lease,
        chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::minutes(2)),
    )
}

async fn wait(
    State(channel): State<AgentChannel>,
    Path(node): Path<String>,
    Query(query): Query<WaitQuery>,
    headers: HeaderMap,
) -> Response {
    let (node, credential) = match authenticated(&channel, &headers, &node).await {
        Ok(who) => who,
        Err(response) => return response,
    };
    let identity = credential.identity;
    let wait = match query.wait.as_deref().map(str::parse::<u64>) {
        None => DEFAULT_WAIT_SECONDS,
        Some(Ok(seconds)) => seconds.min(MAX_WAIT_SECONDS),
        Some(Err(_)) => {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("`wait` must be a whole number of seconds (0 to {MAX_WAIT_SECONDS})"),
            );
        }
    };
    let holder = holder_of(&identity);
    let (lease, lease_span) = lease_of(&channel);
    let store = channel.store();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
    let mut closing = channel.inner.closing.subscribe();
    let waiting = channel.inner.waiters.register(node);
    // The authentication read also said whether there is a task to claim; a wake-up from the
    // dispatcher claims at once.
    let mut look = if credential.claimable {
        Look::Claim
    } else {
        Look::None
    };
    loop {
        let notified = waiting.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let claimed = match look {
            Look::None => Ok(None),
            Look::Claim => {
                channel.inner.known.claimed(node);
                store.claim_task(node, &holder, lease_span).await
            }
        };
        match claimed {
            Ok(Some(task)) => {
                tracing::info!(node = %node, task = %task.id, r#type = %task.task_type, dispatch = task.dispatch_count, "agent task dispatched");
                return (
                    StatusCode::OK,
                    Json(PollAnswer {
                        task: TaskBody::of(&task, lease),
                    }),
                )
                    .into_response();
            }
            Ok(None) => {}
            Err(err) if err.is_transient() => {}
            Err(err) => return store_failure(&err),
        }
        if tokio::time::Instant::now() >= deadline || *closing.borrow() {
            return StatusCode::NO_CONTENT.into_response();
        }
        look = tokio::select! {
            _ = &mut notified => Look::Claim,
            _ = tokio::time::sleep_until(deadline) => Look::None,
            _ = closing.changed() => Look::None,
        };
    }
}

/// What a waiting poll does next: claim (there is a task), or not.
#[derive(Clone, Copy)]
enum Look {
    None,
    Claim,
}

/// The task `task` of `node`, or the 404 answer.
async fn task_of(channel: &AgentChannel, node: Uuid, task: &str) -> Result<Uuid, Response> {
    let not_found = || {
        error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("node {node} has no task {task}"),
        )
    };
    let task_id = Uuid::parse_str(task).map_err(|_| not_found())?;
    match channel.store().task(task_id).await {
        Ok(found) if found.node_id == node => Ok(task_id),
        Ok(_) | Err(StoreError::NotFound { .. }) => Err(not_found()),
        Err(err) => Err(store_failure(&err)),
    }
}

fn lease_lost() -> Response {
    error(
        StatusCode::CONFLICT,
        "lease_lost",
        "this agent does not hold the task's lease (it expired and the task was handed out again, or it is finished): drop the result",
    )
}

fn result_too_large() -> Response {
    crate::listener::closing(error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("a task result is at most {MAX_RESULT_BYTES} bytes"),
    ))
}

async fn result(
    State(channel): State<AgentChannel>,
    Path((node, task)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // The size first (no state read), then the caller, and only then the body.
    if declared_length(&headers).is_some_and(|n| n > MAX_RESULT_BYTES as u64) {
        return result_too_large();
    }
    let (node, identity) = match authenticate(&channel, &headers, &node).await {
        Ok(who) => who,
        Err(response) => return crate::listener::closing(response),
    };
    let body = match read_body(&headers, body, MAX_RESULT_BYTES).await {
        Ok(bytes) => bytes,
        Err(crate::listener::BodyError::TooLarge { .. }) => return result_too_large(),
        Err(other) => return other.response(),
    };
    let body: ResultBody = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("the body is not a task result: {e}"),
            );
        }
    };
    if body
        .message
        .as_deref()
        .is_some_and(|m| m.chars().count() > MAX_MESSAGE_CHARS)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("`message` is at most {MAX_MESSAGE_CHARS} characters"),
        );
    }
    let task_id = match task_of(&channel, node, &task).await {
        Ok(id) => id,
        Err(response) => return response,
    };
    let outcome = TaskOutcome {
        succeeded: body.status == ResultStatus::Succeeded,
        message: body.message,
        details: body.details,
    };
    match channel
        .store()
        .complete_task(task_id, &holder_of(&identity), &outcome)
        .await
    {
        Ok(done) => {
            tracing::info!(node = %node, task = %done.id, status = done.status.as_str(), "agent task result");
            Json(ResultAnswer {
                id: done.id,
                status: done.status.as_str().to_owned(),
            })
            .into_response()
        }
        Err(StoreError::LeaseLost { .. }) => lease_lost(),
        Err(err) => store_failure(&err),
    }
}

async fn renew(
    State(channel): State<AgentChannel>,
    Path((node, task)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let (node, identity) = match authenticate(&channel, &headers, &node).await {
        Ok(who) => who,
        Err(response) => return response,
    };
    let task_id = match task_of(&channel, node, &task).await {
        Ok(id) => id,
        Err(response) => return response,
    };
    let (lease, lease_span) = lease_of(&channel);
    match channel
        .store()
        .renew_task(task_id, &holder_of(&identity), lease_span)
        .await
    {
        Ok(task) => Json(LeaseAnswer {
            id: task.id,
            lease_expires_at: task.lease_expires_at,
            lease_seconds: lease.as_secs().max(1),
        })
        .into_response(),
        Err(StoreError::LeaseLost { .. }) => lease_lost(),
        Err(err) => store_failure(&err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_types_round_trip_by_name() {
        for t in TaskType::ALL {
            assert_eq!(t.as_str().parse::<TaskType>(), Ok(*t));
            let json = serde_json::to_string(t).unwrap();
            assert_eq!(serde_json::from_str::<TaskType>(&json).unwrap(), *t);
        }
        assert_eq!(TaskType::ALL.len(), 9);
        let err = "node.reboot".parse::<TaskType>().unwrap_err().to_string();
        assert!(
            err.starts_with("unknown agent task type `node.reboot` (expected one of: node.drain,"),
            "{err}"
        );
    }
}
