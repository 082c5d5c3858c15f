//! The Redfish provisioner's HTTP API (seed 003 "API Specification", "Security", "Idempotency
//! and Duplicate Requests"; docs/redfish.md; openapi.yaml):
//!
//! - `POST /api/v1/jobs`: a recipe for a server serial → 202 with the queued job (200 with the
//!   existing one for a repeated `Idempotency-Key`); 400 with every recipe error and its JSON
//!   path; 404 for an unknown serial; 409 when the server is busy; 401/403.
//! - `GET /api/v1/jobs/{job_id}`: status, failed step, last update and events.
//! - `GET /api/v1/jobs?status=…&server_serial=…`: jobs, newest first.
//! - `POST /api/v1/status-webhook/{server_serial}`: the maintenance OS's report, with the
//!   shared secret in `X-Webhook-Secret` (compared in constant time; only its presence is
//!   logged); 404 when no job of the server is provisioning; a duplicate is answered
//!   `{"ok": true}` and changes nothing.
//! - `GET /media/tasks/{job_id}/task.iso`: the task ISO by its signed URL
//!   (`provider::redfish::media`).
//!
//! The jobs API takes the daemon's admin tokens, as `Authorization: Bearer TOKEN` or as Basic
//! with the token's name and value. Every refusal is the admin API's typed error body; a
//! refused request changes nothing.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{Access, ApiError, ApiState, BodyLimit, JsonBody, RouteTable, TokenRole, Tokens};
use crate::apply::provisioning::{RequestError, request};
use crate::lifecycle::{JobKind, ProvisioningStatus, WebhookReport};
use crate::provider::redfish::media::{self, MediaService};
use crate::secrets::Secret;
use crate::stages::provision::ProvisioningObserver;
use crate::store::{
    Created, Job, JobSpec, NewProvisioning, ProvisioningFilter, Store, StoreError, WebhookOutcome,
};

/// Request bodies of the jobs API: a recipe carries user-data and assets.
pub const MAX_JOB_BODY_BYTES: usize = 4 * 1024 * 1024;
/// The webhook's body is two fields.
const MAX_WEBHOOK_BODY_BYTES: usize = 16 * 1024;
/// Events a job's view carries (the most recent ones).
const EVENTS_SHOWN: i64 = 500;

/// Who may call the jobs API: the daemon's token table (reloaded with it), or a fixed one.
pub trait TokenCheck: Send + Sync {
    /// The name and role of a presented token.
    fn lookup(&self, presented: &str) -> Option<(String, TokenRole)>;
}

impl TokenCheck for ApiState {
    fn lookup(&self, presented: &str) -> Option<(String, TokenRole)> {
        self.inner
            .tokens
            .read()
            .expect("tokens lock")
            .lookup(presented)
            .map(|(name, role)| (name.to_owned(), role))
    }
}

impl TokenCheck for Tokens {
    fn lookup(&self, presented: &str) -> Option<(String, TokenRole)> {
        Tokens::lookup(self, presented).map(|(name, role)| (name.to_owned(), role))
    }
}

/// What the provisioning routes share.
pub struct ProvisioningApiConfig {
    pub store: Store,
    pub tokens: Arc<dyn TokenCheck>,
    pub webhook_secret: Secret,
    /// CD1 of new jobs (`MAINTENANCE_ISO_URL`).
    pub maintenance_iso_url: String,
    pub observer: Arc<dyn ProvisioningObserver>,
    pub media: Arc<MediaService>,
}

/// The routes' state; cheap to clone.
#[derive(Clone)]
pub struct ProvisioningApi {
    inner: Arc<ProvisioningApiConfig>,
    /// SHA-256 of the webhook secret: compared in constant time, digest to digest.
    secret_digest: [u8; 32],
    limit: usize,
}

impl BodyLimit for ProvisioningApi {
    fn max_body_bytes(&self) -> usize {
        self.limit
    }
}

impl ProvisioningApi {
    pub fn new(config: ProvisioningApiConfig) -> Self {
        Self {
            secret_digest: Sha256::digest(config.webhook_secret.expose().as_bytes()).into(),
            inner: Arc::new(config),
            limit: MAX_JOB_BODY_BYTES,
        }
    }

