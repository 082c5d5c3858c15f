//! The simulated node agent (docs/contracts.md §4–§5): once a deployed host boots, it calls
//! the enrollment URL from its user_data, retrying transient failures with capped exponential
//! back-off, and gives up on a 401/409 or when its host is released, redeployed or powered off.
//!
//! Issue 6 adds the task loop after enrollment (`tasks_url` long-poll); [`Enrollment`] carries
//! what that loop needs.

use std::sync::Arc;
use std::time::Duration;

use super::host::AgentBoot;
use super::server::Shared;
use super::world::AgentRecord;

/// Version string the simulated agent reports.
pub const AGENT_VERSION: &str = "metalform-sim-agent/0.1";
/// Enrollment attempts before the agent gives up on transient failures.
pub const MAX_ATTEMPTS: u32 = 8;
/// Cap of the real-time back-off between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

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

async fn run(shared: Arc<Shared>, boot: AgentBoot) {
    tokio::time::sleep(boot.delay).await;
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
        let result = shared.http.post(&boot.url).json(&body).send().await;
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
