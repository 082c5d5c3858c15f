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
    served
}

fn agent_routes() -> Vec<(Method, String, Access)> {
    vec![(
        Method::POST,
        format!("/{}", crate::agent::ENROLL_PATH),
        Access::Agent,
    )]
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

pub(super) fn app(core: Arc<Core>, api: ApiState, public_url: Url) -> Router {
    let (admin, _) = crate::api::admin_router(api.clone());
    let (public, _) = public_routes().into_parts();
    let agent = crate::agent::router(crate::agent::AgentState::new(
        core.store.clone(),
        public_url,
    ));
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
