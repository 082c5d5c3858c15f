//! What daemon replicas sharing one store agree on through it (issue 17; docs/ha.md): live
//! leases by kind (replica membership, site ownership), concurrency slots counted in the store,
//! clearing a gone replica's leases, fleet-wide settings, and the store's own clock and schema
//! version. Every lease here is a named lease of [`super::leases`].

use chrono::{DateTime, Duration, Utc};

use super::db::{Backend, params};
use super::leases::{Lease, LeaseWrite, NAMED, read_lease, take_named};
use super::{Store, StoreError, format_time, parse_time};

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

    /// Take one of the `limit` slots of `group` (`slot:<group>#<n>`) for `holder`, or `None`
    /// when all of them are held live. The count holds across every process sharing the store.
    pub async fn acquire_slot(
        &self,
        group: &str,
        limit: u32,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let prefix = format!("slot:{group}#");
        let busy: std::collections::BTreeSet<String> = self
            .live_leases(&prefix)
            .await?
            .into_iter()
            .map(|lease| lease.name)
            .collect();
        // Every slot held: no write transaction (many nodes of a wave ask while they wait).
        if (0..limit.max(1)).all(|n| busy.contains(&format!("{prefix}{n}"))) {
            return Ok(None);
        }
        let now = self.now();
        let mut tx = self.pool.write().await?;
        for n in 0..limit.max(1) {
            let name = format!("{prefix}{n}");
            if busy.contains(&name) {
                continue;
            }
            // Conditional: a slot another process took since the read above is not taken.
            if take_named(&mut tx, &name, holder, now, ttl).await? {
                let lease = read_lease(&mut tx, &name).await?;
                tx.commit().await?;
                return Ok(Some(lease));
            }
        }
        Ok(None)
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
