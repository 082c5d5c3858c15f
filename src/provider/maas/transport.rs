//! One MAAS call on the wire (API_REFERENCE §1 "Transport conventions", §2.2): the request as
//! MAAS expects it, the retry loop, and the classification of what came back.
//!
//! * `op` always goes in the query string; parameters go in the query string for GET and in an
//!   `application/x-www-form-urlencoded` body otherwise (what gomaasapi sends; MAAS reads
//!   `request.POST`, which JSON bodies would leave empty).
//! * Multi-valued parameters are repeated (`mac_addresses=a&mac_addresses=b`).
//! * Booleans are `true`/`false`: MAAS's Django BooleanFields read `"0"` as true.
//! * Each attempt is signed afresh (new nonce and timestamp), counted and logged.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::Method;
use reqwest::header::{self, HeaderMap, HeaderValue};
use serde::de::DeserializeOwned;
use url::Url;

use crate::clock::Clock;
use crate::secrets::Secret;

use super::auth::{ApiKey, oauth_encode};
use super::error::{ErrorAnswer, MaasError, TransientCause, bounded, html_summary};
use super::metrics::{MaasMetrics, RequestEvent, RequestStatus};
use super::retry::{Jitter, RetryPolicy, Sleeper};
use super::stream::{ArrayDecoder, ArrayError, Decodable, decode_object};

/// Form parameters of one call, in order. `Debug` shows names only: values may be power
/// passwords or user_data.
#[derive(Clone, Default)]
pub(crate) struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn text(&mut self, name: &str, value: impl Into<String>) -> &mut Self {
        self.pairs.push((name.to_owned(), value.into()));
        self
    }

    pub(crate) fn opt_text(&mut self, name: &str, value: Option<&str>) -> &mut Self {
        if let Some(value) = value {
            self.text(name, value);
        }
        self
    }

    /// `true`/`false`, never `1`/`0` (API_REFERENCE §5.10 boolean gotcha).
    pub(crate) fn flag(&mut self, name: &str, value: bool) -> &mut Self {
        self.text(name, if value { "true" } else { "false" })
    }

    pub(crate) fn opt_flag(&mut self, name: &str, value: Option<bool>) -> &mut Self {
        if let Some(value) = value {
            self.flag(name, value);
        }
        self
    }

    pub(crate) fn number(&mut self, name: &str, value: impl fmt::Display) -> &mut Self {
        self.text(name, value.to_string())
    }

    pub(crate) fn opt_number(&mut self, name: &str, value: Option<impl fmt::Display>) -> &mut Self {
        if let Some(value) = value {
            self.number(name, value);
        }
        self
    }

    /// One pair per value: MAAS reads repeated names as a list.
    pub(crate) fn each<S: AsRef<str>>(
        &mut self,
        name: &str,
        values: impl IntoIterator<Item = S>,
    ) -> &mut Self {
        for value in values {
            self.text(name, value.as_ref());
        }
        self
    }

    /// A comma-separated list in one parameter (MAAS splits `commissioning_scripts`,
    /// `dns_servers` server-side). Omitted when empty.
    pub(crate) fn comma_list(&mut self, name: &str, values: &[String]) -> &mut Self {
        if !values.is_empty() {
            self.text(name, values.join(","));
        }
        self
    }

    pub(crate) fn secret(&mut self, name: &str, value: &Secret) -> &mut Self {
        self.text(name, value.expose())
    }

    fn encode(&self) -> String {
        url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&self.pairs)
            .finish()
    }
}

impl fmt::Debug for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.pairs.iter().map(|(name, _)| name))
            .finish()
    }
}

/// A path under the API root from raw segments: each segment percent-encoded, ending in `/`
/// (every MAAS route ends in `/$`). An empty or dot-only segment (an id like `..`) would change
/// which resource is addressed, so it is refused.
fn api_path(operation: &str, segments: &[String]) -> Result<String, MaasError> {
    let mut path = String::new();
    for segment in segments {
        if segment.is_empty() || segment.chars().all(|c| c == '.') {
            return Err(MaasError::Config {
                message: format!("{operation}: {segment:?} is not a valid MAAS id"),
            });
        }
        path.push_str(&oauth_encode(segment));
        path.push('/');
    }
    Ok(path)
}

