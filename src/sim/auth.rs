//! OAuth 1.0 PLAINTEXT checking (API_REFERENCE.md §2.2–§2.4).
//!
//! Parameters come from the `Authorization: OAuth …` header or from query/form fields. A key
//! is `consumer:token:secret` with an empty consumer secret, so the PLAINTEXT signature is
//! `&<token secret>` (percent-encoded `%26<secret>` on the wire). Error texts are piston's;
//! the bad-signature text never echoes the expected secret.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::model::Caller;
use super::reply::MaasError;
use super::transport::Params;
use super::world::World;

/// Seconds a timestamp may lag behind the server's clock.
pub const TIMESTAMP_THRESHOLD: i64 = 300;

const REQUIRED: [&str; 6] = [
    "oauth_consumer_key",
    "oauth_token",
    "oauth_signature",
    "oauth_signature_method",
    "oauth_timestamp",
    "oauth_nonce",
];

/// OAuth parameters of a request, or `None` when it carries no OAuth at all.
pub fn oauth_params(
    header: Option<&str>,
    query: &Params,
    form: &Params,
) -> Option<BTreeMap<String, String>> {
    let mut found = BTreeMap::new();
    if let Some(rest) = header.and_then(|h| h.trim().strip_prefix("OAuth ")) {
        for item in rest.split(',') {
            let Some((key, value)) = item.trim().split_once('=') else {
                continue;
            };
            let key = key.trim();
            if key == "realm" {
                continue;
            }
            let value = value.trim().trim_matches('"');
            let decoded = percent_decode(value);
            found.insert(key.to_string(), decoded);
        }
    }
    for params in [query, form] {
        for (key, value) in params.pairs() {
            if key.starts_with("oauth_") {
                found
                    .entry(key.to_string())
                    .or_insert_with(|| value.to_string());
            }
        }
    }
    (!found.is_empty()).then_some(found)
}

