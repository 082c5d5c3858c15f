//! Redfish client settings (seed 003 "Configuration": `REDFISH_TIMEOUT=30s`,
//! `REDFISH_RETRIES=5`; "Time Limits and Timeouts"), read from the environment or given.

use std::time::Duration;

use crate::model::duration;

/// How the client talks to BMCs.
#[derive(Debug, Clone, PartialEq)]
pub struct RedfishSettings {
    /// Upper bound of one HTTP request (`REDFISH_TIMEOUT`, default 30s).
    pub timeout: Duration,
    /// Retries of a transiently failing operation after its first try (`REDFISH_RETRIES`,
    /// default 5): 5xx, 429, timeouts and connection errors.
    pub retries: u32,
    /// First backoff, doubled per retry up to `max_backoff` (with jitter, `Retry-After`
    /// honoured).
    pub base_backoff: Duration,
    pub max_backoff: Duration,
    /// How long a graceful shutdown may take before the power is forced off
    /// (`REDFISH_RESET_GRACE`, default 5m).
    pub reset_grace: Duration,
    /// How often power state is polled while waiting for it to change.
    pub poll_interval: Duration,
    /// After a host reset, leave the BMC alone this long instead of the vendor profile's
    /// settle time (`REDFISH_SETTLE_AFTER_RESET`; slow firmware, simulators).
    pub settle_after_reset: Option<Duration>,
    /// Accept self-signed BMC certificates (`REDFISH_INSECURE_TLS=true`); most BMCs ship one.
    pub insecure_tls: bool,
}

impl Default for RedfishSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            retries: 5,
            base_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            reset_grace: Duration::from_secs(300),
            poll_interval: Duration::from_secs(2),
            settle_after_reset: None,
            insecure_tls: false,
        }
    }
}

/// A setting that could not be read; the message names the variable and what it takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {message}")]
pub struct SettingsError {
    pub variable: &'static str,
    pub message: String,
}

impl RedfishSettings {
    /// From the process environment; unset variables keep their defaults.
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// From any lookup of variable names (the daemon's config file, tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let mut settings = Self::default();
        let parse_duration = |variable: &'static str, text: &str| {
            duration::parse(text.trim()).map_err(|e| SettingsError {
                variable,
                message: e.to_string(),
            })
        };
        if let Some(text) = lookup("REDFISH_TIMEOUT") {
            settings.timeout = parse_duration("REDFISH_TIMEOUT", &text)?;
        }
        if let Some(text) = lookup("REDFISH_RESET_GRACE") {
            settings.reset_grace = parse_duration("REDFISH_RESET_GRACE", &text)?;
        }
        if let Some(text) = lookup("REDFISH_SETTLE_AFTER_RESET") {
            settings.settle_after_reset = Some(if text.trim() == "0" {
                Duration::ZERO
            } else {
                parse_duration("REDFISH_SETTLE_AFTER_RESET", &text)?
            });
        }
        if let Some(text) = lookup("REDFISH_RETRIES") {
            settings.retries = text
                .trim()
                .parse()
                .ok()
                .filter(|n| *n <= 100)
                .ok_or_else(|| SettingsError {
                    variable: "REDFISH_RETRIES",
                    message: format!("`{text}` is not a number of retries from 0 to 100"),
                })?;
        }
        if let Some(text) = lookup("REDFISH_INSECURE_TLS") {
            settings.insecure_tls = match text.trim() {
                "true" | "1" => true,
                "false" | "0" | "" => false,
                other => {
                    return Err(SettingsError {
                        variable: "REDFISH_INSECURE_TLS",
                        message: format!("`{other}` is not true or false"),
                    });
                }
            };
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn from(pairs: &[(&str, &str)]) -> Result<RedfishSettings, SettingsError> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RedfishSettings::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn the_seed_variables_are_read_and_checked() {
        assert_eq!(from(&[]).unwrap(), RedfishSettings::default());
        let s = from(&[
            ("REDFISH_TIMEOUT", "10s"),
            ("REDFISH_RETRIES", "2"),
            ("REDFISH_RESET_GRACE", "1m30s"),
            ("REDFISH_INSECURE_TLS", "true"),
            ("REDFISH_SETTLE_AFTER_RESET", "0"),
        ])
        .unwrap();
        assert_eq!(s.timeout, Duration::from_secs(10));
        assert_eq!(s.retries, 2);
        assert_eq!(s.reset_grace, Duration::from_secs(90));
        assert!(s.insecure_tls);
        assert_eq!(s.settle_after_reset, Some(Duration::ZERO));
        assert_eq!(
            from(&[("REDFISH_TIMEOUT", "30")]).unwrap_err().to_string(),
            "REDFISH_TIMEOUT: `30` is not a duration: expected a number followed by a unit (ms, s, m, h, d), e.g. 15m or 1h30m"
        );
        assert_eq!(
            from(&[("REDFISH_RETRIES", "many")])
                .unwrap_err()
                .to_string(),
            "REDFISH_RETRIES: `many` is not a number of retries from 0 to 100"
        );
    }
}
