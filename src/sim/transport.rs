//! Request decoding (API_REFERENCE.md §1 "Request bodies", DESIGN.md §9 python-libmaas notes):
//! query strings, urlencoded and multipart bodies — python-libmaas base64-encodes every
//! multipart part (`Content-Transfer-Encoding: base64`).

use base64::Engine;
use bytes::Bytes;

/// Request parameters in arrival order (names may repeat).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    pub fn new(pairs: Vec<(String, String)>) -> Self {
        Self { pairs }
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a repeatable parameter.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.pairs
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn contains(&self, name: &str) -> bool {
        self.pairs.iter().any(|(k, _)| k == name)
    }
}

/// Parses `a=1&b=2` (`+` as space, percent-decoding).
pub fn parse_urlencoded(text: &[u8]) -> Params {
    Params::new(
        url::form_urlencoded::parse(text)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect(),
    )
}

/// Why a body could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BodyError {
    #[error("Invalid multipart body: {0}")]
    Multipart(String),
}

/// Decodes a request body by its content type. Unknown content types carry no form fields
/// (a JSON body is not a substitute for form fields in MAAS).
pub async fn parse_body(content_type: Option<&str>, body: Bytes) -> Result<Params, BodyError> {
    let Some(content_type) = content_type else {
        return Ok(Params::default());
    };
    let mime = content_type.split(';').next().unwrap_or("").trim();
    if mime.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
        return Ok(parse_urlencoded(&body));
    }
    if !mime.eq_ignore_ascii_case("multipart/form-data") {
        return Ok(Params::default());
    }
    // An empty multipart message (python-libmaas sends one for a POST without parameters):
    // `--B\r\n\r\n--B--`, no part at all, which a strict parser calls incomplete.
    let has_parts = body
        .windows(b"content-disposition".len())
        .any(|w| w.eq_ignore_ascii_case(b"content-disposition"));
    if !has_parts {
        return Ok(Params::default());
    }
    let boundary =
        multer::parse_boundary(content_type).map_err(|e| BodyError::Multipart(e.to_string()))?;
    let stream = futures::stream::once(async move { Ok::<Bytes, std::io::Error>(body) });
    let mut multipart = multer::Multipart::new(stream, boundary);
    let mut pairs = Vec::new();
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) => return Err(BodyError::Multipart(e.to_string())),
        };
        let name = field.name().unwrap_or("").to_string();
        let base64 = field
            .headers()
            .get("content-transfer-encoding")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("base64"));
        let data = field
            .bytes()
            .await
            .map_err(|e| BodyError::Multipart(e.to_string()))?;
        let data = if base64 {
            let cleaned: Vec<u8> = data
                .iter()
                .copied()
                .filter(|b| !b.is_ascii_whitespace())
                .collect();
            base64::engine::general_purpose::STANDARD
                .decode(cleaned)
                .map_err(|e| BodyError::Multipart(format!("part `{name}`: {e}")))?
        } else {
            data.to_vec()
        };
        pairs.push((name, String::from_utf8_lossy(&data).into_owned()));
    }
    Ok(Params::new(pairs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn decodes_python_libmaas_multipart() {
        // The shape python-libmaas' email.mime generator produces.
        let body = "--===============1==\r\nContent-Type: application/octet-stream\r\nMIME-Version: 1.0\r\nContent-Transfer-Encoding: base64\r\nContent-Disposition: form-data; name=\"erase\"\r\n\r\ndHJ1ZQ==\r\n--===============1==\r\nContent-Type: text/plain; charset=\"utf-8\"\r\nMIME-Version: 1.0\r\nContent-Transfer-Encoding: base64\r\nContent-Disposition: form-data; name=\"comment\"\r\n\r\naMOpbGxv\r\n--===============1==--\r\n";
        let params = parse_body(
            Some("multipart/form-data; boundary=\"===============1==\""),
            Bytes::from(body),
        )
        .await
        .unwrap();
        assert_eq!(params.get("erase"), Some("true"));
        assert_eq!(params.get("comment"), Some("héllo"));
        let empty = parse_body(
            Some("multipart/form-data; boundary=\"===============27==\""),
            Bytes::from("--===============27==\r\n\r\n--===============27==--"),
        )
        .await
        .unwrap();
        assert_eq!(empty, Params::default());
    }

    #[tokio::test]
    async fn decodes_urlencoded_and_ignores_json() {
        let p = parse_body(
            Some("application/x-www-form-urlencoded"),
            Bytes::from("mac_addresses=a&mac_addresses=b&hostname=x+y"),
        )
        .await
        .unwrap();
        assert_eq!(p.all("mac_addresses"), vec!["a", "b"]);
        assert_eq!(p.get("hostname"), Some("x y"));
        let j = parse_body(Some("application/json"), Bytes::from("{\"a\":1}"))
            .await
            .unwrap();
        assert_eq!(j, Params::default());
        let bad = parse_body(
            Some("multipart/form-data; boundary=x"),
            Bytes::from("--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nno end"),
        )
        .await;
        assert!(bad.is_err());
    }
}
