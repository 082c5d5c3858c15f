//! Typed JSON errors of the admin API (docs/api.md): every refusal is
//! `{"error": "<code>", "message": "<sentence>", "hint"?: "<what to do>"}` with a status that
//! says the class — 400 bad request, 401/403 auth, 404 unknown, 409 conflict or owned by git,
//! 413 too large, 415 not JSON, 422 MAAS refused a credential, 503 shutting down or a service
//! unavailable, 500 a bug.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::store::StoreError;

/// The body of every error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub hint: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message).hint(
            "send `Authorization: Bearer <token>` with a token from the daemon's [api] tokens",
        )
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// A write that would fight the manifests: git is the source of truth (DESIGN.md §2).
    pub fn owned_by_git(message: impl Into<String>, file: &str) -> Self {
        Self::new(StatusCode::CONFLICT, "owned_by_git", message).hint(format!(
            "change {file} in the fleet repository and commit; the daemon applies it"
        ))
    }

    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the request body is over {limit} bytes"),
        )
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
            .hint("retry with back-off")
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: self.code.to_owned(),
            message: self.message.clone(),
            hint: self.hint.clone(),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"metalform\""),
            );
        }
        response
    }
}

/// The store's refusals, classified once: unknown → 404, lifecycle conflicts → 409, a busy or
/// unreachable store → 503, anything else → 500.
impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match &err {
            StoreError::NotFound { .. } => ApiError::not_found(err.to_string()),
            StoreError::Recovery { .. } => {
                ApiError::new(StatusCode::CONFLICT, "invalid_recovery", err.to_string()).hint(
                    "GET the job: its state and recommended action say which recovery applies",
                )
            }
            _ if err.is_conflict() => ApiError::conflict(err.to_string()),
            _ if err.is_transient() => ApiError::unavailable(err.to_string()),
            _ => ApiError::internal(err.to_string()),
        }
    }
}

/// An extractor's plain-text rejection (a malformed query string) as the typed JSON error every
/// other answer is.
pub async fn typed_rejections(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let response = next.run(request).await;
    let status = response.status();
    let plain = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain"));
    if !(plain && status.is_client_error()) {
        return response;
    }
    let bytes = axum::body::to_bytes(response.into_body(), 16 * 1024)
        .await
        .unwrap_or_default();
    let code = match status {
        axum::http::StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        axum::http::StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        _ => "bad_request",
    };
    ApiError::new(
        status,
        code,
        String::from_utf8_lossy(&bytes).trim().to_owned(),
    )
    .into_response()
}
