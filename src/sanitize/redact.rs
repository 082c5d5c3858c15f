//! Credentials out of everything shown (issue 16 point 2). Two mechanisms, used together:
//!
//! * **Shapes**: a URL's userinfo (`https://deploy:hunter2@git.example/…`) and the values of
//!   query parameters that carry credentials (`?token=…`, `&X-Amz-Signature=…`) are masked
//!   wherever a URL appears — a configured URL shown on its own ([`url`]) or one inside an
//!   error message or a log line ([`text`]). `Bearer …` and `Basic …` credentials are masked
//!   too. This needs no knowledge of the secret.
//! * **Known values**: a [`Redactor`] holds secret values read at run time (a MAAS key's token
//!   parts, the fleet's git token) and masks them where they appear as a whole value — never
//!   inside a longer word, so a secret that happens to be `a` does not garble every message.
//!   A secret shorter than [`MIN_SECRET_LEN`] cannot be masked safely that way and is refused.

use std::borrow::Cow;

/// What stands in for a masked value.
pub const MASK: &str = "***";

/// The shortest secret a [`Redactor`] takes: shorter values occur by chance in ordinary text.
pub const MIN_SECRET_LEN: usize = 8;

/// Query parameters whose value is a credential (compared case-insensitively).
const SECRET_PARAMS: &[&str] = &[
    "access_token",
    "api_key",
    "apikey",
    "auth",
    "authorization",
    "client_secret",
    "code",
    "credential",
    "key",
    "pass",
    "passwd",
    "password",
    "private_token",
    "pwd",
    "secret",
    "session",
    "sig",
    "signature",
    "token",
    "x-amz-credential",
    "x-amz-security-token",
    "x-amz-signature",
    "x-goog-credential",
    "x-goog-signature",
];

/// Name fragments that mark a parameter as a credential (`webhook_token`, `db_password`).
const SECRET_FRAGMENTS: &[&str] = &["token", "secret", "password", "signature", "apikey"];

fn is_secret_param(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_PARAMS.contains(&name.as_str()) || SECRET_FRAGMENTS.iter().any(|f| name.contains(f))
}

/// A URL fit to show: userinfo replaced by `***`, secret query values by `***`. Works on
/// text that does not parse as a URL too (it is string surgery, not a parse).
pub fn url(value: &str) -> String {
    let Some(scheme_end) = value.find("://") else {
        return value.to_owned();
    };
    let authority_start = scheme_end + 3;
    let rest = &value[authority_start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_len];
    let mut out = String::with_capacity(value.len());
    out.push_str(&value[..authority_start]);
    match authority.rfind('@') {
        Some(at) => {
            out.push_str(MASK);
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    let tail = &rest[authority_len..];
    let Some(query_start) = tail.find('?') else {
        out.push_str(tail);
        return out;
    };
    out.push_str(&tail[..=query_start]);
    let query_and_fragment = &tail[query_start + 1..];
    let query_len = query_and_fragment
        .find('#')
        .unwrap_or(query_and_fragment.len());
    let pairs: Vec<String> = query_and_fragment[..query_len]
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if is_secret_param(name) && !value.is_empty() => {
                format!("{name}={MASK}")
            }
            _ => pair.to_owned(),
        })
        .collect();
    out.push_str(&pairs.join("&"));
    out.push_str(&query_and_fragment[query_len..]);
    out
}

