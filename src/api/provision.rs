//! The provider-neutral view of a node and its provisioning verbs (issue 18, seed 002 "REST
//! API impact"): `GET …/nodes/{node_id}/states` answers `provision_state`,
//! `target_provision_state` and the retired and protected flags; `PUT
//! …/nodes/{node_id}/states/provision` with `{"target": VERB, "reason": …}` runs a verb through
//! `crate::apply::provision` (checked against the view, carried out on MAAS, audited). An
//! illegal verb is a 409 naming the current state; a verb the manifests own is 409
//! `owned_by_git`; a verb MAAS has no equivalent for is 400 `not_supported`.

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use super::jobs::node_id;
use super::{Access, ApiError, ApiState, JsonBody, Principal, RouteTable, required_reason};
use crate::apply::SiteMaas;
use crate::apply::provision::{VerbError, VerbRequest, carry_out_verb};
use crate::lifecycle::{Verb, VerbRefusal};

const NODES: &str = "/api/v1/admin/nodes";

pub(super) fn routes(table: &mut RouteTable) {
    table.add(
        Method::GET,
        &format!("{NODES}/{{node_id}}/states"),
        Access::Admin,
        states,
    );
    table.add(
        Method::PUT,
        &format!("{NODES}/{{node_id}}/states/provision"),
        Access::Admin,
        provision,
    );
}

async fn states(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let found = state.store().node_view(node_id(&id)?).await?;
    let node = &found.node;
    Ok(axum::Json(json!({
        "node_id": node.id,
        "site": node.site,
        "hostname": node.hostname,
        "state": node.status,
        "provision_state": found.view.as_ref().map(|v| v.provision_state),
        "target_provision_state": found.view.as_ref().and_then(|v| v.target_provision_state),
        "maintenance": found.view.as_ref().is_some_and(|v| v.maintenance),
        "source": found.view.as_ref().map(|v| v.source),
        "retired": node.retired,
        "retired_reason": node.retired_reason,
        "protected": node.protected,
        "protected_reason": node.protected_reason,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProvisionBody {
    /// The verb (seed 002's names: `active` deploys, `deleted` undeploys).
    target: String,
    reason: Option<String>,
}

async fn provision(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<ProvisionBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let reason = required_reason(body.reason.as_deref())?;
    let verb: Verb = body.target.parse().map_err(|_| {
        let names: Vec<&str> = Verb::ALL.iter().map(|v| v.as_str()).collect();
        ApiError::bad_request(format!("`{}` is not a provisioning verb", body.target))
            .hint(format!("target is one of {}", names.join(", ")))
    })?;
    let node_id = node_id(&id)?;
    let fleet = state.fleet()?;
    let maas = SiteMaas::new(state.inner.secrets.clone(), state.inner.maas.clone());
    let request = VerbRequest {
        node_id,
        verb,
        actor: principal.actor(),
        reason,
        lease_ttl: std::time::Duration::from_secs(60),
    };
    let done = carry_out_verb(state.store(), &maas, &fleet.fleet, &request)
        .await
        .map_err(verb_error)?;
    Ok(axum::Json(json!({"provision": done})))
}

fn verb_error(err: VerbError) -> ApiError {
    let message = err.to_string();
    match err {
        VerbError::Store(e) => e.into(),
        VerbError::NotFound(_) => ApiError::not_found(message),
        VerbError::Refused(VerbRefusal::Conflict { .. }) => {
            ApiError::new(StatusCode::CONFLICT, "invalid_state", message)
                .hint("GET the node's states; docs/recovery.md lists the ways out")
        }
        VerbError::Refused(VerbRefusal::OwnedByGit { .. }) => {
            ApiError::owned_by_git(message, "the node's manifest")
        }
        VerbError::Refused(VerbRefusal::NotSupported { .. }) => {
            ApiError::new(StatusCode::BAD_REQUEST, "not_supported", message)
        }
        VerbError::JobOpen { job, .. } => {
            ApiError::conflict(message).hint(format!("GET the job {job}; cancel it to stop it"))
        }
        VerbError::Busy(_) => ApiError::conflict(message).hint("try again when it is done"),
        VerbError::Unknown(_) => ApiError::conflict(message),
        VerbError::Unavailable(_) => ApiError::conflict(message),
        VerbError::Maas { .. } => ApiError::new(StatusCode::BAD_GATEWAY, "maas_refused", message),
    }
}
