//! JSON request bodies with the API's limit and typed errors: over the limit → 413
//! `payload_too_large`, another content type → 415 `unsupported_media_type`, bad JSON or a
//! missing or mistyped field → 400 `bad_request` naming it. A route that takes a body refuses
//! a request without one (400); the routes that refuse whatever is sent (git owns what they
//! would change) take [`MaybeJsonBody`], where an empty body reads as `{}`.

use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;

use super::{ApiError, ApiState};

/// A JSON body of type `T`.
#[derive(Debug, Clone)]
pub struct JsonBody<T>(pub T);

/// A JSON body of type `T` that may be left out (read as `{}`).
#[derive(Debug, Clone)]
pub struct MaybeJsonBody<T>(pub T);

/// A router state that bounds request bodies.
pub trait BodyLimit {
    fn max_body_bytes(&self) -> usize;
}

impl BodyLimit for ApiState {
    fn max_body_bytes(&self) -> usize {
        self.inner.max_body_bytes
    }
}

impl<T: DeserializeOwned + Send, S: BodyLimit + Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        read(request, state.max_body_bytes(), false).await
    }
}

impl<T: DeserializeOwned + Send, S: BodyLimit + Send + Sync> FromRequest<S> for MaybeJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        read(request, state.max_body_bytes(), true)
            .await
            .map(|JsonBody(body)| MaybeJsonBody(body))
    }
}

async fn read<T: DeserializeOwned>(
    request: Request,
    limit: usize,
    empty_is_object: bool,
) -> Result<JsonBody<T>, ApiError> {
    let headers = request.headers();
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::payload_too_large(limit));
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            let essence = v.split(';').next().unwrap_or_default().trim();
            essence.eq_ignore_ascii_case("application/json")
        });
    let bytes = axum::body::to_bytes(request.into_body(), limit)
        .await
        // Without a Content-Length the limit shows up here.
        .map_err(|_| ApiError::payload_too_large(limit))?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        if empty_is_object {
            return parse(b"{}");
        }
        return Err(ApiError::bad_request("this request needs a JSON body")
            .hint("send a JSON object with Content-Type: application/json; openapi.yaml lists its fields"));
    }
    if json == Some(false) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the body must be JSON",
        )
        .hint("send Content-Type: application/json"));
    }
    // Every body is an object (serde would also read a struct from an array).
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(ApiError::bad_request("the body must be a JSON object")
            .hint("send {…} with the fields openapi.yaml lists"));
    }
    parse(&bytes)
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<JsonBody<T>, ApiError> {
    serde_json::from_slice(bytes)
        .map(JsonBody)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}
