//! The daemon's HTTP server (DESIGN.md §6): the admin API, the agent API, `/healthz`,
//! `/metrics` and the OpenAPI document on one listener; unknown routes and methods answer
//! typed JSON.

use std::sync::Arc;

use axum::Router;
use axum::http::{Method, StatusCode, header};
use axum::response::IntoResponse;
use url::Url;

use super::Core;
use crate::api::{Access, ApiState, RouteTable};

/// Every route the daemon serves: (method, path, access). The OpenAPI test holds this equal
/// to openapi.yaml.
pub fn served_routes() -> Vec<(Method, String, Access)> {
    let (_, mut served) = crate::api::admin_routes().into_parts();
    served.extend(public_routes().into_parts().1);
    served.extend(agent_routes());
    served.extend(crate::web::page_routes().into_parts().1);
    served
}

/// The routes `crate::agent::router` serves (enrollment, and the task protocol with a node's
/// agent token).
fn agent_routes() -> Vec<(Method, String, Access)> {
    vec![
        (
            Method::POST,
            format!("/{}", crate::agent::ENROLL_PATH),
            Access::Agent,
        ),
        (
            Method::GET,
            "/agent/v1/nodes/{node_id}/tasks/wait".to_owned(),
            Access::Agent,
        ),
        (
            Method::POST,
            "/agent/v1/nodes/{node_id}/tasks/{task_id}/result".to_owned(),
            Access::Agent,
        ),
    ]
}

fn public_routes() -> RouteTable<Arc<Core>> {
    let mut table = RouteTable::default();
    table.add(Method::GET, "/healthz", Access::Public, healthz);
    table.add(Method::GET, "/metrics", Access::Public, metrics);
    table.add(Method::GET, "/api/v1/openapi.yaml", Access::Public, openapi);
    table
}

async fn healthz(axum::extract::State(core): axum::extract::State<Arc<Core>>) -> impl IntoResponse {
    let (ok, body) = super::health(&core);
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body))
}

async fn metrics(axum::extract::State(core): axum::extract::State<Arc<Core>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        core.metrics.encode(),
    )
}

async fn openapi() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/yaml")],
        crate::api::OPENAPI_YAML,
    )
}

/// An extractor's plain-text rejection (a malformed query string) as the typed JSON error every
/// other answer is.
async fn typed_rejections(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let response = next.run(request).await;
    let status = response.status();
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain"));
    if !(plain && status.is_client_error()) {
        return response;
    }
    let bytes = axum::body::to_bytes(response.into_body(), 16 * 1024)
        .await
        .unwrap_or_default();
    let code = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        _ => "bad_request",
    };
    crate::api::ApiError::new(
        status,
        code,
        String::from_utf8_lossy(&bytes).trim().to_owned(),
    )
    .into_response()
}

pub(super) fn app(core: Arc<Core>, api: ApiState, public_url: Url) -> Router {
    let (admin, _) = crate::api::admin_router(api.clone());
    let (public, _) = public_routes().into_parts();
    let agent = crate::agent::router(crate::agent::AgentState::new(
        core.store.clone(),
        public_url,
    ))
    .layer(axum::middleware::from_fn(typed_rejections));
    let web = crate::web::WebState::new(
        core.store.clone(),
        Arc::new(super::Handle { core: core.clone() }),
        crate::web::DEFAULT_REFRESH,
    );
    Router::new()
        .merge(crate::web::router(web, api.clone()))
        .merge(admin)
        .merge(public.with_state(core))
        .merge(agent)
        .fallback(crate::api::not_found)
        .method_not_allowed_fallback(crate::api::method_not_allowed)
}
