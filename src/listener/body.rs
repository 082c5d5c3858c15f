//! Request bodies under the listener's guard: a size cap counted as the bytes arrive (a
//! chunked body has no Content-Length to check up front) and a deadline for the whole body, so
//! a client that trickles a body cannot hold a connection and its buffer. Handlers read bodies
//! with [`read_body`] *after* they checked the caller, with their own (smaller) limit, and get
//! a [`BodyError`] that names what went wrong.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::Json;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use serde::{Deserialize, Serialize};

/// The body of every error answer the listener itself gives (the agent channel and the admin
/// API use the same shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    pub message: String,
}

/// A typed JSON error answer.
pub fn error_response(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (
        status,
        Json(ErrorBody {
            error: code.to_owned(),
            message: message.into(),
        }),
    )
        .into_response()
}

/// An error answer after which the connection is closed (the rest of the request was not read).
pub fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Why a body could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    #[error("the request body is over {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the request body did not arrive within {seconds} s")]
    TimedOut { seconds: u64 },
    #[error("the request body was cut short")]
    Aborted,
}

impl BodyError {
    /// The typed answer: 413 `payload_too_large`, 408 `request_timeout`, 400 `bad_request`.
    pub fn response(&self) -> Response {
        let (status, code) = match self {
            BodyError::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            BodyError::TimedOut { .. } => (StatusCode::REQUEST_TIMEOUT, "request_timeout"),
            BodyError::Aborted => (StatusCode::BAD_REQUEST, "bad_request"),
        };
        closing(error_response(status, code, self.to_string()))
    }
}

/// The declared length, when the request has one.
pub fn declared_length(headers: &axum::http::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// Read a whole body of at most `limit` bytes. A body whose declared length is over the limit
/// is refused before a byte of it is read.
pub async fn read_body(
    headers: &axum::http::HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Bytes, BodyError> {
    if declared_length(headers).is_some_and(|n| n > limit as u64) {
        return Err(BodyError::TooLarge { limit });
    }
    match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => Ok(bytes),
        Err(err) => Err(classify(&err, limit)),
    }
}

/// What a body read error was, looking through the error chain for the guard's own error.
fn classify(err: &axum::Error, limit: usize) -> BodyError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(guard) = e.downcast_ref::<BodyError>() {
            return match guard {
                // The listener's cap is larger than the route's: report the route's.
                BodyError::TooLarge { .. } => BodyError::TooLarge { limit },
                other => *other,
            };
        }
        if e.to_string().contains("length limit exceeded") {
            return BodyError::TooLarge { limit };
        }
        source = e.source();
    }
    BodyError::Aborted
}

/// The incoming body with the listener's cap and deadline.
pub(super) struct GuardedBody<B> {
    inner: B,
    limit: usize,
    seen: usize,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout_seconds: u64,
    failed: bool,
}

impl<B> GuardedBody<B> {
    pub(super) fn new(inner: B, limit: usize, timeout: std::time::Duration) -> Self {
        Self {
            inner,
            limit,
            seen: 0,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            timeout_seconds: timeout.as_secs().max(1),
            failed: false,
        }
    }
}

impl<B> HttpBody for GuardedBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.failed {
            return Poll::Ready(None);
        }
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.seen += data.len();
                    if this.seen > this.limit {
                        this.failed = true;
                        return Poll::Ready(Some(Err(Box::new(BodyError::TooLarge {
                            limit: this.limit,
                        }))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                ready!(this.deadline.as_mut().poll(cx));
                this.failed = true;
                Poll::Ready(Some(Err(Box::new(BodyError::TimedOut {
                    seconds: this.timeout_seconds,
                }))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
