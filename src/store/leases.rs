//! Leases with fencing generations (seed 003 "Leasing"; DESIGN.md §4): one implementation for
//! every row that can be leased.
//!
//! A lease lives in a row with a holder, an expiry and a fencing generation ([`LeaseColumns`]):
//! the named leases of the job executors (`leases`: one per node, onboarding and decommission
//! share it), the dispatch lease of each agent task (`agent_tasks`, whose `dispatch_count` is
//! its generation), and — seed 003 — a provisioning job's own row. Every lease write is one
//! conditional `UPDATE` built here ([`LeaseWrite`]): take (only when free or expired; bumps the
//! generation), renew and release (only by the holder, at its generation), check (a fenced
//! no-op), free a stale one. The callers add their own columns and conditions (a task's
//! status) to the same statement, so a lease and the state it guards change together.
//!
//! A write made under a named lease passes its [`Fence`], which the store re-checks inside the
//! write's transaction, so a holder whose lease was taken over after expiry cannot write any
//! more.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use super::db::{Param, Tx, params};
use super::{Store, StoreError, format_time, parse_time};

/// Where one sort of lease is kept: the table and the columns of its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseColumns {
    pub table: &'static str,
    /// The row's key.
    pub key: &'static str,
    /// The holder's name; NULL when nobody holds it.
    pub holder: &'static str,
    pub expires: &'static str,
    /// Grows by one on every take.
    pub fencing: &'static str,
}

/// The named leases of executors and the drift pass.
pub(crate) const NAMED: LeaseColumns = LeaseColumns {
    table: "leases",
    key: "name",
    holder: "holder",
    expires: "expires_at",
    fencing: "fencing",
};

/// The dispatch lease of an agent task.
pub(crate) const TASK: LeaseColumns = LeaseColumns {
    table: "agent_tasks",
    key: "id",
    holder: "lease_holder",
    expires: "lease_expires_at",
    fencing: "dispatch_count",
};

/// A provisioning job's own lease (seed 003 `jobs.worker_id`, `jobs.lease_expires_at`).
pub(crate) const PROVISIONING_JOB: LeaseColumns = LeaseColumns {
    table: "provisioning_jobs",
    key: "id",
    holder: "worker_id",
    expires: "lease_expires_at",
    fencing: "lease_fencing",
};

/// Which rows a lease held by a job runner lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseSort {
    /// A named lease (`leases`): a node's, the drift pass's.
    Named,
    /// A provisioning job's own row.
    ProvisioningJob,
}

impl LeaseSort {
    pub(crate) fn columns(self) -> LeaseColumns {
        match self {
            LeaseSort::Named => NAMED,
            LeaseSort::ProvisioningJob => PROVISIONING_JOB,
        }
    }
}

/// What a job runner takes a lease on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseTarget {
    /// A named lease, e.g. a node's (`onboarding:dc1/c07u45`).
    Named(String),
    /// A provisioning job's row: taking it from `queued` moves the job to `provisioning`
    /// (seed 003 "Acquire lease via atomic UPDATE"); taking it over after its holder's lease
    /// expired is the seed's steal.
    ProvisioningJob(uuid::Uuid),
}

impl LeaseTarget {
    /// The lease's name in messages and fences.
    pub fn name(&self) -> String {
        match self {
            LeaseTarget::Named(name) => name.clone(),
            LeaseTarget::ProvisioningJob(id) => format!("provisioning:{id}"),
        }
    }
}

/// One conditional `UPDATE` of a leased row: `SET …` and `WHERE key = … AND …`, with numbered
/// parameters. Conditions take `?` where a value goes.
#[must_use]
pub(crate) struct LeaseWrite {
    columns: LeaseColumns,
    sets: Vec<String>,
    conditions: Vec<String>,
    params: Vec<Param>,
}

impl LeaseWrite {
    /// A write to the row `key`.
    pub fn row(columns: LeaseColumns, key: impl Into<Param>) -> Self {
        let mut write = Self {
            columns,
            sets: Vec::new(),
            conditions: Vec::new(),
            params: Vec::new(),
        };
        let placeholder = write.bind(key);
        write
            .conditions
            .push(format!("{} = {placeholder}", columns.key));
        write
    }

    fn bind(&mut self, value: impl Into<Param>) -> String {
        self.params.push(value.into());
        format!("${}", self.params.len())
    }

    /// `column = value`.
    pub fn set(mut self, column: &str, value: impl Into<Param>) -> Self {
        let placeholder = self.bind(value);
        self.sets.push(format!("{column} = {placeholder}"));
        self
    }

