//! Redfish failures, classified once (seed 003 "Error Handling and Retries": transient — 5xx,
//! timeouts, connection errors — vs terminal — 4xx). Messages carry the BMC's own words (its
//! `@Message.ExtendedInfo`), never credentials.

use std::time::Duration;

/// Why a transient failure happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransientCause {
    /// 5xx, or 429 Too Many Requests.
    Status(u16),
    Timeout,
    Connect,
}

impl std::fmt::Display for TransientCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransientCause::Status(code) => write!(f, "HTTP {code}"),
            TransientCause::Timeout => f.write_str("timed out"),
            TransientCause::Connect => f.write_str("connection failed"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedfishError {
    /// Worth retrying later; the client already retried `attempts` times.
    #[error("{op} on {bmc}: {cause} after {attempts} attempt(s): {message}")]
    Transient {
        op: &'static str,
        bmc: String,
        cause: TransientCause,
        attempts: u32,
        message: String,
        /// The BMC's `Retry-After`, when it sent one.
        retry_after: Option<Duration>,
    },
    /// The BMC answered 4xx: the request is wrong for it and will stay wrong.
    #[error("{op} on {bmc}: the BMC refused (HTTP {status}): {message}")]
    Refused {
        op: &'static str,
        bmc: String,
        status: u16,
        message: String,
    },
    /// The BMC answered something we cannot use (missing links, not JSON, a write that did
    /// not take).
    #[error("{op} on {bmc}: {message}")]
    Protocol {
        op: &'static str,
        bmc: String,
        message: String,
    },
    /// The BMC login could not be read from the secret store.
    #[error("cannot read the login of BMC {bmc}: {message}")]
    Credentials {
        bmc: String,
        message: String,
        /// The secret store was unreachable (worth retrying), not missing the secret.
        transient: bool,
    },
    /// The BMC lacks what provisioning needs (no virtual CD, no reset action).
    #[error("{bmc} cannot {what}")]
    Unsupported { bmc: String, what: String },
}

impl RedfishError {
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            RedfishError::Transient { .. }
                | RedfishError::Credentials {
                    transient: true,
                    ..
                }
        )
    }

    /// The HTTP status, when the BMC answered with one.
    pub fn status(&self) -> Option<u16> {
        match self {
            RedfishError::Refused { status, .. } => Some(*status),
            RedfishError::Transient {
                cause: TransientCause::Status(status),
                ..
            } => Some(*status),
            _ => None,
        }
    }

    /// What the operator should do.
    pub fn hint(&self) -> &'static str {
        match self {
            RedfishError::Transient { .. } => {
                "the BMC is busy or unreachable: check its network and load; the job retries"
            }
            RedfishError::Refused { status: 401, .. }
            | RedfishError::Refused { status: 403, .. } => {
                "check the BMC credentials in the secret store and the account's Redfish role"
            }
            RedfishError::Refused { .. } => {
                "the BMC rejected the request: check its firmware and the server's vendor setting"
            }
            RedfishError::Protocol { .. } => {
                "the BMC's answer was not what Redfish specifies: set the server's vendor explicitly or update the BMC firmware"
            }
            RedfishError::Credentials { .. } => {
                "write the BMC login {user, pass} at the server's secret reference, or check the secret store"
            }
            RedfishError::Unsupported { .. } => {
                "this BMC cannot be provisioned over virtual media; check its licence (virtual media often needs one)"
            }
        }
    }
}

/// The human part of a Redfish error body: the first `@Message.ExtendedInfo` message, else
/// `error.message`, else the raw text (shortened).
pub fn error_message(body: &str) -> String {
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(body) {
        let error = &json["error"];
        let extended = error["@Message.ExtendedInfo"]
            .as_array()
            .and_then(|items| items.iter().find_map(|i| i["Message"].as_str()));
        if let Some(text) = extended.or_else(|| error["message"].as_str()) {
            return text.to_owned();
        }
    }
    let text = body.trim();
    if text.is_empty() {
        return "no details".to_owned();
    }
    text.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_come_from_the_extended_info() {
        let body = r#"{"error": {"code": "Base.1.8.GeneralError", "message": "A general error has occurred.",
            "@Message.ExtendedInfo": [{"MessageId": "Base.1.8.PropertyValueNotInList",
            "Message": "The value UsbCd for the property BootSourceOverrideTarget is not in the list of acceptable values."}]}}"#;
        assert_eq!(
            error_message(body),
            "The value UsbCd for the property BootSourceOverrideTarget is not in the list of acceptable values."
        );
        assert_eq!(error_message(r#"{"error": {"message": "nope"}}"#), "nope");
        assert_eq!(error_message("  "), "no details");
        assert_eq!(error_message("<html>502</html>"), "<html>502</html>");
    }
}
