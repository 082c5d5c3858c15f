//! The simulated node agent (docs/contracts.md §4–§5): once a deployed host boots, it calls
//! the enrollment URL from its user_data, retrying transient failures with capped exponential
//! back-off, and gives up on a 401/409 or when its host is released, redeployed or powered off.
//!
//! Once enrolled it runs the task loop (seed 000 §5.6, §6.3; 001 §8): it long-polls
//! `<tasks_url>/wait` with its agent token, runs each task for `timings.agent_task_secs`
//! (scaled) and reports the result — unless an injected [`TaskFault`] makes it report a failure
//! or never report at all (the task's lease then goes stale). It stops when its host goes away
//! or its token is refused. Every task it runs is logged in `World::agent_task_log`.
//!
//! Like the real agent it pins the CA its payload carried (`/etc/metalform/ca.pem`) when the
//! channel speaks TLS, and long-polls as long as the real agent does by default. Its host going
//! away (released, redeployed, powered off, agent stopped) wakes it at once: it does not wait
//! for its poll to end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::config::{TaskFault, TaskFaultMode};
use super::host::AgentBoot;
use super::model::{AgentRecord, AgentTaskRecord};
use super::shared::Shared;

/// Version string the simulated agent reports.
pub const AGENT_VERSION: &str = "metalform-sim-agent/0.1";
/// Enrollment attempts before the agent gives up on transient failures.
pub const MAX_ATTEMPTS: u32 = 8;
/// Cap of the real-time back-off between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The long-poll the agent asks for, in seconds: the real agent's default (`poll_wait`).
const POLL_WAIT_SECONDS: u64 = 30;
/// Consecutive failed polls (connection errors, 5xx) before the task loop gives up.
const MAX_POLL_FAILURES: u32 = 30;

/// A successful enrollment (the 200 body of contracts §5).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Enrollment {
    pub node_id: serde_json::Value,
    pub agent_token: String,
    pub tasks_url: String,
    pub heartbeat_interval_seconds: Option<u64>,
}

