//! The redacting secret value (seed 000 §3.2: "secrets are never stored in the database").
//!
//! Built on `secrecy`: the value is zeroized when dropped, and `Debug`, `Display` and
//! `Serialize` all write `<redacted>`, so a secret cannot end up in a log, JSON, a plan file or
//! an API answer by accident — writing the value out takes an explicit [`Secret::expose`]. It
//! deserializes (secret files and Vault answers are read into it).

use std::fmt;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A secret string. Redacted in `Debug`, `Display` and `Serialize`; compare and clone freely.
#[derive(Clone)]
pub struct Secret(SecretString);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(SecretString::from(value.into()))
    }

    /// The plain value. Call only where it leaves the process on purpose (an HTTP header, a
    /// rendered payload the operator asked to see).
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    pub fn is_empty(&self) -> bool {
        self.expose().is_empty()
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for Secret {}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Writes `<redacted>`: a struct holding a secret serializes without leaking it.
impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str("<redacted>")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret::new)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self::new(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_the_value() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s}"), "<redacted>");
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        assert_eq!(format!("{:?}", vec![s.clone()]), "[Secret(<redacted>)]");
        assert_eq!(s.expose(), "hunter2");
        assert_eq!(s, Secret::from("hunter2"));
        assert_ne!(s, Secret::from("hunter3"));
    }

    #[test]
    fn reads_from_json_and_writes_only_redacted() {
        let s: Secret = serde_json::from_str("\"hunter2\"").unwrap();
        assert_eq!(s.expose(), "hunter2");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"<redacted>\"");
        assert_eq!(
            serde_json::json!({"token": s}).to_string(),
            r#"{"token":"<redacted>"}"#
        );
    }
}
