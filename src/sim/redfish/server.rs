//! The HTTP side of a simulated BMC: Basic auth (the service root is open, as DSP0266 and
//! sushy-tools have it), fault rules, the 503s of a BMC settling after a host power-on, and
//! the Redfish resources of [`super::bmc`]. Plus the background work: power changes that
//! land after a delay, host boots, and the maintenance OS's webhook deliveries.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use chrono::{DateTime, Utc};
use serde_json::Value as Json;

use super::bmc::{Bmc, HostOs, PendingPower, Power, error_body};
use super::faults::{self, Effect, MaintenanceBehaviour, Op};
use super::{
    Entry, RedfishSimConfig, RequestLog, Shared, State as SimState, WebhookRecord, maintenance,
};

/// Largest image a simulated BMC downloads.
const MAX_IMAGE: usize = 256 << 20;

#[derive(Clone)]
struct Ctx {
    shared: Arc<Shared>,
    serial: String,
}

pub(super) fn router(shared: Arc<Shared>, serial: String) -> Router {
    Router::new()
        .fallback(handle)
        .with_state(Ctx { shared, serial })
}

fn reply(status: StatusCode, body: Option<Json>, etag: Option<String>) -> Response {
    let mut response = match body {
        Some(body) => (status, axum::Json(body)).into_response(),
        None => status.into_response(),
    };
    let headers = response.headers_mut();
    headers.insert("OData-Version", HeaderValue::from_static("4.0"));
    if let Some(tag) = etag.and_then(|t| HeaderValue::from_str(&t).ok()) {
        headers.insert(header::ETAG, tag);
    }
    response
}

fn error(status: StatusCode, id: &str, message: &str) -> Response {
    reply(status, Some(error_body(id, message)), None)
}

/// What a request is, from the BMC's layout.
fn classify(bmc: &Bmc, method: &Method, path: &str) -> Op {
    let f = &bmc.flavour;
    let media = f.media_path();
    if path == "/redfish/v1" || path == "/redfish" {
        Op::Root
    } else if path.starts_with(&media) {
        if path.ends_with("/Actions/VirtualMedia.InsertMedia") {
            Op::Insert
        } else if path.ends_with("/Actions/VirtualMedia.EjectMedia") {
            Op::Eject
        } else {
            Op::Media
        }
    } else if path.ends_with("/Actions/ComputerSystem.Reset") {
        Op::Reset
    } else if path.starts_with("/redfish/v1/Managers") {
        Op::Manager
    } else if *method == Method::PATCH {
        Op::PatchSystem
    } else {
        Op::System
    }
}

fn authorized(shared: &Shared, headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some(encoded) = value.strip_prefix("Basic ") else {
        return false;
    };
    let expected = format!("{}:{}", shared.config.user, shared.config.password.expose());
    base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .is_ok_and(|decoded| decoded == expected.as_bytes())
}

async fn handle(
    State(ctx): State<Ctx>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().trim_end_matches('/').to_owned();
    let op = ctx
        .shared
        .with_state(|s| {
            s.bmcs
                .get(&ctx.serial)
                .map(|e| classify(&e.bmc, &method, &path))
        })
        .unwrap_or(Op::Any);
    let response = answer(&ctx, op, &method, &path, &headers, &body).await;
    let status = response.status().as_u16();
    ctx.shared.with_state(|s| {
        if let Some(entry) = s.bmcs.get_mut(&ctx.serial) {
            entry.log.push(RequestLog {
                method: method.to_string(),
                path: uri.path().to_owned(),
                status,
            });
        }
    });
    response
}