    /// `column = expression` (no values).
    pub fn set_expr(mut self, column: &str, expression: &str) -> Self {
        self.sets.push(format!("{column} = {expression}"));
        self
    }

    /// One more condition; each `?` in it takes the next of `values`.
    pub fn when<const N: usize>(mut self, condition: &str, values: [Param; N]) -> Self {
        let mut values = values.into_iter();
        let mut text = String::new();
        for (i, part) in condition.split('?').enumerate() {
            if i > 0 {
                let value = values.next().expect("a value for every `?`");
                text.push_str(&self.bind(value));
            }
            text.push_str(part);
        }
        self.conditions.push(text);
        self
    }

    /// Held by `holder` (at `fencing`, when given).
    pub fn held_by(self, holder: &str, fencing: Option<i64>) -> Self {
        let columns = self.columns;
        let write = self.when(&format!("{} = ?", columns.holder), params![holder]);
        match fencing {
            Some(fencing) => write.when(&format!("{} = ?", columns.fencing), params![fencing]),
            None => write,
        }
    }

    /// Not expired at `now`.
    pub fn live(self, now: DateTime<Utc>) -> Self {
        let expires = self.columns.expires;
        self.when(&format!("{expires} > ?"), params![format_time(now)])
    }

    fn sql(&self) -> String {
        format!(
            "UPDATE {} SET {} WHERE {}",
            self.columns.table,
            self.sets.join(", "),
            self.conditions.join(" AND ")
        )
    }

    /// The number of rows changed (0 or 1).
    pub async fn execute(self, tx: &mut Tx) -> Result<u64, StoreError> {
        tx.execute(self.sql(), &self.params).await
    }
}

/// Take the lease of `key` for `holder` until `now + ttl` when nobody holds it or it expired;
/// the generation grows. Add the caller's columns and conditions before executing.
pub(crate) fn take(
    columns: LeaseColumns,
    key: impl Into<Param>,
    holder: &str,
    now: DateTime<Utc>,
    ttl: Duration,
) -> LeaseWrite {
    let fencing = format!("{} + 1", columns.fencing);
    let free = format!("({} IS NULL OR {} <= ?)", columns.holder, columns.expires);
    LeaseWrite::row(columns, key)
        .set(columns.holder, holder)
        .set(columns.expires, format_time(now + ttl))
        .set_expr(columns.fencing, &fencing)
        .when(&free, params![format_time(now)])
}

/// Extend a live lease of `holder` to `now + ttl`.
pub(crate) fn renew(
    columns: LeaseColumns,
    key: impl Into<Param>,
    holder: &str,
    fencing: Option<i64>,
    now: DateTime<Utc>,
    ttl: Duration,
) -> LeaseWrite {
    LeaseWrite::row(columns, key)
        .set(columns.expires, format_time(now + ttl))
        .held_by(holder, fencing)
        .live(now)
}

/// Give up the lease of `holder` (expired or not).
pub(crate) fn release(
    columns: LeaseColumns,
    key: impl Into<Param>,
    holder: &str,
    fencing: Option<i64>,
    now: DateTime<Utc>,
) -> LeaseWrite {
    LeaseWrite::row(columns, key)
        .set_expr(columns.holder, "NULL")
        .set(columns.expires, format_time(now))
        .held_by(holder, fencing)
}

/// Free a lease whose holder let it expire (the row is claimable again, the generation
/// unchanged until the next take).
pub(crate) fn free_stale(
    columns: LeaseColumns,
    key: impl Into<Param>,
    now: DateTime<Utc>,
) -> LeaseWrite {
    let stale = format!("{} <= ?", columns.expires);
    LeaseWrite::row(columns, key)
        .set_expr(columns.holder, "NULL")
        .set_expr(columns.expires, "NULL")
        .when(&stale, params![format_time(now)])
}

/// A lease held by this process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lease {
    /// The row's key: a lease name, or a provisioning job's id.
    pub name: String,
    pub holder: String,
    /// Grows by one on every takeover; a write carrying an older value is refused.
    pub fencing: i64,
    pub expires_at: DateTime<Utc>,
    #[serde(skip)]
    pub sort: LeaseSort,
}

impl Lease {
    /// The token to pass with writes made under this lease.
    pub fn fence(&self) -> Fence {
        Fence {
            name: self.name.clone(),
            holder: self.holder.clone(),
            fencing: self.fencing,
            sort: self.sort,
        }
    }
}

/// Proof of holding a lease, checked by fenced writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fence {
    pub name: String,
    pub holder: String,
    pub fencing: i64,
    #[serde(skip)]
    pub sort: LeaseSort,
}

