//! The simulated node agent's enrollment call (docs/contracts.md §4–§5), against a small axum
//! server standing in for metalform's enrollment endpoint.

use crate::sim_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine;
use reqwest::Method;
use serde_json::{Value, json};
use sim_support::{Sim, fleet};

/// The test's enrollment endpoint: answers 503 `fail_first` times, then 200 for the expected
/// token and 401 for any other.
#[derive(Clone, Default)]
struct Endpoint {
    calls: Arc<Mutex<Vec<Value>>>,
    fail_first: Arc<Mutex<u32>>,
}

async fn enroll(State(ep): State<Endpoint>, Json(body): Json<Value>) -> (StatusCode, Json<Value>) {
    ep.calls.lock().unwrap().push(body.clone());
    {
        let mut fail = ep.fail_first.lock().unwrap();
        if *fail > 0 {
            *fail -= 1;
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"error": "unavailable"})),
            );
        }
    }
    if body["token"] == "enroll-secret-1" {
        (
            StatusCode::OK,
            Json(
                json!({"node_id": "n-1", "agent_token": "at-1", "tasks_url": "http://127.0.0.1:1/tasks", "heartbeat_interval_seconds": 30}),
            ),
        )
    } else {
        (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "invalid_token", "message": "unknown token"})),
        )
    }
}

