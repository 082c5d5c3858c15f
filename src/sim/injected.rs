//! What an injected request fault answers (docs/simulator.md "Faults"), shaped like what it
//! imitates: MAAS's own errors for a status (its texts, content types and `Retry-After`,
//! src/maasserver/utils/views.py, middleware.py, api/machines.py), or the answers of something
//! in front of MAAS (`answer=`).

use super::faults::AnswerFault;
use super::reply::{CONFLICT_PAGE, MaasError};
use super::world::{RACK_SYSTEM_ID, World};

/// MAAS's answer with `status` to the action `key` (`machine.deploy`) on `system_id`.
pub fn status_error(
    world: &World,
    key: &str,
    system_id: Option<&str>,
    status: u16,
    retry_after: Option<u64>,
) -> MaasError {
    match (status, retry_after) {
        // A serialization failure after MAAS's own retries: HttpResponseConflict.
        (409, Some(_)) => MaasError::Page {
            status,
            html: CONFLICT_PAGE.to_string(),
            retry_after,
            location: None,
        },
        (409, None) => MaasError::Conflict(state_violation(world, key, system_id)),
        // NoConnectionsAvailable through APIRPCErrorsMiddleware.
        (503, Some(_)) => MaasError::Status {
            status,
            message: format!(
                "Unable to connect to rack controller '{RACK_SYSTEM_ID}' ({RACK_SYSTEM_ID}); no \
                 connections available."
            ),
            retry_after,
        },
        (503, None) => MaasError::Unavailable(
            "Power on for the node failed: the BMC did not answer (PowerProblem).".to_string(),
        ),
        (504, _) => MaasError::Status {
            status,
            message: format!(
                "Error while calling PowerQuery: RPC connection timed out to rack controller \
                 '{RACK_SYSTEM_ID}'."
            ),
            retry_after,
        },
        (500, _) => MaasError::Internal("Unexpected exception: OperationalError.".to_string()),
        (s, _) => MaasError::Status {
            status: s,
            message: format!("Injected fault: HTTP {s} for {key}."),
            retry_after,
        },
    }
}

/// The `NodeStateViolation` text the handler of `key` uses, with the machine's status.
fn state_violation(world: &World, key: &str, system_id: Option<&str>) -> String {
    let machine = system_id.and_then(|sid| world.machine(sid));
    let status = machine.map_or("Unknown", |m| m.status.name());
    let sid = system_id.unwrap_or("");
    match key {
        "machine.deploy" => format!("Can't deploy a machine that is in the '{status}' state"),
        "machine.release" => {
            format!("Machine cannot be released in its current state ('{status}').")
        }
        "machine.abort" => {
            format!("Cannot abort in current state: node {sid} is in state {status}.")
        }
        "machine.power_on" => "Can't start node: it hasn't been allocated.".to_string(),
        "machine.mark_fixed" => "Can't mark a non-broken node as 'Ready'.".to_string(),
        "machine.set_storage_layout" => {
            "Cannot change the storage layout on a machine that is not Ready.".to_string()
        }
        "blockdevice.set_boot_disk" => {
            "Cannot set as boot disk because the machine is not Ready.".to_string()
        }
        "interface.link_subnet" => "Cannot link subnet interface because the machine is not \
                                    New, Ready, Allocated, or Broken."
            .to_string(),
        "interface.unlink_subnet" => "Cannot unlink subnet interface because the machine is \
                                      not New, Ready, Allocated, or Broken."
            .to_string(),
        "machines.accept" => {
            format!("Cannot accept node enlistment: node {sid} is in state {status}.")
        }
        _ => format!("Invalid transition: {status} -> {status}."),
    }
}

/// An answer from something in front of MAAS. `Truncated` is applied to MAAS's own answer by
/// the server; `None` here.
pub fn foreign_answer(
    kind: AnswerFault,
    status: Option<u16>,
    host: &str,
    path: &str,
) -> Option<MaasError> {
    match kind {
        AnswerFault::Html => Some(MaasError::Page {
            status: status.unwrap_or(200),
            html: "<!DOCTYPE html>\n<html><head><title>Sign in</title></head>\n<body><h1>Sign in \
                   to continue</h1><form method=\"post\" action=\"/login\"></form></body></html>\n"
                .to_string(),
            retry_after: None,
            location: None,
        }),
        AnswerFault::Redirect => Some(MaasError::Page {
            status: status.unwrap_or(302),
            html: String::new(),
            retry_after: None,
            location: Some(format!("https://{host}{path}")),
        }),
        AnswerFault::Shape => Some(MaasError::Page {
            status: 200,
            html: String::new(),
            retry_after: None,
            location: None,
        }),
        AnswerFault::Truncated => None,
    }
}