impl Fence {
    fn lost(&self) -> StoreError {
        StoreError::LeaseLost {
            name: self.name.clone(),
            holder: self.holder.clone(),
            fencing: self.fencing,
        }
    }
}

/// The lease name used for one node's executor (000 §4.4: one stage runner per node).
pub fn node_lease_name(node: uuid::Uuid) -> String {
    format!("node:{node}")
}

/// Refuse unless `fence` still holds the lease: same holder, same fencing generation. A lease
/// past its expiry that nobody took over still passes — only a takeover (which bumps the
/// generation) or a release ends it, so a holder slowed past its TTL by a loaded machine keeps
/// its work when no one else started on it. The no-op update takes the row lock on
/// PostgreSQL, so a concurrent steal waits for this transaction to finish.
pub(crate) async fn check_fence(tx: &mut Tx, fence: &Fence) -> Result<(), StoreError> {
    let columns = fence.sort.columns();
    let held = LeaseWrite::row(columns, fence.name.clone())
        .set_expr(columns.expires, columns.expires)
        .held_by(&fence.holder, Some(fence.fencing))
        .execute(tx)
        .await?;
    if held == 1 { Ok(()) } else { Err(fence.lost()) }
}

impl Store {
    /// Take a lease for `ttl`: free, released or expired leases are taken (bumping the fencing
    /// generation); the same holder re-acquiring a live lease renews it; a live lease of another
    /// holder is refused with [`StoreError::LeaseHeld`].
    pub async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        let taken = take_named(&mut tx, name, holder, now, ttl).await?
            || renew(NAMED, name, holder, None, now, ttl)
                .set("renewed_at", format_time(now))
                .execute(&mut tx)
                .await?
                == 1;
        if !taken {
            let row = tx
                .fetch_one(
                    "SELECT holder, expires_at FROM leases WHERE name = $1",
                    &params![name],
                )
                .await?;
            return Err(StoreError::LeaseHeld {
                name: name.to_owned(),
                holder: row.opt_text("holder")?.unwrap_or_default(),
                expires_at: row.text("expires_at")?,
            });
        }
        let lease = read_lease(&mut tx, name).await?;
        tx.commit().await?;
        Ok(lease)
    }

    /// Take the lease of `target` for `holder` (see [`LeaseTarget`]). A live lease of another
    /// holder is refused with [`StoreError::LeaseHeld`].
    pub async fn take_lease(
        &self,
        target: &LeaseTarget,
        holder: &str,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        match target {
            LeaseTarget::Named(name) => self.acquire_lease(name, holder, ttl).await,
            LeaseTarget::ProvisioningJob(id) => self.take_provisioning_job(*id, holder, ttl).await,
        }
    }

    /// Extend a held lease (heartbeat). Refused with [`StoreError::LeaseLost`] once it was
    /// taken over or released. Like seed 003's renewal (`WHERE id AND worker_id`, no expiry
    /// condition), a lease that expired without being taken over is extended: the fencing
    /// generation proves nobody else acted under it.
    pub async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        self.renew_leases(std::slice::from_ref(lease), ttl)
            .await?
            .pop()
            .expect("one answer per lease")
    }

    /// Extend many held leases in one transaction (an executor's heartbeat round), as
    /// [`Store::renew_lease`] extends one: each comes back renewed, or as
    /// [`StoreError::LeaseLost`] when it was taken over or released. An error of the store
    /// itself fails the whole round (nothing renewed).
    pub async fn renew_leases(
        &self,
        leases: &[Lease],
        ttl: Duration,
    ) -> Result<Vec<Result<Lease, StoreError>>, StoreError> {
        let now = self.now();
        // What the rows hold once renewed (stored at microseconds).
        let expires_at = parse_time(&format_time(now + ttl))?;
        let mut tx = self.pool.write().await?;
        let mut renewed = Vec::with_capacity(leases.len());
        for lease in leases {
            let columns = lease.sort.columns();
            let mut write = LeaseWrite::row(columns, lease.name.clone())
                .set(columns.expires, format_time(expires_at))
                .held_by(&lease.holder, Some(lease.fencing));
            if lease.sort == LeaseSort::Named {
                write = write.set("renewed_at", format_time(now));
            }
            renewed.push(if write.execute(&mut tx).await? == 0 {
                Err(lease.fence().lost())
            } else {
                Ok(Lease {
                    expires_at,
                    ..lease.clone()
                })
            });
        }
        tx.commit().await?;
        Ok(renewed)
    }

    /// Give a lease up so the next acquirer need not wait for expiry. Releasing a lease that
    /// was already taken over is a no-op (returns `false`).
    pub async fn release_lease(&self, lease: &Lease) -> Result<bool, StoreError> {
        let mut tx = self.pool.write().await?;
        let released = release(
            lease.sort.columns(),
            lease.name.clone(),
            &lease.holder,
            Some(lease.fencing),
            self.now(),
        )
        .execute(&mut tx)
        .await?;
        tx.commit().await?;
        Ok(released == 1)
    }

    /// The current holder of a lease, if it is live.
    pub async fn lease(&self, name: &str) -> Result<Option<Lease>, StoreError> {
        let mut tx = self.pool.read().await?;
        let Some(row) = tx
            .fetch_optional("SELECT * FROM leases WHERE name = $1", &params![name])
            .await?
        else {
            return Ok(None);
        };
        let expires_at = parse_time(&row.text("expires_at")?)?;
        match row.opt_text("holder")? {
            Some(holder) if expires_at > self.now() => Ok(Some(Lease {
                name: name.to_owned(),
                holder,
                fencing: row.int("fencing")?,
                expires_at,
                sort: LeaseSort::Named,
            })),
            _ => Ok(None),
        }
    }

    /// Check a fence outside any other write (a cheap "am I still the holder?").
    pub async fn check_fence(&self, fence: &Fence) -> Result<(), StoreError> {
        let mut tx = self.pool.write().await?;
        check_fence(&mut tx, fence).await?;
        tx.commit().await
    }
}

