//! Domain events from the outbox to an HTTP webhook, at least once (seed 000 §8.0, issue 6): a
//! real local receiver fails the first attempts; each event is retried with backoff, marked
//! delivered only after a 2xx, and arrives in outbox order; a stopped outbox gives its delivery
//! lease up.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use metalform::clock::SystemClock;
use metalform::events::{Outbox, Pacing, Sink};
use metalform::store::{DomainEvent, Store};

#[derive(Clone, Default)]
struct Receiver {
    attempts: Arc<Mutex<usize>>,
    received: Arc<Mutex<Vec<serde_json::Value>>>,
}

async fn receive(State(r): State<Receiver>, Json(body): Json<serde_json::Value>) -> StatusCode {
    let mut attempts = r.attempts.lock().unwrap();
    *attempts += 1;
    if *attempts <= 3 {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    r.received.lock().unwrap().push(body);
    StatusCode::NO_CONTENT
}

#[tokio::test]
async fn webhook_delivery_retries_until_acknowledged_and_keeps_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        &format!("sqlite://{}", dir.path().join("state.db").display()),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    for (n, kind) in ["started", "completed", "failed"].iter().enumerate() {
        store
            .publish(&DomainEvent {
                event_type: format!("node.onboarding.{kind}"),
                subject_id: format!("node-{n}"),
                payload: serde_json::json!({"n": n}),
            })
            .await
            .unwrap();
    }
    let receiver = Receiver::default();
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(receive))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let outbox = Outbox::new(
        store.clone(),
        Sink::webhook(
            format!("http://{addr}/hook").parse().unwrap(),
            Duration::from_secs(2),
        ),
        Pacing {
            idle: Duration::from_millis(20),
            retry_base: Duration::from_millis(20),
            retry_cap: Duration::from_millis(100),
            batch: 10,
        },
        Arc::new(()),
    );
    // A pass stops at the first failure and marks nothing delivered.
    let first = outbox.deliver_pending().await;
    assert_eq!((first.delivered, first.failed), (0, true));
    let pending = store.pending_events(10).await.unwrap();
    assert_eq!(pending.len(), 3);
    assert_eq!(pending[0].attempts, 1);

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(outbox.run(async {
        let _ = stopped.await;
    }));
    for _ in 0..200 {
        if store.pending_events(10).await.unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(store.live_leases("events:").await.unwrap().len(), 1);
    let _ = stop.send(());
    run.await.unwrap();
    // Stopped: the delivery lease is given up, not left to expire.
    assert!(store.live_leases("events:").await.unwrap().is_empty());
    assert!(store.pending_events(10).await.unwrap().is_empty());
    let received = receiver.received.lock().unwrap().clone();
    let types: Vec<&str> = received
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "node.onboarding.started",
            "node.onboarding.completed",
            "node.onboarding.failed"
        ]
    );
    assert_eq!(received[1]["subject"], "node-1");
    assert_eq!(received[1]["data"], serde_json::json!({"n": 1}));
    assert_eq!(
        *receiver.attempts.lock().unwrap(),
        6,
        "3 refused, then 3 accepted"
    );
}
