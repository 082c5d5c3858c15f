//! Redfish client and provisioner settings (seed 003 "Configuration": `REDFISH_TIMEOUT=30s`,
//! `REDFISH_RETRIES=5`, `WORKER_CONCURRENCY=4`, `JOB_LEASE_TTL=10m`, `JOB_STUCK_TIMEOUT=4h`,
//! `MAINTENANCE_ISO_URL`, `TASK_ISO_DIR`; "Time Limits and Timeouts"), read from the
//! environment, the daemon's configuration, or given.

use std::path::PathBuf;
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

/// The provisioner's settings (seed 003 "Configuration", "Workers and Concurrency", "Task ISO
/// Lifecycle", "Time Limits and Timeouts"), read like the client's: unset variables keep their
/// defaults; `MAINTENANCE_ISO_URL` has none.
#[derive(Debug, Clone, PartialEq)]
pub struct ProvisionerSettings {
    /// CD1's image (`MAINTENANCE_ISO_URL`).
    pub maintenance_iso_url: String,
    /// Where task ISOs are written (`TASK_ISO_DIR`, default `<data dir>/task-isos`).
    pub task_iso_dir: PathBuf,
    /// The controller's address as BMCs reach it, for the signed task ISO URLs
    /// (`MEDIA_BASE_URL`; default: the daemon's public URL).
    pub media_base_url: Option<url::Url>,
    /// Jobs worked on at once (`WORKER_CONCURRENCY`, default 4).
    pub worker_concurrency: usize,
    /// A worker's lease on its job (`JOB_LEASE_TTL`, default 10m); renewed every third of it.
    pub lease_ttl: Duration,
    /// A job without a report this long after it started fails (`JOB_STUCK_TIMEOUT`, 4h).
    pub stuck_timeout: Duration,
    /// Upper bound of each cleanup step (`JOB_CLEANUP_TIMEOUT`, 15m).
    pub cleanup_timeout: Duration,
    /// How often workers look for jobs and waiting jobs for their report (`JOB_POLL_INTERVAL`,
    /// 2s).
    pub poll_interval: Duration,
    /// ISO builds at once (`ISO_BUILD_CONCURRENCY`, 2).
    pub iso_builds: usize,
    /// Builds waiting or running above which no queued job is picked (`ISO_QUEUE_LIMIT`, 32):
    /// the seed's backpressure.
    pub iso_queue_limit: usize,
    /// `xorriso` (default) or `builtin` (`ISO_BUILDER`).
    pub iso_tool: super::iso::IsoTool,
    /// The xorriso program (`XORRISO`, default from `PATH`).
    pub xorriso: PathBuf,
    /// How long a complete job's image is kept (`TASK_ISO_RETENTION`, 7d).
    pub retention: Duration,
}

impl ProvisionerSettings {
    /// Defaults for a controller whose data lives in `data_dir`, CD1 at `maintenance_iso_url`.
    pub fn new(maintenance_iso_url: impl Into<String>, data_dir: &std::path::Path) -> Self {
        Self {
            maintenance_iso_url: maintenance_iso_url.into(),
            task_iso_dir: data_dir.join("task-isos"),
            media_base_url: None,
            worker_concurrency: 4,
            lease_ttl: Duration::from_secs(600),
            stuck_timeout: Duration::from_secs(4 * 3600),
            cleanup_timeout: Duration::from_secs(900),
            poll_interval: Duration::from_secs(2),
            iso_builds: 2,
            iso_queue_limit: 32,
            iso_tool: super::iso::IsoTool::Xorriso,
            xorriso: PathBuf::from("xorriso"),
            retention: Duration::from_secs(7 * 86_400),
        }
    }

