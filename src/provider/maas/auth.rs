//! MAAS API keys and OAuth 1.0 PLAINTEXT signing (API_REFERENCE §2.1–2.3).
//!
//! A MAAS API key is `consumer_key:token_key:token_secret`; the consumer secret is always
//! empty, so the PLAINTEXT signature is `&<token_secret>`. Every request carries a fresh nonce
//! and the current timestamp (MAAS rejects reused nonces and timestamps older than 300 s).

use std::fmt;

use crate::sanitize::Redactor;
use crate::secrets::Secret;

use super::error::MaasError;

/// A parsed MAAS API key. The token secret stays a [`Secret`]; `Debug` shows only the consumer
/// key, which MAAS itself lists in its UI.
#[derive(Clone)]
pub struct ApiKey {
    consumer_key: String,
    token_key: Secret,
    token_secret: Secret,
    /// Masks the two token parts in whatever MAAS sends back.
    redactor: Redactor,
}

impl ApiKey {
    /// Parses `consumer_key:token_key:token_secret` (surrounding whitespace, e.g. the newline of
    /// a pasted key, is ignored). The error never contains the key.
    pub fn parse(key: &Secret) -> Result<Self, MaasError> {
        let parts: Vec<&str> = key.expose().trim().split(':').collect();
        if parts.len() != 3 {
            return Err(MaasError::Config {
                message: format!(
                    "the MAAS API key must have 3 colon-separated parts \
                     (consumer_key:token_key:token_secret), it has {}",
                    parts.len()
                ),
            });
        }
        if let Some(empty) = ["consumer_key", "token_key", "token_secret"]
            .iter()
            .zip(&parts)
            .find(|(_, part)| part.is_empty())
        {
            return Err(MaasError::Config {
                message: format!("the MAAS API key has an empty {}", empty.0),
            });
        }
        // MAAS issues 18- and 32-character token parts. A shorter one is no MAAS key, and
        // could not be told apart from ordinary text when masking it in messages.
        let mut redactor = Redactor::new();
        for (what, part) in [("token_key", parts[1]), ("token_secret", parts[2])] {
            redactor
                .add(&format!("the MAAS API key's {what}"), part)
                .map_err(|err| MaasError::Config {
                    message: err.to_string(),
                })?;
        }
        Ok(Self {
            consumer_key: parts[0].to_owned(),
            token_key: Secret::new(parts[1]),
            token_secret: Secret::new(parts[2]),
            redactor,
        })
    }

    pub fn consumer_key(&self) -> &str {
        &self.consumer_key
    }

    /// The `Authorization` header value for one request, signed with PLAINTEXT.
    pub(crate) fn authorization(&self, nonce: &str, timestamp: i64) -> Secret {
        // RFC 5849 §3.4.4: signature = encode(consumer_secret) "&" encode(token_secret), and
        // §3.5.1: each header value is encoded again. MAAS's consumer secret is empty.
        let signature = format!("&{}", oauth_encode(self.token_secret.expose()));
        let header = format!(
            "OAuth realm=\"\", oauth_version=\"1.0\", oauth_signature_method=\"PLAINTEXT\", \
             oauth_consumer_key=\"{}\", oauth_token=\"{}\", oauth_signature=\"{}\", \
             oauth_nonce=\"{}\", oauth_timestamp=\"{}\"",
            oauth_encode(&self.consumer_key),
            oauth_encode(self.token_key.expose()),
            oauth_encode(&signature),
            oauth_encode(nonce),
            timestamp,
        );
        Secret::new(header)
    }

    /// Replaces the key's secret parts in text that came back from MAAS (upstream piston echoes
    /// the expected signature in some 401 bodies) so that no error ever carries them.
    pub(crate) fn scrub(&self, text: &str) -> String {
        self.redactor.redact(text).into_owned()
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("consumer_key", &self.consumer_key)
            .field("token_key", &self.token_key)
            .field("token_secret", &self.token_secret)
            .finish()
    }
}

/// Percent-encoding of RFC 5849 §3.6: everything but ALPHA / DIGIT / `-` `.` `_` `~`.
pub(crate) fn oauth_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_parts_and_ignores_a_trailing_newline() {
        let key = ApiKey::parse(&Secret::new("ck:tokenkey1:tokensecret1\n")).unwrap();
        assert_eq!(key.consumer_key(), "ck");
        assert_eq!(key.token_key.expose(), "tokenkey1");
        assert_eq!(key.token_secret.expose(), "tokensecret1");
    }

    #[test]
    fn rejects_malformed_keys_without_echoing_them() {
        let err = ApiKey::parse(&Secret::new("only:two-parts-s3cret")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "MAAS client configuration: the MAAS API key must have 3 colon-separated parts \
             (consumer_key:token_key:token_secret), it has 2"
        );
        assert!(!format!("{err:?}").contains("s3cret"));
        let err = ApiKey::parse(&Secret::new("ck::s3cret")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "MAAS client configuration: the MAAS API key has an empty token_key"
        );
        // A one-letter part would be masked out of every message containing that letter.
        let err = ApiKey::parse(&Secret::new("ck:tokenkey1:s")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "MAAS client configuration: the MAAS API key's token_secret is 1 character(s) long: too short to be masked safely in messages (at least 8)"
        );
        assert!(!format!("{err:?}").contains(":s\""));
    }

    #[test]
    fn plaintext_signature_is_ampersand_secret() {
        let key = ApiKey::parse(&Secret::new("ck:tokenkey:tokensecret")).unwrap();
        let header = key.authorization("n1", 1_700_000_000);
        assert_eq!(
            header.expose(),
            "OAuth realm=\"\", oauth_version=\"1.0\", oauth_signature_method=\"PLAINTEXT\", \
             oauth_consumer_key=\"ck\", oauth_token=\"tokenkey\", oauth_signature=\"%26tokensecret\", \
             oauth_nonce=\"n1\", oauth_timestamp=\"1700000000\""
        );
    }

    #[test]
    fn reserved_characters_in_a_secret_are_encoded_twice_in_the_signature() {
        // Signature base `&a%2Bb` (encode once), then header encoding: `%26a%252Bb`.
        let key = ApiKey::parse(&Secret::new("ck:tokenkey:aaaa+bbb")).unwrap();
        assert!(
            key.authorization("n", 0)
                .expose()
                .contains("oauth_signature=\"%26aaaa%252Bbbb\"")
        );
    }

    #[test]
    fn debug_and_scrub_never_show_the_secret_parts() {
        let key = ApiKey::parse(&Secret::new("ck:tokenkey:tokensecret")).unwrap();
        let debug = format!("{key:?}");
        assert!(debug.contains("ck"));
        assert!(!debug.contains("tokensecret") && !debug.contains("tokenkey"));
        assert_eq!(
            key.scrub("expected &tokensecret for tokenkey"),
            "expected &*** for ***"
        );
    }

    #[test]
    fn oauth_encoding_keeps_only_unreserved_characters() {
        assert_eq!(oauth_encode("aZ09-._~"), "aZ09-._~");
        assert_eq!(oauth_encode("a b&c/é"), "a%20b%26c%2F%C3%A9");
    }
}
