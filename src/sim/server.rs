//! The simulator's HTTP server (DESIGN.md §5): MAAS API 2.0 under `/MAAS/`, the control API
//! under `/sim/v1/`, a ticker that runs due background work, and the embeddable handle.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::Notify;

use super::api::{self, Call};
use super::auth;
use super::config::SimConfig;
use super::describe;
use super::faults::AnswerFault;
use super::injected;
use super::model::OpRecord;
use super::reply::{MaasError, Reply};
use super::shared::Shared;
use super::transport::{self, Params};
use super::world::{World, WorldError};
use crate::clock::Clock;

/// Starts agents of hosts that booted and returns when the next background work is due.
fn tick(shared: &Arc<Shared>) -> Option<chrono::DateTime<chrono::Utc>> {
    let (boots, next) = shared.with_world(|w| (std::mem::take(&mut w.outbox), w.next_due()));
    for boot in boots {
        super::agent::spawn(shared.clone(), boot);
    }
    next
}

async fn ticker(shared: Arc<Shared>) {
    loop {
        let next = tick(&shared);
        let wait = next
            .map(|due| (due - shared.clock.now()).to_std().unwrap_or_default())
            .unwrap_or(Duration::from_secs(1))
            // Re-check at least every second (a ManualClock moves without waking us).
            .min(Duration::from_secs(1));
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shared.wake.notified() => {}
        }
    }
}

/// Why the simulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Config(#[from] WorldError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot build the agents' HTTP client: {0}")]
    Http(String),
}

/// A running simulator.
#[derive(Debug)]
pub struct SimHandle {
    /// `http://127.0.0.1:PORT/MAAS/` — what a MAAS client is given.
    pub maas_url: String,
    /// The listening address.
    pub addr: SocketAddr,
    api_key: crate::secrets::Secret,
    pub(super) shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
    ticker: tokio::task::JoinHandle<()>,
}

impl SimHandle {
    /// The admin API key (`consumer:token:secret`).
    pub fn api_key(&self) -> &crate::secrets::Secret {
        &self.api_key
    }

    /// `http://ADDR` (base of the control API `/sim/v1/…`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Runs `f` on the simulated region (after running due background work).
    pub fn with_world<T>(&self, f: impl FnOnce(&mut World) -> T) -> T {
        // Agents of hosts that booted meanwhile are started by the (woken) ticker.
        self.shared.with_world(f)
    }

    /// Counters of requests that took effect, per system id (contracts §3 `/counters`).
    pub fn counters(&self) -> std::collections::BTreeMap<String, super::model::Counters> {
        self.with_world(|w| w.counters.clone())
    }

    /// The operation log (contracts §3 `/ops`).
    pub fn ops(&self) -> Vec<OpRecord> {
        self.with_world(|w| w.ops.clone())
    }

    /// The simulated agents' enrollment attempts.
    pub fn agent_log(&self) -> Vec<super::model::AgentRecord> {
        self.with_world(|w| w.agent_log.clone())
    }

    /// Replaces the fault spec (same grammar as `--faults`).
    pub fn set_faults(&self, spec: &str) -> Result<(), super::faults::FaultSpecError> {
        let spec = super::faults::FaultSpec::parse(spec, &describe::is_known_action)?;
        self.with_world(|w| w.replace_faults(spec));
        Ok(())
    }

    /// An operator's out-of-band change (contracts §3 `/oob`).
    pub fn out_of_band(&self, system_id: &str, action: &str) -> Result<(), MaasError> {
        let now = self.shared.clock.now();
        self.with_world(|w| {
            let id = w.machine_id(system_id).ok_or_else(MaasError::no_machine)?;
            w.out_of_band(id, action, now)
        })
    }

    /// The IPMI stand-in (contracts §3 `/bmc/{ip}/power`).
    pub fn bmc_power(
        &self,
        ip: &str,
        action: &str,
        pxe_boot: bool,
    ) -> Result<serde_json::Value, MaasError> {
        let now = self.shared.clock.now();
        self.with_world(|w| w.bmc_power(ip, action, pxe_boot, now))
    }

    /// The SSH stand-in (contracts §3 `/host/files`).
    pub fn write_host_file(
        &self,
        system_id: &str,
        path: &str,
        content: &str,
    ) -> Result<(), MaasError> {
        let now = self.shared.clock.now();
        self.with_world(|w| w.write_host_file(system_id, path, content, now))
    }