async fn answer(
    ctx: &Ctx,
    op: Op,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    if op != Op::Root && !authorized(&ctx.shared, headers) {
        let mut response = error(
            StatusCode::UNAUTHORIZED,
            "NoValidSession",
            "authentication is required: send HTTP Basic credentials",
        );
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"Redfish\""),
        );
        return response;
    }
    let now = ctx.shared.clock.now();
    let (effect, settling) = ctx
        .shared
        .with_state(|s| match s.bmcs.get_mut(&ctx.serial) {
            Some(entry) => (
                faults::take(&mut entry.faults, op),
                entry.bmc.settling_until.is_some_and(|until| now < until),
            ),
            None => (None, false),
        });
    match effect {
        Some(Effect::Status { code, retry_after }) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = error(status, "GeneralError", "injected fault");
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            return response;
        }
        Some(Effect::Latency(delay)) => tokio::time::sleep(delay).await,
        Some(Effect::Hang) => std::future::pending::<()>().await,
        None => {}
    }
    // While it settles the BMC still reports power, but its virtual media, boot override and
    // reset services answer 503.
    if settling && !matches!(op, Op::Root | Op::System) {
        let mut response = error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceTemporarilyUnavailable",
            "the service is restarting after a host power-on; retry shortly",
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    }
    let parsed: Option<Json> = serde_json::from_slice(body).ok();
    let malformed = || {
        error(
            StatusCode::BAD_REQUEST,
            "MalformedJSON",
            "the request body is not valid JSON",
        )
    };
    match (op, method.clone()) {
        (Op::Insert, Method::POST) => match parsed {
            Some(body) => insert(ctx, path, &body).await,
            None => malformed(),
        },
        (Op::Eject, Method::POST) => with_entry(ctx, |e, _| eject(e, path)),
        (Op::Reset, Method::POST) => match parsed {
            Some(body) => with_entry(ctx, |e, now| reset(&ctx.shared, e, path, &body, now)),
            None => malformed(),
        },
        (Op::PatchSystem, Method::PATCH) => match parsed {
            Some(body) => with_entry(ctx, |e, _| patch_system(e, path, headers, &body)),
            None => malformed(),
        },
        (_, Method::GET) => with_entry(ctx, |e, _| get(&e.bmc, path)),
        _ => error(
            StatusCode::METHOD_NOT_ALLOWED,
            "OperationNotAllowed",
            &format!("{method} is not allowed on {path}"),
        ),
    }
}

fn with_entry(ctx: &Ctx, f: impl FnOnce(&mut Entry, DateTime<Utc>) -> Response) -> Response {
    let now = ctx.shared.clock.now();
    ctx.shared
        .with_state(|s| match s.bmcs.get_mut(&ctx.serial) {
            Some(entry) => f(entry, now),
            None => error(StatusCode::NOT_FOUND, "ResourceMissingAtURI", "no such BMC"),
        })
}

fn missing(path: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "ResourceMissingAtURI",
        &format!("the resource at {path} was not found"),
    )
}

fn get(bmc: &Bmc, path: &str) -> Response {
    let f = &bmc.flavour;
    let ok = |body| reply(StatusCode::OK, Some(body), None);
    match path {
        "/redfish/v1" | "/redfish" => ok(bmc.root()),
        "/redfish/v1/Systems" => ok(bmc.systems()),
        "/redfish/v1/Managers" => ok(bmc.managers()),
        p if p == f.system_path() => reply(StatusCode::OK, Some(bmc.system()), Some(bmc.etag())),
        p if p == f.manager_path() => ok(bmc.manager()),
        p if p == f.media_path() => ok(bmc.media_collection()),
        p => match p
            .strip_prefix(&format!("{}/", f.media_path()))
            .and_then(|id| bmc.slots.iter().find(|s| s.id == id))
        {
            Some(slot) => reply(
                StatusCode::OK,
                Some(bmc.media(slot)),
                Some(bmc.slot_etag(slot)),
            ),
            None => missing(p),
        },
    }
}

/// The slot id of an action path `…/VirtualMedia/{id}/Actions/…`.
fn slot_of<'a>(bmc: &Bmc, path: &'a str) -> Option<&'a str> {
    let rest = path.strip_prefix(&format!("{}/", bmc.flavour.media_path()))?;
    rest.split('/').next()
}