/// Take the named lease `name` for `holder` when it does not exist yet, nobody holds it or it
/// expired (not when `holder` itself holds it live: that is a renewal).
pub(crate) async fn take_named(
    tx: &mut Tx,
    name: &str,
    holder: &str,
    now: DateTime<Utc>,
    ttl: Duration,
) -> Result<bool, StoreError> {
    let now_s = format_time(now);
    let inserted = tx
        .execute(
            "INSERT INTO leases (name, holder, expires_at, fencing, acquired_at, renewed_at)
             VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (name) DO NOTHING",
            &params![name, holder, format_time(now + ttl), 1i64, now_s.clone()],
        )
        .await?;
    Ok(inserted == 1
        || take(NAMED, name, holder, now, ttl)
            .set("acquired_at", now_s.clone())
            .set("renewed_at", now_s)
            .execute(tx)
            .await?
            == 1)
}

pub(crate) async fn read_lease(tx: &mut Tx, name: &str) -> Result<Lease, StoreError> {
    read_lease_of(tx, LeaseSort::Named, name).await
}

/// The lease in the row `key` of `sort`'s table, as it stands.
pub(crate) async fn read_lease_of(
    tx: &mut Tx,
    sort: LeaseSort,
    key: &str,
) -> Result<Lease, StoreError> {
    let c = sort.columns();
    let row = tx
        .fetch_one(
            format!(
                "SELECT {} AS holder, {} AS fencing, {} AS expires_at FROM {} WHERE {} = $1",
                c.holder, c.fencing, c.expires, c.table, c.key
            ),
            &params![key],
        )
        .await?;
    Ok(Lease {
        name: key.to_owned(),
        holder: row.opt_text("holder")?.unwrap_or_default(),
        fencing: row.int("fencing")?,
        expires_at: match row.opt_text("expires_at")? {
            Some(text) => parse_time(&text)?,
            None => DateTime::<Utc>::UNIX_EPOCH,
        },
        sort,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_take_binds_every_value_once_in_order() {
        let now = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let write = take(TASK, "t1", "agent-a", now, Duration::seconds(30))
            .set("status", "dispatched")
            .when("status IN (?, ?)", params!["queued", "dispatched"]);
        assert_eq!(
            write.sql(),
            "UPDATE agent_tasks SET lease_holder = $2, lease_expires_at = $3, \
             dispatch_count = dispatch_count + 1, status = $5 WHERE id = $1 AND \
             (lease_holder IS NULL OR lease_expires_at <= $4) AND status IN ($6, $7)"
        );
        assert_eq!(
            write.params,
            params![
                "t1",
                "agent-a",
                "2026-01-01T00:00:30.000000Z",
                "2026-01-01T00:00:00.000000Z",
                "dispatched",
                "queued",
                "dispatched"
            ]
        );
        let renew = renew(
            NAMED,
            "node:x",
            "exec-a",
            Some(3),
            now,
            Duration::seconds(30),
        );
        assert_eq!(
            renew.sql(),
            "UPDATE leases SET expires_at = $2 WHERE name = $1 AND holder = $3 AND \
             fencing = $4 AND expires_at > $5"
        );
    }
}
