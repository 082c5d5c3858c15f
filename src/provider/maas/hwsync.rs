//! The machine token and hardware-sync health (API_REFERENCE §3.1 "Not in the REST API",
//! §5.22; seed 000 §4.3 EnsureHardwareSyncConfigured / WaitForHardwareSyncHealthy, §9.1).
//!
//! `is_sync_healthy` exists only in MAAS's websocket API, so it is computed here with MAAS's
//! formula (models/node.py): `enable_hw_sync && last_sync && sync_interval &&
//! now <= last_sync + 1.5 * sync_interval`. "Now" is a parameter: this part is pure.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::secrets::Secret;

use super::client::MaasClient;
use super::error::MaasError;
use super::machines::{Machine, MachineSummary};
use super::transport::Call;

/// A machine's own metadata OAuth token (what `/etc/maas/maas-machine-creds.yml` holds).
/// It is replaced whenever the machine's owner changes (every release + deploy).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineToken {
    pub consumer_key: String,
    pub token_key: String,
    pub token_secret: Secret,
}

/// The hardware-sync fields of a machine, with the effective `enabled` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HardwareSync {
    /// `enable_hw_sync`, or for MAAS 3.2 (which does not emit it) deduced as gomaasclient
    /// does: a non-zero `sync_interval` and a `last_sync` or `next_sync`.
    pub enabled: bool,
    pub last_sync: Option<DateTime<Utc>>,
    pub next_sync: Option<DateTime<Utc>>,
    /// Seconds.
    pub sync_interval: Option<u64>,
}

/// What the hardware-sync fields say at a given moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncHealth {
    /// The machine was not deployed with `enable_hw_sync=true` (or MAAS is older than 3.2).
    Disabled,
    /// Enabled, but MAAS has no `last_sync` (or no interval) yet.
    NeverSynced,
    /// The last sync is recent enough; healthy until `deadline`.
    Healthy { deadline: DateTime<Utc> },
    /// No sync for longer than 1.5 intervals.
    Stale {
        deadline: DateTime<Utc>,
        overdue_by: Duration,
    },
}

impl SyncHealth {
    /// MAAS's `is_sync_healthy`.
    pub fn is_healthy(&self) -> bool {
        matches!(self, SyncHealth::Healthy { .. })
    }
}

impl HardwareSync {
    pub fn health(&self, now: DateTime<Utc>) -> SyncHealth {
        if !self.enabled {
            return SyncHealth::Disabled;
        }
        let (Some(last_sync), Some(interval)) = (self.last_sync, self.sync_interval) else {
            return SyncHealth::NeverSynced;
        };
        if interval == 0 {
            return SyncHealth::NeverSynced;
        }
        // 1.5 × interval, in milliseconds so odd intervals are exact.
        let grace = i64::try_from(interval)
            .ok()
            .and_then(|secs| secs.checked_mul(1500))
            .map_or(Duration::MAX, Duration::milliseconds);
        let deadline = last_sync
            .checked_add_signed(grace)
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        if now <= deadline {
            SyncHealth::Healthy { deadline }
        } else {
            SyncHealth::Stale {
                deadline,
                overdue_by: now - deadline,
            }
        }
    }

    /// MAAS's `is_sync_healthy` at `now`.
    pub fn is_healthy(&self, now: DateTime<Utc>) -> bool {
        self.health(now).is_healthy()
    }
}

impl HardwareSync {
    /// From a machine's `enable_hw_sync`, `last_sync`, `next_sync` and `sync_interval`.
    fn of(
        enable_hw_sync: Option<bool>,
        last_sync: Option<DateTime<Utc>>,
        next_sync: Option<DateTime<Utc>>,
        sync_interval: Option<u64>,
    ) -> HardwareSync {
        let deduced =
            sync_interval.unwrap_or(0) != 0 && (last_sync.is_some() || next_sync.is_some());
        HardwareSync {
            enabled: enable_hw_sync.unwrap_or(deduced),
            last_sync,
            next_sync,
            sync_interval,
        }
    }
}

impl Machine {
    pub fn hardware_sync(&self) -> HardwareSync {
        HardwareSync::of(
            self.enable_hw_sync,
            self.last_sync,
            self.next_sync,
            self.sync_interval,
        )
    }
}

impl MachineSummary {
    pub fn hardware_sync(&self) -> HardwareSync {
        HardwareSync::of(
            self.enable_hw_sync,
            self.last_sync,
            self.next_sync,
            self.sync_interval,
        )
    }
}

impl MaasClient {
    /// `GET machines/{id}/?op=get_token` (admin): the machine's token, or `None` if MAAS has
    /// none for it yet. The answer is never put in an error (it is a credential).
    pub async fn get_token(&self, system_id: &str) -> Result<Option<MachineToken>, MaasError> {
        self.transport()
            .json(
                Call::get("get_token", &["machines", system_id])
                    .op("get_token")
                    .sensitive_response(),
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    fn sync(enabled: bool, last: Option<&str>, interval: Option<u64>) -> HardwareSync {
        HardwareSync {
            enabled,
            last_sync: last.map(at),
            next_sync: None,
            sync_interval: interval,
        }
    }

    #[test]
    fn healthy_until_one_and_a_half_intervals_after_the_last_sync() {
        let s = sync(true, Some("2026-01-01T00:00:00Z"), Some(900));
        let deadline = at("2026-01-01T00:22:30Z");
        assert_eq!(
            s.health(at("2026-01-01T00:10:00Z")),
            SyncHealth::Healthy { deadline }
        );
        assert!(s.is_healthy(deadline));
        assert_eq!(
            s.health(at("2026-01-01T00:22:31Z")),
            SyncHealth::Stale {
                deadline,
                overdue_by: Duration::seconds(1)
            }
        );
    }

    #[test]
    fn each_missing_ingredient_is_unhealthy() {
        let now = at("2026-01-01T00:00:00Z");
        assert_eq!(
            sync(false, Some("2026-01-01T00:00:00Z"), Some(900)).health(now),
            SyncHealth::Disabled
        );
        assert_eq!(
            sync(true, None, Some(900)).health(now),
            SyncHealth::NeverSynced
        );
        assert_eq!(
            sync(true, Some("2026-01-01T00:00:00Z"), None).health(now),
            SyncHealth::NeverSynced
        );
        assert_eq!(
            sync(true, Some("2026-01-01T00:00:00Z"), Some(0)).health(now),
            SyncHealth::NeverSynced
        );
    }

    #[test]
    fn odd_intervals_and_huge_values_do_not_overflow() {
        let s = sync(true, Some("2026-01-01T00:00:00Z"), Some(1));
        assert_eq!(
            s.health(at("2026-01-01T00:00:01Z")),
            SyncHealth::Healthy {
                deadline: at("2026-01-01T00:00:01.5Z")
            }
        );
        let s = sync(true, Some("2026-01-01T00:00:00Z"), Some(u64::MAX));
        assert!(s.is_healthy(at("2999-01-01T00:00:00Z")));
    }

    #[test]
    fn token_secret_is_redacted_in_debug() {
        let token: MachineToken = serde_json::from_str(
            r#"{"token_key": "tk", "token_secret": "very-secret", "consumer_key": "ck"}"#,
        )
        .unwrap();
        assert_eq!(token.token_secret.expose(), "very-secret");
        assert!(!format!("{token:?}").contains("very-secret"));
    }
}
