//! What daemon replicas sharing one store agree on through it (issue 17; docs/ha.md): live
//! leases by kind (replica membership, site ownership), concurrency slots counted in the store,
//! clearing a gone replica's leases, fleet-wide settings, and the store's own clock and schema
//! version. Every lease here is a named lease of [`super::leases`].

use std::collections::BTreeSet;

use chrono::{DateTime, Duration, Utc};

use super::db::{Backend, params};
use super::leases::{Lease, LeaseWrite, NAMED, read_lease, take_named};
use super::{Store, StoreError, format_time, parse_time};
use crate::lifecycle::JobState;

/// A node asking for one of its group's concurrency slots.
#[derive(Debug, Clone, Copy)]
pub struct SlotRequest<'a> {
    /// `site/profile`: the slots are the named leases `slot:<group>#0` .. `#limit-1`.
    pub group: &'a str,
    pub limit: u32,
    /// The node, of the group's site.
    pub site: &'a str,
    pub hostname: &'a str,
}

/// Which slot a request may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotPick {
    /// Any free slot not kept for another node.
    Free,
    /// Only the slot this node was running under when its holder stopped.
    Left,
}

#[derive(Debug)]
pub enum SlotOutcome {
    Taken(Lease),
    /// Every slot is held or kept for a node (`Free`), or the slot the node left is still
    /// held by its lapsing holder (`Left`): ask again later.
    Busy,
    /// No slot was left to this node (`Left` only).
    NoneLeft,
}

struct SlotRow {
    name: String,
    subject: Option<String>,
    live: bool,
}

/// A setting every replica must agree on, with who recorded it first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetSetting {
    pub name: String,
    pub value: String,
    pub set_by: String,
    pub set_at: DateTime<Utc>,
}

