//! The daemon's admin API (seed 000 §3.4–§3.5 sites and credentials, §3.3 RoCE assignments,
//! §4.2/§4.15 onboardings and their recovery actions, §6.6 reconciliation run; DESIGN.md §6;
//! docs/api.md, openapi.yaml).
//!
//! Git is the source of truth: what the manifests own (sites, nodes, profiles, RoCE
//! assignments) is read here and refused on write with 409 `owned_by_git` naming the file to
//! change; runtime actions — credentials (written to the secret store after probing MAAS),
//! probes, recovery actions, an immediate reconcile — are served. Every admin route takes a
//! bearer token of the admin role (`auth`); every mutation is written to the audit log with the
//! token's name, its role and the request's reason; errors are typed JSON (`error`); bodies are
//! JSON with a size limit (413).
//!
//! The routes are declared once in a [`RouteTable`], which both builds the router and lists
//! what is served: a test holds that list equal to openapi.yaml. Decommissions (000 §5.7: read,
//! retry, cancel, and the runtime soft reset and storage cleanup) and drift (000 §6.6 status,
//! drift, resolve) mount into the same table.

mod auth;
mod body;
mod decommissions;
mod error;
mod import_maas;
mod jobs;
mod nodes;
mod onboardings;
mod provision;
pub mod provisioning;
mod reconciliation;
mod sites;

use std::sync::Arc;

use axum::Router;
use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{MethodFilter, on};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde::Serialize;

pub use auth::{ApiToken, Principal, TokenRole, Tokens};
pub use body::{BodyLimit, JsonBody, MaybeJsonBody};
pub use error::{ApiError, ErrorBody, typed_rejections};

use crate::apply::recovery::Recovery;
use crate::model::{Fleet, SiteName};
use crate::observe::MaasClients;
use crate::plan::NodeTarget;
use crate::plan::Summary;
use crate::secrets::SecretStore;
use crate::store::{Actor, AuditEntry, Store};

/// The OpenAPI document of every route served, committed in the repository.
pub const OPENAPI_YAML: &str = include_str!("../../openapi.yaml");

/// Default request body limit (bytes); credentials and RoCE lists are far smaller.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;

/// The fleet the daemon last accepted from its source (a valid, non-empty read).
#[derive(Debug, Clone)]
pub struct FleetRevision {
    pub fleet: Fleet,
    /// `commit:<id>` or `sha256:<hash>` (plan::revision_id).
    pub revision: String,
    pub accepted_at: DateTime<Utc>,
}

/// What one reconcile of a site did: planned, dispatched to the executor (the nodes then run on
/// their own; their jobs say how they end), and the drift pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReconcileSummary {
    pub site: String,
    pub revision: Option<String>,
    /// The plan's counts for the site; `None` when the reconcile could not plan.
    pub plan: Option<Summary>,
    /// Nodes dispatched to the executor by this reconcile.
    pub started: usize,
    /// Change items whose node was still running from an earlier dispatch.
    pub in_flight: usize,
    /// Items the self-heal policy held back (an operator applies them).
    pub held: usize,
    /// The site's drift pass (000 §6.4) after the dispatch; `None` when it did not run.
    pub drift: Option<crate::drift::DriftPassSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Why the daemon did not take a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("the daemon is shutting down and takes no new work")]
    ShuttingDown,
    #[error("site `{0}` is not in the fleet")]
    UnknownSite(String),
}

impl From<ControlError> for ApiError {
    fn from(err: ControlError) -> Self {
        match err {
            ControlError::ShuttingDown => ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "shutting_down",
                err.to_string(),
            )
            .hint("retry against the restarted daemon"),
            ControlError::UnknownSite(_) => ApiError::not_found(err.to_string()),
        }
    }
}

/// What the API asks of the daemon loop (implemented by `crate::daemon`).
pub trait Control: Send + Sync + 'static {
    /// Whether new work is taken (false once shutdown began).
    fn accepting(&self) -> bool;

    /// The last accepted fleet, if any.
    fn fleet(&self) -> Option<Arc<FleetRevision>>;

    /// Reconcile `site` now, through the daemon's loop; resolves when that reconcile ended.
    /// `ignore_windows`: the operator's reason to run disruptive items outside their
    /// maintenance windows this once (audited per item).
    fn reconcile(
        &self,
        site: SiteName,
        actor: Actor,
        ignore_windows: Option<String>,
    ) -> Result<BoxFuture<'static, ReconcileSummary>, ControlError>;

    /// The node lease's time to live of the daemon's executors (a cancel waits for a live
    /// executor up to 1.5 times it).
    fn lease_ttl(&self) -> std::time::Duration;

    /// Run a recorded recovery action in the background (its stages may take an hour).
    fn carry_out(&self, target: NodeTarget, recovery: Recovery) -> Result<(), ControlError>;

    /// The last plan of each site (`GET /api/v1/admin/plan`); none by default.
    fn plans(&self) -> Vec<(SiteName, Arc<crate::web::LatestPlan>)> {
        Vec::new()
    }
}

/// What the handlers share.
struct Inner {
    store: Store,
    secrets: Arc<dyn SecretStore>,
    maas: MaasClients,
    /// Replaced whole when the daemon reloads its credentials (SIGHUP).
    tokens: std::sync::RwLock<Tokens>,
    control: Arc<dyn Control>,
    max_body_bytes: usize,
}

