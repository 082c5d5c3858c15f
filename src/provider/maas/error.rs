//! MAAS errors, classified once (API_REFERENCE §1 "Error bodies", §2.4; DESIGN.md §8).
//!
//! Every failure of a MAAS call becomes one [`MaasError`] variant. The classification follows
//! what MAAS means by its status codes: a 409 without `Retry-After` is a lifecycle violation
//! (`NodeStateViolation`, not retryable), a 409 or 503 *with* `Retry-After` is MAAS asking to be
//! retried after it rolled the transaction back. MAAS's own text is kept (bounded, scrubbed of
//! the API key) for diagnostics.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// MAAS form errors: field name → messages (`__all__` for errors not tied to a field).
pub type FormErrors = BTreeMap<String, Vec<String>>;

/// Longest MAAS text kept in an error (characters).
pub(crate) const MAX_MESSAGE_CHARS: usize = 1024;

/// Why a transient error happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransientCause {
    /// MAAS answered with this status (5xx, or 409/503 with `Retry-After`).
    Status(u16),
    /// The TCP/TLS connection could not be established: the request was never sent.
    Connect,
    /// No complete answer within the request timeout.
    Timeout,
    /// The connection failed after the request may have been sent (reset, truncated body).
    Transport,
}

impl fmt::Display for TransientCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransientCause::Status(status) => write!(f, "HTTP {status}"),
            TransientCause::Connect => f.write_str("connection failed"),
            TransientCause::Timeout => f.write_str("timed out"),
            TransientCause::Transport => f.write_str("connection error"),
        }
    }
}

/// A failed MAAS call. `operation` is the client method's name (`deploy`, `list_machines`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MaasError {
    /// 401: the API key is unknown, revoked or malformed as MAAS sees it.
    #[error("MAAS {operation}: unauthorized (401): {}", or_empty(message))]
    Unauthorized {
        operation: &'static str,
        message: String,
    },
    /// 403: the key's user lacks the permission (admin, owner, locked machine).
    #[error("MAAS {operation}: forbidden (403): {}", or_empty(message))]
    Forbidden {
        operation: &'static str,
        message: String,
    },
    /// 404: the object (usually the machine) does not exist.
    #[error("MAAS {operation}: not found (404): {}", or_empty(message))]
    NotFound {
        operation: &'static str,
        message: String,
    },
    /// A requested static address MAAS will not give: already in use (404
    /// `StaticIPAddressUnavailable`) or outside what the subnet allows (403
    /// `StaticIPAddressOutOfRange`), answered by `link_subnet` (models/interface.py). Not a
    /// missing machine and not a permission problem, though the status says so.
    #[error(
        "MAAS {operation}: address unavailable ({status}): {}",
        or_empty(message)
    )]
    AddressUnavailable {
        operation: &'static str,
        status: u16,
        message: String,
    },
    /// 409 without `Retry-After`: the operation is not allowed in the machine's current state.
    #[error("MAAS {operation}: state conflict (409): {}", or_empty(message))]
    Conflict {
        operation: &'static str,
        message: String,
    },
    /// 400 (and other 4xx): MAAS rejected the parameters. `form_errors` holds MAAS's field
    /// errors when it answered with its JSON form-error document.
    #[error(
        "MAAS {operation}: bad request ({status}): {}",
        describe_bad_request(message, form_errors)
    )]
    BadRequest {
        operation: &'static str,
        status: u16,
        message: String,
        form_errors: FormErrors,
    },
    /// MAAS was unavailable or busy, or the connection failed. The client already retried as
    /// far as it safely could (`attempts` requests were made). When `outcome_unknown` is set,
    /// a non-idempotent request may or may not have taken effect: re-read before deciding.
    #[error(
        "MAAS {operation}: transient failure ({cause}) after {attempts} attempt{}{}{}{}",
        plural(*attempts),
        retry_after.map(|d| format!(", retry after {}s", d.as_secs())).unwrap_or_default(),
        if *outcome_unknown { ", outcome unknown" } else { "" },
        if message.is_empty() { String::new() } else { format!(": {message}") }
    )]
    Transient {
        operation: &'static str,
        cause: TransientCause,
        message: String,
        retry_after: Option<Duration>,
        outcome_unknown: bool,
        attempts: u32,
    },
    /// What answered is not the MAAS answer the operation expects: a document of another
    /// shape, an HTML page, a truncated body, a redirect. Nothing of it is used.
    #[error("MAAS {operation}: unexpected answer from {endpoint}: expected {expected}; {message}")]
    Decode {
        operation: &'static str,
        /// `POST /MAAS/api/2.0/machines/4y3ha3/?op=deploy` (no parameter values).
        endpoint: String,
        /// What the operation reads, e.g. `a machine object`.
        expected: &'static str,
        message: String,
        /// The start of the body, unless the response may carry secrets (machine tokens).
        body_excerpt: Option<String>,
    },
    /// The client was given an unusable base URL or API key, or a request it must not send.
    #[error("MAAS client configuration: {message}")]
    Config { message: String },
}