/// How one enrollment call ended.
#[derive(Debug, Clone, PartialEq)]
enum Attempt {
    Enrolled(Box<Enrollment>),
    Refused(&'static str),
    Transient,
}

/// Starts the agent of a booted host.
pub fn spawn(shared: Arc<Shared>, boot: AgentBoot) {
    tokio::spawn(async move { run(shared, boot).await });
}

/// The agent's HTTP client: pinned to the CA of its payload, if it carried one. Agents
/// pinning the same CA share one client (a client per agent costs a TLS configuration and a
/// connection pool each: hundreds of megabytes at 10,000 hosts).
fn client_for(shared: &Shared, boot: &AgentBoot) -> reqwest::Client {
    static PINNED: OnceLock<Mutex<HashMap<String, reqwest::Client>>> = OnceLock::new();
    let ca = shared.with_world(|w| {
        w.machine(&boot.system_id)
            .and_then(|m| m.host_files.get(crate::cloudinit::AGENT_CA_PATH).cloned())
    });
    let Some(pem) = ca else {
        return shared.http.clone();
    };
    let mut clients = PINNED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(client) = clients.get(&pem) {
        return client.clone();
    }
    let pinned = reqwest::Certificate::from_pem_bundle(pem.as_bytes())
        .ok()
        .and_then(|certs| {
            reqwest::Client::builder()
                .tls_certs_only(certs)
                .timeout(Duration::from_secs(120))
                .build()
                .ok()
        });
    match pinned {
        Some(client) => {
            clients.insert(pem, client.clone());
            client
        }
        None => shared.http.clone(),
    }
}

async fn run(shared: Arc<Shared>, boot: AgentBoot) {
    tokio::time::sleep(boot.delay).await;
    let http = client_for(&shared, &boot);
    let mut backoff = boot.retry_base.max(Duration::from_millis(10));
    for attempt in 1..=MAX_ATTEMPTS {
        if !shared.with_world(|w| w.agent_alive(&boot.system_id, boot.boot)) {
            record(
                &shared,
                &boot,
                attempt,
                None,
                "host gone (released, redeployed or powered off)",
            );
            return;
        }
        let body = serde_json::json!({
            "token": boot.token,
            "hostname": boot.hostname,
            "system_id": boot.system_id,
            "agent_version": AGENT_VERSION,
        });
        let result = http.post(&boot.url).json(&body).send().await;
        let outcome = match result {
            Ok(response) => {
                let status = response.status().as_u16();
                let text = response.text().await.unwrap_or_default();
                let outcome = classify(status, &text);
                let (note, tasks_url) = match &outcome {
                    Attempt::Enrolled(e) => ("enrolled".to_string(), Some(e.tasks_url.clone())),
                    Attempt::Refused(why) => (format!("refused: {why}"), None),
                    Attempt::Transient => (format!("transient: HTTP {status}"), None),
                };
                record_with(&shared, &boot, attempt, Some(status), &note, tasks_url);
                if let Attempt::Enrolled(enrollment) = &outcome {
                    task_loop(&shared, &http, &boot, enrollment).await;
                }
                outcome
            }
            Err(err) => {
                let kind = if err.is_connect() {
                    "connection refused"
                } else {
                    "request failed"
                };
                record(&shared, &boot, attempt, None, &format!("transient: {kind}"));
                Attempt::Transient
            }
        };
        if outcome != Attempt::Transient {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    record(
        &shared,
        &boot,
        MAX_ATTEMPTS,
        None,
        "gave up after transient failures",
    );
}

/// A task as the poll hands it out.
#[derive(Debug, serde::Deserialize)]
struct PolledTask {
    id: String,
    #[serde(rename = "type")]
    task_type: String,
    #[serde(default)]
    params: serde_json::Value,
}

#[derive(Debug, serde::Deserialize)]
struct Poll {
    task: PolledTask,
}

/// Poll for tasks and run them while the host lives.
async fn task_loop(
    shared: &Shared,
    http: &reqwest::Client,
    boot: &AgentBoot,
    enrollment: &Enrollment,
) {
    let base = enrollment.tasks_url.trim_end_matches('/');
    let wait_url = format!("{base}/wait?wait={POLL_WAIT_SECONDS}");
    let mut failures = 0;
    let mut backoff = boot.retry_base.max(Duration::from_millis(10));
    let waker = shared.with_world(|w| w.agent_waker(&boot.system_id));
    let alive = || shared.with_world(|w| w.agent_alive(&boot.system_id, boot.boot));
    while alive() {
        let poll = http
            .get(&wait_url)
            .bearer_auth(&enrollment.agent_token)
            .timeout(Duration::from_secs(POLL_WAIT_SECONDS + 20))
            .send();
        tokio::pin!(poll);
        // The poll runs until it answers, or until the host goes away (the agent dies with it).
        let polled = loop {
            tokio::select! {
                polled = &mut poll => break Some(polled),
                _ = waker.notified() => {
                    if !alive() {
                        break None;
                    }
                }
            }
        };
        let Some(polled) = polled else {
            return;
        };
        let task = match polled {
            Ok(response) if response.status().as_u16() == 200 => {
                match response.json::<Poll>().await {
                    Ok(poll) => Some(poll.task),
                    Err(_) => None,
                }
            }
            Ok(response) if response.status().as_u16() == 204 => {
                failures = 0;
                continue;
            }
            // Refused: the token was revoked (a newer enrollment) or belongs elsewhere.
            Ok(response) if matches!(response.status().as_u16(), 401 | 403 | 404) => return,
            _ => None,
        };
        let Some(task) = task else {
            failures += 1;
            if failures >= MAX_POLL_FAILURES {
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            continue;
        };
        failures = 0;
        backoff = boot.retry_base.max(Duration::from_millis(10));
        run_task(shared, http, boot, enrollment, base, task).await;
    }
}

/// Run one task and report it (or not, as an injected fault says).
async fn run_task(
    shared: &Shared,
    http: &reqwest::Client,
    boot: &AgentBoot,
    enrollment: &Enrollment,
    base: &str,
    task: PolledTask,
) {
    let (fault, duration) = shared.with_world(|w| {
        (
            w.take_task_fault(&boot.system_id, &task.task_type),
            w.task_duration(),
        )
    });
    tokio::time::sleep(duration).await;
    let alive = shared.with_world(|w| w.agent_alive(&boot.system_id, boot.boot));
    // A reseed restarts the host's sync units with the credentials it holds; the simulated
    // host says whether that got a sync to MAAS going.
    let reseed = (alive && fault.is_none() && task.task_type == "node.hw_sync_reseed").then(|| {
        let now = shared.clock.now();
        shared.with_world(|w| w.reseed_hw_sync(&boot.system_id, now))
    });
    let (outcome, body) = match (&fault, alive) {
        (_, false) => ("abandoned", None),
        (
            Some(TaskFault {
                mode: TaskFaultMode::Hang,
                ..
            }),
            _,
        ) => ("hung", None),
        (Some(fault), _) => (
            "failed",
            Some(serde_json::json!({
                "status": "failed",
                "message": fault.message.clone().unwrap_or_else(|| format!("{} failed (injected)", task.task_type)),
                "details": {"injected": true},
            })),
        ),
        (None, _) if matches!(reseed, Some(Err(_))) => (
            "failed",
            Some(serde_json::json!({
                "status": "failed",
                "message": reseed.and_then(Result::err).unwrap_or_default(),
                "details": {"simulated": true},
            })),
        ),
        (None, _) => (
            "succeeded",
            Some(serde_json::json!({
                "status": "succeeded",
                "message": format!("{} done", task.task_type),
                "details": {"simulated": true},
            })),
        ),
    };
    let mut report_status = None;
    if let Some(body) = body {
        let url = format!("{base}/{}/result", task.id);
        for _ in 0..3 {
            match http
                .post(&url)
                .bearer_auth(&enrollment.agent_token)
                .json(&body)
                .send()
                .await
            {
                Ok(response) if response.status().as_u16() < 500 => {
                    report_status = Some(response.status().as_u16());
                    break;
                }
                Ok(response) => report_status = Some(response.status().as_u16()),
                Err(_) => {}
            }
            tokio::time::sleep(boot.retry_base.max(Duration::from_millis(10))).await;
        }
    }
    let at = super::machine::format_datetime(shared.clock.now());
    shared.with_world(|w| {
        w.agent_task_log.push(AgentTaskRecord {
            system_id: boot.system_id.clone(),
            hostname: boot.hostname.clone(),
            task_id: task.id.clone(),
            task_type: task.task_type.clone(),
            params: task.params.clone(),
            outcome: outcome.to_owned(),
            report_status,
            at,
        })
    });
}

fn classify(status: u16, body: &str) -> Attempt {
    match status {
        200 => match serde_json::from_str::<Enrollment>(body) {
            Ok(enrollment) => Attempt::Enrolled(Box::new(enrollment)),
            Err(_) => Attempt::Refused("200 without an enrollment body"),
        },
        401 => Attempt::Refused("invalid token"),
        409 => Attempt::Refused("not waiting for enrollment"),
        s if s >= 500 => Attempt::Transient,
        _ => Attempt::Refused("unexpected status"),
    }
}

fn record(shared: &Shared, boot: &AgentBoot, attempt: u32, status: Option<u16>, outcome: &str) {
    record_with(shared, boot, attempt, status, outcome, None);
}

fn record_with(
    shared: &Shared,
    boot: &AgentBoot,
    attempt: u32,
    status: Option<u16>,
    outcome: &str,
    tasks_url: Option<String>,
) {
    let at = super::machine::format_datetime(shared.clock.now());
    shared.with_world(|w| {
        w.agent_log.push(AgentRecord {
            system_id: boot.system_id.clone(),
            hostname: boot.hostname.clone(),
            attempt,
            at,
            status,
            outcome: outcome.to_string(),
            tasks_url,
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_enrollment_answers() {
        let ok = r#"{"node_id":"n1","agent_token":"t","tasks_url":"http://x/tasks","heartbeat_interval_seconds":30}"#;
        let Attempt::Enrolled(e) = classify(200, ok) else {
            panic!("not enrolled");
        };
        assert_eq!(e.tasks_url, "http://x/tasks");
        assert_eq!(e.agent_token, "t");
        assert_eq!(
            classify(200, "{}"),
            Attempt::Refused("200 without an enrollment body")
        );
        assert_eq!(classify(401, "{}"), Attempt::Refused("invalid token"));
        assert_eq!(
            classify(409, "{}"),
            Attempt::Refused("not waiting for enrollment")
        );
        assert_eq!(classify(503, ""), Attempt::Transient);
    }
}
