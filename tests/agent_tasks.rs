//! The agent task API over HTTP (docs/contracts.md §5, docs/agent-protocol.md "Tasks"; seed
//! 000 §5.6, §6.3; seed 001 §8): bearer auth (401 without or with an unknown token, 403 with
//! another node's), every poll recorded as a heartbeat, leases (a live lease or a fresh queued
//! task is never duplicated, a stale one is handed out again), results only from the lease
//! holder, typed JSON errors. A real axum server on loopback over a SQLite store whose clock
//! the test drives.

use crate::agent_suite;

use std::time::Duration;

use chrono::Duration as Span;
use metalform::agent::{AgentChannel, ChannelOptions, TaskTiming, TaskType};
use metalform::clock::ManualClock;
use metalform::store::{EnsureOutcome, Store, TaskStatus};
use serde_json::{Value, json};
use uuid::Uuid;

struct Bed {
    store: Store,
    channel: AgentChannel,
    clock: ManualClock,
    base: String,
    node: Uuid,
    token: String,
    other_token: String,
}

async fn bed() -> Bed {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    let (store, clock) =
        agent_suite::open(&format!("sqlite://{}", dir.join("state.db").display())).await;
    let a = agent_suite::onboarding(&store, "c07u43", "x7k3pa").await;
    let b = agent_suite::onboarding(&store, "c07u44", "x7k3pb").await;
    let token = store
        .enroll_agent(&agent_suite::request(&a.token, "c07u43", "x7k3pa"))
        .await
        .unwrap()
        .agent_token;
    let other = store
        .enroll_agent(&agent_suite::request(&b.token, "c07u44", "x7k3pb"))
        .await
        .unwrap()
        .agent_token;
    // The channel on the hardened listener, TLS turned off explicitly (raw HTTP for the test).
    let bound = metalform::listener::bind(
        "agent",
        "127.0.0.1:0".parse().unwrap(),
        &metalform::listener::TlsSetting::Off,
        metalform::listener::Limits::agent(),
    )
    .await
    .unwrap();
    let addr = bound.local_addr();
    let channel = AgentChannel::new(
        store.clone(),
        format!("http://{addr}/").parse().unwrap(),
        ChannelOptions {
            timing: TaskTiming {
                lease: Duration::from_secs(120),
                poll_step: Duration::from_millis(20),
            },
            // Contacts are written when the test flushes.
            contact_flush: Duration::from_secs(3600),
        },
    );
    std::mem::forget(bound.serve(channel.router()));
    Bed {
        store,
        channel: channel.clone(),
        clock,
        base: format!("http://{addr}/agent/v1/nodes/{}/tasks", a.node),
        node: a.node,
        token: token.expose().to_owned(),
        other_token: other.expose().to_owned(),
    }
}