fn percent_decode(text: &str) -> String {
    url::form_urlencoded::parse(format!("v={}", text.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

fn unauthorized(message: &str) -> MaasError {
    MaasError::Unauthorized(format!("Authorization Error: '{message}'"))
}

/// Checks the request's OAuth and returns who is calling.
pub fn authenticate(
    world: &mut World,
    oauth: Option<BTreeMap<String, String>>,
    now: DateTime<Utc>,
) -> Result<Caller, MaasError> {
    let Some(p) = oauth else {
        return Ok(Caller::Anonymous);
    };
    if let Some(missing) = REQUIRED.iter().find(|k| !p.contains_key(**k)) {
        return Err(MaasError::BadRequest(format!(
            "Bad Request: 'Missing OAuth parameters: {missing}'"
        )));
    }
    let consumer = &p["oauth_consumer_key"];
    let token = &p["oauth_token"];
    let user = world
        .users
        .iter()
        .find(|(_, key, _)| &key[0] == consumer)
        .map(|(name, key, admin)| {
            (
                Caller::User {
                    name: name.clone(),
                    admin: *admin,
                },
                key[1].clone(),
                key[2].clone(),
            )
        });
    // A user's key first; only then the machines' tokens (a walk over every machine).
    let node = || {
        world.machines.values().find_map(|m| {
            let t = m.token.as_ref()?;
            (&t.consumer_key == consumer).then(|| {
                (
                    Caller::Node {
                        system_id: m.system_id.clone(),
                    },
                    t.token_key.clone(),
                    t.token_secret.clone(),
                )
            })
        })
    };
    let Some((caller, token_key, secret)) = user.or_else(node) else {
        return Err(MaasError::Unauthorized(
            "Authorization Error: Invalid API key.".to_string(),
        ));
    };
    if token != &token_key {
        return Err(unauthorized(&format!("Invalid access token: {token}")));
    }
    if let Some(version) = p.get("oauth_version")
        && version != "1.0"
    {
        return Err(unauthorized(&format!(
            "OAuth version {version} not supported."
        )));
    }
    let timestamp: i64 = p["oauth_timestamp"].trim().parse().map_err(|_| {
        MaasError::BadRequest(format!(
            "Bad Request: 'Invalid timestamp: {}'",
            p["oauth_timestamp"]
        ))
    })?;
    let now_secs = now.timestamp();
    if now_secs - timestamp > TIMESTAMP_THRESHOLD {
        return Err(unauthorized(&format!(
            "Expired timestamp: given {timestamp} and now {now_secs} has a greater difference than threshold {TIMESTAMP_THRESHOLD}"
        )));
    }
    let method = p["oauth_signature_method"].as_str();
    if method != "PLAINTEXT" {
        return Err(unauthorized(&format!(
            "Signature method {method} not supported by the simulator; use PLAINTEXT."
        )));
    }
    // piston's PLAINTEXT check (§2.3): `escape(consumer_secret) + "&" + escape(token_secret)`
    // against the header value after one unescape, so the secret arrives percent-encoded.
    if p["oauth_signature"] != format!("&{}", escape(&secret)) {
        return Err(unauthorized("Invalid signature."));
    }
    let nonce_key = (consumer.clone(), token.clone(), p["oauth_nonce"].clone());
    if world.nonces.seen(&nonce_key) {
        return Err(unauthorized(&format!(
            "Nonce already used: {}",
            p["oauth_nonce"]
        )));
    }
    world
        .nonces
        .insert(nonce_key, timestamp, now_secs, TIMESTAMP_THRESHOLD);
    Ok(caller)
}

/// piston's `escape`: Python's `urllib.parse.quote(s, safe="~")`, i.e. every byte but
/// ALPHA / DIGIT / `_` `.` `-` `~` percent-encoded (the RFC 5849 §3.6 set).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'-' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Builds a PLAINTEXT `Authorization` header as oauthlib does (tests and the benchmark sign
/// with it): the signature `&escape(secret)`, every header value escaped again.
pub fn sign_header(api_key: &str, nonce: &str, timestamp: i64) -> String {
    let mut parts = api_key.splitn(3, ':');
    let consumer = escape(parts.next().unwrap_or(""));
    let token = escape(parts.next().unwrap_or(""));
    let signature = escape(&format!("&{}", escape(parts.next().unwrap_or(""))));
    let nonce = escape(nonce);
    format!(
        "OAuth realm=\"\", oauth_consumer_key=\"{consumer}\", oauth_token=\"{token}\", \
         oauth_signature_method=\"PLAINTEXT\", oauth_signature=\"{signature}\", \
         oauth_timestamp=\"{timestamp}\", oauth_nonce=\"{nonce}\", oauth_version=\"1.0\""
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_header_and_decodes_the_signature() {
        let header = sign_header("ck:tk:sec", "n1", 1000);
        let p = oauth_params(Some(&header), &Params::default(), &Params::default()).unwrap();
        assert_eq!(p["oauth_signature"], "&sec");
        assert_eq!(p["oauth_consumer_key"], "ck");
        assert!(!p.contains_key("realm"));
        assert!(oauth_params(None, &Params::default(), &Params::default()).is_none());
        // Reserved characters of the secret are escaped inside the signature and again in the
        // header: one unescape leaves `&` + escape(secret), what piston compares with.
        let header = sign_header("ck:tk:s+c/r=t~", "n2", 1000);
        assert!(
            header.contains("oauth_signature=\"%26s%252Bc%252Fr%253Dt~\""),
            "{header}"
        );
        let p = oauth_params(Some(&header), &Params::default(), &Params::default()).unwrap();
        assert_eq!(p["oauth_signature"], "&s%2Bc%2Fr%3Dt~");
    }

    #[test]
    fn nonces_are_forgotten_only_past_the_limit_and_only_once_too_old_to_replay() {
        const KEPT: usize = super::super::world::Nonces::KEPT;
        let key = |n: usize| ("ck".to_string(), "tk".to_string(), format!("n{n}"));
        let mut nonces = super::super::world::Nonces::default();
        for n in 0..KEPT {
            nonces.insert(key(n), 1_000, 1_000, TIMESTAMP_THRESHOLD);
        }
        // At the limit nothing is forgotten, even what is too old to be replayed.
        nonces.insert(key(KEPT), 1_200, 1_350, TIMESTAMP_THRESHOLD);
        assert!(nonces.seen(&key(0)) && nonces.seen(&key(KEPT)));
        // Past it, the nonces too old to be accepted again are forgotten, and only those.
        nonces.insert(key(usize::MAX), 1_250, 1_400, TIMESTAMP_THRESHOLD);
        assert!(!nonces.seen(&key(0)) && !nonces.seen(&key(KEPT - 1)));
        assert!(nonces.seen(&key(KEPT)) && nonces.seen(&key(usize::MAX)));
        assert_eq!(nonces.len(), 2);
    }
}