fn or_empty(message: &str) -> &str {
    if message.is_empty() {
        "(no message)"
    } else {
        message
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn describe_bad_request(message: &str, form_errors: &FormErrors) -> String {
    if form_errors.is_empty() {
        return or_empty(message).to_owned();
    }
    form_errors
        .iter()
        .map(|(field, messages)| format!("{field}: {}", messages.join(" ")))
        .collect::<Vec<_>>()
        .join("; ")
}

impl MaasError {
    /// The client operation that failed (`None` for configuration errors).
    pub fn operation(&self) -> Option<&'static str> {
        match self {
            MaasError::Unauthorized { operation, .. }
            | MaasError::Forbidden { operation, .. }
            | MaasError::NotFound { operation, .. }
            | MaasError::AddressUnavailable { operation, .. }
            | MaasError::Conflict { operation, .. }
            | MaasError::BadRequest { operation, .. }
            | MaasError::Transient { operation, .. }
            | MaasError::Decode { operation, .. } => Some(operation),
            MaasError::Config { .. } => None,
        }
    }

    /// MAAS's own text (bounded, scrubbed).
    pub fn maas_message(&self) -> &str {
        match self {
            MaasError::Unauthorized { message, .. }
            | MaasError::Forbidden { message, .. }
            | MaasError::NotFound { message, .. }
            | MaasError::AddressUnavailable { message, .. }
            | MaasError::Conflict { message, .. }
            | MaasError::BadRequest { message, .. }
            | MaasError::Transient { message, .. }
            | MaasError::Decode { message, .. }
            | MaasError::Config { message } => message,
        }
    }

    /// The HTTP status MAAS answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            MaasError::Unauthorized { .. } => Some(401),
            MaasError::Forbidden { .. } => Some(403),
            MaasError::NotFound { .. } => Some(404),
            MaasError::Conflict { .. } => Some(409),
            MaasError::AddressUnavailable { status, .. } | MaasError::BadRequest { status, .. } => {
                Some(*status)
            }
            MaasError::Transient {
                cause: TransientCause::Status(status),
                ..
            } => Some(*status),
            MaasError::Transient { .. } | MaasError::Decode { .. } | MaasError::Config { .. } => {
                None
            }
        }
    }

    /// A later attempt may succeed (MAAS busy or unreachable). If [`is_outcome_unknown`]
    /// is also true, re-read the machine before repeating a non-idempotent operation.
    ///
    /// [`is_outcome_unknown`]: MaasError::is_outcome_unknown
    pub fn is_retryable(&self) -> bool {
        matches!(self, MaasError::Transient { .. })
    }

    /// A non-idempotent request (deploy, release, commission, create…) failed in a way that
    /// does not tell whether MAAS applied it (timeout, 5xx, connection lost after sending).
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(
            self,
            MaasError::Transient {
                outcome_unknown: true,
                ..
            }
        )
    }

    /// How long MAAS asked the client to wait (`Retry-After`), if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            MaasError::Transient { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// MAAS's field errors for a 400 answered with its form-error JSON.
    pub fn form_errors(&self) -> Option<&FormErrors> {
        match self {
            MaasError::BadRequest { form_errors, .. } if !form_errors.is_empty() => {
                Some(form_errors)
            }
            _ => None,
        }
    }

    /// True when MAAS has provably not applied the request, so that even a non-idempotent
    /// request may be repeated: the connection was never made, or MAAS answered 409/503 with
    /// `Retry-After` (it rolled the transaction back and asks for a retry).
    pub(crate) fn provably_not_applied(&self) -> bool {
        matches!(
            self,
            MaasError::Transient {
                cause: TransientCause::Connect,
                ..
            } | MaasError::Transient {
                cause: TransientCause::Status(409 | 503),
                retry_after: Some(_),
                ..
            }
        )
    }

    /// What an operator should do about it (one `hint:` line at the CLI edge).
    pub fn hint(&self) -> &'static str {
        match self {
            MaasError::Unauthorized { .. } => {
                "check the site's MAAS API key (consumer_key:token_key:token_secret) in the secret \
                 store; create a new one with `maas apikey --username=<user>` if it was revoked"
            }
            MaasError::Forbidden { .. } => {
                "the MAAS user behind the API key lacks the permission: it must be a MAAS admin, \
                 and the machine must not be locked or owned by another user"
            }
            MaasError::NotFound { .. } => {
                "the object is not in MAAS (deleted out of band?); re-read the site and plan again"
            }
            MaasError::AddressUnavailable { .. } => {
                "MAAS will not give this address: another machine or device holds it, or it is \
                 outside the subnet; fix the address in the manifests or free it in MAAS"
            }
            MaasError::Conflict { .. } => {
                "the machine's MAAS status does not allow this operation; re-read the machine and \
                 plan again"
            }
            MaasError::BadRequest { .. } => {
                "MAAS rejected the request's parameters; fix the values named in the message"
            }
            MaasError::Transient {
                outcome_unknown: true,
                ..
            } => {
                "MAAS may or may not have applied the request; re-read the machine before \
                 repeating it"
            }
            MaasError::Transient { .. } => {
                "MAAS is busy or unreachable; check the MAAS URL and region controller, then retry"
            }
            MaasError::Decode { .. } => {
                "MAAS answered with an unexpected document; check that the URL points at MAAS 3.x \
                 (…/MAAS) and report the MAAS version if it does"
            }
            MaasError::Config { .. } => {
                "fix the MAAS URL (like http://10.0.0.1:5240/MAAS) or API key in the site \
                 configuration"
            }
        }
    }

    /// Builds the error for a non-2xx answer. `body` is already scrubbed of credentials.
    pub(crate) fn from_status(
        operation: &'static str,
        answer: &ErrorAnswer<'_>,
        body: &str,
    ) -> Self {
        let status = answer.status;
        let retry_after = answer.retry_after;
        let is_json = answer
            .content_type
            .is_some_and(|t| t.starts_with("application/json"));
        let html = answer
            .content_type
            .is_some_and(|t| t.starts_with("text/html"))
            .then(|| html_summary(body));
        if (300..400).contains(&status) {
            // MAAS's API answers its clients directly; a redirect means the URL points
            // elsewhere (http→https, a login page, a proxy).
            return MaasError::Decode {
                operation,
                endpoint: answer.endpoint.clone(),
                expected: answer.expected,
                message: format!(
                    "got a redirect (HTTP {status}) to {}",
                    answer.location.unwrap_or("nowhere")
                ),
                body_excerpt: None,
            };
        }
        // MAAS's own HTML answer is the serialization conflict page (409 + Retry-After: 5,
        // utils/views.py HttpResponseConflict); a proxy's 5xx page is still "unavailable".
        // Any other HTML page did not come from MAAS's API.
        let message = match &html {
            Some(summary) => summary.clone(),
            None => bounded(body.trim()),
        };
        if html.is_some() && status < 500 && !(status == 409 && retry_after.is_some()) {
            return MaasError::Decode {
                operation,
                endpoint: answer.endpoint.clone(),
                expected: answer.expected,
                message: format!("got an HTML page (HTTP {status}): {message}"),
                body_excerpt: None,
            };
        }
        if matches!(operation, "link_subnet" | "update_interface")
            && matches!(status, 403 | 404)
            && message.starts_with("IP address is ")
        {
            return MaasError::AddressUnavailable {
                operation,
                status,
                message,
            };
        }
        match status {
            401 => MaasError::Unauthorized { operation, message },
            403 => MaasError::Forbidden { operation, message },
            404 => MaasError::NotFound { operation, message },
            409 | 503 if retry_after.is_some() => MaasError::Transient {
                operation,
                cause: TransientCause::Status(status),
                message,
                retry_after,
                outcome_unknown: false,
                attempts: 1,
            },
            409 => MaasError::Conflict { operation, message },
            500..=599 => MaasError::Transient {
                operation,
                cause: TransientCause::Status(status),
                message,
                retry_after,
                outcome_unknown: false,
                attempts: 1,
            },
            _ => MaasError::BadRequest {
                operation,
                status,
                form_errors: if is_json {
                    parse_form_errors(body)
                } else {
                    FormErrors::new()
                },
                message,
            },
        }
    }
}

