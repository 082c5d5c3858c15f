//! Sites and RoCE assignments (seed 000 §3.3–§3.5): read from the accepted manifests plus the
//! store; create, update, delete and RoCE writes are refused as owned by git (naming the
//! manifest file); `credentials` probes MAAS with the given key and writes the secret store at
//! the site's reference paths; `probe` checks the stored key.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Access, ApiError, ApiState, FleetRevision, JsonBody, Principal, RouteTable};
use crate::lifecycle::JobKind;
use crate::model::{Site, SiteName};
use crate::provider::maas::{MaasClient, MaasClientOptions, RetryPolicy};
use crate::secrets::{Secret, SecretError};
use crate::store::{JobFilter, NodeFilter};

const SITES: &str = "/api/v1/admin/maas-sites";
const SITE: &str = "/api/v1/admin/maas-sites/{id}";

pub(super) fn routes(table: &mut RouteTable) {
    table.add(Method::GET, SITES, Access::Admin, list);
    table.add(Method::POST, SITES, Access::Admin, create);
    table.add(Method::GET, SITE, Access::Admin, get);
    table.add(Method::PATCH, SITE, Access::Admin, update);
    table.add(Method::DELETE, SITE, Access::Admin, delete);
    table.add(
        Method::POST,
        &format!("{SITE}/credentials"),
        Access::Admin,
        credentials,
    );
    table.add(Method::POST, &format!("{SITE}/probe"), Access::Admin, probe);
    table.add(
        Method::POST,
        &format!("{SITE}/import"),
        Access::Admin,
        super::import_maas::import,
    );
    table.add(
        Method::GET,
        &format!("{SITE}/roce-assignments"),
        Access::Admin,
        list_roce,
    );
    table.add(
        Method::POST,
        &format!("{SITE}/roce-assignments"),
        Access::Admin,
        upsert_roce,
    );
    table.add(
        Method::DELETE,
        &format!("{SITE}/roce-assignments/{{aid}}"),
        Access::Admin,
        delete_roce,
    );
}

/// A site as the API shows it: the manifest's fields (secret references only, never values),
/// where it is defined, and what the store knows of its nodes and jobs.
#[derive(Debug, Serialize)]
struct SiteView {
    id: String,
    /// `sites/dc1.yaml:3:1`: change the site there.
    manifest: String,
    site: Site,
    nodes_in_manifests: usize,
    /// Inventory nodes by coarse state.
    inventory: BTreeMap<String, usize>,
    open_onboardings: usize,
}

async fn view(
    state: &ApiState,
    site: &Site,
    fleet: &crate::model::Fleet,
) -> Result<SiteView, ApiError> {
    let nodes = state
        .store()
        .list_nodes(&NodeFilter {
            site: Some(site.name.to_string()),
            ..NodeFilter::default()
        })
        .await?;
    let mut inventory = BTreeMap::new();
    for node in &nodes {
        *inventory.entry(node.status.to_string()).or_insert(0) += 1;
    }
    let open = state
        .store()
        .list_jobs(
            JobKind::Onboarding,
            &JobFilter {
                site: Some(site.name.to_string()),
                open_only: true,
                ..JobFilter::default()
            },
        )
        .await?;
    Ok(SiteView {
        id: site.name.to_string(),
        manifest: site.provenance.to_string(),
        site: site.clone(),
        nodes_in_manifests: fleet.nodes_of_site(&site.name).count(),
        inventory,
        open_onboardings: open.len(),
    })
}

/// The accepted fleet and its site `id` (404 when the fleet has no such site).
fn accepted_site(state: &ApiState, id: &str) -> Result<(Arc<FleetRevision>, Site), ApiError> {
    let accepted = state.fleet()?;
    let site = find_site(&accepted.fleet, id)?;
    Ok((accepted, site))
}