    fn store(&self) -> &Store {
        &self.inner.store
    }
}

/// The jobs API's routes (auth: [`guard`]).
fn user_routes() -> RouteTable<ProvisioningApi> {
    let mut table = RouteTable::default();
    table.add(Method::POST, "/api/v1/jobs", Access::User, create_job);
    table.add(Method::GET, "/api/v1/jobs", Access::User, list_jobs);
    table.add(Method::GET, "/api/v1/jobs/{job_id}", Access::User, get_job);
    table
}

/// The webhook (it checks its own secret).
fn webhook_routes() -> RouteTable<ProvisioningApi> {
    let mut table = RouteTable::default();
    table.add(
        Method::POST,
        "/api/v1/status-webhook/{server_serial}",
        Access::Webhook,
        webhook,
    );
    table
}

/// Every provisioning route: (method, path, access).
pub fn served() -> Vec<(Method, String, Access)> {
    let mut served = user_routes().into_parts().1;
    served.extend(webhook_routes().into_parts().1);
    for method in [Method::GET, Method::HEAD] {
        served.push((
            method,
            "/media/tasks/{job_id}/task.iso".into(),
            Access::Signed,
        ));
    }
    served
}

/// The provisioning routes: the jobs API behind its guard, the webhook, the task ISOs.
pub fn router(api: ProvisioningApi) -> Router {
    let media = media::router(api.inner.media.clone());
    let (user, _) = user_routes().into_parts();
    let (hook, _) = webhook_routes().into_parts();
    user.route_layer(axum::middleware::from_fn_with_state(api.clone(), guard))
        .merge(hook)
        .with_state(api)
        .merge(media)
}

/// The jobs API's auth.
async fn guard(
    State(api): State<ProvisioningApi>,
    mut request: Request,
    next: Next,
) -> Result<Response, Response> {
    let name = authenticate(&api, request.headers()).await?;
    request.extensions_mut().insert(Caller(name));
    Ok(next.run(request).await)
}

/// The caller of a jobs API route (a token's name).
#[derive(Debug, Clone)]
struct Caller(String);

fn unauthorized(message: &str) -> Response {
    let mut response = ApiError::unauthorized(message)
        .hint("send `Authorization: Bearer <token>`, or Basic auth with the token's name and value")
        .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"metalform\", Basic realm=\"metalform\""),
    );
    response
}

/// Bearer or Basic: an admin token → its name; an agent's token → 403; anything else → 401.
async fn authenticate(api: &ProvisioningApi, headers: &HeaderMap) -> Result<String, Response> {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return Err(unauthorized("no credentials"));
    };
    let (scheme, credentials) = value.split_once(' ').unwrap_or((value, ""));
    let credentials = credentials.trim();
    let (token, basic_name) = if scheme.eq_ignore_ascii_case("bearer") {
        (credentials.to_owned(), None)
    } else if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(credentials)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| unauthorized("the Basic credentials are not base64 of name:token"))?;
        let (name, token) = decoded
            .split_once(':')
            .ok_or_else(|| unauthorized("the Basic credentials are not name:token"))?;
        (token.to_owned(), Some(name.to_owned()))
    } else {
        return Err(unauthorized("unsupported authorization scheme"));
    };
    if token.is_empty() {
        return Err(unauthorized("empty credentials"));
    }
    match api.inner.tokens.lookup(&token) {
        Some((name, TokenRole::Admin)) if basic_name.as_deref().is_none_or(|b| b == name) => {
            Ok(name)
        }
        Some((_, TokenRole::Admin)) => Err(unauthorized("unknown credentials")),
        Some((name, TokenRole::Agent)) => Err(ApiError::forbidden(format!(
            "token `{name}` has the agent role; the jobs API needs an admin token"
        ))
        .into_response()),
        None => match api.store().authenticate_agent(&Secret::new(token)).await {
            Ok(Some(_)) => Err(ApiError::forbidden(
                "a node agent's token cannot call the jobs API",
            )
            .into_response()),
            Ok(None) => Err(unauthorized("unknown credentials")),
            Err(err) => Err(ApiError::from(err).into_response()),
        },
    }
}

