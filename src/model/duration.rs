//! Policy durations (seed 000 §3.6 `hardware_sync_interval '15m'`, §4.14 timeouts): written as
//! `15m`, `2h`, `1h30m`, `90s`, `500ms` or `1d` in manifests, held as `std::time::Duration`.

use std::fmt;
use std::time::Duration;

/// Why a duration string was refused; the message is shown to the operator as is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("a duration cannot be empty")]
    Empty,
    #[error(
        "`{0}` is not a duration: expected a number followed by a unit (ms, s, m, h, d), e.g. 15m or 1h30m"
    )]
    Malformed(String),
    #[error("`{0}` has unit `{1}`: use ms, s, m, h or d")]
    UnknownUnit(String, String),
    #[error("`{0}` is zero: a policy duration must be positive")]
    Zero(String),
    #[error("`{0}` is too large")]
    Overflow(String),
}

/// Parse `15m`, `1h30m`, `90s`, `500ms`, `2d`. Units may repeat in any order (`1h30m` or
/// `30m1h`), but the total must be positive.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let malformed = || DurationError::Malformed(text.to_string());
    let mut total_ms: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(malformed());
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| DurationError::Overflow(text.to_string()))?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        if unit_len == 0 {
            return Err(malformed());
        }
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let unit_ms: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            other => return Err(DurationError::UnknownUnit(text.to_string(), other.into())),
        };
        total_ms = number
            .checked_mul(unit_ms)
            .and_then(|ms| total_ms.checked_add(ms))
            .ok_or_else(|| DurationError::Overflow(text.to_string()))?;
    }
    if total_ms == 0 {
        return Err(DurationError::Zero(text.to_string()));
    }
    Ok(Duration::from_millis(total_ms))
}

/// Canonical text of a duration, largest units first: `1h30m`, `15m`, `500ms`.
pub fn format(duration: Duration) -> String {
    struct Canonical(Duration);
    impl fmt::Display for Canonical {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let mut ms = self.0.as_millis();
            if ms == 0 {
                return f.write_str("0s");
            }
            for (unit, size) in [
                ("d", 86_400_000u128),
                ("h", 3_600_000),
                ("m", 60_000),
                ("s", 1_000),
                ("ms", 1),
            ] {
                if ms >= size {
                    write!(f, "{}{unit}", ms / size)?;
                    ms %= size;
                }
            }
            Ok(())
        }
    }
    Canonical(duration).to_string()
}

/// `#[serde(serialize_with = "duration::serialize")]`: durations leave the model as their
/// canonical text so JSON output reads like the manifests.
pub fn serialize<S: serde::Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format(*value))
}

/// `#[serde(deserialize_with = "duration::deserialize")]`: the text [`serialize`] writes (plan
/// files carry model values).
pub fn deserialize<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(deserializer)?;
    parse(&text).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats_canonically() {
        for (text, secs, canonical) in [
            ("15m", 900, "15m"),
            ("2h", 7200, "2h"),
            ("1h30m", 5400, "1h30m"),
            ("90m", 5400, "1h30m"),
            ("30m1h", 5400, "1h30m"),
            ("1d", 86_400, "1d"),
            ("45s", 45, "45s"),
        ] {
            let parsed = parse(text).unwrap();
            assert_eq!(parsed, Duration::from_secs(secs), "{text}");
            assert_eq!(format(parsed), canonical, "{text}");
        }
        assert_eq!(format(parse("1500ms").unwrap()), "1s500ms");
    }

    #[test]
    fn refuses_what_is_not_a_duration() {
        assert_eq!(parse(""), Err(DurationError::Empty));
        assert_eq!(parse("15"), Err(DurationError::Malformed("15".into())));
        assert_eq!(parse("m15"), Err(DurationError::Malformed("m15".into())));
        assert_eq!(parse("1 h"), Err(DurationError::Malformed("1 h".into())));
        assert_eq!(
            parse("15min"),
            Err(DurationError::UnknownUnit("15min".into(), "min".into()))
        );
        assert_eq!(parse("0s"), Err(DurationError::Zero("0s".into())));
        assert!(matches!(
            parse("99999999999999999999d"),
            Err(DurationError::Overflow(_))
        ));
        assert_eq!(
            parse("15x").unwrap_err().to_string(),
            "`15x` has unit `x`: use ms, s, m, h or d"
        );
    }
}
