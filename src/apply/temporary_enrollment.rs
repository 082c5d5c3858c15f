//! TEMPORARY until the enrollment endpoint (src/agent, issue 5 part C) is merged; deleted at the
//! merge. The smallest server of docs/contracts.md §5 that lets the simulator's agents enroll
//! while `apply` runs: consume the single-use token, record the agent's contact on the node.

use std::net::SocketAddr;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use crate::secrets::Secret;
use crate::store::{Store, StoreError};

#[derive(Deserialize)]
struct EnrollRequest {
    token: String,
}

async fn enroll(State(store): State<Store>, Json(request): Json<EnrollRequest>) -> Response {
    match store
        .consume_enrollment_token(&Secret::new(request.token))
        .await
    {
        Ok(claim) => match store.touch_agent_contact(claim.node_id).await {
            Ok(()) => (
                StatusCode::OK,
                Json(json!({
                    "node_id": claim.node_id,
                    "agent_token": uuid::Uuid::new_v4().to_string(),
                    "tasks_url": "http://127.0.0.1:9/tasks",
                    "heartbeat_interval_seconds": 30,
                })),
            )
                .into_response(),
            Err(err) => error(StatusCode::INTERNAL_SERVER_ERROR, "internal", err),
        },
        Err(StoreError::Token(err)) => error(StatusCode::UNAUTHORIZED, "invalid_token", err),
        Err(err) => error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", err),
    }
}

fn error(status: StatusCode, code: &str, err: impl std::fmt::Display) -> Response {
    (
        status,
        Json(json!({"error": code, "message": err.to_string()})),
    )
        .into_response()
}

/// A running enrollment endpoint.
pub struct TemporaryEnrollmentServer {
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl TemporaryEnrollmentServer {
    pub async fn start(
        store: Store,
        listen: SocketAddr,
        public_url: Option<String>,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let router = Router::new()
            .route("/api/v1/agent/enroll", post(enroll))
            .with_state(store);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        let url = match public_url {
            Some(base) => format!("{}/api/v1/agent/enroll", base.trim_end_matches('/')),
            None => format!("http://{addr}/api/v1/agent/enroll"),
        };
        Ok(Self { url, task })
    }

    pub fn enroll_url(&self) -> String {
        self.url.clone()
    }

    pub async fn shutdown(self) {
        self.task.abort();
    }
}
