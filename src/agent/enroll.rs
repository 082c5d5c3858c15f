//! `POST /agent/v1/enroll` (docs/contracts.md §5): shape and size checks, the store call, and
//! the contract's answers — 200 with the agent token, 401 `invalid_token`, 409 `conflict`,
//! 400 `bad_request`, 413 `payload_too_large`, 503 `unavailable` (the agent retries 5xx).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use axum::Json;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::{Deserialize, Serialize};

use super::{AgentChannel, ENROLL_PATH, HEARTBEAT_INTERVAL_SECONDS};
use crate::listener::{BodyError, error_response as error, read_body};
use crate::secrets::Secret;
use crate::store::{EnrollError, EnrollmentRequest};

/// Largest enrollment request accepted; a real one is a few hundred bytes.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// Field limits (characters).
const MAX_TOKEN: usize = 512;
const MAX_HOSTNAME: usize = 253;
const MAX_SYSTEM_ID: usize = 64;
const MAX_AGENT_VERSION: usize = 128;
const MAX_LAYERS: usize = 16;
const MAX_LAYER_TEXT: usize = 64;

/// The request body. Unknown fields are ignored (newer agents may send more).
#[derive(Debug, Clone, Deserialize)]
pub struct EnrollRequestBody {
    pub token: Secret,
    pub hostname: String,
    pub system_id: String,
    pub agent_version: String,
    #[serde(default)]
    pub layers: BTreeMap<String, String>,
}

/// The 200 answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnrollResponse {
    pub node_id: String,
    pub agent_token: String,
    pub tasks_url: String,
    pub heartbeat_interval_seconds: u64,
}

pub(super) fn routes() -> axum::Router<AgentChannel> {
    axum::Router::new().route(
        &format!("/{ENROLL_PATH}"),
        post(enroll).fallback(method_not_allowed),
    )
}

async fn method_not_allowed() -> Response {
    let mut response = error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "enrollment is a POST of a JSON body (see docs/agent-protocol.md)",
    );
    response
        .headers_mut()
        .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
    response
}

fn bad_request(message: impl Into<String>) -> Response {
    error(StatusCode::BAD_REQUEST, "bad_request", message)
}

/// A field's length in characters within `1..=max`; the error is the 400 message.
fn check_len(field: &str, value: &str, max: usize) -> Result<(), String> {
    let n = value.chars().count();
    if n == 0 || n > max {
        return Err(format!("`{field}` must be 1 to {max} characters (got {n})"));
    }
    if value.chars().any(char::is_control) {
        return Err(format!("`{field}` must not contain control characters"));
    }
    Ok(())
}

fn check_body(body: &EnrollRequestBody) -> Result<(), String> {
    check_len("token", body.token.expose(), MAX_TOKEN)?;
    check_len("hostname", &body.hostname, MAX_HOSTNAME)?;
    check_len("system_id", &body.system_id, MAX_SYSTEM_ID)?;
    check_len("agent_version", &body.agent_version, MAX_AGENT_VERSION)?;
    if body.layers.len() > MAX_LAYERS {
        return Err(format!(
            "`layers` has {} entries; at most {MAX_LAYERS}",
            body.layers.len()
        ));
    }
    for (name, status) in &body.layers {
        check_len("layers key", name, MAX_LAYER_TEXT)?;
        check_len("layers value", status, MAX_LAYER_TEXT)?;
    }
    Ok(())
}

async fn enroll(State(state): State<AgentChannel>, request: Request) -> Response {
    let remote_addr = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip().to_string());
    let (parts, body) = request.into_parts();
    let bytes = match read_body(&parts.headers, body, MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(BodyError::TooLarge { .. }) => return too_large(),
        Err(other) => return other.response(),
    };
    let body: EnrollRequestBody = match serde_json::from_slice(&bytes) {
        Ok(body) => body,
        // serde names the field and position; it never echoes a string value.
        Err(e) => return bad_request(format!("the body is not an enrollment request: {e}")),
    };
    if let Err(message) = check_body(&body) {
        return bad_request(message);
    }
    let request = EnrollmentRequest {
        token: body.token,
        hostname: body.hostname,
        system_id: body.system_id,
        agent_version: body.agent_version,
        remote_addr,
        layers: body.layers,
    };
    match state.store().enroll_agent(&request).await {
        Ok(enrolled) => {
            let e = &enrolled.enrollment;
            // Older tokens of the node were revoked: not one more poll with them.
            state.inner.known.forget_node(e.node_id);
            // A stage of this process waiting for this agent looks at the store now.
            state.inner.signals.notify(e.node_id);
            tracing::info!(
                node = %e.node_id,
                hostname = %e.hostname,
                system_id = %e.system_id,
                late = e.is_late(),
                replayed = enrolled.replayed,
                "agent enrolled"
            );
            (
                StatusCode::OK,
                Json(EnrollResponse {
                    node_id: e.node_id.to_string(),
                    agent_token: enrolled.agent_token.expose().to_string(),
                    tasks_url: state.tasks_url(e.node_id),
                    heartbeat_interval_seconds: HEARTBEAT_INTERVAL_SECONDS,
                }),
            )
                .into_response()
        }
        Err(err) => refusal(&request, err),
    }
}

fn too_large() -> Response {
    crate::listener::closing(error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("an enrollment request is at most {MAX_BODY_BYTES} bytes"),
    ))
}

/// The contract's answer to a refused enrollment, logged without the token.
fn refusal(request: &EnrollmentRequest, err: EnrollError) -> Response {
    tracing::warn!(
        hostname = %request.hostname,
        system_id = %request.system_id,
        error = %err,
        "agent enrollment refused"
    );
    match err {
        EnrollError::InvalidToken(e) => {
            error(StatusCode::UNAUTHORIZED, "invalid_token", e.to_string())
        }
        // The caller is not authenticated yet (the token is what is in question): the answer
        // says what is wrong without naming the node the token belongs to. The log above has
        // the details for the operator.
        EnrollError::NotWaiting { .. } => error(
            StatusCode::CONFLICT,
            "conflict",
            "the node this token was issued for is not waiting for an agent enrollment",
        ),
        EnrollError::WrongMachine { field, .. } => error(
            StatusCode::CONFLICT,
            "conflict",
            format!("the token was issued for another machine (its {field} does not match)"),
        ),
        EnrollError::Store(e) if e.is_transient() => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the state store is busy or unreachable; retry",
        ),
        EnrollError::Store(_) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "enrollment failed on the server; retry later",
        ),
    }
}
