//! The simulator control API under `/sim/v1/` (docs/contracts.md §3): the operation log,
//! per-machine counters, the IPMI and SSH stand-ins, out-of-band operator changes and the
//! fault spec. No OAuth: the simulator listens on loopback.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::faults::FaultSpec;
use super::reply::MaasError;
use super::shared::Shared;

pub fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/sim/v1/ops", get(ops))
        .route("/sim/v1/counters", get(counters))
        .route("/sim/v1/machines", get(machines))
        .route(
            "/sim/v1/machines/{system_id}/counters",
            get(machine_counters),
        )
        .route("/sim/v1/bmc/{ip}/power", post(bmc_power))
        .route(
            "/sim/v1/machines/{system_id}/host/files",
            post(write_file).get(read_files),
        )
        .route("/sim/v1/machines/{system_id}/oob", post(out_of_band))
        .route("/sim/v1/faults", put(set_faults).get(get_faults))
        .route("/sim/v1/agents", get(agents))
        .route("/sim/v1/agents/tasks", get(agent_tasks))
        .route(
            "/sim/v1/agents/task-faults",
            put(set_task_faults).get(get_task_faults),
        )
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": message.into()}))).into_response()
}

fn from_maas(err: MaasError) -> Response {
    let status = StatusCode::from_u16(err.status()).unwrap_or(StatusCode::BAD_REQUEST);
    let message = match err {
        MaasError::BadRequest(m)
        | MaasError::Forbidden(m)
        | MaasError::NotFound(m)
        | MaasError::Conflict(m)
        | MaasError::Internal(m)
        | MaasError::Unavailable(m)
        | MaasError::Unauthorized(m) => m,
        other => format!("{other:?}"),
    };
    error(status, message)
}

async fn ops(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.with_world(|w| w.ops.clone())).into_response()
}

async fn counters(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.with_world(|w| w.counters.clone())).into_response()
}

async fn machine_counters(
    State(shared): State<Arc<Shared>>,
    Path(system_id): Path<String>,
) -> Response {
    shared.with_world(|w| match w.counters.get(&system_id) {
        Some(c) => Json(c.clone()).into_response(),
        None if w.machine(&system_id).is_some() => {
            Json(super::model::Counters::default()).into_response()
        }
        None => error(StatusCode::NOT_FOUND, format!("No machine {system_id}.")),
    })
}

async fn machines(State(shared): State<Arc<Shared>>) -> Response {
    let list = shared.with_world(|w| {
        w.machines
            .values()
            .map(|m| {
                json!({
                    "system_id": m.system_id,
                    "hostname": m.hostname,
                    "status_name": m.status.name(),
                    "power_state": m.power_state.as_str(),
                    "bmc_ip": m.bmc_ip(),
                    "scenarios": m.scenarios.iter().map(|s| s.scenario.name()).collect::<Vec<_>>(),
                })
            })
            .collect::<Vec<_>>()
    });
    Json(json!({"machines": list, "unknown_bmcs": shared.with_world(|w| w.unknown_bmcs())}))
        .into_response()
}

#[derive(Debug, Deserialize)]
struct PowerRequest {
    action: String,
    #[serde(default)]
    boot: Option<String>,
}

async fn bmc_power(
    State(shared): State<Arc<Shared>>,
    Path(ip): Path<String>,
    body: Result<Json<PowerRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Ok(Json(request)) = body else {
        return error(
            StatusCode::BAD_REQUEST,
            "expected JSON {\"action\": \"on\"|\"off\"|\"cycle\", \"boot\": \"pxe\"|\"disk\"}",
        );
    };
    let pxe = match request.boot.as_deref() {
        None | Some("pxe") => true,
        Some("disk") => false,
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("unknown boot device `{other}` (pxe or disk)"),
            );
        }
    };
    let now = shared.clock.now();
    match shared.with_world(|w| w.bmc_power(&ip, &request.action, pxe, now)) {
        Ok(value) => Json(value).into_response(),
        Err(err) => from_maas(err),
    }
}

#[derive(Debug, Deserialize)]
struct FileRequest {
    path: String,
    content: String,
}

async fn write_file(
    State(shared): State<Arc<Shared>>,
    Path(system_id): Path<String>,
    body: Result<Json<FileRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Ok(Json(request)) = body else {
        return error(
            StatusCode::BAD_REQUEST,
            "expected JSON {\"path\": …, \"content\": …}",
        );
    };
    let now = shared.clock.now();
    match shared.with_world(|w| w.write_host_file(&system_id, &request.path, &request.content, now))
    {
        Ok(()) => Json(json!({"written": request.path})).into_response(),
        Err(err) => from_maas(err),
    }
}

async fn read_files(State(shared): State<Arc<Shared>>, Path(system_id): Path<String>) -> Response {
    shared.with_world(|w| match w.machine(&system_id) {
        Some(m) => Json(m.host_files.clone()).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("No machine {system_id}.")),
    })
}

#[derive(Debug, Deserialize)]
struct OobRequest {
    action: String,
}

async fn out_of_band(
    State(shared): State<Arc<Shared>>,
    Path(system_id): Path<String>,
    body: Result<Json<OobRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Ok(Json(request)) = body else {
        return error(StatusCode::BAD_REQUEST, "expected JSON {\"action\": …}");
    };
    let now = shared.clock.now();
    let result = shared.with_world(|w| {
        let id = w.machine_id(&system_id).ok_or_else(MaasError::no_machine)?;
        w.out_of_band(id, &request.action, now)?;
        Ok::<_, MaasError>(w.machine(&system_id).map(|m| m.status.name()))
    });
    match result {
        Ok(status) => {
            Json(json!({"system_id": system_id, "action": request.action, "status_name": status}))
                .into_response()
        }
        Err(err) => from_maas(err),
    }
}

async fn set_faults(State(shared): State<Arc<Shared>>, body: String) -> Response {
    match FaultSpec::parse(&body, &super::describe::is_known_action) {
        Ok(spec) => {
            let text = spec.text.clone();
            shared.with_world(|w| w.replace_faults(spec));
            Json(json!({"faults": text})).into_response()
        }
        Err(err) => error(StatusCode::BAD_REQUEST, err.to_string()),
    }
}

async fn get_faults(State(shared): State<Arc<Shared>>) -> Response {
    Json(json!({"faults": shared.with_world(|w| w.faults.text.clone())})).into_response()
}

async fn agents(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.with_world(|w| w.agent_log.clone())).into_response()
}

async fn agent_tasks(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.with_world(|w| w.agent_task_log.clone())).into_response()
}

fn task_faults_json(w: &super::world::World) -> serde_json::Value {
    json!(
        w.agent_task_faults
            .iter()
            .map(|(fault, fired)| json!({"fault": fault, "fired": fired}))
            .collect::<Vec<_>>()
    )
}

/// Replace the injected agent task failures (docs/simulator.md "Agent tasks").
async fn set_task_faults(State(shared): State<Arc<Shared>>, body: axum::body::Bytes) -> Response {
    match serde_json::from_slice::<Vec<super::config::TaskFault>>(&body) {
        Ok(faults) => Json(shared.with_world(|w| {
            w.replace_task_faults(faults);
            task_faults_json(w)
        }))
        .into_response(),
        Err(err) => error(
            StatusCode::BAD_REQUEST,
            format!("expected a list of task faults: {err}"),
        ),
    }
}

async fn get_task_faults(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.with_world(|w| task_faults_json(w))).into_response()
}