pub(super) fn find_site(fleet: &crate::model::Fleet, id: &str) -> Result<Site, ApiError> {
    fleet.sites.get(&SiteName::new(id)).cloned().ok_or_else(|| {
        ApiError::not_found(format!("site `{id}` is not in the fleet")).hint(format!(
            "sites: {}",
            fleet
                .sites
                .keys()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

async fn list(State(state): State<ApiState>) -> Result<impl IntoResponse, ApiError> {
    let accepted = state.fleet()?;
    let mut sites = Vec::new();
    for site in accepted.fleet.sites.values() {
        sites.push(view(&state, site, &accepted.fleet).await?);
    }
    Ok(axum::Json(
        json!({"revision": accepted.revision, "sites": sites}),
    ))
}

async fn get(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let (accepted, site) = accepted_site(&state, &id)?;
    Ok(axum::Json(view(&state, &site, &accepted.fleet).await?))
}

async fn create(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<Value>,
) -> Result<(), ApiError> {
    let _ = state.fleet()?;
    let name = body.get("name").and_then(Value::as_str).unwrap_or("<name>");
    Err(ApiError::owned_by_git(
        format!(
            "sites are defined by the fleet's manifests: add sites/{name}.yaml (kind: Site) instead"
        ),
        &format!("sites/{name}.yaml"),
    ))
}

async fn update(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<(), ApiError> {
    let (_, site) = accepted_site(&state, &id)?;
    let fields = body
        .as_object()
        .map(|o| {
            o.keys()
                .filter(|k| *k != "reason")
                .map(|k| format!("spec.{k}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    let file = &site.provenance.file;
    Err(ApiError::owned_by_git(
        format!(
            "site {id} is owned by git: change {} in {file} instead",
            if fields.is_empty() {
                "its spec".to_owned()
            } else {
                fields
            }
        ),
        file,
    ))
}

async fn delete(State(state): State<ApiState>, Path(id): Path<String>) -> Result<(), ApiError> {
    let (_, site) = accepted_site(&state, &id)?;
    let file = &site.provenance.file;
    Err(ApiError::owned_by_git(
        format!("site {id} is owned by git: set spec.status: disabled in {file} instead"),
        file,
    ))
}

/// `POST …/credentials`: the MAAS API key (required) and the site's default BMC login
/// (optional), checked against MAAS before anything is written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CredentialsBody {
    maas_api_key: Secret,
    #[serde(default)]
    power: Option<PowerLogin>,
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PowerLogin {
    user: Secret,
    pass: Secret,
}

/// A MAAS client for a probe: one attempt, short timeouts (an operator is waiting).
fn probe_client(state: &ApiState, site: &Site, key: Secret) -> Result<MaasClient, ApiError> {
    let options = MaasClientOptions {
        timeout: Duration::from_secs(15),
        connect_timeout: Duration::from_secs(5),
        retry: RetryPolicy::never(),
        metrics: state.inner.maas.metrics().clone(),
        ..MaasClientOptions::default()
    };
    MaasClient::new(&state.inner.maas.url_of(site), key, options).map_err(|e| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_api_key",
            e.to_string(),
        )
        .hint("a MAAS API key is `consumer_key:token_key:token_secret` (MAAS UI: API keys)")
    })
}

/// What a successful probe learned.
#[derive(Debug, Serialize)]
struct ProbeReport {
    maas_url: String,
    version: String,
    capabilities: Vec<String>,
    user: String,
    is_admin: bool,
    hardware_sync_supported: Option<bool>,
}

/// `GET version/` (MAAS reachable) and `users/?op=whoami` (the key works: `version/` alone is
/// anonymous in MAAS, so it cannot tell a bad key).
async fn run_probe(
    state: &ApiState,
    site: &Site,
    client: &MaasClient,
) -> Result<ProbeReport, String> {
    let version = client.version().await.map_err(|e| e.to_string())?;
    let whoami = client.whoami().await.map_err(|e| e.to_string())?;
    Ok(ProbeReport {
        maas_url: crate::sanitize::redact::url(&state.inner.maas.url_of(site)),
        hardware_sync_supported: version.supports_hardware_sync(),
        version: version.version,
        capabilities: version.capabilities,
        user: whoami.username,
        is_admin: whoami.is_superuser,
    })
}

fn secret_error(err: SecretError) -> ApiError {
    let api = if err.is_transient() {
        ApiError::unavailable(err.to_string())
    } else {
        ApiError::new(StatusCode::BAD_GATEWAY, "secret_store", err.to_string())
    };
    match err.hint() {
        Some(hint) => api.hint(hint),
        None => api,
    }
}

/// Replace some fields of the secret at `path`, keeping its other fields.
async fn write_fields(
    state: &ApiState,
    path: &str,
    fields: Vec<(String, Secret)>,
) -> Result<Vec<String>, ApiError> {
    let secrets = &state.inner.secrets;
    let mut current = match secrets.read(path).await {
        Ok(data) => data.fields,
        Err(SecretError::NotFound { .. }) => BTreeMap::new(),
        Err(err) => return Err(secret_error(err)),
    };
    let names = fields.iter().map(|(k, _)| k.clone()).collect();
    current.extend(fields);
    secrets.write(path, &current).await.map_err(secret_error)?;
    Ok(names)
}

async fn credentials(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<CredentialsBody>,
) -> Result<impl IntoResponse, ApiError> {
    let (_, site) = accepted_site(&state, &id)?;
    if body.maas_api_key.expose().trim().is_empty() {
        return Err(ApiError::bad_request("`maas_api_key` is empty"));
    }
    let client = probe_client(&state, &site, body.maas_api_key.clone())?;
    let report = run_probe(&state, &site, &client).await.map_err(|message| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "maas_probe_failed",
            format!(
                "MAAS at {} refused or did not answer: {message}",
                state.inner.maas.url_of(&site)
            ),
        )
        .hint("check the site's MAAS URL and the key (MAAS UI: API keys); nothing was written")
    })?;
    if !report.is_admin {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "maas_key_not_admin",
            format!(
                "the key belongs to MAAS user `{}`, who is not an administrator",
                report.user
            ),
        )
        .hint("onboarding needs an admin's API key; nothing was written"));
    }
    let mut written = Vec::new();
    let key_ref = &site.maas.api_key;
    let field = key_ref.key.clone().unwrap_or_else(|| "token".into());
    let fields = write_fields(&state, &key_ref.path, vec![(field, body.maas_api_key)]).await?;
    written.push(json!({"path": key_ref.path, "fields": fields}));
    if let Some(power) = body.power {
        let path = &site.power.default_credentials.path;
        let fields = write_fields(
            &state,
            path,
            vec![("user".into(), power.user), ("pass".into(), power.pass)],
        )
        .await?;
        written.push(json!({"path": path, "fields": fields}));
    }
    let details = json!({"written": written, "maas_version": report.version});
    state
        .audit(
            &principal,
            "site.credentials_written",
            ("site", site.name.as_str()),
            body.reason.as_deref(),
            details.clone(),
        )
        .await?;
    tracing::info!(site = %site.name, actor = %principal.name, "site credentials written");
    Ok(axum::Json(json!({
        "site": site.name,
        "written": details["written"],
        "probe": report,
    })))
}

async fn probe(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let (_, site) = accepted_site(&state, &id)?;
    let key_ref = crate::secrets::SecretRef::new(
        site.maas.api_key.path.clone(),
        site.maas.api_key.key.as_deref(),
    );
    let key = state
        .inner
        .secrets
        .get(&key_ref)
        .await
        .map_err(secret_error)?;
    let client = probe_client(&state, &site, key)?;
    Ok(axum::Json(match run_probe(&state, &site, &client).await {
        Ok(report) => json!({"site": site.name, "ok": true, "probe": report}),
        Err(error) => json!({"site": site.name, "ok": false, "error": error}),
    }))
}

/// One RoCE assignment (000 §3.3) as the manifests define it.
#[derive(Debug, Serialize)]
struct RoceView {
    /// `hostname:interface`.
    id: String,
    hostname: String,
    interface: String,
    ipv4_cidr: String,
    manifest: String,
}

async fn list_roce(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let (accepted, site) = accepted_site(&state, &id)?;
    let items: Vec<RoceView> = accepted
        .fleet
        .nodes_of_site(&site.name)
        .flat_map(|node| {
            node.roce.iter().map(move |roce| RoceView {
                id: format!("{}:{}", node.id.hostname, roce.interface),
                hostname: node.id.hostname.to_string(),
                interface: roce.interface.clone(),
                ipv4_cidr: roce.address.to_string(),
                manifest: node.provenance.to_string(),
            })
        })
        .collect();
    Ok(axum::Json(json!({"site": site.name, "items": items})))
}

async fn upsert_roce(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<(), ApiError> {
    let (accepted, site) = accepted_site(&state, &id)?;
    let hostnames: std::collections::BTreeSet<&str> = body
        .get("items")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.get("hostname").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    let files: std::collections::BTreeSet<String> = accepted
        .fleet
        .nodes_of_site(&site.name)
        .filter(|n| hostnames.contains(n.id.hostname.as_str()))
        .map(|n| n.provenance.file.clone())
        .collect();
    let file = if files.is_empty() {
        "the node's manifest under nodes/".to_owned()
    } else {
        files.into_iter().collect::<Vec<_>>().join(", ")
    };
    Err(ApiError::owned_by_git(
        format!(
            "RoCE assignments of site {id} are owned by git: edit the nodes' `roce` lists in {file} instead"
        ),
        &file,
    ))
}

async fn delete_roce(
    State(state): State<ApiState>,
    Path((id, aid)): Path<(String, String)>,
) -> Result<(), ApiError> {
    let (accepted, site) = accepted_site(&state, &id)?;
    let (hostname, interface) = aid.split_once(':').unwrap_or((aid.as_str(), ""));
    let node = accepted
        .fleet
        .nodes_of_site(&site.name)
        .find(|n| {
            n.id.hostname.as_str() == hostname && n.roce.iter().any(|r| r.interface == interface)
        })
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "no RoCE assignment `{aid}` in site {id} (ids are hostname:interface)"
            ))
        })?;
    let file = &node.provenance.file;
    Err(ApiError::owned_by_git(
        format!(
            "RoCE assignment {aid} is owned by git: remove it from the `roce` list of {hostname} in {file} instead"
        ),
        file,
    ))
}
