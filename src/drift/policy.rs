//! The self-heal policy (seed 000 §6.4 "Auto-action", §6.3 heartbeat threshold): which of the
//! table's auto-actions the drift pass carries out. The default is the table's: all of them,
//! with a 5-minute heartbeat threshold. A disabled action is still detected, recorded and
//! reported — as held, not taken (`DriftAction::allowed_by`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `[drift]` of the daemon's configuration (every field optional).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DriftPolicy {
    /// An active node whose agent has not been heard from for longer goes offline (000 §6.3).
    #[serde(with = "crate::model::duration")]
    pub heartbeat_threshold: Duration,
    /// Move nodes active → offline and back on agent contact.
    pub heartbeat: bool,
    /// Quarantine a node whose machine was released, failed or deleted out of band.
    pub quarantine: bool,
    /// Update a node's host address when MAAS shows its deployed IP changed.
    pub update_host: bool,
    /// Release and power off the machine of a retired node that is still Deployed.
    pub release_retired: bool,
    /// When more than this fraction of a site's in-service nodes (and at least two) are absent
    /// from a MAAS list that did answer, the list is taken for partial (a wrong MAAS, a
    /// restored database) and nothing is quarantined for absence.
    #[serde(deserialize_with = "fraction")]
    pub absent_guard_fraction: f64,
}

/// A number between 0 and 1 (a fraction above 1 would never trip the guard, below 0 always).
fn fraction<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let value = f64::deserialize(d)?;
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(serde::de::Error::custom(format!(
            "absent_guard_fraction {value} is not between 0 and 1"
        )))
    }
}

impl Default for DriftPolicy {
    fn default() -> Self {
        Self {
            heartbeat_threshold: Duration::from_secs(300),
            heartbeat: true,
            quarantine: true,
            update_host: true,
            release_retired: true,
            absent_guard_fraction: 0.5,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Config {
        drift: DriftPolicy,
    }

    #[test]
    fn reads_from_toml_with_defaults_and_refuses_unknown_keys() {
        let config: Config =
            toml::from_str("[drift]\nheartbeat_threshold = \"90s\"\nquarantine = false\n").unwrap();
        assert_eq!(config.drift.heartbeat_threshold, Duration::from_secs(90));
        assert!(!config.drift.quarantine);
        assert!(config.drift.release_retired);
        let err = toml::from_str::<Config>("[drift]\nquarantine_all = true\n")
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("unknown field `quarantine_all`"), "{err}");
        let err = toml::from_str::<Config>("[drift]\nheartbeat_threshold = \"5 minutes\"\n")
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("is not a duration"), "{err}");
        let err = toml::from_str::<Config>("[drift]\nabsent_guard_fraction = -0.1\n")
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("is not between 0 and 1"), "{err}");
        let config: Config = toml::from_str("[drift]\nabsent_guard_fraction = 1\n").unwrap();
        assert_eq!(config.drift.absent_guard_fraction, 1.0);
    }
}