/// Reads whose answer grows with the site (tens of megabytes for thousands of machines): each
/// attempt may take the client's whole-request timeout. Other reads get the policy's short
/// `read_timeout`, writes its `write_timeout`.
const LISTINGS: &[&str] = &[
    "list_machines",
    "power_parameters",
    "query_events",
    "list_subnets",
];

/// Whether repeating a request could apply it twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Idempotency {
    /// GET reads, PUT updates (the same fields set to the same values).
    Idempotent,
    /// POST operations (deploy, release, commission, create, link…) and DELETE.
    NonIdempotent,
}

/// One call: which operation, where, with what.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) operation: &'static str,
    method: Method,
    segments: Vec<String>,
    op: Option<&'static str>,
    params: Params,
    /// The response may contain secrets (machine tokens): no body in decode errors.
    sensitive_response: bool,
    timeout: Option<Duration>,
    /// What a successful answer holds, for errors about answers that do not.
    expected: &'static str,
}

impl Call {
    fn new(operation: &'static str, method: Method, segments: &[&str]) -> Self {
        Self {
            operation,
            method,
            segments: segments.iter().map(|s| (*s).to_owned()).collect(),
            op: None,
            params: Params::new(),
            sensitive_response: false,
            timeout: None,
            expected: "a JSON document",
        }
    }

    pub(crate) fn get(operation: &'static str, segments: &[&str]) -> Self {
        Self::new(operation, Method::GET, segments)
    }

    pub(crate) fn post(operation: &'static str, segments: &[&str]) -> Self {
        Self::new(operation, Method::POST, segments)
    }

    pub(crate) fn put(operation: &'static str, segments: &[&str]) -> Self {
        Self::new(operation, Method::PUT, segments)
    }

    pub(crate) fn delete(operation: &'static str, segments: &[&str]) -> Self {
        Self::new(operation, Method::DELETE, segments)
    }

    pub(crate) fn op(mut self, op: &'static str) -> Self {
        self.op = Some(op);
        self
    }

    pub(crate) fn params(mut self, params: Params) -> Self {
        self.params = params;
        self
    }

    /// What the answer holds (`a machine object`), named by errors about answers that do not.
    pub(crate) fn expects(mut self, expected: &'static str) -> Self {
        self.expected = expected;
        self
    }

    pub(crate) fn sensitive_response(mut self) -> Self {
        self.sensitive_response = true;
        self
    }

    /// A longer timeout than the client's for calls MAAS itself lets run long
    /// (query_power_state waits up to 60 s for the BMC).
    pub(crate) fn at_least(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// How long one attempt may take: by what the call does, at least what it asked for.
    fn attempt_timeout(&self, policy: &RetryPolicy, whole: Duration) -> Duration {
        let budget = if self.method != Method::GET {
            policy.write_timeout.min(whole)
        } else if LISTINGS.contains(&self.operation) {
            whole
        } else {
            policy.read_timeout.min(whole)
        };
        self.timeout.map_or(budget, |asked| asked.max(budget))
    }

    fn idempotency(&self) -> Idempotency {
        if self.method == Method::GET || self.method == Method::PUT {
            Idempotency::Idempotent
        } else {
            Idempotency::NonIdempotent
        }
    }
}

/// A successful (2xx) answer.
pub(crate) struct Reply {
    pub(crate) body: Bytes,
}

/// How the body of a successful answer is read. Error answers are always read whole.
pub(crate) trait ReadBody: Sync {
    type Output: Send;

    fn read(
        &self,
        response: reqwest::Response,
    ) -> impl Future<Output = Result<Self::Output, reqwest::Error>> + Send;
}

/// The whole body, in one buffer.
struct WholeBody;

impl ReadBody for WholeBody {
    type Output = Reply;

    async fn read(&self, response: reqwest::Response) -> Result<Reply, reqwest::Error> {
        Ok(Reply {
            body: response.bytes().await?,
        })
    }
}

/// A JSON array decoded element by element while it arrives (see [`ArrayDecoder`]), on a
/// blocking thread: decoding a large list neither holds up the runtime's other tasks (other
/// sites' reads) nor waits for them.
struct JsonArrayBody<T>(std::marker::PhantomData<fn() -> T>);

impl<T: Decodable + Send + 'static> ReadBody for JsonArrayBody<T> {
    type Output = Result<Vec<T>, ArrayError>;