/// Where a URL embedded in free text ends.
fn ends_url(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`' | ')' | ']' | '}' | ',')
}

/// Free text (an error message, a log line) with every URL in it passed through [`url`] and
/// `Bearer`/`Basic` credentials masked.
pub fn text(value: &str) -> Cow<'_, str> {
    if !value.contains("://") && !value.contains("Bearer ") {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(sep) = rest.find("://") {
        // The scheme: letters, digits, `+`, `-`, `.` before `://`.
        let scheme_start = rest[..sep]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let end = rest[sep + 3..]
            .find(ends_url)
            .map_or(rest.len(), |i| sep + 3 + i);
        out.push_str(&rest[..scheme_start]);
        out.push_str(&url(&rest[scheme_start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    Cow::Owned(mask_auth_schemes(&out))
}

/// Characters of an HTTP credential (token68).
fn is_credential_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~' | '+' | '/' | '=')
}

/// `Authorization: Basic <credential>` and `Bearer <credential>` (at least 8 characters, so
/// prose saying "bearer token" is left alone) with the credential masked.
fn mask_auth_schemes(value: &str) -> String {
    let mut out = value.to_owned();
    for scheme in ["Authorization: Basic ", "Bearer "] {
        let mut searched = 0;
        while let Some(found) = out[searched..].find(scheme) {
            let start = searched + found + scheme.len();
            let end = out[start..]
                .find(|c: char| !is_credential_char(c))
                .map_or(out.len(), |i| start + i);
            if end - start >= MIN_SECRET_LEN {
                out.replace_range(start..end, MASK);
                searched = start + MASK.len();
            } else {
                searched = end;
            }
        }
    }
    out
}

/// A log writer that masks credentials in everything written through it (URL userinfo,
/// secret query parameters, `Bearer` credentials): the one path every log line takes.
#[derive(Debug)]
pub struct RedactingWriter<W>(pub W);

impl<W: std::io::Write> std::io::Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The log formatter hands over one whole event per write.
        match std::str::from_utf8(buf) {
            Ok(line) => self.0.write_all(text(line).as_bytes())?,
            Err(_) => self.0.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Why a secret cannot be masked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedactError {
    #[error(
        "{what} is {len} character(s) long: too short to be masked safely in messages (at least {MIN_SECRET_LEN})"
    )]
    TooShort { what: String, len: usize },
}

/// Known secret values, masked where they appear whole.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Longest first, so a secret containing another is masked whole.
    secrets: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

/// A character that continues a token (base64url, hex, words): a secret is masked only where
/// the characters around it are not such.
fn continues_token(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-')
}

impl Redactor {
    pub fn new() -> Self {
        Self::default()
    }

    /// Mask `secret` from now on; `what` names it in the refusal (never the value).
    pub fn add(&mut self, what: &str, secret: &str) -> Result<(), RedactError> {
        let len = secret.chars().count();
        if len < MIN_SECRET_LEN {
            return Err(RedactError::TooShort {
                what: what.to_owned(),
                len,
            });
        }
        if !self.secrets.iter().any(|s| s == secret) {
            self.secrets.push(secret.to_owned());
            self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        }
        Ok(())
    }

    /// `value` with each known secret masked where it stands whole, then [`text`].
    pub fn redact<'a>(&self, value: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(value);
        for secret in &self.secrets {
            if !out.contains(secret.as_str()) {
                continue;
            }
            let mut masked = String::with_capacity(out.len());
            let mut rest: &str = &out;
            while let Some(at) = rest.find(secret.as_str()) {
                let before = rest[..at].chars().next_back();
                let after = rest[at + secret.len()..].chars().next();
                let whole =
                    !before.is_some_and(continues_token) && !after.is_some_and(continues_token);
                masked.push_str(&rest[..at]);
                masked.push_str(if whole { MASK } else { secret });
                rest = &rest[at + secret.len()..];
            }
            masked.push_str(rest);
            out = Cow::Owned(masked);
        }
        match text(&out) {
            Cow::Borrowed(_) => out,
            Cow::Owned(shown) => Cow::Owned(shown),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn urls_lose_userinfo_and_secret_parameters() {
        assert_eq!(
            url("https://deploy:hunter2@git.example/fleet.git"),
            "https://***@git.example/fleet.git"
        );
        assert_eq!(
            url("http://admin:pw@10.0.0.1:5240/MAAS"),
            "http://***@10.0.0.1:5240/MAAS"
        );
        assert_eq!(
            url("https://hooks.example/in?team=ops&token=abc123&X-Amz-Signature=f00#frag"),
            "https://hooks.example/in?team=ops&token=***&X-Amz-Signature=***#frag"
        );
        assert_eq!(
            url("https://hooks.example/in?webhook_token=x&page=2"),
            "https://hooks.example/in?webhook_token=***&page=2"
        );
        assert_eq!(
            url("postgres://metalform:p@ss@db:5432/m?sslmode=verify-full"),
            "postgres://***@db:5432/m?sslmode=verify-full"
        );
        assert_eq!(
            url("https://maas.example:5443/MAAS"),
            "https://maas.example:5443/MAAS"
        );
        assert_eq!(url("not a url"), "not a url");
    }

    #[test]
    fn urls_inside_messages_and_auth_headers_are_masked() {
        assert_eq!(
            text("error sending request for url (https://hooks.example/x?token=s3cr3t): timed out"),
            "error sending request for url (https://hooks.example/x?token=***): timed out"
        );
        assert_eq!(
            text("fetch \"https://u:p@git.example/f.git\" failed"),
            "fetch \"https://***@git.example/f.git\" failed"
        );
        assert_eq!(
            text("Authorization: Bearer abc.def-ghi, then Authorization: Basic dXNlcjpwdw=="),
            "Authorization: Bearer ***, then Authorization: Basic ***"
        );
        assert!(matches!(text("nothing here"), Cow::Borrowed(_)));
        assert_eq!(
            text("Basic setup uses a Bearer token"),
            "Basic setup uses a Bearer token"
        );
    }

    #[test]
    fn known_secrets_are_masked_as_whole_values_only() {
        let mut redactor = Redactor::new();
        redactor.add("token_secret", "Zq8kLm2Pw9").unwrap();
        assert_eq!(
            redactor.redact("expected &Zq8kLm2Pw9 got xZq8kLm2Pw9 and Zq8kLm2Pw9."),
            "expected &*** got xZq8kLm2Pw9 and ***."
        );
        // A one-letter "secret" is refused instead of garbling every message with an `a`.
        assert_eq!(
            redactor.add("token_key", "a").unwrap_err().to_string(),
            "token_key is 1 character(s) long: too short to be masked safely in messages (at least 8)"
        );
        assert_eq!(redactor.redact("a cat sat"), "a cat sat");
    }

    proptest! {
        #[test]
        fn a_secret_standing_alone_never_survives(
            secret in "[A-Za-z0-9_-]{8,24}",
            before in "[ :&=(\"/]{0,2}",
            after in "[ :&)\".,;]{0,2}",
        ) {
            let mut redactor = Redactor::new();
            redactor.add("s", &secret).unwrap();
            let line = format!("x{before}{secret}{after}y");
            let shown = redactor.redact(&line);
            prop_assert!(before.is_empty() || after.is_empty() || !shown.contains(&secret), "{}", shown);
        }

        #[test]
        fn userinfo_never_survives(user in "[a-z]{1,8}", pass in "[A-Za-z0-9!$%*+]{6,16}", host in "[a-z]{1,10}\\.example") {
            let line = format!("failed: https://{user}:{pass}@{host}/x?token={pass}");
            let shown = text(&line);
            prop_assert!(!shown.contains(&pass), "{}", shown);
        }
    }
}