/// The admin API's state; cheap to clone.
#[derive(Clone)]
pub struct ApiState {
    inner: Arc<Inner>,
}

impl ApiState {
    pub fn new(
        store: Store,
        secrets: Arc<dyn SecretStore>,
        maas: MaasClients,
        tokens: Tokens,
        control: Arc<dyn Control>,
        max_body_bytes: usize,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                secrets,
                maas,
                tokens: std::sync::RwLock::new(tokens),
                control,
                max_body_bytes,
            }),
        }
    }

    /// Take new configured tokens: the old ones stop working at once.
    pub fn replace_tokens(&self, tokens: Tokens) {
        *self.inner.tokens.write().expect("tokens lock") = tokens;
    }

    fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The accepted fleet, or 503 while the daemon has not read one yet.
    fn fleet(&self) -> Result<Arc<FleetRevision>, ApiError> {
        self.inner.control.fleet().ok_or_else(|| {
            ApiError::unavailable("the daemon has not read a valid fleet from its source yet")
        })
    }

    /// Write one audit row for a mutation made through the API.
    async fn audit(
        &self,
        principal: &Principal,
        action: &str,
        subject: (&str, &str),
        reason: Option<&str>,
        details: serde_json::Value,
    ) -> Result<(), ApiError> {
        self.store()
            .audit(&AuditEntry {
                actor: principal.actor(),
                reason: reason.map(str::to_owned),
                action: action.to_owned(),
                subject_kind: subject.0.to_owned(),
                subject_id: subject.1.to_owned(),
                prior_state: None,
                expected_target: None,
                correlation_ids: serde_json::json!({}),
                details,
            })
            .await
            .map_err(ApiError::from)
    }
}

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// No token (health, metrics, the OpenAPI document).
    Public,
    /// An admin token.
    Admin,
    /// Served by `crate::agent` (enrollment: its token in the body; tasks: a node's agent
    /// token).
    Agent,
    /// The Redfish provisioner's jobs API (seed 003): an admin token as bearer, or Basic with
    /// the token's name and value.
    User,
    /// The maintenance OS's status webhook: the shared secret in `X-Webhook-Secret`.
    Webhook,
    /// Task ISOs for BMCs: the URL's own HMAC signature and expiry.
    Signed,
}

/// Routes declared once: the router, and the list of (method, path, access) it serves.
pub struct RouteTable<S = ApiState> {
    router: Router<S>,
    served: Vec<(Method, String, Access)>,
}

impl<S: Clone + Send + Sync + 'static> Default for RouteTable<S> {
    fn default() -> Self {
        Self {
            router: Router::new(),
            served: Vec::new(),
        }
    }
}

impl<S: Clone + Send + Sync + 'static> RouteTable<S> {
    /// Serve `handler` at `method path` (axum path syntax, `{param}`).
    pub fn add<H, T>(&mut self, method: Method, path: &str, access: Access, handler: H)
    where
        H: Handler<T, S>,
        T: 'static,
    {
        let filter = MethodFilter::try_from(method.clone()).expect("a routable method");
        let router = std::mem::take(&mut self.router);
        self.router = router.route(path, on(filter, handler));
        self.served.push((method, path.to_owned(), access));
    }

    /// Record routes another router serves (the agent API), so the list stays complete.
    pub fn served_elsewhere(&mut self, method: Method, path: &str, access: Access) {
        self.served.push((method, path.to_owned(), access));
    }

    pub fn served(&self) -> &[(Method, String, Access)] {
        &self.served
    }

    pub fn into_parts(self) -> (Router<S>, Vec<(Method, String, Access)>) {
        (self.router, self.served)
    }
}

/// The admin routes (all under `/api/v1/admin`, admin token required).
pub fn admin_routes() -> RouteTable {
    let mut table = RouteTable::default();
    sites::routes(&mut table);
    onboardings::routes(&mut table);
    decommissions::routes(&mut table);
    jobs::routes(&mut table, crate::lifecycle::JobKind::Provisioning);
    provision::routes(&mut table);
    reconciliation::routes(&mut table);
    nodes::routes(&mut table);
    table
}

/// The admin router with its guard, limits and JSON fallbacks, and the list it serves.
pub fn admin_router(state: ApiState) -> (Router, Vec<(Method, String, Access)>) {
    let (router, served) = admin_routes().into_parts();
    let router = router
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_admin,
        ))
        .with_state(state);
    (router, served)
}

/// Put `router` behind the admin routes' guard: the daemon's status pages take the same tokens.
pub fn behind_admin_guard(router: Router, state: ApiState) -> Router {
    router.route_layer(axum::middleware::from_fn_with_state(
        state,
        auth::require_admin,
    ))
}

/// 404 for a path nothing serves, as typed JSON.
pub async fn not_found() -> ApiError {
    ApiError::not_found("no such route").hint("see openapi.yaml for the routes served")
}

/// 405 for a served path with another method, as typed JSON.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this path does not take that method",
    )
    .hint("see openapi.yaml for the methods served")
}

/// A required, non-blank `reason` (every recovery action is audited with one, 000 §4.12).
fn required_reason(reason: Option<&str>) -> Result<String, ApiError> {
    reason
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| {
            ApiError::bad_request("`reason` is required: every recovery action is audited")
                .hint("send {\"reason\": \"BOSS card replaced (ticket HW-2291)\"}")
        })
}

/// A boxed future, for the [`Control`] trait.
pub type ReconcileFuture = BoxFuture<'static, ReconcileSummary>;
