//! The daemon's status pages (seed 001 §9.1 inventory view and §9.2 lifecycle detail view,
//! seed 000 §6.5 drift; DESIGN.md §6; docs/status-page.md): server-rendered HTML on the admin
//! listener, read-only, behind the admin API's token check.
//!
//! Pages: the fleet overview (`/ui/`: per site, nodes by coarse state, failures, drift, the last
//! plan's summary), the node list with filters (`/ui/nodes?site=&state=&group=&drift=1&failed=1`),
//! one node (`/ui/nodes/{site}/{hostname}`: lifecycle, provision state, jobs with their stage
//! timeline, drift, agent contact, recent events) and the daemon's current plan (`/ui/plan`).
//!
//! Many viewers do not mean many store reads: the overview, the list and the plan page render
//! from one snapshot shared by every viewer and read again at most once per refresh interval
//! (the first request after it expires reads; the others wait for that read), node pages are
//! cached per node the same way, and every page carries an ETag so an unchanged page costs a
//! 304. status.js refreshes the part of the page below the filters in place while the tab is
//! visible; without JavaScript the page reloads itself.
//!
//! Browsers cannot send a bearer token on navigation, so the pages also take HTTP Basic
//! credentials whose password is an admin token (any user name): the request then goes
//! through the same admin guard as the API. Every value is escaped (maud), and the pages are
//! served with a Content-Security-Policy that allows only their own stylesheet and script.

mod pages;
mod view;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use base64::Engine as _;
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;

pub use pages::{BASE, MAX_ROWS, age};
pub use view::{
    DaemonView, FleetSnapshot, JobBrief, LatestPlan, NOT_ONBOARDED, NodeDetail, NodeQuery, NodeRow,
    SiteOverview, StageStep, StepStatus, fleet_snapshot, node_detail, timeline,
};

use crate::api::ApiState;
use crate::store::{Store, StoreError};

/// How often pages refresh, and how long one store read serves every viewer.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(5);

/// Node pages kept at once; older ones are dropped first when more are asked for.
const NODE_PAGES: usize = 256;

const CSS: &str = include_str!("assets/status.css");
const JS: &str = include_str!("assets/status.js");

/// Only the pages' own stylesheet and script; no inline code, no frames, no other origin.
const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; \
                   img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A value read from the store, and when.
struct Slot<T> {
    read_at: Instant,
    value: Arc<T>,
}

impl<T> Slot<T> {
    fn fresh(&self, ttl: Duration) -> Option<Arc<T>> {
        (self.read_at.elapsed() < ttl).then(|| self.value.clone())
    }
}

type NodeKey = (String, String);

struct Inner {
    store: Store,
    daemon: Arc<dyn DaemonView>,
    refresh: Duration,
    fleet: Mutex<Option<Slot<FleetSnapshot>>>,
    nodes: Mutex<HashMap<NodeKey, Slot<Option<NodeDetail>>>>,
    reads: AtomicU64,
}

/// The pages' state: the store, the daemon's view, the shared snapshots. Cheap to clone.
#[derive(Clone)]
pub struct WebState {
    inner: Arc<Inner>,
}

impl WebState {
    /// `refresh` is both how often pages refresh and how long one read serves everyone (at
    /// least one second).
    pub fn new(store: Store, daemon: Arc<dyn DaemonView>, refresh: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                daemon,
                refresh: refresh.max(Duration::from_secs(1)),
                fleet: Mutex::new(None),
                nodes: Mutex::new(HashMap::new()),
                reads: AtomicU64::new(0),
            }),
        }
    }

    /// How many times the pages read the store (a snapshot or a node page) so far.
    pub fn store_reads(&self) -> u64 {
        self.inner.reads.load(Ordering::SeqCst)
    }

    fn refresh_secs(&self) -> u64 {
        self.inner.refresh.as_secs()
    }

    /// The shared snapshot, read again when it is older than the refresh interval. Concurrent
    /// callers wait for one read.
    pub async fn snapshot(&self) -> Result<Arc<FleetSnapshot>, StoreError> {
        let mut slot = self.inner.fleet.lock().await;
        if let Some(value) = slot.as_ref().and_then(|s| s.fresh(self.inner.refresh)) {
            return Ok(value);
        }
        self.inner.reads.fetch_add(1, Ordering::SeqCst);
        let value = Arc::new(fleet_snapshot(&self.inner.store, self.inner.daemon.as_ref()).await?);
        *slot = Some(Slot {
            read_at: Instant::now(),
            value: value.clone(),
        });
        Ok(value)
    }

    /// One node's page data, cached like the snapshot.
    pub async fn node(
        &self,
        site: &str,
        hostname: &str,
    ) -> Result<Arc<Option<NodeDetail>>, StoreError> {
        let key = (site.to_owned(), hostname.to_owned());
        let mut nodes = self.inner.nodes.lock().await;
        if let Some(value) = nodes.get(&key).and_then(|s| s.fresh(self.inner.refresh)) {
            return Ok(value);
        }
        self.inner.reads.fetch_add(1, Ordering::SeqCst);
        let value = Arc::new(
            node_detail(
                &self.inner.store,
                self.inner.daemon.as_ref(),
                site,
                hostname,
            )
            .await?,
        );
        if nodes.len() >= NODE_PAGES {
            let ttl = self.inner.refresh;
            nodes.retain(|_, slot| slot.fresh(ttl).is_some());
            if nodes.len() >= NODE_PAGES
                && let Some(oldest) = nodes
                    .iter()
                    .min_by_key(|(_, slot)| slot.read_at)
                    .map(|(k, _)| k.clone())
            {
                nodes.remove(&oldest);
            }
        }
        nodes.insert(
            key,
            Slot {
                read_at: Instant::now(),
                value: value.clone(),
            },
        );
        Ok(value)
    }
}

