//! MAAS's answers: JSON bodies as piston emits them and the error classes of
//! API_REFERENCE.md §1 ("Error bodies"), each with its status, content type and headers.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;
use serde_json::ser::Formatter;

/// A successful answer.
#[derive(Debug)]
pub enum Reply {
    /// `application/json; charset=utf-8`, piston's indent-4 rendering.
    Json(Vec<u8>),
    /// The same, as the pieces of one document sent one after the other without being joined
    /// (a machines list is its machines' cached renderings), with their total length as
    /// `Content-Length`.
    JsonParts(Vec<Bytes>),
    /// The same, already rendered (a machine's kept rendering).
    Rendered(Bytes),
    /// `200 OK` text/plain (`rc.ALL_OK`, e.g. set_boot_disk).
    AllOk,
    /// `204` empty (`rc.DELETED`).
    Deleted,
}

impl Reply {
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Reply {
        Reply::Json(to_piston_json(value))
    }
}

/// piston's JSON emitter: `json.dumps(..., indent=4)`.
pub fn to_piston_json<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(4096);
    write_piston_json(&mut out, value, 0);
    out
}

/// Appends `value` as piston renders it when it sits `level` containers deep in a document:
/// its inner lines indented by `4 × (level + 1)` spaces, its closing bracket by `4 × level`,
/// its first line not indented (the container puts it after its own indentation).
pub fn write_piston_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T, level: usize) {
    let start = out.len();
    let mut ser = serde_json::Serializer::with_formatter(&mut *out, PistonFormatter::at(level));
    // Serialising our own view types cannot fail (no maps with non-string keys).
    if value.serialize(&mut ser).is_err() {
        out.truncate(start);
        out.extend_from_slice(b"null");
    }
}

/// Python's `json.dumps(indent=4)` layout (serde_json's `PrettyFormatter` with four spaces),
/// able to start inside a container so a list element can be rendered on its own.
struct PistonFormatter {
    level: usize,
    has_value: bool,
}

impl PistonFormatter {
    fn at(level: usize) -> Self {
        Self {
            level,
            has_value: false,
        }
    }

    fn indent<W: ?Sized + std::io::Write>(&self, writer: &mut W) -> std::io::Result<()> {
        const SPACES: &[u8; 64] = &[b' '; 64];
        let mut left = self.level * 4;
        while left > 0 {
            let n = left.min(SPACES.len());
            writer.write_all(&SPACES[..n])?;
            left -= n;
        }
        Ok(())
    }

    fn open<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.level += 1;
        self.has_value = false;
        writer.write_all(bracket)
    }

    fn close<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.level -= 1;
        if self.has_value {
            writer.write_all(b"\n")?;
            self.indent(writer)?;
        }
        writer.write_all(bracket)
    }

    fn entry<W: ?Sized + std::io::Write>(
        &self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        writer.write_all(if first { b"\n" } else { b",\n" })?;
        self.indent(writer)
    }
}

