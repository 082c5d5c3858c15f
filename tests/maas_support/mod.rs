//! Test support for the MAAS client's wire tests: a small axum server that records exactly
//! what the client sends and answers with scripted MAAS bodies (fixtures, MAAS's error
//! shapes, delays). It listens on loopback; `base_url()` is what a `MaasClient` is pointed at,
//! so the same client helpers work against any MAAS-speaking server (the simulator later).

#![allow(dead_code)]

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use metalform::clock::{Clock, ManualClock};
use metalform::provider::maas::{Jitter, MaasClient, MaasClientOptions, RetryPolicy};
use metalform::secrets::Secret;

/// The key every test client uses; its secret parts must never surface in errors.
pub const API_KEY: &str = "ck-consumer:tk-token-key:ts-token-secret";
pub const TOKEN_KEY: &str = "tk-token-key";
pub const TOKEN_SECRET: &str = "ts-token-secret";

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// tokio time at arrival (paused time in retry tests).
    pub at: tokio::time::Instant,
}

impl Recorded {
    pub fn op(&self) -> Option<&str> {
        self.query_value("op")
    }

    pub fn query_value(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The form-decoded body, in order.
    pub fn form(&self) -> Vec<(String, String)> {
        url::form_urlencoded::parse(&self.body)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    }

    pub fn form_values(&self, name: &str) -> Vec<String> {
        self.form()
            .into_iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v)
            .collect()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// What the server answers.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// Wait this long before answering (a hang, with a long enough value).
    pub delay: Option<Duration>,
}

impl Reply {
    /// 200 with MAAS's JSON content type.
    pub fn json(body: impl Into<String>) -> Self {
        Self::with_type(200, "application/json; charset=utf-8", body)
    }

    /// An error status with a JSON body (MAAS's form errors).
    pub fn json_status(status: u16, body: impl Into<String>) -> Self {
        Self::with_type(status, "application/json; charset=utf-8", body)
    }

    /// MAAS's plain-text answers (errors, `OK`).
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Self::with_type(status, "text/plain; charset=utf-8", body)
    }

    pub fn empty(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: String::new(),
            delay: None,
        }
    }

    fn with_type(status: u16, content_type: &str, body: impl Into<String>) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            body: body.into(),
            delay: None,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn retry_after(self, seconds: u64) -> Self {
        self.header("retry-after", &seconds.to_string())
    }

    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Never answers within any test's timeout.
    pub fn hang() -> Self {
        Self::empty(200).delayed(Duration::from_secs(24 * 3600))
    }
}

type Responder = dyn Fn(&Recorded, usize) -> Reply + Send + Sync;

#[derive(Clone)]
struct ServerState {
    recorded: Arc<Mutex<Vec<Recorded>>>,
    calls: Arc<AtomicUsize>,
    responder: Arc<Responder>,
}

/// A recording MAAS stand-in. The responder gets each request and its 0-based index.
pub struct FakeMaas {
    addr: std::net::SocketAddr,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    server: tokio::task::JoinHandle<()>,
}

impl FakeMaas {
    pub async fn start(
        responder: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, responder)
    }

    /// Serves on a listener the test bound itself (to start "MAAS" late, on a known port).
    pub fn serve(
        listener: tokio::net::TcpListener,
        responder: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let addr = listener.local_addr().unwrap();
        let state = ServerState {
            recorded: Arc::default(),
            calls: Arc::default(),
            responder: Arc::new(responder),
        };
        let recorded = state.recorded.clone();
        let app = axum::Router::new().fallback(handle).with_state(state);
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            addr,
            recorded,
            server,
        }
    }

    /// A server that answers every request the same way.
    pub async fn always(reply: Reply) -> Self {
        Self::start(move |_, _| reply.clone()).await
    }

    /// A server that answers with `replies` in order, then repeats the last one.
    pub async fn sequence(replies: Vec<Reply>) -> Self {
        let replies = Mutex::new(VecDeque::from(replies));
        Self::start(move |_, _| {
            let mut replies = replies.lock().unwrap();
            if replies.len() > 1 {
                replies.pop_front().unwrap()
            } else {
                replies.front().cloned().expect("at least one reply")
            }
        })
        .await
    }

    /// `http://127.0.0.1:PORT/MAAS`, what an operator configures.
    pub fn base_url(&self) -> String {
        format!("http://{}/MAAS", self.addr)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.recorded.lock().unwrap().clone()
    }
}

impl Drop for FakeMaas {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn handle(
    State(state): State<ServerState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let recorded = Recorded {
        method,
        path: uri.path().to_owned(),
        query: uri
            .query()
            .map(|q| {
                url::form_urlencoded::parse(q.as_bytes())
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect()
            })
            .unwrap_or_default(),
        headers,
        body,
        at: tokio::time::Instant::now(),
    };
    let index = state.calls.fetch_add(1, Ordering::SeqCst);
    let reply = (state.responder)(&recorded, index);
    state.recorded.lock().unwrap().push(recorded);
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    let mut response = (StatusCode::from_u16(reply.status).unwrap(), reply.body).into_response();
    for (name, value) in reply.headers {
        response.headers_mut().insert(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(&value).unwrap(),
        );
    }
    response
}

/// A fixture file's text.
pub fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/maas")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One example of a MAAS api-examples file, as JSON text.
pub fn example(file: &str, key: &str) -> String {
    let doc: serde_json::Value = serde_json::from_str(&fixture(file)).unwrap();
    serde_json::to_string(&doc[key]).unwrap()
}

/// A real machine (yorc's IPMI hardware, MAAS ~2.9, status Deploying).
pub fn machine_json() -> String {
    fixture("yorc__all_test_data__deployResponse.json")
}

/// Always the same sample: for jitter-exact timing assertions.
#[derive(Debug)]
pub struct FixedJitter(pub f64);

impl Jitter for FixedJitter {
    fn sample(&self) -> f64 {
        self.0
    }
}

/// 2026-01-01T00:00:00Z, the OAuth clock of the tests.
pub fn test_clock() -> ManualClock {
    ManualClock::new(
        chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc),
    )
}

/// Deterministic options: fixed clock, fixed jitter (0.5), 10 s timeout, default retries.
pub fn test_options() -> MaasClientOptions {
    MaasClientOptions {
        timeout: Duration::from_secs(10),
        clock: Arc::new(test_clock()) as Arc<dyn Clock>,
        jitter: Arc::new(FixedJitter(0.5)),
        retry: RetryPolicy::default(),
        ..MaasClientOptions::default()
    }
}

pub fn client_for(base_url: &str, options: MaasClientOptions) -> MaasClient {
    MaasClient::new(base_url, Secret::new(API_KEY), options).unwrap()
}

pub fn client(server: &FakeMaas) -> MaasClient {
    client_for(&server.base_url(), test_options())
}

/// The `Authorization: OAuth k="v", …` parameters, unquoted.
pub fn oauth_params(header: &str) -> std::collections::BTreeMap<String, String> {
    let rest = header.strip_prefix("OAuth ").expect("OAuth scheme");
    rest.split(", ")
        .map(|pair| {
            let (k, v) = pair.split_once('=').expect("k=v");
            (k.to_owned(), v.trim_matches('"').to_owned())
        })
        .collect()
}