    async fn read(&self, mut response: reqwest::Response) -> Result<Self::Output, reqwest::Error> {
        let (pieces, mut arriving) = tokio::sync::mpsc::channel::<Bytes>(16);
        let decoding = tokio::task::spawn_blocking(move || {
            let mut decoder = ArrayDecoder::<T>::default();
            while let Some(piece) = arriving.blocking_recv() {
                // On an error the receiver is dropped, which stops the reading below.
                decoder.feed(&piece)?;
            }
            decoder.finish()
        });
        while let Some(piece) = response.chunk().await? {
            if pieces.send(piece).await.is_err() {
                break;
            }
        }
        drop(pieces);
        Ok(match decoding.await {
            Ok(decoded) => decoded,
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Err(_) => Err(ArrayError {
                error: serde::de::Error::custom("the runtime shut down while decoding"),
                head: Vec::new(),
            }),
        })
    }
}

/// What one exchange brought back.
enum Answer<T> {
    /// A 2xx status and the body as read.
    Success(u16, T),
    /// Any other status, with the headers and body that classify it.
    Failure(u16, HeaderMap, Bytes),
}

/// The wire side of a [`super::MaasClient`].
pub(crate) struct Transport {
    pub(crate) http: reqwest::Client,
    pub(crate) api_root: Url,
    pub(crate) key: ApiKey,
    pub(crate) timeout: Duration,
    pub(crate) retry: RetryPolicy,
    pub(crate) metrics: MaasMetrics,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) jitter: Arc<dyn Jitter>,
    pub(crate) sleeper: Arc<dyn Sleeper>,
}

impl Transport {
    /// Sends `call`, retrying as the policy and the call's idempotency allow.
    pub(crate) async fn send(&self, call: &Call) -> Result<Reply, MaasError> {
        self.send_reading(call, &WholeBody).await
    }