async fn insert(ctx: &Ctx, path: &str, body: &Json) -> Response {
    let Some(image) = body["Image"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "PropertyMissing",
            "the property Image is a required property and must be included in the request",
        );
    };
    let inserted = body["Inserted"].as_bool().unwrap_or(true);
    let write_protected = body["WriteProtected"].as_bool().unwrap_or(true);
    let found = ctx.shared.with_state(|s| {
        let entry = s.bmcs.get(&ctx.serial)?;
        let id = slot_of(&entry.bmc, path)?;
        let slot = entry.bmc.slots.iter().find(|slot| slot.id == id)?;
        Some((id.to_owned(), slot.inserted))
    });
    let Some((id, busy)) = found else {
        return missing(path);
    };
    let generic = ctx.shared.with_state(|s| {
        s.bmcs.get(&ctx.serial).is_some_and(|e| {
            e.bmc.flavour.vendor == crate::provider::redfish::profile::Vendor::Generic
        })
    });
    // Vendor BMCs refuse to insert over a connected image; sushy-tools replaces it.
    if busy && !generic {
        return error(
            StatusCode::BAD_REQUEST,
            "ActionNotSupported",
            "the virtual media device is already connected: eject it first",
        );
    }
    // Like sushy-tools (and BMCs that cache the image), download it now.
    let bytes = match download(&ctx.shared.http, &image).await {
        Ok(bytes) => bytes,
        Err((status, message)) => {
            return error(
                status,
                "GeneralError",
                &format!("cannot download virtual media: {message}"),
            );
        }
    };
    with_entry(ctx, |entry, _| {
        let Some(slot) = entry.bmc.slot_mut(&id) else {
            return missing(path);
        };
        slot.image = Some(image);
        slot.inserted = inserted;
        slot.write_protected = write_protected;
        slot.bytes = Some(Arc::new(bytes));
        StatusCode::NO_CONTENT.into_response()
    })
}

async fn download(http: &reqwest::Client, url: &str) -> Result<Vec<u8>, (StatusCode, String)> {
    let response = http
        .get(url)
        .send()
        .await
        .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
    let status = response.status();
    if !status.is_success() {
        // As sushy-tools: the image server's 5xx is a 502, anything else a 400.
        let code = if status.is_server_error() {
            StatusCode::BAD_GATEWAY
        } else {
            StatusCode::BAD_REQUEST
        };
        return Err((
            code,
            format!("got error {} from the server", status.as_u16()),
        ));
    }
    if response
        .content_length()
        .is_some_and(|len| len > MAX_IMAGE as u64)
    {
        return Err((StatusCode::BAD_REQUEST, "the image is too large".into()));
    }
    let bytes = response
        .bytes()
        .await
        .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
    Ok(bytes.to_vec())
}

fn eject(entry: &mut Entry, path: &str) -> Response {
    let bmc = &mut entry.bmc;
    let Some(id) = slot_of(bmc, path).map(str::to_owned) else {
        return missing(path);
    };
    let Some(slot) = bmc.slot_mut(&id) else {
        return missing(path);
    };
    slot.image = None;
    slot.inserted = false;
    slot.write_protected = false;
    slot.bytes = None;
    StatusCode::NO_CONTENT.into_response()
}