impl Store {
    /// Every live lease whose name starts with `prefix`, by name.
    pub async fn live_leases(&self, prefix: &str) -> Result<Vec<Lease>, StoreError> {
        let mut tx = self.pool.read().await?;
        let rows = tx
            .fetch_all(
                "SELECT * FROM leases WHERE substr(name, 1, CAST($1 AS INTEGER)) = $2 AND holder IS NOT NULL
                 AND expires_at > $3 ORDER BY name",
                &params![
                    prefix.chars().count() as i64,
                    prefix,
                    format_time(self.now())
                ],
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(Lease {
                    sort: super::LeaseSort::Named,
                    name: row.text("name")?,
                    holder: row.opt_text("holder")?.unwrap_or_default(),
                    fencing: row.int("fencing")?,
                    expires_at: parse_time(&row.text("expires_at")?)?,
                })
            })
            .collect()
    }

    /// Take a slot of `ask.group` for `ask`'s node and `holder`. `SlotPick::Free` takes one of
    /// the `limit` slots that no live lease holds and that is not kept for another node;
    /// `SlotPick::Left` only the slot this node was running under when its holder stopped
    /// renewing. The count holds across every process sharing the store.
    ///
    /// A slot is kept for the node it was taken for while that node's job runs: a replica
    /// that died mid-deploy left the machine deploying in MAAS, and the replica resuming the
    /// job takes the slot back instead of another node starting beside it.
    pub async fn acquire_slot(
        &self,
        ask: &SlotRequest<'_>,
        pick: SlotPick,
        holder: &str,
        ttl: Duration,
    ) -> Result<SlotOutcome, StoreError> {
        let prefix = format!("slot:{}#", ask.group);
        let now = self.now();
        let slots = self.slots(&prefix, now).await?;
        let left = slots
            .iter()
            .find(|slot| slot.subject.as_deref() == Some(ask.hostname));
        let candidates: Vec<String> = match (pick, left) {
            (SlotPick::Left, None) => return Ok(SlotOutcome::NoneLeft),
            // Its holder's lease has not run out yet: the node is still in that run.
            (SlotPick::Left, Some(slot)) if slot.live => return Ok(SlotOutcome::Busy),
            (SlotPick::Left, Some(slot)) => {
                if !self
                    .running_hostnames(ask.site)
                    .await?
                    .contains(ask.hostname)
                {
                    return Ok(SlotOutcome::NoneLeft);
                }
                vec![slot.name.clone()]
            }
            (SlotPick::Free, _) => {
                let idle_for_others = slots
                    .iter()
                    .any(|slot| !slot.live && slot.subject.is_some());
                let running = if idle_for_others {
                    self.running_hostnames(ask.site).await?
                } else {
                    BTreeSet::new()
                };
                (0..ask.limit.max(1))
                    .map(|n| format!("{prefix}{n}"))
                    .filter(|name| {
                        slots
                            .iter()
                            .find(|slot| &slot.name == name)
                            .is_none_or(|slot| {
                                !slot.live
                                    && slot.subject.as_deref().is_none_or(|subject| {
                                        subject == ask.hostname || !running.contains(subject)
                                    })
                            })
                    })
                    .collect()
            }
        };
        // Every slot held or kept: no write transaction (many nodes of a wave ask while they
        // wait).
        if candidates.is_empty() {
            return Ok(SlotOutcome::Busy);
        }
        let mut tx = self.pool.write().await?;
        for name in candidates {
            // Conditional: a slot another process took since the read above is not taken.
            if take_named(&mut tx, &name, holder, now, ttl).await? {
                tx.execute(
                    "UPDATE leases SET subject = $1 WHERE name = $2",
                    &params![ask.hostname, name.as_str()],
                )
                .await?;
                let lease = read_lease(&mut tx, &name).await?;
                tx.commit().await?;
                return Ok(SlotOutcome::Taken(lease));
            }
        }
        Ok(SlotOutcome::Busy)
    }

    /// Every slot row named with `prefix`, live or not, with the node it was last taken for.
    async fn slots(&self, prefix: &str, now: DateTime<Utc>) -> Result<Vec<SlotRow>, StoreError> {
        let mut tx = self.pool.read().await?;
        let rows = tx
            .fetch_all(
                "SELECT name, subject, holder IS NOT NULL AND expires_at > $3 AS live FROM leases
                 WHERE substr(name, 1, CAST($1 AS INTEGER)) = $2",
                &params![prefix.chars().count() as i64, prefix, format_time(now)],
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(SlotRow {
                    name: row.text("name")?,
                    subject: row.opt_text("subject")?,
                    live: row.bool("live")?,
                })
            })
            .collect()
    }

    /// Hostnames of `site` with an onboarding or decommission in progress.
    async fn running_hostnames(&self, site: &str) -> Result<BTreeSet<String>, StoreError> {
        let mut tx = self.pool.read().await?;
        tx.fetch_all(
            "SELECT hostname FROM onboardings WHERE status IN ($1, $2) AND site = $3
             UNION SELECT hostname FROM decommissions WHERE status IN ($1, $2) AND site = $3",
            &params![
                JobState::Running.as_str(),
                JobState::Compensating.as_str(),
                site
            ],
        )
        .await?
        .iter()
        .map(|row| row.text("hostname"))
        .collect()
    }

    /// Free every expired lease still naming `holder` (a replica that is gone, whose work the
    /// others took over); the live ones stay. Returns how many were freed.
    pub async fn clear_expired_leases_of(&self, holder: &str) -> Result<u64, StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        let names: Vec<String> = tx
            .fetch_all(
                "SELECT name FROM leases WHERE holder = $1 AND expires_at <= $2",
                &params![holder, format_time(now)],
            )
            .await?
            .iter()
            .map(|row| row.text("name"))
            .collect::<Result<_, _>>()?;
        let mut freed = 0;
        for name in names {
            freed += LeaseWrite::row(NAMED, name)
                .set_expr("holder", "NULL")
                .when(
                    "holder = ? AND expires_at <= ?",
                    params![holder, format_time(now)],
                )
                .execute(&mut tx)
                .await?;
        }
        tx.commit().await?;
        Ok(freed)
    }

    /// Holders named by leases (live or expired, not yet freed) whose name starts with `prefix`.
    pub async fn lease_holders(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let mut tx = self.pool.read().await?;
        tx.fetch_all(
            "SELECT DISTINCT holder FROM leases WHERE substr(name, 1, CAST($1 AS INTEGER)) = $2
             AND holder IS NOT NULL ORDER BY holder",
            &params![prefix.chars().count() as i64, prefix],
        )
        .await?
        .iter()
        .map(|row| row.text("holder"))
        .collect()
    }

    /// A fleet-wide setting, if one was recorded.
    pub async fn fleet_setting(&self, name: &str) -> Result<Option<FleetSetting>, StoreError> {
        let mut tx = self.pool.read().await?;
        tx.fetch_optional(
            "SELECT * FROM fleet_settings WHERE name = $1",
            &params![name],
        )
        .await?
        .map(|row| {
            Ok(FleetSetting {
                name: row.text("name")?,
                value: row.text("value")?,
                set_by: row.text("set_by")?,
                set_at: parse_time(&row.text("set_at")?)?,
            })
        })
        .transpose()
    }

    /// Record `value` for `name` unless a value is recorded already; returns the recorded
    /// setting (the caller compares it with its own).
    pub async fn claim_fleet_setting(
        &self,
        name: &str,
        value: &str,
        by: &str,
    ) -> Result<FleetSetting, StoreError> {
        let mut tx = self.pool.write().await?;
        tx.execute(
            "INSERT INTO fleet_settings (name, value, set_by, set_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (name) DO NOTHING",
            &params![name, value, by, format_time(self.now())],
        )
        .await?;
        tx.commit().await?;
        self.fleet_setting(name)
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("fleet setting {name} vanished")))
    }

    /// The newest schema version recorded in the store (another process may have migrated it
    /// since this one opened it).
    pub async fn stored_schema_version(&self) -> Result<i64, StoreError> {
        let mut tx = self.pool.read().await?;
        tx.fetch_one(
            "SELECT COALESCE(MAX(version), 0) AS version FROM schema_migrations",
            &[],
        )
        .await?
        .int("version")
    }

    /// The database server's clock (UTC). Replicas compare it with their own: a replica whose
    /// clock disagrees would misjudge every lease's expiry.
    pub async fn database_now(&self) -> Result<DateTime<Utc>, StoreError> {
        let sql = match self.backend() {
            Backend::Postgres => {
                "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS now"
            }
            Backend::Sqlite => "SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS now",
        };
        let mut tx = self.pool.read().await?;
        parse_time(&tx.fetch_one(sql, &[]).await?.text("now")?)
    }
}