/// A job as seed 003 shows it (`POST` answer, list entries).
fn summary(job: &Job) -> Value {
    let (serial, status, failed_step) = match &job.spec {
        JobSpec::Provisioning {
            server_serial,
            status,
            failed_step,
            ..
        } => (server_serial.as_str(), *status, failed_step.clone()),
        _ => ("", ProvisioningStatus::Queued, None),
    };
    json!({
        "job_id": job.id,
        "status": status,
        "server_serial": serial,
        "failed_step": failed_step,
        "created_at": rfc3339(job.requested_at),
        "last_update": rfc3339(job.updated_at),
    })
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Typed errors of the jobs API.
fn store_error(err: StoreError) -> Response {
    let message = err.to_string();
    match err {
        StoreError::NotFound { kind: "server", id } => ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_server",
            format!("no server with serial `{id}`"),
        )
        .hint("servers come from the fleet's Redfish nodes (`provisioner.serial`); commit the node first")
        .into_response(),
        StoreError::ServerBusy { job, .. } => {
            ApiError::new(StatusCode::CONFLICT, "server_busy", message)
                .hint(format!(
                    "GET /api/v1/jobs/{job} shows it; a new job is accepted once it is complete"
                ))
                .into_response()
        }
        StoreError::IdempotencyConflict { .. } => {
            ApiError::new(StatusCode::CONFLICT, "idempotency_conflict", message)
                .hint("use a new Idempotency-Key for a different recipe")
                .into_response()
        }
        other => ApiError::from(other).into_response(),
    }
}

/// A text field of a request: present, a non-empty string of printable characters, at most
/// `max` characters (as openapi.yaml's `maxLength` counts them, not bytes).
fn text_field(body: &Value, name: &str, max: usize) -> Result<Option<String>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text))
            if !text.trim().is_empty()
                && text.chars().count() <= max
                && !text.chars().any(char::is_control) =>
        {
            Ok(Some(text.clone()))
        }
        Some(Value::String(_)) => Err(ApiError::bad_request(format!(
            "`{name}` must be 1 to {max} printable characters"
        ))),
        Some(other) => Err(ApiError::bad_request(format!(
            "`{name}` must be a string, not {}",
            json_type(other)
        ))),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Refuse fields a body does not take.
fn only_fields(body: &Value, allowed: &[&str]) -> Result<(), ApiError> {
    let Some(map) = body.as_object() else {
        return Err(ApiError::bad_request(format!(
            "the body must be a JSON object, not {}",
            json_type(body)
        )));
    };
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(unknown) => Err(ApiError::bad_request(format!(
            "unknown field `{unknown}`; expected {}",
            allowed.join(", ")
        ))),
        None => Ok(()),
    }
}

/// The request's idempotency key (`Idempotency-Key`, or the seed's `idempotency_key`).
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers
        .get("idempotency-key")
        .or_else(|| headers.get("idempotency_key"))
    else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|k| !k.is_empty() && k.len() <= 255)
        .map(|k| Some(k.to_owned()))
        .ok_or_else(|| {
            ApiError::bad_request("the idempotency key must be 1 to 255 visible ASCII characters")
        })
}