/// What classifies a non-2xx answer besides its body.
#[derive(Debug, Clone)]
pub(crate) struct ErrorAnswer<'a> {
    pub(crate) status: u16,
    pub(crate) endpoint: String,
    pub(crate) expected: &'static str,
    pub(crate) retry_after: Option<Duration>,
    pub(crate) content_type: Option<&'a str>,
    pub(crate) location: Option<&'a str>,
}

/// `title: text` of an HTML page, bounded: enough to recognise it, never the markup.
pub(crate) fn html_summary(body: &str) -> String {
    let lower = body.to_ascii_lowercase();
    let title = lower
        .find("<title>")
        .and_then(|start| {
            let from = start + "<title>".len();
            lower[from..]
                .find("</title>")
                .map(|end| &body[from..from + end])
        })
        .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "));
    // The visible text: markup dropped, whitespace collapsed.
    let body_start = lower.find("<body").unwrap_or(0);
    let mut text = String::new();
    let mut in_tag = false;
    for c in body[body_start..].chars() {
        match c {
            '<' => {
                in_tag = true;
                text.push(' ');
            }
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let summary = match (title, text.is_empty()) {
        (Some(title), false) if !text.starts_with(title.as_str()) => format!("{title}: {text}"),
        (Some(title), _) => title,
        (None, _) => text,
    };
    let summary: String = summary.chars().take(200).collect();
    if summary.is_empty() {
        "an empty HTML page".to_owned()
    } else {
        summary
    }
}

/// MAAS form errors: `{"field": ["msg", …]}`, or a bare list for errors without a field.
fn parse_form_errors(body: &str) -> FormErrors {
    let mut errors = FormErrors::new();
    let strings = |value: &serde_json::Value| -> Vec<String> {
        match value {
            serde_json::Value::Array(items) => items.iter().map(value_text).collect(),
            other => vec![value_text(other)],
        }
    };
    match serde_json::from_str::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(fields)) => {
            for (field, value) in &fields {
                errors.insert(field.clone(), strings(value));
            }
        }
        Ok(list @ serde_json::Value::Array(_)) => {
            errors.insert("__all__".to_owned(), strings(&list));
        }
        _ => {}
    }
    errors
}