    /// [`Transport::send`], reading a successful answer's body with `body`.
    async fn send_reading<R: ReadBody>(
        &self,
        call: &Call,
        body: &R,
    ) -> Result<R::Output, MaasError> {
        let url = self.url(call)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let err = match self.attempt(call, &url, attempt, body).await {
                Ok(reply) => return Ok(reply),
                Err(err) => err,
            };
            if !should_retry(&self.retry, call.idempotency(), &err, attempt) {
                return Err(finish(err, attempt, call.idempotency()));
            }
            let delay = self
                .retry
                .delay(attempt - 1, err.retry_after(), self.jitter.sample());
            tracing::debug!(
                target: "metalform::maas",
                operation = call.operation,
                attempt,
                delay_ms = delay.as_millis() as u64,
                error = %err,
                "retrying MAAS request"
            );
            self.sleeper.sleep(delay).await;
        }
    }

    /// Sends `call` and decodes its JSON body (`Option<T>` accepts MAAS's `null`).
    pub(crate) async fn json<T: DeserializeOwned>(&self, call: Call) -> Result<T, MaasError> {
        let reply = self.send(&call).await?;
        serde_json::from_slice(&reply.body)
            .map_err(|err| self.decode_error(&call, &reply.body, &err))
    }

    /// [`Transport::json`] for an object answer of which `T` reads only some members (the rest
    /// is stepped over, not decoded).
    pub(crate) async fn json_object<T: Decodable>(&self, call: Call) -> Result<T, MaasError> {
        let reply = self.send(&call).await?;
        decode_object(&reply.body).map_err(|err| self.decode_error(&call, &reply.body, &err))
    }

    /// Sends `call` and decodes its body, a JSON array, element by element while it arrives:
    /// for answers that can be large (a machines list of a big site is tens of megabytes).
    pub(crate) async fn json_array<T: Decodable + Send + 'static>(
        &self,
        call: Call,
    ) -> Result<Vec<T>, MaasError> {
        self.send_reading(&call, &JsonArrayBody(std::marker::PhantomData))
            .await?
            .map_err(|failure| self.decode_error(&call, &failure.head, &failure.error))
    }

    /// Sends `call` and ignores the body (204 for deletes, `OK` for set_boot_disk).
    pub(crate) async fn unit(&self, call: Call) -> Result<(), MaasError> {
        self.send(&call).await.map(drop)
    }

    /// `body`: the answer, or at least its first 200 characters.
    fn decode_error(&self, call: &Call, body: &[u8], err: &serde_json::Error) -> MaasError {
        let text = String::from_utf8_lossy(body);
        let message = if err.classify() == serde_json::error::Category::Eof {
            format!(
                "the answer ends early (truncated after {} bytes)",
                body.len()
            )
        } else if text.trim_start().starts_with('<') {
            format!("got an HTML page: {}", html_summary(&text))
        } else if call.sensitive_response {
            // serde's messages quote the offending value, which could be a token secret.
            format!(
                "{:?} error at line {} column {}",
                err.classify(),
                err.line(),
                err.column()
            )
        } else {
            self.key.scrub(&err.to_string())
        };
        let body_excerpt = (!call.sensitive_response).then(|| {
            let excerpt: String = text.chars().take(200).collect();
            self.key.scrub(&excerpt)
        });
        MaasError::Decode {
            operation: call.operation,
            endpoint: self.endpoint(call),
            expected: call.expected,
            message,
            body_excerpt,
        }
    }

    /// `GET /MAAS/api/2.0/machines/4y3ha3/?op=deploy`: method, path and op, no parameters.
    fn endpoint(&self, call: &Call) -> String {
        let path = api_path(call.operation, &call.segments)
            .ok()
            .and_then(|p| self.api_root.join(&p).ok())
            .map_or_else(|| call.segments.join("/"), |u| u.path().to_owned());
        match call.op {
            Some(op) => format!("{} {path}?op={op}", call.method),
            None => format!("{} {path}", call.method),
        }
    }

    fn url(&self, call: &Call) -> Result<Url, MaasError> {
        let path = api_path(call.operation, &call.segments)?;
        let mut url = self.api_root.join(&path).map_err(|err| MaasError::Config {
            message: format!("cannot build the URL for {}: {err}", call.operation),
        })?;
        let mut query: Vec<(&str, &str)> = Vec::new();
        if let Some(op) = call.op {
            query.push(("op", op));
        }
        if call.method == Method::GET {
            query.extend(
                call.params
                    .pairs
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            );
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        Ok(url)
    }

    async fn attempt<R: ReadBody>(
        &self,
        call: &Call,
        url: &Url,
        attempt: u32,
        body: &R,
    ) -> Result<R::Output, MaasError> {
        let started = tokio::time::Instant::now();
        let outcome = self.exchange(call, url, body).await;
        let status = match &outcome {
            Ok(Answer::Success(status, _)) | Ok(Answer::Failure(status, _, _)) => {
                RequestStatus::Http(*status)
            }
            Err(err) => transport_status(err),
        };
        RequestEvent {
            operation: call.operation,
            method: call.method.as_str(),
            path: url.path(),
            status,
            attempt,
            elapsed: started.elapsed(),
        }
        .emit(&self.metrics);

        let (status, headers, body) =
            match outcome.map_err(|err| self.transport_error(call.operation, err))? {
                Answer::Success(_, output) => return Ok(output),
                Answer::Failure(status, headers, body) => (status, headers, body),
            };
        let header_text = |name| headers.get(name).and_then(|v| v.to_str().ok());
        let answer = ErrorAnswer {
            status,
            endpoint: self.endpoint(call),
            expected: call.expected,
            retry_after: self.retry_after(&headers),
            content_type: header_text(header::CONTENT_TYPE),
            location: header_text(header::LOCATION),
        };
        let text = self.key.scrub(&String::from_utf8_lossy(&body));
        Err(MaasError::from_status(call.operation, &answer, &text))
    }

    /// One HTTP exchange: a 2xx answer's body read with `body`, any other answer whole.
    async fn exchange<R: ReadBody>(
        &self,
        call: &Call,
        url: &Url,
        body: &R,
    ) -> Result<Answer<R::Output>, reqwest::Error> {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let authorization = self.key.authorization(&nonce, self.clock.now().timestamp());
        let mut authorization = HeaderValue::from_str(authorization.expose())
            .expect("the OAuth header is percent-encoded ASCII");
        authorization.set_sensitive(true);

        let mut request = self
            .http
            .request(call.method.clone(), url.clone())
            .header(header::AUTHORIZATION, authorization)
            .header(header::ACCEPT, "application/json")
            .timeout(call.attempt_timeout(&self.retry, self.timeout));
        if call.method != Method::GET {
            request = request
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(call.params.encode());
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(Answer::Success(status, body.read(response).await?));
        }
        let headers = response.headers().clone();
        Ok(Answer::Failure(status, headers, response.bytes().await?))
    }

    fn transport_error(&self, operation: &'static str, err: reqwest::Error) -> MaasError {
        let cause = match transport_status(&err) {
            RequestStatus::ConnectError => TransientCause::Connect,
            RequestStatus::Timeout => TransientCause::Timeout,
            _ => TransientCause::Transport,
        };
        MaasError::Transient {
            operation,
            cause,
            message: bounded(&self.key.scrub(&error_chain(&err.without_url()))),
            retry_after: None,
            outcome_unknown: false,
            attempts: 1,
        }
    }

    /// `Retry-After` as delta-seconds (what MAAS sends) or an HTTP date.
    fn retry_after(&self, headers: &HeaderMap) -> Option<Duration> {
        let value = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
        if let Ok(seconds) = value.parse::<u64>() {
            return Some(Duration::from_secs(seconds));
        }
        let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
        let wait = at.with_timezone(&chrono::Utc) - self.clock.now();
        Some(wait.to_std().unwrap_or(Duration::ZERO))
    }
}