async fn create_job(
    State(api): State<ProvisioningApi>,
    axum::Extension(caller): axum::Extension<Caller>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Value>,
) -> Response {
    let parsed = (|| {
        only_fields(&body, &["server_serial", "recipe"])?;
        let serial = text_field(&body, "server_serial", 128)?.ok_or_else(|| {
            ApiError::bad_request("`server_serial` is required")
                .hint("send {\"server_serial\": \"XF-12345ABC\", \"recipe\": {…}}")
        })?;
        let recipe = match body.get("recipe") {
            Some(recipe @ Value::Object(_)) => recipe.clone(),
            None | Some(Value::Null) => {
                return Err(ApiError::bad_request("`recipe` is required")
                    .hint("see schema/recipe.schema.json for what a recipe holds"));
            }
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "`recipe` must be an object, not {}",
                    json_type(other)
                )));
            }
        };
        Ok((serial, recipe, idempotency_key(&headers)?))
    })();
    let (serial, recipe, key) = match parsed {
        Ok(parsed) => parsed,
        Err(err) => return err.into_response(),
    };
    let new = NewProvisioning {
        serial,
        recipe,
        maintenance_iso_url: api.inner.maintenance_iso_url.clone(),
        idempotency_key: key,
        requested_by: Some(caller.0.clone()),
        plan_id: None,
        generation: None,
    };
    match request(api.store(), api.inner.observer.as_ref(), &new).await {
        Ok(Created::New(job)) => {
            tracing::info!(target: "metalform::provisioning", job_id = %job.id, server_serial = %new.serial, caller = %caller.0, "provisioning job queued");
            (StatusCode::ACCEPTED, axum::Json(summary(&job))).into_response()
        }
        Ok(Created::Existing(job)) => (StatusCode::OK, axum::Json(summary(&job))).into_response(),
        Err(RequestError::InvalidRecipe(errors)) => {
            let body = json!({
                "error": "invalid_recipe",
                "message": format!("the recipe is not valid: {} problem(s)", errors.len()),
                "hint": "each entry of `errors` names the field by its JSON path; see schema/recipe.schema.json",
                "errors": errors,
            });
            (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
        }
        Err(RequestError::Store(err)) => store_error(err),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    status: Option<String>,
    server_serial: Option<String>,
    limit: Option<i64>,
}

async fn list_jobs(
    State(api): State<ProvisioningApi>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(query) = match query {
        Ok(query) => query,
        Err(e) => return ApiError::bad_request(e.body_text()).into_response(),
    };
    let status = match query
        .status
        .as_deref()
        .map(str::parse::<ProvisioningStatus>)
    {
        None => None,
        Some(Ok(status)) => Some(status),
        Some(Err(e)) => {
            return ApiError::bad_request(e.to_string())
                .hint(format!(
                    "status is one of {}",
                    ProvisioningStatus::NAMES.join(", ")
                ))
                .into_response();
        }
    };
    if query.limit.is_some_and(|l| !(1..=1000).contains(&l)) {
        return ApiError::bad_request("`limit` must be from 1 to 1000").into_response();
    }
    let filter = ProvisioningFilter {
        status,
        serial: query.server_serial,
        limit: Some(query.limit.unwrap_or(100)),
    };
    match api.store().list_provisioning(&filter).await {
        Ok(jobs) => {
            let jobs: Vec<Value> = jobs.iter().map(summary).collect();
            axum::Json(json!({ "jobs": jobs })).into_response()
        }
        Err(err) => store_error(err),
    }
}

async fn get_job(State(api): State<ProvisioningApi>, Path(id): Path<String>) -> Response {
    let not_found = || {
        ApiError::not_found(format!("no provisioning job `{id}`"))
            .hint("GET /api/v1/jobs lists them; a job id is the UUID POST /api/v1/jobs answered")
            .into_response()
    };
    let Ok(job_id) = Uuid::parse_str(&id) else {
        return not_found();
    };
    let job = match api.store().job(JobKind::Provisioning, job_id).await {
        Ok(job) => job,
        Err(StoreError::NotFound { .. }) => return not_found(),
        Err(err) => return store_error(err),
    };
    let events = match api.store().provisioning_events(job_id, EVENTS_SHOWN).await {
        Ok(events) => events,
        Err(err) => return store_error(err),
    };
    let events: Vec<Value> = events
        .iter()
        .map(|e| {
            json!({"time": rfc3339(e.time), "level": e.level, "message": e.message, "step": e.step})
        })
        .collect();
    let mut body = summary(&job);
    let extras = body.as_object_mut().expect("an object");
    extras.insert("events".into(), json!(events));
    extras.insert("stage".into(), json!(job.stage));
    if let JobSpec::Provisioning {
        worker_id,
        maintenance_iso_url,
        picked_at,
        ..
    } = &job.spec
    {
        extras.insert("worker_id".into(), json!(worker_id));
        extras.insert("picked_at".into(), json!(picked_at.map(rfc3339)));
        extras.insert("maintenance_iso_url".into(), json!(maintenance_iso_url));
    }
    let mut kind_extras = (crate::apply::kinds::info(JobKind::Provisioning).extras)(&job);
    for key in ["task_iso", "warnings"] {
        extras.insert(key.into(), kind_extras.remove(key).unwrap_or(Value::Null));
    }
    axum::Json(body).into_response()
}

/// Constant-time comparison of the presented secret's digest with the configured one's.
fn secret_matches(api: &ProvisioningApi, presented: &[u8]) -> bool {
    let digest: [u8; 32] = Sha256::digest(presented).into();
    digest
        .iter()
        .zip(api.secret_digest.iter())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

/// The report in a webhook body.
fn report_of(body: &Value) -> Result<WebhookReport, ApiError> {
    let invalid = |message: String| {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_payload", message).hint(
            "send {\"status\": \"success\"} or {\"status\": \"failed\", \"failed_step\": \"UNIT\"}",
        )
    };
    only_fields(body, &["status", "failed_step"]).map_err(|e| invalid(e.message))?;
    let step = text_field(body, "failed_step", 256).map_err(|e| invalid(e.message))?;
    match body.get("status").and_then(Value::as_str) {
        Some("success") if step.is_none() => Ok(WebhookReport::Success),
        Some("success") => Err(invalid(
            "`failed_step` comes with `status: failed` only".into(),
        )),
        Some("failed") => Ok(WebhookReport::Failed { step }),
        Some(other) => Err(invalid(format!(
            "`status` `{other}`: expected success or failed"
        ))),
        None => Err(invalid("`status` is required: success or failed".into())),
    }
}

async fn webhook(
    State(api): State<ProvisioningApi>,
    Path(serial): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Response {
    let presented = headers.get("x-webhook-secret");
    // Only whether the secret was there is ever logged, never its value.
    tracing::debug!(target: "metalform::provisioning", server_serial = %serial, secret_present = presented.is_some(), "status webhook");
    let Some(presented) = presented else {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the X-Webhook-Secret header is missing",
        )
        .hint("the maintenance OS sends the controller's webhook secret in X-Webhook-Secret")
        .into_response();
    };
    if !secret_matches(&api, presented.as_bytes()) {
        tracing::warn!(target: "metalform::provisioning", server_serial = %serial, secret_present = true, "status webhook refused: wrong secret");
        return ApiError::forbidden("the X-Webhook-Secret does not match")
            .hint("check the webhook secret the maintenance OS was given")
            .into_response();
    }
    let limited = ProvisioningApi {
        limit: MAX_WEBHOOK_BODY_BYTES,
        ..api.clone()
    };
    let body =
        match <JsonBody<Value> as axum::extract::FromRequest<_>>::from_request(request, &limited)
            .await
        {
            Ok(JsonBody(body)) => body,
            Err(err) => return err.into_response(),
        };
    let report = match report_of(&body) {
        Ok(report) => report,
        Err(err) => return err.into_response(),
    };
    match api.store().report_webhook(&serial, &report).await {
        Ok(WebhookOutcome::Moved(job)) => {
            api.inner.observer.status(report.status());
            if let (
                Some(started),
                JobSpec::Provisioning {
                    webhook_at: Some(at),
                    ..
                },
            ) = (job.started_at, &job.spec)
            {
                let latency = (*at - started).to_std().unwrap_or_default();
                api.inner.observer.webhook_latency(latency.as_secs_f64());
            }
            tracing::info!(target: "metalform::provisioning", job_id = %job.id, server_serial = %serial, status = %report.status(), failed_step = report.failed_step().unwrap_or(""), "the maintenance OS reported");
            axum::Json(json!({"ok": true})).into_response()
        }
        Ok(WebhookOutcome::Duplicate(job)) => {
            tracing::info!(target: "metalform::provisioning", job_id = %job.id, server_serial = %serial, "duplicate report ignored");
            axum::Json(json!({"ok": true})).into_response()
        }
        Ok(WebhookOutcome::NoActiveJob) => ApiError::new(
            StatusCode::NOT_FOUND,
            "no_active_job",
            format!("no job of server `{serial}` is provisioning"),
        )
        .hint("GET /api/v1/jobs?server_serial=SERIAL shows the server's jobs")
        .into_response(),
        Err(err) => store_error(err),
    }
}