impl Formatter for PistonFormatter {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open(writer, b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close(writer, b"]")
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.entry(writer, first)
    }

    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open(writer, b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close(writer, b"}")
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.entry(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// Form errors: `{"field": ["message", …]}`.
pub type FormErrors = BTreeMap<String, Vec<String>>;

/// A MAAS error answer.
#[derive(Debug, Clone, PartialEq)]
pub enum MaasError {
    /// 400 text/plain (`MAASAPIBadRequest`).
    BadRequest(String),
    /// 400 application/json (`MAASAPIValidationError` of a form).
    Form(FormErrors),
    /// 401 with `WWW-Authenticate: OAuth realm="OAuth"`.
    Unauthorized(String),
    /// 403 text/plain (often empty).
    Forbidden(String),
    /// 404 text/plain.
    NotFound(String),
    /// 405 with `Allow`.
    MethodNotAllowed(Vec<&'static str>),
    /// 409 text/plain, no Retry-After (`NodeStateViolation` and friends): not retryable.
    Conflict(String),
    /// 500 text/plain.
    Internal(String),
    /// 503 text/plain.
    Unavailable(String),
    /// Any status with optional Retry-After (injected faults).
    Status {
        status: u16,
        message: String,
        retry_after: Option<u64>,
    },
    /// An HTML page: MAAS's serialization-conflict page (409, `Retry-After: 5`), or what a
    /// proxy or login page in front of MAAS answers.
    Page {
        status: u16,
        html: String,
        retry_after: Option<u64>,
        location: Option<String>,
    },
}

impl MaasError {
    /// One form error.
    pub fn field(name: &str, message: impl Into<String>) -> MaasError {
        MaasError::Form(BTreeMap::from([(name.to_string(), vec![message.into()])]))
    }

    /// `{"__all__": [message]}`.
    pub fn all(message: impl Into<String>) -> MaasError {
        MaasError::field("__all__", message)
    }

    pub fn status(&self) -> u16 {
        match self {
            MaasError::BadRequest(_) | MaasError::Form(_) => 400,
            MaasError::Unauthorized(_) => 401,
            MaasError::Forbidden(_) => 403,
            MaasError::NotFound(_) => 404,
            MaasError::MethodNotAllowed(_) => 405,
            MaasError::Conflict(_) => 409,
            MaasError::Internal(_) => 500,
            MaasError::Unavailable(_) => 503,
            MaasError::Status { status, .. } | MaasError::Page { status, .. } => *status,
        }
    }

    /// "No Machine matches the given query."
    pub fn no_machine() -> MaasError {
        MaasError::NotFound("No Machine matches the given query.".to_string())
    }
}

const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json; charset=utf-8";

fn with_type(status: u16, content_type: &str, body: impl Into<Body>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body.into()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(content_type).unwrap_or(HeaderValue::from_static(TEXT)),
    );
    response
}

impl Reply {
    pub fn into_response(self) -> Response {
        match self {
            Reply::Json(body) => with_type(200, JSON, body),
            Reply::Rendered(body) => with_type(200, JSON, body),
            Reply::JsonParts(parts) => {
                let length: usize = parts.iter().map(Bytes::len).sum();
                let body = Body::from_stream(futures::stream::iter(
                    parts.into_iter().map(Ok::<_, std::convert::Infallible>),
                ));
                let mut response = (StatusCode::OK, body).into_response();
                let headers = response.headers_mut();
                headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
                // hyper sends a body of unknown size chunked unless told its length.
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
                response
            }
            Reply::AllOk => with_type(200, TEXT, b"OK".to_vec()),
            Reply::Deleted => StatusCode::NO_CONTENT.into_response(),
        }
    }
}

impl MaasError {
    pub fn into_response(self) -> Response {
        let status = self.status();
        match self {
            MaasError::Form(errors) => with_type(
                status,
                JSON,
                serde_json::to_vec(&errors).unwrap_or_default(),
            ),
            MaasError::Unauthorized(message) => {
                let mut response = with_type(status, TEXT, message.into_bytes());
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("OAuth realm=\"OAuth\""),
                );
                response
            }
            MaasError::MethodNotAllowed(allow) => {
                let mut response = with_type(status, TEXT, Vec::new());
                if let Ok(value) = HeaderValue::from_str(&allow.join(", ")) {
                    response.headers_mut().insert(header::ALLOW, value);
                }
                response
            }
            MaasError::Status {
                message,
                retry_after,
                ..
            } => {
                let mut response = with_type(status, TEXT, message.into_bytes());
                if let Some(secs) = retry_after {
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
                }
                response
            }
            MaasError::Page {
                html,
                retry_after,
                location,
                ..
            } => {
                let mut response = with_type(status, "text/html; charset=utf-8", html.into_bytes());
                if let Some(secs) = retry_after {
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
                }
                if let Some(location) = location.and_then(|l| HeaderValue::from_str(&l).ok()) {
                    response.headers_mut().insert(header::LOCATION, location);
                }
                response
            }
            MaasError::BadRequest(m)
            | MaasError::Forbidden(m)
            | MaasError::NotFound(m)
            | MaasError::Conflict(m)
            | MaasError::Internal(m)
            | MaasError::Unavailable(m) => with_type(status, TEXT, m.into_bytes()),
        }
    }
}

/// MAAS's `409.html` (src/maasserver/templates/409.html), sent with every serialization
/// conflict (`HttpResponseConflict`).
pub const CONFLICT_PAGE: &str = "<!DOCTYPE html PUBLIC \"-//W3C//DTD XHTML 1.0 Transitional//EN\" \"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd\">
<html xmlns=\"http://www.w3.org/1999/xhtml\" xml:lang=\"en\" lang=\"en\">
  <head>
    <title>Error: Conflict Error</title>
  </head>
  <body>
    <h2 class=\"p-heading--four\">
      Conflict error. Try your request again, as it will most likely succeed.
    </h2>
  </body>
</html>
";

/// Django `BooleanField` (CheckboxInput): only "true"/"false" are special, anything else is
/// Python truthiness — so `"0"` is **true** (API_REFERENCE.md §5.10 gotcha).
pub fn django_bool(value: Option<&str>) -> bool {
    match value {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        Some(v) => !v.is_empty(),
    }
}

/// formencode `StringBool`: true/false/1/0/yes/no/on/off, else a form error.
pub fn string_bool(field: &str, value: Option<&str>, default: bool) -> Result<bool, MaasError> {
    match value.map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) if v.is_empty() => Ok(default),
        Some(v) => match v.as_str() {
            "true" | "1" | "yes" | "on" | "t" | "y" => Ok(true),
            "false" | "0" | "no" | "off" | "f" | "n" => Ok(false),
            _ => Err(MaasError::field(
                field,
                format!("Value should be 'true' or 'false' (got '{v}')"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_follow_django_and_formencode() {
        assert!(
            django_bool(Some("0")),
            "Django's BooleanField reads \"0\" as true"
        );
        assert!(!django_bool(Some("False")));
        assert!(!django_bool(Some("")));
        assert!(!django_bool(None));
        assert_eq!(string_bool("x", Some("0"), true), Ok(false));
        assert_eq!(string_bool("x", None, true), Ok(true));
        assert!(string_bool("x", Some("maybe"), false).is_err());
    }

    #[test]
    fn an_element_rendered_alone_fits_the_indented_document() {
        let element = serde_json::json!({
            "a": [1, {"b": [], "c": {}}, [[]]],
            "d": {"e": null, "f": "x\ny"},
            "g": []
        });
        let document = serde_json::json!([element, element]);
        // serde_json's own four-space layout is Python's `indent=4` one.
        let mut expected = Vec::new();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut expected, formatter);
        document.serialize(&mut ser).unwrap();
        assert_eq!(to_piston_json(&document), expected);
        let mut one = Vec::new();
        write_piston_json(&mut one, &element, 1);
        let spliced = [b"[\n    ".as_slice(), &one, b",\n    ", &one, b"\n]"].concat();
        assert_eq!(
            String::from_utf8(spliced).unwrap(),
            String::from_utf8(expected).unwrap()
        );
    }

    #[test]
    fn json_is_indented_like_piston() {
        let body = to_piston_json(&serde_json::json!({"a": [1]}));
        assert_eq!(
            String::from_utf8(body).unwrap(),
            "{\n    \"a\": [\n        1\n    ]\n}"
        );
    }
}
