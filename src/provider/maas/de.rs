//! Serde helpers for MAAS documents (API_REFERENCE §1 "Datetimes", §3.3 "Variability seen in
//! real captures"): nulls where a list or string is expected, timestamps with or without a
//! zone, the events `created` format.

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::{Deserialize, Deserializer};

/// `null` (or a missing field, with `#[serde(default)]`) reads as the type's default.
pub(crate) fn null_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// `null` and `""` both read as `None` (MAAS uses either for "not set": `gateway_ip`,
/// `min_hwe_kernel`, `hwe_kernel`).
pub(crate) fn empty_as_none<'de, D>(deserializer: D) -> Result<Option<String>, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(Option::<String>::deserialize(deserializer)?.filter(|s| !s.is_empty()))
}

/// A boolean that some captures spell as a string (`"authoritative": "true"` in gomaasapi's
/// domain capture); `null` reads as `None`.
pub(crate) fn opt_lenient_bool<'de, D>(deserializer: D) -> Result<Option<bool>, D::Error>
where
    D: Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum BoolOrText {
        Bool(bool),
        Text(String),
    }
    match Option::<BoolOrText>::deserialize(deserializer)? {
        None => Ok(None),
        Some(BoolOrText::Bool(value)) => Ok(Some(value)),
        Some(BoolOrText::Text(text)) => match text.to_ascii_lowercase().as_str() {
            "true" => Ok(Some(true)),
            "false" => Ok(Some(false)),
            _ => Err(serde::de::Error::custom(format!(
                "{text:?} is not a boolean"
            ))),
        },
    }
}

/// A MAAS datetime: `2023-05-11T21:15:04.208` (≤ 3.5, naive, taken as UTC),
/// `2023-05-11T21:15:04.208Z` or `…+00:00` (3.6+), `null` or `""`.
pub(crate) fn opt_datetime<'de, D>(deserializer: D) -> Result<Option<DateTime<Utc>>, D::Error>
where
    D: Deserializer<'de>,
{
    match Option::<String>::deserialize(deserializer)? {
        None => Ok(None),
        Some(text) if text.is_empty() => Ok(None),
        Some(text) => parse_datetime(&text).map(Some).ok_or_else(|| {
            serde::de::Error::custom(format!("unrecognised MAAS datetime {text:?}"))
        }),
    }
}

pub(crate) fn parse_datetime(text: &str) -> Option<DateTime<Utc>> {
    if let Ok(aware) = DateTime::parse_from_rfc3339(text) {
        return Some(aware.with_timezone(&Utc));
    }
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
        .map(|naive| naive.and_utc())
}

/// The events `created` field: `strftime("%a, %d %b. %Y %H:%M:%S")`, no zone (UTC from 3.6).
pub(crate) fn parse_event_time(text: &str) -> Option<DateTime<Utc>> {
    NaiveDateTime::parse_from_str(text, "%a, %d %b. %Y %H:%M:%S")
        .ok()
        .map(|naive| naive.and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_with_and_without_zone() {
        let expected = "2023-05-11T21:15:04.208Z";
        for text in [
            "2023-05-11T21:15:04.208",
            "2023-05-11T21:15:04.208Z",
            "2023-05-11T21:15:04.208+00:00",
            "2023-05-11 21:15:04.208",
        ] {
            assert_eq!(
                parse_datetime(text)
                    .unwrap()
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                expected,
                "{text}"
            );
        }
        assert_eq!(
            parse_datetime("2023-05-11T23:15:04+02:00").unwrap(),
            parse_datetime("2023-05-11T21:15:04").unwrap()
        );
        assert_eq!(parse_datetime("yesterday"), None);
    }

    #[test]
    fn lenient_booleans() {
        #[derive(Deserialize)]
        struct B {
            #[serde(default, deserialize_with = "opt_lenient_bool")]
            b: Option<bool>,
        }
        let read = |json: &str| serde_json::from_str::<B>(json).map(|b| b.b);
        assert_eq!(read(r#"{"b": true}"#).unwrap(), Some(true));
        assert_eq!(read(r#"{"b": "False"}"#).unwrap(), Some(false));
        assert_eq!(read(r#"{"b": null}"#).unwrap(), None);
        assert_eq!(read("{}").unwrap(), None);
        assert!(read(r#"{"b": "maybe"}"#).is_err());
    }

    #[test]
    fn event_created_format() {
        assert_eq!(
            parse_event_time("Fri, 07 Dec. 2018 20:11:08")
                .unwrap()
                .to_rfc3339(),
            "2018-12-07T20:11:08+00:00"
        );
        assert_eq!(parse_event_time("2018-12-07T20:11:08"), None);
    }

    #[derive(Deserialize)]
    struct Sample {
        #[serde(default, deserialize_with = "null_default")]
        tags: Vec<String>,
        #[serde(default, deserialize_with = "empty_as_none")]
        kernel: Option<String>,
        #[serde(default, deserialize_with = "opt_datetime")]
        at: Option<DateTime<Utc>>,
    }

    #[test]
    fn nulls_empty_strings_and_missing_fields() {
        let s: Sample =
            serde_json::from_str(r#"{"tags": null, "kernel": "", "at": null}"#).unwrap();
        assert!(s.tags.is_empty() && s.kernel.is_none() && s.at.is_none());
        let s: Sample = serde_json::from_str("{}").unwrap();
        assert!(s.tags.is_empty() && s.kernel.is_none() && s.at.is_none());
        let s: Sample = serde_json::from_str(
            r#"{"tags": ["a"], "kernel": "ga-22.04", "at": "2024-01-02T03:04:05Z"}"#,
        )
        .unwrap();
        assert_eq!(s.tags, ["a"]);
        assert_eq!(s.kernel.as_deref(), Some("ga-22.04"));
        assert!(s.at.is_some());
        let err = serde_json::from_str::<Sample>(r#"{"at": "soon"}"#)
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .contains("unrecognised MAAS datetime \"soon\"")
        );
    }
}
