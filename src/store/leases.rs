//! Named leases with fencing generations (seed 003 "Leasing"; DESIGN.md §4).
//!
//! Acquire is an atomic conditional write (insert if absent, else take over only when released
//! or expired); renew and release are conditional on the holder and the fencing generation;
//! every takeover bumps the generation. A write made under a lease passes its [`Fence`], which
//! the store re-checks inside the write's transaction, so a holder whose lease was stolen after
//! expiry cannot write any more.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use super::db::{Tx, params};
use super::{Store, StoreError, format_time, parse_time};

/// A lease held by this process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lease {
    pub name: String,
    pub holder: String,
    /// Grows by one on every takeover; a write carrying an older value is refused.
    pub fencing: i64,
    pub expires_at: DateTime<Utc>,
}

impl Lease {
    /// The token to pass with writes made under this lease.
    pub fn fence(&self) -> Fence {
        Fence {
            name: self.name.clone(),
            holder: self.holder.clone(),
            fencing: self.fencing,
        }
    }
}

/// Proof of holding a lease, checked by fenced writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fence {
    pub name: String,
    pub holder: String,
    pub fencing: i64,
}

/// The lease name used for one node's executor (000 §4.4: one stage runner per node).
pub fn node_lease_name(node: uuid::Uuid) -> String {
    format!("node:{node}")
}

/// Refuse unless `fence` is still the live holder. The no-op update takes the row lock on
/// PostgreSQL, so a concurrent steal waits for this transaction to finish.
pub(crate) async fn check_fence(
    tx: &mut Tx,
    fence: &Fence,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let held = tx
        .execute(
            "UPDATE leases SET renewed_at = renewed_at
             WHERE name = $1 AND holder = $2 AND fencing = $3 AND expires_at > $4",
            &params![
                fence.name.clone(),
                fence.holder.clone(),
                fence.fencing,
                format_time(now)
            ],
        )
        .await?;
    if held == 1 {
        Ok(())
    } else {
        Err(StoreError::LeaseLost {
            name: fence.name.clone(),
            holder: fence.holder.clone(),
            fencing: fence.fencing,
        })
    }
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
        let expires = format_time(now + ttl);
        let now_s = format_time(now);
        let mut tx = self.pool.write().await?;
        let inserted = tx
            .execute(
                "INSERT INTO leases (name, holder, expires_at, fencing, acquired_at, renewed_at)
                 VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (name) DO NOTHING",
                &params![name, holder, expires.clone(), 1i64, now_s.clone()],
            )
            .await?;
        if inserted == 0 {
            let taken = tx
                .execute(
                    "UPDATE leases SET holder = $1, expires_at = $2, fencing = fencing + 1,
                        acquired_at = $3, renewed_at = $3
                     WHERE name = $4 AND (holder IS NULL OR expires_at <= $3)",
                    &params![holder, expires.clone(), now_s.clone(), name],
                )
                .await?;
            if taken == 0 {
                let renewed = tx
                    .execute(
                        "UPDATE leases SET expires_at = $1, renewed_at = $2
                         WHERE name = $3 AND holder = $4 AND expires_at > $2",
                        &params![expires, now_s, name, holder],
                    )
                    .await?;
                if renewed == 0 {
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
            }
        }
        let lease = read_lease(&mut tx, name).await?;
        tx.commit().await?;
        Ok(lease)
    }

    /// Extend a held lease (heartbeat). Refused with [`StoreError::LeaseLost`] once it expired
    /// or was taken over.
    pub async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        let renewed = tx
            .execute(
                "UPDATE leases SET expires_at = $1, renewed_at = $2
                 WHERE name = $3 AND holder = $4 AND fencing = $5 AND expires_at > $2",
                &params![
                    format_time(now + ttl),
                    format_time(now),
                    lease.name.clone(),
                    lease.holder.clone(),
                    lease.fencing,
                ],
            )
            .await?;
        if renewed == 0 {
            return Err(StoreError::LeaseLost {
                name: lease.name.clone(),
                holder: lease.holder.clone(),
                fencing: lease.fencing,
            });
        }
        let lease = read_lease(&mut tx, &lease.name).await?;
        tx.commit().await?;
        Ok(lease)
    }

    /// Give a lease up so the next acquirer need not wait for expiry. Releasing a lease that
    /// was already taken over is a no-op (returns `false`).
    pub async fn release_lease(&self, lease: &Lease) -> Result<bool, StoreError> {
        let mut tx = self.pool.write().await?;
        let released = tx
            .execute(
                "UPDATE leases SET holder = NULL, expires_at = $1
                 WHERE name = $2 AND holder = $3 AND fencing = $4",
                &params![
                    format_time(self.now()),
                    lease.name.clone(),
                    lease.holder.clone(),
                    lease.fencing
                ],
            )
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
            })),
            _ => Ok(None),
        }
    }

    /// Check a fence outside any other write (a cheap "am I still the holder?").
    pub async fn check_fence(&self, fence: &Fence) -> Result<(), StoreError> {
        let mut tx = self.pool.write().await?;
        check_fence(&mut tx, fence, self.now()).await?;
        tx.commit().await
    }
}

async fn read_lease(tx: &mut Tx, name: &str) -> Result<Lease, StoreError> {
    let row = tx
        .fetch_one("SELECT * FROM leases WHERE name = $1", &params![name])
        .await?;
    Ok(Lease {
        name: name.to_owned(),
        holder: row.opt_text("holder")?.unwrap_or_default(),
        fencing: row.int("fencing")?,
        expires_at: parse_time(&row.text("expires_at")?)?,
    })
}