fn transport_status(err: &reqwest::Error) -> RequestStatus {
    // A connect timeout is both: the request was never sent, which is what matters.
    if err.is_connect() {
        RequestStatus::ConnectError
    } else if err.is_timeout() {
        RequestStatus::Timeout
    } else {
        RequestStatus::TransportError
    }
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The retry rule: transient failures only, within the attempt budget, never a
/// `Retry-After` longer than the policy waits for, and a non-idempotent request only when
/// MAAS provably did not apply it.
pub(crate) fn should_retry(
    policy: &RetryPolicy,
    idempotency: Idempotency,
    err: &MaasError,
    attempts_made: u32,
) -> bool {
    if !err.is_retryable() || attempts_made >= policy.max_attempts {
        return false;
    }
    if err
        .retry_after()
        .is_some_and(|asked| asked > policy.max_retry_after)
    {
        return false;
    }
    match idempotency {
        Idempotency::Idempotent => true,
        Idempotency::NonIdempotent => err.provably_not_applied(),
    }
}

/// The error handed to the caller: how many attempts were made, and whether a non-idempotent
/// request might have taken effect.
fn finish(err: MaasError, attempts_made: u32, idempotency: Idempotency) -> MaasError {
    let not_applied = err.provably_not_applied();
    match err {
        MaasError::Transient {
            operation,
            cause,
            message,
            retry_after,
            ..
        } => MaasError::Transient {
            operation,
            cause,
            message,
            retry_after,
            outcome_unknown: idempotency == Idempotency::NonIdempotent && !not_applied,
            attempts: attempts_made,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transient(cause: TransientCause, retry_after: Option<u64>) -> MaasError {
        MaasError::Transient {
            operation: "deploy",
            cause,
            message: String::new(),
            retry_after: retry_after.map(Duration::from_secs),
            outcome_unknown: false,
            attempts: 1,
        }
    }

    #[test]
    fn non_idempotent_requests_retry_only_when_provably_not_applied() {
        use Idempotency::*;
        use TransientCause::*;
        let p = RetryPolicy::default();
        let cases = [
            (transient(Connect, None), true),
            (transient(Status(503), Some(10)), true),
            (transient(Status(409), Some(5)), true),
            (transient(Status(503), None), false),
            (transient(Status(500), None), false),
            (transient(Timeout, None), false),
            (transient(Transport, None), false),
        ];
        for (err, post_retries) in cases {
            assert_eq!(
                should_retry(&p, NonIdempotent, &err, 1),
                post_retries,
                "{err}"
            );
            assert!(should_retry(&p, Idempotent, &err, 1), "{err}");
            let handed_back = finish(err, 1, NonIdempotent);
            assert_eq!(
                handed_back.is_outcome_unknown(),
                !post_retries,
                "{handed_back}"
            );
        }
    }

    #[test]
    fn never_retries_definite_answers_or_past_the_budget() {
        let p = RetryPolicy::default();
        let conflict = MaasError::Conflict {
            operation: "deploy",
            message: String::new(),
        };
        assert!(!should_retry(&p, Idempotency::Idempotent, &conflict, 1));
        let busy = transient(TransientCause::Status(503), Some(10));
        assert!(should_retry(
            &p,
            Idempotency::Idempotent,
            &busy,
            p.max_attempts - 1
        ));
        assert!(!should_retry(
            &p,
            Idempotency::Idempotent,
            &busy,
            p.max_attempts
        ));
        let too_long = transient(TransientCause::Status(503), Some(3600));
        assert!(!should_retry(&p, Idempotency::Idempotent, &too_long, 1));
        assert!(!finish(too_long, 1, Idempotency::NonIdempotent).is_outcome_unknown());
    }

    #[test]
    fn params_encode_in_order_with_repeats_and_debug_hides_values() {
        let mut params = Params::new();
        params
            .text("hostname", "gpu 01")
            .each("mac_addresses", ["aa:bb", "cc:dd"])
            .flag("enable_ssh", true)
            .flag("skip_storage", false)
            .secret("power_parameters_power_pass", &Secret::new("p&ss"));
        assert_eq!(
            params.encode(),
            "hostname=gpu+01&mac_addresses=aa%3Abb&mac_addresses=cc%3Add&enable_ssh=true\
             &skip_storage=false&power_parameters_power_pass=p%26ss"
        );
        let debug = format!("{params:?}");
        assert!(!debug.contains("p&ss"));
        assert!(debug.contains("power_parameters_power_pass"));
    }

    #[test]
    fn attempts_are_timed_by_what_they_do() {
        let policy = RetryPolicy::default();
        let whole = Duration::from_secs(90);
        let timeout = |call: Call| call.attempt_timeout(&policy, whole);
        assert_eq!(
            timeout(Call::get("read_machine", &["machines", "x"])),
            Duration::from_secs(10)
        );
        assert_eq!(timeout(Call::get("list_machines", &["machines"])), whole);
        assert_eq!(
            timeout(Call::post("deploy", &["machines", "x"])),
            Duration::from_secs(45)
        );
        // A call that says it runs long (MAAS waits on the BMC) gets that much.
        assert_eq!(
            timeout(
                Call::get("query_power_state", &["machines", "x"])
                    .at_least(Duration::from_secs(75))
            ),
            Duration::from_secs(75)
        );
        // Never longer than the client's whole-request timeout allows for the kind.
        assert_eq!(
            Call::get("read_machine", &["machines", "x"])
                .attempt_timeout(&policy, Duration::from_secs(2)),
            Duration::from_secs(2)
        );
    }

    fn path(segments: &[&str]) -> Result<String, MaasError> {
        let owned: Vec<String> = segments.iter().map(|s| (*s).to_owned()).collect();
        api_path("read_machine", &owned)
    }

    #[test]
    fn paths_encode_segments_and_end_in_a_slash() {
        assert_eq!(path(&["machines"]).unwrap(), "machines/");
        assert_eq!(
            path(&["nodes", "4y3ha3", "blockdevices", "12"]).unwrap(),
            "nodes/4y3ha3/blockdevices/12/"
        );
        assert_eq!(
            path(&["machines", "../x?y"]).unwrap(),
            "machines/..%2Fx%3Fy/"
        );
        for bad in ["", ".", ".."] {
            assert_eq!(
                path(&["machines", bad]).unwrap_err().to_string(),
                format!("MAAS client configuration: read_machine: {bad:?} is not a valid MAAS id")
            );
        }
    }
}
