//! `POST /api/v1/admin/reconciliation/run` (seed 000 §4.15, §6.6): reconcile a site now —
//! observe, plan, apply — through the daemon's loop (the same path as its interval), audited.
//! `wait: true` answers with the outcome; otherwise 202 once queued. The drift read routes of
//! §6.6 (status, drift, resolve) mount beside it.

use axum::Extension;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use super::{Access, ApiError, ApiState, JsonBody, Principal, RouteTable};
use crate::model::SiteName;

pub(super) fn routes(table: &mut RouteTable) {
    table.add(
        Method::POST,
        "/api/v1/admin/reconciliation/run",
        Access::Admin,
        run,
    );
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunBody {
    /// The site to reconcile; every site of the fleet when absent.
    site: Option<String>,
    reason: Option<String>,
    /// Answer after the reconcile ended, with its outcome.
    #[serde(default)]
    wait: bool,
}

async fn run(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    JsonBody(body): JsonBody<RunBody>,
) -> Result<impl IntoResponse, ApiError> {
    let accepted = state.fleet()?;
    let sites: Vec<SiteName> = match &body.site {
        Some(site) => {
            let name = SiteName::new(site.as_str());
            if !accepted.fleet.sites.contains_key(&name) {
                return Err(super::ControlError::UnknownSite(site.clone()).into());
            }
            vec![name]
        }
        None => accepted.fleet.sites.keys().cloned().collect(),
    };
    let mut pending = Vec::new();
    for site in &sites {
        pending.push(
            state
                .inner
                .control
                .reconcile(site.clone(), principal.actor())?,
        );
    }
    let names: Vec<&str> = sites.iter().map(SiteName::as_str).collect();
    state
        .audit(
            &principal,
            "reconciliation.run_requested",
            ("reconciliation", &names.join(",")),
            body.reason.as_deref(),
            json!({"sites": names, "revision": accepted.revision}),
        )
        .await?;
    if !body.wait {
        return Ok((StatusCode::ACCEPTED, axum::Json(json!({"queued": names}))));
    }
    let results = futures::future::join_all(pending).await;
    Ok((StatusCode::OK, axum::Json(json!({"results": results}))))
}