    /// Stops serving.
    pub fn shutdown(self) {
        self.server.abort();
        self.ticker.abort();
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.server.abort();
        self.ticker.abort();
    }
}

/// Starts a simulator on `listen` (use `127.0.0.1:0` for a free port) with an injected clock.
pub async fn start(
    config: SimConfig,
    clock: Arc<dyn Clock>,
    listen: SocketAddr,
) -> Result<SimHandle, SimError> {
    let api_key = crate::secrets::Secret::new(config.api_key.clone());
    let world = World::new(config, clock.now())?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| SimError::Listen {
            addr: listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| SimError::Listen {
        addr: listen,
        source,
    })?;
    // reqwest is built without a default TLS provider; embedders (tests, demo) may not have
    // installed one yet. Installing twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| SimError::Http(e.to_string()))?;
    let shared = Arc::new(Shared {
        world: Mutex::new(world),
        clock,
        http,
        wake: Notify::new(),
        api_hash: describe::api_hash(),
    });
    let app = Router::new()
        .merge(super::control::routes())
        .fallback(maas_entry)
        .layer(DefaultBodyLimit::max(64 * 1024 * 1024))
        .with_state(shared.clone());
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let ticker = tokio::spawn(ticker(shared.clone()));
    Ok(SimHandle {
        maas_url: format!("http://{addr}/MAAS/"),
        addr,
        api_key,
        shared,
        server,
        ticker,
    })
}