async fn endpoint(fail_first: u32) -> (Endpoint, String) {
    let ep = Endpoint::default();
    *ep.fail_first.lock().unwrap() = fail_first;
    let app = Router::new()
        .route("/enroll", post(enroll))
        .with_state(ep.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/enroll", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (ep, url)
}

fn user_data(url: &str) -> String {
    let doc = format!(
        "#cloud-config\nwrite_files:\n  - path: /etc/metalform/agent.env\n    permissions: '0600'\n    content: |\n      METALFORM_ENROLL_URL={url}\n      METALFORM_ENROLL_TOKEN=enroll-secret-1\n      METALFORM_NODE=c07u43\n"
    );
    base64::engine::general_purpose::STANDARD.encode(doc)
}

/// A fast fleet: MAAS durations / 1000 (deploy 0.6 s, agent boot 30 ms).
fn fast(n: usize, behaviours: &[metalform::sim::AgentBehaviour]) -> metalform::sim::SimConfig {
    let mut config = fleet(n);
    config.time_scale = 1000.0;
    for (m, b) in config.machines.iter_mut().zip(behaviours) {
        m.agent = b.clone();
    }
    config
}

async fn wait_for<T>(mut check: impl FnMut() -> Option<T>) -> T {
    for _ in 0..200 {
        if let Some(v) = check() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("condition not reached within 5 s");
}

async fn deploy_all(sim: &Sim, url: &str) -> Vec<String> {
    let sids = sim.system_ids().await;
    for sid in &sids {
        sim.op(
            &format!("machines/{sid}/"),
            "deploy",
            &[("user_data", &user_data(url))],
        )
        .await
        .expect(200);
    }
    sim.advance(1);
    for sid in &sids {
        assert_eq!(sim.status_name(sid).await, "Deployed");
    }
    sids
}

#[tokio::test]
async fn agent_enrolls_with_the_token_from_user_data_after_transient_failures() {
    let (ep, url) = endpoint(2).await;
    let sim = Sim::start(fast(1, &[metalform::sim::AgentBehaviour::OnTime])).await;
    let sid = deploy_all(&sim, &url).await.remove(0);
    let calls = wait_for(|| {
        let calls = ep.calls.lock().unwrap().clone();
        (calls.len() == 3).then_some(calls)
    })
    .await;
    assert_eq!(calls[2]["token"], "enroll-secret-1");
    assert_eq!(calls[2]["hostname"], "c07u43");
    assert_eq!(calls[2]["system_id"], sid.as_str());
    assert!(calls[2]["agent_version"].is_string());
    let log = wait_for(|| {
        let log = sim.handle.with_world(|w| w.agent_log.clone());
        (log.len() == 3).then_some(log)
    })
    .await;
    assert_eq!(log[0].outcome, "transient: HTTP 503");
    assert_eq!(log[2].outcome, "enrolled");
    assert_eq!(
        log[2].tasks_url.as_deref(),
        Some("http://127.0.0.1:1/tasks")
    );
    // The host got user_data's files.
    let files = sim
        .control(
            Method::GET,
            &format!("/sim/v1/machines/{sid}/host/files"),
            None,
        )
        .await
        .expect(200)
        .json();
    assert!(
        files["/etc/metalform/agent.env"]
            .as_str()
            .unwrap()
            .contains("METALFORM_ENROLL_TOKEN=enroll-secret-1")
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        ep.calls.lock().unwrap().len(),
        3,
        "no call after enrollment"
    );
}

#[tokio::test]
async fn wrong_token_late_and_never() {
    use metalform::sim::AgentBehaviour::*;
    let (ep, url) = endpoint(0).await;
    let sim = Sim::start(fast(3, &[WrongToken, Late { delay_secs: 300.0 }, Never])).await;
    let sids = deploy_all(&sim, &url).await;
    let first = wait_for(|| ep.calls.lock().unwrap().first().cloned()).await;
    assert_eq!(first["system_id"], sids[0].as_str());
    assert_ne!(first["token"], "enroll-secret-1");
    // The late agent calls ~0.3 s later (300 simulated seconds / 1000).
    let late = wait_for(|| {
        let calls = ep.calls.lock().unwrap().clone();
        calls
            .iter()
            .find(|c| c["system_id"] == sids[1].as_str())
            .cloned()
    })
    .await;
    assert_eq!(late["token"], "enroll-secret-1");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls = ep.calls.lock().unwrap().clone();
    assert_eq!(
        calls.len(),
        2,
        "the wrong-token agent does not retry a 401; `never` never calls"
    );
    let log = sim.handle.with_world(|w| w.agent_log.clone());
    assert!(
        log.iter()
            .any(|r| r.system_id == sids[0] && r.outcome == "refused: invalid token")
    );
}

#[tokio::test]
async fn agent_of_a_released_host_stops() {
    let sim = Sim::start(fast(
        1,
        &[metalform::sim::AgentBehaviour::Late { delay_secs: 200.0 }],
    ))
    .await;
    // Nothing listens here: every attempt is a connection error.
    let url = "http://127.0.0.1:9/enroll";
    let sid = deploy_all(&sim, url).await.remove(0);
    sim.op(&format!("machines/{sid}/"), "release", &[])
        .await
        .expect(200);
    let log = wait_for(|| {
        let log = sim.handle.with_world(|w| w.agent_log.clone());
        (!log.is_empty()).then_some(log)
    })
    .await;
    assert_eq!(
        log[0].outcome,
        "host gone (released, redeployed or powered off)"
    );
}

/// A tasks endpoint that holds every poll open and records when the agent drops one: the
/// number of polls seen and of polls whose connection the agent closed.
async fn holding_tasks_endpoint() -> (String, Arc<Mutex<(u32, u32)>>) {
    use tokio::io::AsyncReadExt;
    let seen = Arc::new(Mutex::new((0, 0)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/tasks", listener.local_addr().unwrap());
    let counts = seen.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let counts = counts.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                counts.lock().unwrap().0 += 1;
                // Never answered: the poll ends only when the agent closes it.
                while !matches!(socket.read(&mut buf).await, Ok(0) | Err(_)) {}
                counts.lock().unwrap().1 += 1;
            });
        }
    });
    (url, seen)
}

#[tokio::test]
async fn an_enrolled_agent_long_polls_and_stops_at_once_when_its_host_is_released() {
    let (tasks_url, polls) = holding_tasks_endpoint().await;
    let app =
        Router::new().route(
            "/enroll",
            post(move |Json(_): Json<Value>| {
                let tasks_url = tasks_url.clone();
                async move {
                    Json(json!({"node_id": "n-1", "agent_token": "at-1", "tasks_url": tasks_url}))
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/enroll", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let sim = Sim::start(fast(1, &[metalform::sim::AgentBehaviour::OnTime])).await;
    let sid = deploy_all(&sim, &url).await.remove(0);
    // Enrolled, it holds one long poll (30 s, as the real agent's).
    wait_for(|| (*polls.lock().unwrap() == (1, 0)).then_some(())).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(*polls.lock().unwrap(), (1, 0), "one poll, held");
    sim.op(&format!("machines/{sid}/"), "release", &[])
        .await
        .expect(200);
    // The release wakes the agent: it drops its poll long before the poll would end, and
    // polls no more.
    wait_for(|| (polls.lock().unwrap().1 == 1).then_some(())).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(*polls.lock().unwrap(), (1, 1), "no poll after the release");
}