fn value_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => bounded(text),
        other => bounded(&other.to_string()),
    }
}

/// At most [`MAX_MESSAGE_CHARS`] characters, marking the cut.
pub(crate) fn bounded(text: &str) -> String {
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        None => text.to_owned(),
        Some((cut, _)) => format!("{}… (truncated)", &text[..cut]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(status: u16, retry_after: Option<u64>, json: bool, body: &str) -> MaasError {
        let content_type = if json {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        };
        classify_typed(status, retry_after, content_type, body)
    }

    fn classify_typed(
        status: u16,
        retry_after: Option<u64>,
        content_type: &str,
        body: &str,
    ) -> MaasError {
        MaasError::from_status(
            "deploy",
            &ErrorAnswer {
                status,
                endpoint: "POST /MAAS/api/2.0/machines/4y3ha3/?op=deploy".to_owned(),
                expected: "a machine object",
                retry_after: retry_after.map(Duration::from_secs),
                content_type: Some(content_type),
                location: Some("https://maas.example/MAAS/api/2.0/machines/4y3ha3/"),
            },
            body,
        )
    }

    #[test]
    fn html_pages_and_redirects_name_the_endpoint_and_what_was_expected() {
        let conflict = "<!DOCTYPE html><html><head><title>Error: Conflict Error</title></head>\
            <body><h2>Conflict error. Try your request again, as it will most likely succeed.</h2></body></html>";
        let err = classify_typed(409, Some(5), "text/html; charset=utf-8", conflict);
        assert!(err.is_retryable(), "{err}");
        assert_eq!(
            err.maas_message(),
            "Error: Conflict Error: Conflict error. Try your request again, as it will most likely succeed."
        );
        let err = classify_typed(
            502,
            None,
            "text/html",
            "<html><title>502 Bad Gateway</title><body><h1>502 Bad Gateway</h1></body></html>",
        );
        assert!(err.is_retryable(), "{err}");
        assert_eq!(err.maas_message(), "502 Bad Gateway");
        let err = classify_typed(
            404,
            None,
            "text/html",
            "<html><body>Not Found</body></html>",
        );
        assert_eq!(
            err.to_string(),
            "MAAS deploy: unexpected answer from POST /MAAS/api/2.0/machines/4y3ha3/?op=deploy: \
             expected a machine object; got an HTML page (HTTP 404): Not Found"
        );
        let err = classify_typed(302, None, "text/html", "");
        assert_eq!(
            err.to_string(),
            "MAAS deploy: unexpected answer from POST /MAAS/api/2.0/machines/4y3ha3/?op=deploy: \
             expected a machine object; got a redirect (HTTP 302) to \
             https://maas.example/MAAS/api/2.0/machines/4y3ha3/"
        );
        assert!(!err.is_retryable());
    }

    #[test]
    fn conflicts_are_split_by_retry_after() {
        let violation = classify(
            409,
            None,
            false,
            "Can't deploy a machine that is in the 'Deployed' state",
        );
        assert!(matches!(violation, MaasError::Conflict { .. }));
        assert!(!violation.is_retryable());
        assert_eq!(
            violation.to_string(),
            "MAAS deploy: state conflict (409): Can't deploy a machine that is in the 'Deployed' state"
        );

        let busy = classify(409, Some(5), false, "");
        assert!(busy.is_retryable());
        assert!(busy.provably_not_applied());
        assert_eq!(busy.retry_after(), Some(Duration::from_secs(5)));
    }

    #[test]
    fn service_unavailable_without_retry_after_is_transient_but_not_provably_unapplied() {
        let err = classify(503, None, false, "Unable to allocate static IP");
        assert!(err.is_retryable());
        assert!(!err.provably_not_applied());
        let err = classify(503, Some(10), false, "No rack controllers");
        assert!(err.provably_not_applied());
        assert!(classify(500, None, false, "boom").is_retryable());
        assert!(classify(504, None, false, "").is_retryable());
    }

    #[test]
    fn form_errors_are_parsed_from_json_bodies() {
        let err = classify(
            400,
            None,
            true,
            r#"{"mode": ["Interface is already set to DHCP."], "subnet": ["This field is required."]}"#,
        );
        assert_eq!(
            err.to_string(),
            "MAAS deploy: bad request (400): mode: Interface is already set to DHCP.; \
             subnet: This field is required."
        );
        let fields = err.form_errors().unwrap();
        assert_eq!(fields["subnet"], vec!["This field is required."]);

        let err = classify(400, None, true, r#"["Only a list."]"#);
        assert_eq!(err.form_errors().unwrap()["__all__"], vec!["Only a list."]);

        let err = classify(
            400,
            None,
            false,
            "Unrecognised signature: method=POST op=foo",
        );
        assert_eq!(err.form_errors(), None);
        assert_eq!(
            err.maas_message(),
            "Unrecognised signature: method=POST op=foo"
        );
    }

    #[test]
    fn other_client_errors_are_bad_requests_with_their_status() {
        let err = classify(405, None, false, "");
        assert_eq!(err.status(), Some(405));
        assert_eq!(
            err.to_string(),
            "MAAS deploy: bad request (405): (no message)"
        );
    }

    #[test]
    fn messages_are_bounded() {
        let long = "x".repeat(MAX_MESSAGE_CHARS + 50);
        let err = classify(500, None, false, &long);
        assert_eq!(
            err.maas_message().len(),
            MAX_MESSAGE_CHARS + "… (truncated)".len()
        );
        // Never cut inside a character.
        let wide = "é".repeat(MAX_MESSAGE_CHARS + 1);
        assert!(bounded(&wide).starts_with(&"é".repeat(MAX_MESSAGE_CHARS)));
    }

    #[test]
    fn transient_display_names_cause_attempts_and_outcome() {
        let err = MaasError::Transient {
            operation: "deploy",
            cause: TransientCause::Timeout,
            message: String::new(),
            retry_after: None,
            outcome_unknown: true,
            attempts: 1,
        };
        assert_eq!(
            err.to_string(),
            "MAAS deploy: transient failure (timed out) after 1 attempt, outcome unknown"
        );
        assert!(err.is_outcome_unknown());
        assert!(err.hint().starts_with("MAAS may or may not have applied"));
    }
}