fn text(status: StatusCode, body: &str) -> Response {
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Everything under `/MAAS/`.
async fn maas_entry(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    if path == "/MAAS/api/version/" {
        return text(StatusCode::OK, "2.0");
    }
    if path.starts_with("/MAAS/api/1.0/") {
        return text(
            StatusCode::GONE,
            "The 1.0 API is no longer available. Please use API version 2.0.",
        );
    }
    let Some(rest) = path.strip_prefix("/MAAS/api/2.0/") else {
        return text(StatusCode::NOT_FOUND, &format!("Not found: {path}"));
    };
    // MAAS's WSGI server hands Django the path decoded (`subnets/cidr%3A10.0.0.0/24/` is
    // `subnets/cidr:10.0.0.0/24/`); routes are matched on that.
    let rest = percent_decoded(rest);
    let mut response = maas_api(&shared, &method, &uri, &headers, body, &rest).await;
    if let Ok(value) = HeaderValue::from_str(&shared.api_hash) {
        response.headers_mut().insert("X-MAAS-API-Hash", value);
    }
    response
}

/// `text` with its `%XX` escapes decoded (bytes that are not UTF-8 become U+FFFD).
fn percent_decoded(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('%') {
        return text.into();
    }
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match bytes.get(i + 1..i + 3) {
            Some(hex) if bytes[i] == b'%' && hex.iter().all(u8::is_ascii_hexdigit) => {
                std::str::from_utf8(hex)
                    .ok()
                    .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            }
            _ => None,
        };
        match escaped {
            Some(byte) => {
                decoded.push(byte);
                i += 3;
            }
            None => {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned().into()
}

struct Outcome {
    response: Response,
    status: u16,
    action: Option<String>,
    fault: Option<String>,
}

impl Outcome {
    fn error(err: MaasError, action: Option<String>) -> Outcome {
        Outcome {
            status: err.status(),
            response: err.into_response(),
            action,
            fault: None,
        }
    }
}

async fn maas_api(
    shared: &Arc<Shared>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
    rest: &str,
) -> Response {
    let query = transport::parse_urlencoded(uri.query().unwrap_or("").as_bytes());
    let route = api::route(rest);
    let op_param = query.get("op").map(String::from);
    let outcome = handle(
        shared,
        method,
        uri,
        headers,
        body,
        rest,
        &query,
        route.clone(),
    )
    .await;
    let system_id = route.as_ref().and_then(|r| r.system_id().map(String::from));
    let at = super::machine::format_datetime(shared.clock.now());
    shared.with_world(|w| {
        let seq = w.ops.len() as u64 + 1;
        w.ops.push(OpRecord {
            seq,
            at,
            method: method.to_string(),
            path: uri.path().to_string(),
            op: op_param.or(route.and_then(|r| r.suffix_op)),
            action: outcome.action.clone(),
            system_id,
            status: outcome.status,
            fault: outcome.fault.clone(),
        });
    });
    outcome.response
}

#[allow(clippy::too_many_arguments)]
async fn handle(
    shared: &Arc<Shared>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
    rest: &str,
    query: &Params,
    route: Option<api::Route>,
) -> Outcome {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost:5240")
        .to_string();
    let base_url = format!("http://{host}");
    if rest == "describe/" {
        let mut doc = describe::describe_document(&base_url);
        doc["hash"] = serde_json::Value::String(shared.api_hash.clone());
        return Outcome {
            status: 200,
            response: Reply::json(&doc).into_response(),
            action: Some("describe.read".to_string()),
            fault: None,
        };
    }
    let Some(route) = route else {
        return Outcome::error(
            MaasError::NotFound(format!("Unknown API endpoint: {}.", uri.path())),
            None,
        );
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let form = match transport::parse_body(content_type, body).await {
        Ok(form) => form,
        Err(err) => return Outcome::error(MaasError::BadRequest(err.to_string()), None),
    };
    let op = query
        .get("op")
        .or(form.get("op"))
        .or(route.suffix_op.as_deref())
        .filter(|op| !op.is_empty())
        .map(String::from);
    let oauth = auth::oauth_params(
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
        query,
        &form,
    );
    let method_name = method.as_str().to_string();
    // Authenticate, pick the action and draw faults in one critical section.
    let prepared = shared.with_world(|w| {
        let caller = auth::authenticate(w, oauth, shared.clock.now())?;
        let (_, action) = api::select_action(&route, &caller, &method_name, op.as_deref())?;
        let key = describe::action_key(route.handler, action);
        let ids: Vec<String> = route
            .system_id()
            .map(|sid| match w.machine(sid) {
                Some(m) => vec![
                    m.system_id.clone(),
                    m.hostname.clone(),
                    m.bmc_ip().unwrap_or("").to_string(),
                ],
                None => vec![sid.to_string()],
            })
            .unwrap_or_default();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let seed = w.seed;
        let faults = w.faults.clone();
        let injection = faults.draw(seed, &key, &refs, &mut w.fault_state);
        Ok::<_, MaasError>((caller, action, key, injection))
    });
    let (caller, action, key, injection) = match prepared {
        Ok(p) => p,
        Err(err) => return Outcome::error(err, None),
    };
    if let Some(latency) = injection.latency {
        tokio::time::sleep(latency).await;
    }
    if injection.hang {
        // The client's timeout ends this request; nothing takes effect.
        tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
    }
    let system_id = route.system_id().map(String::from);
    if let Some(kind) = injection.answer
        && let Some(answer) = injected::foreign_answer(kind, injection.status, &host, uri.path())
    {
        let mut outcome = match (kind, answer) {
            // JSON MAAS would never send for this action.
            (AnswerFault::Shape, _) => Outcome {
                status: 200,
                response: Reply::json(&serde_json::json!({"detail": "unexpected", "items": []}))
                    .into_response(),
                action: Some(key),
                fault: None,
            },
            (_, answer) => Outcome::error(answer, Some(key)),
        };
        outcome.fault = injection.rule;
        return outcome;
    }
    if let Some(status) = injection.status {
        let err = shared.with_world(|w| {
            injected::status_error(w, &key, system_id.as_deref(), status, injection.retry_after)
        });
        let mut outcome = Outcome::error(err, Some(key));
        outcome.fault = injection.rule;
        return outcome;
    }
    let now = shared.clock.now();
    let result = shared.with_world(|w| {
        let call = Call {
            caller: &caller,
            route: &route,
            action,
            query,
            form: &form,
            now,
        };
        api::execute(w, &call)
    });
    let truncated = injection.answer == Some(AnswerFault::Truncated);
    let mut outcome = match result {
        Ok(reply) => Outcome {
            status: match reply {
                Reply::Deleted => 204,
                _ => 200,
            },
            response: if truncated {
                truncate(reply.into_response()).await
            } else {
                reply.into_response()
            },
            action: Some(key),
            fault: None,
        },
        Err(err) => Outcome::error(err, Some(key)),
    };
    outcome.fault = injection
        .rule
        .filter(|_| injection.latency.is_some() || truncated);
    outcome
}

/// MAAS's answer with only its first half, as a proxy that cut it would pass it on.
async fn truncate(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let half = bytes.slice(..bytes.len() / 2);
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(half.len()));
    Response::from_parts(parts, axum::body::Body::from(half))
}