    /// From a lookup of the variables (the daemon's `[provisioner]` table, the environment).
    pub fn from_lookup(
        data_dir: &std::path::Path,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        let err = |variable: &'static str, message: String| SettingsError { variable, message };
        let url = lookup("MAINTENANCE_ISO_URL").ok_or_else(|| {
            err(
                "MAINTENANCE_ISO_URL",
                "is required: the URL of the maintenance OS image BMCs mount as CD1".into(),
            )
        })?;
        match url::Url::parse(url.trim()) {
            Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {}
            _ => {
                return Err(err(
                    "MAINTENANCE_ISO_URL",
                    format!("`{url}` is not an http(s) URL a BMC can fetch"),
                ));
            }
        }
        let mut s = Self::new(url.trim(), data_dir);
        let duration = |variable: &'static str, text: &str| {
            duration::parse(text.trim()).map_err(|e| err(variable, e.to_string()))
        };
        let count = |variable: &'static str, text: &str, max: usize| {
            text.trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| {
                    err(
                        variable,
                        format!("`{text}` is not a number from 1 to {max}"),
                    )
                })
        };
        if let Some(dir) = lookup("TASK_ISO_DIR") {
            s.task_iso_dir = PathBuf::from(dir.trim());
        }
        if let Some(text) = lookup("MEDIA_BASE_URL") {
            s.media_base_url = Some(
                url::Url::parse(text.trim())
                    .ok()
                    .filter(|u| matches!(u.scheme(), "http" | "https"))
                    .ok_or_else(|| {
                        err("MEDIA_BASE_URL", format!("`{text}` is not an http(s) URL"))
                    })?,
            );
        }
        for (variable, field) in [
            ("JOB_LEASE_TTL", &mut s.lease_ttl),
            ("JOB_STUCK_TIMEOUT", &mut s.stuck_timeout),
            ("JOB_CLEANUP_TIMEOUT", &mut s.cleanup_timeout),
            ("JOB_POLL_INTERVAL", &mut s.poll_interval),
            ("TASK_ISO_RETENTION", &mut s.retention),
        ] {
            if let Some(text) = lookup(variable) {
                *field = duration(variable, &text)?;
            }
        }
        for (variable, field, max) in [
            ("WORKER_CONCURRENCY", &mut s.worker_concurrency, 1024),
            ("ISO_BUILD_CONCURRENCY", &mut s.iso_builds, 64),
            ("ISO_QUEUE_LIMIT", &mut s.iso_queue_limit, 100_000),
        ] {
            if let Some(text) = lookup(variable) {
                *field = count(variable, &text, max)?;
            }
        }
        if let Some(text) = lookup("ISO_BUILDER") {
            s.iso_tool = match text.trim() {
                "xorriso" => super::iso::IsoTool::Xorriso,
                "builtin" => super::iso::IsoTool::Builtin,
                other => {
                    return Err(err(
                        "ISO_BUILDER",
                        format!("`{other}`: expected xorriso or builtin"),
                    ));
                }
            };
        }
        if let Some(program) = lookup("XORRISO") {
            s.xorriso = PathBuf::from(program.trim());
        }
        if s.lease_ttl < Duration::from_secs(1) {
            return Err(err(
                "JOB_LEASE_TTL",
                "must be at least 1s (it is renewed every third of it)".into(),
            ));
        }
        Ok(s)
    }

    /// The variables [`ProvisionerSettings::from_lookup`] and
    /// [`RedfishSettings::from_lookup`] read.
    pub const VARIABLES: &'static [&'static str] = &[
        "MAINTENANCE_ISO_URL",
        "TASK_ISO_DIR",
        "MEDIA_BASE_URL",
        "WORKER_CONCURRENCY",
        "JOB_LEASE_TTL",
        "JOB_STUCK_TIMEOUT",
        "JOB_CLEANUP_TIMEOUT",
        "JOB_POLL_INTERVAL",
        "ISO_BUILD_CONCURRENCY",
        "ISO_QUEUE_LIMIT",
        "ISO_BUILDER",
        "XORRISO",
        "TASK_ISO_RETENTION",
        "REDFISH_TIMEOUT",
        "REDFISH_RETRIES",
        "REDFISH_RESET_GRACE",
        "REDFISH_SETTLE_AFTER_RESET",
        "REDFISH_INSECURE_TLS",
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn provisioner_settings_need_cd1_and_check_every_value() {
        let dir = std::path::Path::new("/var/lib/metalform");
        let lookup = |pairs: &'static [(&str, &str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            ProvisionerSettings::from_lookup(dir, lookup(&[]))
                .unwrap_err()
                .to_string(),
            "MAINTENANCE_ISO_URL: is required: the URL of the maintenance OS image BMCs mount as CD1"
        );
        let s = ProvisionerSettings::from_lookup(
            dir,
            lookup(&[
                ("MAINTENANCE_ISO_URL", "http://10.0.0.1/maint.iso"),
                ("WORKER_CONCURRENCY", "8"),
                ("JOB_STUCK_TIMEOUT", "2h"),
                ("ISO_BUILDER", "builtin"),
            ]),
        )
        .unwrap();
        assert_eq!(s.worker_concurrency, 8);
        assert_eq!(s.stuck_timeout, Duration::from_secs(7200));
        assert_eq!(s.iso_tool, super::super::iso::IsoTool::Builtin);
        assert_eq!(s.task_iso_dir, dir.join("task-isos"));
        assert_eq!(s.lease_ttl, Duration::from_secs(600));
        assert_eq!(
            ProvisionerSettings::from_lookup(
                dir,
                lookup(&[
                    ("MAINTENANCE_ISO_URL", "http://10.0.0.1/maint.iso"),
                    ("WORKER_CONCURRENCY", "0"),
                ])
            )
            .unwrap_err()
            .to_string(),
            "WORKER_CONCURRENCY: `0` is not a number from 1 to 1024"
        );
        assert!(
            ProvisionerSettings::from_lookup(
                dir,
                lookup(&[("MAINTENANCE_ISO_URL", "ftp://x/y.iso")])
            )
            .is_err()
        );
    }

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