impl Bed {
    async fn poll_with(&self, token: Option<&str>, wait: &str) -> (u16, Value) {
        let mut request = agent_suite::http().get(format!("{}/wait?wait={wait}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// A heartbeat: a poll that does not wait (answered from memory when the channel knows
    /// the token and the node had nothing to claim at its last refresh).
    async fn poll(&self) -> (u16, Value) {
        self.poll_with(Some(&self.token), "0").await
    }

    /// A poll that waits a little: it sees a task queued a moment ago.
    async fn poll_for_task(&self) -> (u16, Value) {
        self.poll_with(Some(&self.token), "2").await
    }

    async fn report(&self, task: &str, body: &Value) -> (u16, Value) {
        let response = agent_suite::http()
            .post(format!("{}/{task}/result", self.base))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }

    async fn ensure(&self, task: TaskType) -> (Uuid, EnsureOutcome) {
        let (task, outcome) = self
            .store
            .ensure_task(self.node, task.as_str(), &json!({"scope": "local"}), None)
            .await
            .unwrap();
        (task.id, outcome)
    }
}

fn error(code: &str, message: &str) -> Value {
    json!({"error": code, "message": message})
}

#[tokio::test]
async fn polls_need_the_nodes_own_agent_token() {
    let bed = bed().await;
    assert_eq!(
        bed.poll_with(None, "0").await,
        (
            401,
            error(
                "unauthorized",
                "no bearer token: send `Authorization: Bearer <agent_token>` from the enrollment answer"
            )
        )
    );
    assert_eq!(
        bed.poll_with(Some("not-a-token"), "0").await,
        (
            401,
            error(
                "invalid_token",
                "unknown or revoked agent token: enroll again"
            )
        )
    );
    let (status, body) = bed.poll_with(Some(&bed.other_token), "0").await;
    assert_eq!(status, 403);
    assert_eq!(
        body,
        error(
            "forbidden",
            &format!("the agent token belongs to another node, not {}", bed.node)
        )
    );
    assert_eq!(
        bed.poll_with(Some(&bed.token), "soon").await,
        (
            400,
            error(
                "bad_request",
                "`wait` must be a whole number of seconds (0 to 60)"
            )
        )
    );
    // A wrong token on the result route is a 401 too, and changes nothing.
    let (id, _) = bed.ensure(TaskType::NodeDrain).await;
    let response = agent_suite::http()
        .post(format!("{}/{id}/result", bed.base))
        .bearer_auth("not-a-token")
        .json(&json!({"status": "succeeded"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    assert_eq!(bed.store.task(id).await.unwrap().status, TaskStatus::Queued);
}

#[tokio::test]
async fn every_poll_is_a_heartbeat_written_in_batches() {
    let bed = bed().await;
    let contact_of = |bed: &Bed| {
        let store = bed.store.clone();
        let node = bed.node;
        async move {
            store
                .node(node)
                .await
                .unwrap()
                .last_agent_contact_at
                .unwrap()
        }
    };
    let enrolled_at = contact_of(&bed).await;
    // The first use of a new agent token is written at once (the replay rule reads it).
    bed.clock.advance(Span::minutes(7));
    assert_eq!(bed.poll().await.0, 204);
    let contact = contact_of(&bed).await;
    assert_eq!(contact - enrolled_at, Span::minutes(7));
    // Later polls are noted in memory and written together at the next flush.
    bed.clock.advance(Span::minutes(1));
    assert_eq!(bed.poll().await.0, 204);
    bed.clock.advance(Span::minutes(1));
    assert_eq!(bed.poll().await.0, 204);
    assert_eq!(contact_of(&bed).await, contact, "not written yet");
    assert_eq!(bed.channel.flush_contacts().await.unwrap(), 1, "one row");
    assert_eq!(contact_of(&bed).await - contact, Span::minutes(2));
    // A refused poll (another node's token) is no heartbeat for this node.
    bed.clock.advance(Span::minutes(1));
    assert_eq!(bed.poll_with(Some(&bed.other_token), "0").await.0, 403);
    assert_eq!(bed.channel.flush_contacts().await.unwrap(), 0);
    assert_eq!(contact_of(&bed).await - contact, Span::minutes(2));
    // Closing the channel writes what is noted (a restart loses nothing).
    bed.clock.advance(Span::minutes(1));
    assert_eq!(bed.poll().await.0, 204);
    bed.channel.close().await;
    assert_eq!(contact_of(&bed).await - contact, Span::minutes(4));
}

#[tokio::test]
async fn a_live_lease_or_a_queued_task_is_never_duplicated_and_a_stale_one_is_handed_out_again() {
    let bed = bed().await;
    let (id, outcome) = bed.ensure(TaskType::NodeGpuScrub).await;
    assert_eq!(outcome, EnsureOutcome::Created);
    assert_eq!(
        bed.ensure(TaskType::NodeGpuScrub).await,
        (id, EnsureOutcome::AlreadyQueued)
    );

    let (status, body) = bed.poll_for_task().await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["task"]["id"], json!(id.to_string()));
    assert_eq!(body["task"]["type"], json!("node.gpu_scrub"));
    assert_eq!(body["task"]["params"], json!({"scope": "local"}));
    assert_eq!(
        body["task"]["lease_expires_at"],
        json!("2026-03-01T08:02:00Z")
    );
    // Live lease: the stage's ensure does not duplicate it, and no poll gets it again.
    assert_eq!(
        bed.ensure(TaskType::NodeGpuScrub).await,
        (id, EnsureOutcome::LiveLease)
    );
    assert_eq!(bed.poll().await.0, 204);
    assert_eq!(bed.store.tasks_for_node(bed.node).await.unwrap().len(), 1);

    // The agent never reported: once the lease is stale the task is re-queued, same id.
    bed.clock.advance(Span::minutes(3));
    assert_eq!(
        bed.ensure(TaskType::NodeGpuScrub).await,
        (id, EnsureOutcome::Requeued)
    );
    let (status, body) = bed.poll_for_task().await;
    assert_eq!((status, &body["task"]["id"]), (200, &json!(id.to_string())));
    let task = bed.store.task(id).await.unwrap();
    assert_eq!(
        (task.status, task.dispatch_count),
        (TaskStatus::Dispatched, 2)
    );
    assert_eq!(bed.store.tasks_for_node(bed.node).await.unwrap().len(), 1);
}

#[tokio::test]
async fn results_come_from_the_lease_holder_once() {
    let bed = bed().await;
    let (id, _) = bed.ensure(TaskType::NodeValidateClean).await;
    // Not handed out yet: nobody holds its lease.
    assert_eq!(
        bed.report(&id.to_string(), &json!({"status": "succeeded"}))
            .await
            .0,
        409
    );
    assert_eq!(bed.poll_for_task().await.0, 200);
    assert_eq!(
        bed.report(&id.to_string(), &json!({"status": "maybe"}))
            .await
            .0,
        400
    );
    assert_eq!(
        bed.report(&Uuid::new_v4().to_string(), &json!({"status": "failed"}))
            .await
            .0,
        404
    );
    let done = json!({"status": "failed", "message": "tenant process 4711 still running",
        "details": {"pids": [4711]}});
    let (status, body) = bed.report(&id.to_string(), &done).await;
    assert_eq!(
        (status, body),
        (200, json!({"id": id.to_string(), "status": "failed"}))
    );
    let task = bed.store.task(id).await.unwrap();
    assert_eq!(task.status, TaskStatus::Failed);
    assert_eq!(
        task.result_message.as_deref(),
        Some("tenant process 4711 still running")
    );
    assert_eq!(task.result_details, json!({"pids": [4711]}));
    // The same report again (a lost answer) is fine; a different one is refused.
    assert_eq!(bed.report(&id.to_string(), &done).await.0, 200);
    let (status, body) = bed
        .report(&id.to_string(), &json!({"status": "succeeded"}))
        .await;
    assert_eq!(status, 409);
    assert_eq!(body["error"], json!("lease_lost"));
    // A finished task is not open: ensuring it again makes a new one.
    let (again, outcome) = bed.ensure(TaskType::NodeValidateClean).await;
    assert_eq!(outcome, EnsureOutcome::Created);
    assert_ne!(again, id);
}

#[tokio::test]
async fn a_waiting_poll_gets_a_task_queued_while_it_waits() {
    let bed = bed().await;
    let started = std::time::Instant::now();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let base = bed.base.clone();
    let token = bed.token.clone();
    tokio::spawn(async move {
        let response = agent_suite::http()
            .get(format!("{base}/wait?wait=10"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let _ = tx.send((status, response.json::<Value>().await.unwrap()));
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (id, _) = bed.ensure(TaskType::TerminalClose).await;
    let (status, body) = rx.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body["task"]["id"], json!(id.to_string()));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the long-poll answered as soon as the task was queued"
    );
}

#[tokio::test]
async fn a_restart_keeps_every_contact_and_resets_none() {
    let bed = bed().await;
    let b = bed
        .store
        .node(
            bed.store
                .find_node("dc1", "c07u44")
                .await
                .unwrap()
                .unwrap()
                .id,
        )
        .await
        .unwrap();
    let quiet_since = b.last_agent_contact_at;
    // The first agent polls (its first use is written at once), then again (noted only).
    bed.clock.advance(Span::minutes(1));
    assert_eq!(bed.poll().await.0, 204);
    bed.clock.advance(Span::minutes(1));
    assert_eq!(bed.poll().await.0, 204);
    // A graceful stop writes what was noted; a new channel on the same store (the restarted
    // daemon) starts from the store and resets nothing: the quiet node stays as quiet.
    bed.channel.close().await;
    let again = AgentChannel::new(
        bed.store.clone(),
        "http://127.0.0.1:1/".parse().unwrap(),
        ChannelOptions::default(),
    );
    bed.clock.advance(Span::minutes(10));
    again.flush_contacts().await.unwrap();
    let polled = bed
        .store
        .node(bed.node)
        .await
        .unwrap()
        .last_agent_contact_at;
    assert_eq!(
        polled.unwrap() - b.last_agent_contact_at.unwrap(),
        Span::minutes(2)
    );
    assert_eq!(
        bed.store.node(b.id).await.unwrap().last_agent_contact_at,
        quiet_since,
        "the node whose agent went quiet is not heard from after the restart"
    );
    // What the drift pass reads: the quiet node is 12 minutes without contact, past the
    // 5-minute threshold, and will go offline.
    let contacts = bed.store.agent_contacts(Some("dc1")).await.unwrap();
    assert_eq!(contacts.get(&b.id).copied(), quiet_since, "{contacts:?}");
    again.close().await;
}

#[tokio::test]
async fn a_revoked_token_is_refused_within_a_poll_step_though_the_channel_knew_it() {
    let bed = bed().await;
    // Known to the channel (checked, in use): later polls are answered from memory.
    assert_eq!(bed.poll().await.0, 204);
    assert_eq!(bed.poll().await.0, 204);
    // The decommission's CleanupSecrets revokes it: the store serial moves, the channel
    // forgets what it knew at its next step (20 ms here), and the token is refused.
    assert_eq!(
        bed.store.revoke_agent_credentials(bed.node).await.unwrap(),
        1
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        bed.poll().await,
        (
            401,
            error(
                "invalid_token",
                "unknown or revoked agent token: enroll again"
            )
        )
    );
}