/// The pages' router: `/ui/…` behind the admin guard, and `/` sending a browser there.
pub fn router(state: WebState, api: ApiState) -> Router {
    let pages = Router::new()
        .route(BASE, get(overview))
        .route(&format!("{BASE}/"), get(overview))
        .route(&format!("{BASE}/nodes"), get(nodes))
        .route(&format!("{BASE}/nodes/{{site}}/{{hostname}}"), get(node))
        .route(&format!("{BASE}/plan"), get(plan))
        .route(&format!("{BASE}/assets/status.css"), get(css))
        .route(&format!("{BASE}/assets/status.js"), get(js))
        .with_state(state);
    crate::api::behind_admin_guard(pages, api)
        .route("/", get(|| async { Redirect::to(&format!("{BASE}/")) }))
        .layer(axum::middleware::from_fn(browser))
}

/// A page that could not be served, as HTML.
struct PageError {
    status: StatusCode,
    message: String,
    hint: Option<String>,
}

impl PageError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            hint: None,
        }
    }

    fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl From<StoreError> for PageError {
    fn from(err: StoreError) -> Self {
        let api = crate::api::ApiError::from(err);
        PageError {
            status: api.status,
            message: api.message,
            hint: api
                .hint
                .or_else(|| Some("the page tries again at its next refresh".into())),
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let body = pages::error_page(self.status.as_u16(), &self.message, self.hint.as_deref())
            .into_string();
        (
            self.status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            body,
        )
            .into_response()
    }
}

/// An HTML page with an ETag: a request that already has this version gets 304.
fn page(request: &HeaderMap, markup: maud::Markup) -> Response {
    let body = markup.into_string();
    let etag = format!(
        "\"{}\"",
        &hex::encode(Sha256::digest(body.as_bytes()))[..32]
    );
    let cache = [
        (header::ETAG, etag.clone()),
        (header::CACHE_CONTROL, "private, no-cache".to_owned()),
    ];
    let unchanged = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|tag| tag.trim() == etag));
    if unchanged {
        return (StatusCode::NOT_MODIFIED, cache).into_response();
    }
    (
        cache,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8".to_owned())],
        body,
    )
        .into_response()
}

async fn overview(State(web): State<WebState>, headers: HeaderMap) -> Result<Response, PageError> {
    let snapshot = web.snapshot().await?;
    Ok(page(
        &headers,
        pages::overview(&snapshot, web.refresh_secs()),
    ))
}

async fn nodes(
    State(web): State<WebState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let query = NodeQuery::parse(&pairs).map_err(|message| {
        PageError::new(StatusCode::BAD_REQUEST, message).hint(format!(
            "open {BASE}/nodes and pick the filters from the form"
        ))
    })?;
    let snapshot = web.snapshot().await?;
    Ok(page(
        &headers,
        pages::nodes(&snapshot, &query, web.refresh_secs()),
    ))
}

async fn node(
    State(web): State<WebState>,
    Path((site, hostname)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let detail = web.node(&site, &hostname).await?;
    match detail.as_ref() {
        Some(detail) => Ok(page(&headers, pages::node(detail, web.refresh_secs()))),
        None => Err(PageError::new(
            StatusCode::NOT_FOUND,
            format!("no node `{hostname}` in site `{site}`: neither the inventory nor the manifests know it"),
        )
        .hint(format!("find it in {BASE}/nodes"))),
    }
}

async fn plan(State(web): State<WebState>, headers: HeaderMap) -> Result<Response, PageError> {
    let snapshot = web.snapshot().await?;
    Ok(page(&headers, pages::plan(&snapshot, web.refresh_secs())))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "private, max-age=300"),
        ],
        body,
    )
        .into_response()
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", JS)
}

/// The admin token of a `Basic` header (its password, or its user name when the password is
/// empty), as the `Bearer` header the admin guard reads.
fn basic_as_bearer(headers: &mut HeaderMap) {
    let Some(token) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
        .and_then(|(_, encoded)| {
            base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .ok()
        })
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .map(|pair| match pair.split_once(':') {
            Some((user, "")) => user.to_owned(),
            Some((_, password)) => password.to_owned(),
            None => pair,
        })
    else {
        return;
    };
    match HeaderValue::from_str(&format!("Bearer {token}")) {
        Ok(value) => {
            headers.insert(header::AUTHORIZATION, value);
        }
        Err(_) => {
            headers.remove(header::AUTHORIZATION);
        }
    }
}

/// What a browser needs around the pages: Basic credentials taken as the admin token, the
/// guard's JSON refusals as HTML (a 401 asks the browser for credentials), and the security
/// headers on every answer.
async fn browser(mut request: Request, next: Next) -> Response {
    basic_as_bearer(request.headers_mut());
    let mut response = next.run(request).await;
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if json && !response.status().is_success() {
        let status = response.status();
        let bytes = axum::body::to_bytes(std::mem::take(response.body_mut()), 64 * 1024)
            .await
            .unwrap_or_default();
        let refusal: Option<crate::api::ErrorBody> = serde_json::from_slice(&bytes).ok();
        let (message, hint) = match (status, refusal) {
            (StatusCode::UNAUTHORIZED, _) => (
                "sign in with an admin API token".to_owned(),
                Some("give any user name and an admin token of the daemon's [api] tokens as the password".to_owned()),
            ),
            (_, Some(body)) => (body.message, body.hint),
            (_, None) => (status.to_string(), None),
        };
        let mut page = PageError {
            status,
            message,
            hint,
        }
        .into_response();
        if status == StatusCode::UNAUTHORIZED {
            page.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"metalform\", charset=\"UTF-8\""),
            );
        }
        response = page;
    }
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}