fn patch_system(entry: &mut Entry, path: &str, headers: &HeaderMap, body: &Json) -> Response {
    let bmc = &mut entry.bmc;
    if path != bmc.flavour.system_path() {
        return missing(path);
    }
    match headers.get(header::IF_MATCH).and_then(|v| v.to_str().ok()) {
        Some(tag) if tag != bmc.etag() && tag != "*" => {
            return error(
                StatusCode::PRECONDITION_FAILED,
                "PreconditionFailed",
                "the ETag in If-Match does not match the resource",
            );
        }
        None if bmc.flavour.requires_if_match => {
            return error(
                StatusCode::PRECONDITION_REQUIRED,
                "PreconditionRequired",
                "this resource requires an If-Match header with its ETag",
            );
        }
        _ => {}
    }
    let Some(boot) = body.get("Boot").and_then(Json::as_object) else {
        return error(
            StatusCode::BAD_REQUEST,
            "PropertyMissing",
            "PATCH of the system takes a Boot object",
        );
    };
    let target = boot.get("BootSourceOverrideTarget").and_then(Json::as_str);
    let enabled = boot.get("BootSourceOverrideEnabled").and_then(Json::as_str);
    let mode = boot.get("BootSourceOverrideMode").and_then(Json::as_str);
    if let Some(target) = target
        && !bmc.flavour.boot_targets.contains(&target)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "PropertyValueNotInList",
            &format!(
                "the value {target} for the property BootSourceOverrideTarget is not in the list of acceptable values"
            ),
        );
    }
    if let Some(enabled) = enabled
        && !["Disabled", "Once", "Continuous"].contains(&enabled)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "PropertyValueNotInList",
            &format!(
                "the value {enabled} for the property BootSourceOverrideEnabled is not in the list of acceptable values"
            ),
        );
    }
    if let Some(mode) = mode
        && !["UEFI", "Legacy"].contains(&mode)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "PropertyValueNotInList",
            &format!(
                "the value {mode} for the property BootSourceOverrideMode is not in the list of acceptable values"
            ),
        );
    }
    if target.is_none() && enabled.is_none() && mode.is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "PropertyMissing",
            "the Boot object names no property this BMC can change",
        );
    }
    if let Some(target) = target {
        bmc.boot_target = target.to_owned();
        // A target alone means a one-time override (DSP2046 default).
        if enabled.is_none() && bmc.boot_enabled == "Disabled" {
            bmc.boot_enabled = "Once".into();
        }
    }
    if let Some(enabled) = enabled {
        bmc.boot_enabled = enabled.to_owned();
    }
    if let Some(mode) = mode {
        bmc.boot_mode = mode.to_owned();
    }
    bmc.generation += 1;
    StatusCode::NO_CONTENT.into_response()
}

fn reset(
    shared: &Shared,
    entry: &mut Entry,
    path: &str,
    body: &Json,
    now: DateTime<Utc>,
) -> Response {
    if path
        != format!(
            "{}/Actions/ComputerSystem.Reset",
            entry.bmc.flavour.system_path()
        )
    {
        return missing(path);
    }
    let Some(kind) = body["ResetType"].as_str() else {
        return error(
            StatusCode::BAD_REQUEST,
            "PropertyMissing",
            "the property ResetType is a required property and must be included in the request",
        );
    };
    let delay = shared.after(now, shared.config.power_delay);
    let bmc = &mut entry.bmc;
    let on = bmc.power == Power::On;
    let pending = |to, restart| {
        Some(PendingPower {
            to,
            at: delay,
            restart,
        })
    };
    match kind {
        "On" | "ForceOn" => {
            if !on && bmc.pending.is_none() {
                bmc.pending = pending(Power::On, false);
            }
        }
        "ForceOff" => {
            if on {
                bmc.pending = pending(Power::Off, false);
            }
        }
        "GracefulShutdown" => {
            // An OS that ignores the ACPI request keeps running; the BMC still accepts it.
            if on && !entry.ignores_graceful_shutdown && bmc.pending.is_none() {
                bmc.pending = pending(Power::Off, false);
            }
        }
        "GracefulRestart" | "ForceRestart" => {
            if on {
                bmc.power = Power::Off;
                bmc.host = HostOs::None;
                bmc.pending = pending(Power::On, true);
            } else {
                bmc.pending = pending(Power::On, false);
            }
        }
        other => {
            return error(
                StatusCode::BAD_REQUEST,
                "ActionParameterValueNotInList",
                &format!(
                    "the value {other} for the parameter ResetType is not in the list of acceptable values"
                ),
            );
        }
    }
    bmc.generation += 1;
    StatusCode::NO_CONTENT.into_response()
}

