//! `POST /api/v1/admin/maas-sites/{id}/import` (issue 15 "adopt what already runs"): the
//! route of `metalform import-maas`. It reads the site's MAAS with the stored key and answers
//! the NodeGroup manifest of its machines to commit (git stays the source of truth: nothing is
//! added to the fleet here), the machines left out, and — with `write_secrets` — the Vault paths
//! where the BMC logins that differ from the site's default were stored. Audited.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;

use super::sites::find_site;
use super::{ApiError, ApiState, JsonBody, Principal};
use crate::manifest::maas_import::{self, ImportOptions, default_credentials};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ImportBody {
    sku: String,
    gpus: u32,
    #[serde(default)]
    profile: Option<String>,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    write_secrets: bool,
    #[serde(default)]
    reason: Option<String>,
}

pub(super) async fn import(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<ImportBody>,
) -> Result<impl IntoResponse, ApiError> {
    let accepted = state.fleet()?;
    let site = find_site(&accepted.fleet, &id)?;
    let profile = body
        .profile
        .clone()
        .or(site.default_profile.as_ref().map(|p| p.to_string()))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "site {} has no defaultProfile: name the imported nodes' profile",
                site.name
            ))
            .hint("send {\"profile\": \"gpu-default\", ...}")
        })?;
    let maas = state
        .inner
        .maas
        .client(&site, state.inner.secrets.as_ref())
        .await
        .map_err(|err| {
            let api = if err.is_transient() {
                ApiError::unavailable(err.to_string())
            } else {
                ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "maas_unusable",
                    err.to_string(),
                )
            };
            match err.hint() {
                Some(hint) => api.hint(hint),
                None => api,
            }
        })?;
    let options = ImportOptions::for_site(
        &site,
        &maas,
        profile,
        body.sku.clone(),
        body.gpus,
        body.group.clone(),
    );
    let report = maas_import::import(
        &maas,
        state.inner.secrets.as_ref(),
        &default_credentials(&site),
        &options,
        body.write_secrets,
    )
    .await
    .map_err(|err| {
        let message = format!("nothing was imported from site {}: {err}", site.name);
        match &err {
            maas_import::ImportError::Maas(maas) if maas.is_retryable() => {
                ApiError::unavailable(message)
            }
            _ => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "import_failed", message).hint(
                "the site's MAAS API key must belong to a MAAS admin (power parameters are read)",
            ),
        }
    })?;
    state
        .audit(
            &principal,
            "site.imported_from_maas",
            ("site", site.name.as_str()),
            body.reason.as_deref(),
            json!({
                "nodes": report.nodes.len(),
                "skipped": report.skipped.len(),
                "secrets_written": report.secrets_written,
            }),
        )
        .await?;
    Ok(Json(report))
}