/// Runs power changes and boots that are due at `now`.
pub(super) fn advance(config: &RedfishSimConfig, state: &mut SimState, now: DateTime<Utc>) {
    let scaled = |d: Duration| chrono::Duration::from_std(config.scaled(d)).unwrap_or_default();
    let mut reports = Vec::new();
    for (serial, entry) in state.bmcs.iter_mut() {
        let bmc = &mut entry.bmc;
        if let Some(pending) = bmc.pending.filter(|p| p.at <= now) {
            bmc.pending = None;
            bmc.power = pending.to;
            bmc.generation += 1;
            match pending.to {
                Power::Off => bmc.host = HostOs::None,
                Power::On => {
                    bmc.boots += 1;
                    if config.settle && !bmc.flavour.settle_after_power_on.is_zero() {
                        bmc.settling_until =
                            Some(pending.at + scaled(bmc.flavour.settle_after_power_on));
                    }
                    let override_on =
                        bmc.boot_enabled != "Disabled" && bmc.boot_target == bmc.flavour.cd_target;
                    let cd1 = bmc
                        .slots
                        .iter()
                        .find(|s| s.takes_cd())
                        .is_some_and(|s| s.inserted);
                    bmc.host = if override_on && cd1 {
                        HostOs::Maintenance {
                            at: pending.at + scaled(config.maintenance_run),
                        }
                    } else {
                        HostOs::Disk
                    };
                    if bmc.boot_enabled == "Once" {
                        bmc.boot_enabled = "Disabled".into();
                    }
                }
            }
        }
        if let HostOs::Maintenance { at } = bmc.host
            && at <= now
        {
            let images: Vec<Arc<Vec<u8>>> = bmc
                .slots
                .iter()
                .filter(|s| s.inserted)
                .filter_map(|s| s.bytes.clone())
                .collect();
            let views: Vec<&[u8]> = images.iter().map(|b| b.as_slice()).collect();
            let outcome = match &entry.maintenance {
                MaintenanceBehaviour::Silent => None,
                MaintenanceBehaviour::Succeed => Some(maintenance::report(&views, None)),
                MaintenanceBehaviour::Fail(step) => Some(maintenance::report(&views, Some(step))),
            };
            bmc.host = HostOs::MaintenanceDone {
                outcome: outcome.as_ref().map_or("silent".to_owned(), |r| {
                    r["status"].as_str().unwrap_or_default().to_owned()
                }),
            };
            if let Some(report) = outcome {
                reports.push((serial.clone(), report));
            }
        }
    }
    state.outbox.extend(reports);
}

/// Background work: due power changes, boots, and webhook deliveries.
pub(super) async fn ticker(shared: Arc<Shared>) {
    loop {
        let outbox = shared.with_state(|s| std::mem::take(&mut s.outbox));
        for (serial, body) in outbox {
            tokio::spawn(deliver(shared.clone(), serial, body));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Posts one report, retrying a few times as an installer's reporting unit would.
async fn deliver(shared: Arc<Shared>, serial: String, body: Json) {
    let Some(target) = shared.config.webhook.clone() else {
        shared.with_state(|s| {
            s.webhooks.push(WebhookRecord {
                serial,
                body,
                result: Err("no webhook URL configured".into()),
            })
        });
        return;
    };
    let mut result = Err(String::new());
    for attempt in 0..5u32 {
        result = maintenance::post(&shared.http, &target, &serial, &body).await;
        if matches!(result, Ok(status) if status < 500) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200) * (attempt + 1)).await;
    }
    shared.with_state(|s| {
        s.webhooks.push(WebhookRecord {
            serial,
            body,
            result,
        })
    });
}
