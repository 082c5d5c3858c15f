//! The executor's lease (DESIGN.md §4: "a second executor never runs a stage a live holder
//! owns, and a stale one cannot move a node back"): a node's, or — seed 003 — a provisioning
//! job's own row.
//!
//! The lease is named after the node's site and hostname, because the node record only exists
//! from `render_cloud_init` on. It is renewed in the background every third of its TTL; every
//! journal write carries its fence, which the store checks in the write's transaction. A lease
//! held by a dead executor (killed apply) expires after its TTL and is then taken over, with a
//! higher fencing generation.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::store::{Fence, Lease, LeaseTarget, Store, StoreError};

/// The lease name of one node's onboarding executor.
pub fn onboarding_lease_name(site: &str, hostname: &str) -> String {
    format!("onboarding:{site}/{hostname}")
}

/// Why a lease could not be taken.
#[derive(Debug)]
pub enum LeaseRefusal {
    /// Another executor holds it and keeps renewing it.
    Busy {
        holder: String,
        until: String,
    },
    Store(StoreError),
}

impl LeaseRefusal {
    /// Why the node was left alone, for progress lines and reports.
    pub fn reason(&self) -> String {
        match self {
            LeaseRefusal::Busy { holder, until } => {
                format!("another executor ({holder}) is working on this node (lease until {until})")
            }
            LeaseRefusal::Store(err) => format!("cannot take the node lease: {err}"),
        }
    }
}

/// A held lease with its heartbeat.
pub struct NodeLease {
    store: Store,
    current: Arc<Mutex<Lease>>,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl NodeLease {
    /// The lease of one node (onboarding and decommission share it: one job runs on a node
    /// at a time), with a `ttl` lifetime, waiting up to 1.5 × `ttl` for a dead holder's lease
    /// to expire.
    pub async fn acquire_node(
        store: &Store,
        site: &str,
        hostname: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<NodeLease, LeaseRefusal> {
        let target = LeaseTarget::Named(onboarding_lease_name(site, hostname));
        Self::acquire(store, &target, holder, ttl, ttl + ttl / 2).await
    }

    /// Take the lease of `target` (a named lease, or a provisioning job's row), waiting up to
    /// `wait` for a holder that stopped renewing (its lease expires) before giving up on a
    /// live one.
    pub async fn acquire(
        store: &Store,
        target: &LeaseTarget,
        holder: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<NodeLease, LeaseRefusal> {
        let chrono_ttl = chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::seconds(60));
        let started = tokio::time::Instant::now();
        let mut store_errors = 0;
        let lease = loop {
            match store.take_lease(target, holder, chrono_ttl).await {
                Ok(lease) => break lease,
                Err(StoreError::LeaseHeld {
                    holder, expires_at, ..
                }) => {
                    if started.elapsed() >= wait {
                        return Err(LeaseRefusal::Busy {
                            holder,
                            until: expires_at,
                        });
                    }
                }
                Err(err) if err.is_transient() && store_errors < 5 => store_errors += 1,
                Err(err) => return Err(LeaseRefusal::Store(err)),
            }
            tokio::time::sleep((ttl / 8).clamp(Duration::from_millis(20), Duration::from_secs(5)))
                .await;
        };
        Ok(Self::hold(store, lease, ttl))
    }

    /// Keep a lease taken elsewhere (a concurrency slot) renewed until it is released.
    pub fn hold(store: &Store, lease: Lease, ttl: Duration) -> NodeLease {
        let chrono_ttl = chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::seconds(60));
        let current = Arc::new(Mutex::new(lease));
        let heartbeat = tokio::spawn(heartbeat(store.clone(), current.clone(), ttl, chrono_ttl));
        NodeLease {
            store: store.clone(),
            current,
            heartbeat,
        }
    }

    /// The fence to pass with every write made under this lease.
    pub fn fence(&self) -> Fence {
        self.current.lock().expect("lease lock").fence()
    }

    /// Stop renewing and give the lease up, so the next executor need not wait for expiry.
    pub async fn release(self) {
        self.heartbeat.abort();
        let lease = self.current.lock().expect("lease lock").clone();
        let _ = self.store.release_lease(&lease).await;
    }
}

impl Drop for NodeLease {
    /// A lease dropped without `release` (a panic, an aborted task) stops being renewed and
    /// expires after its TTL, as a killed process's would.
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

async fn heartbeat(
    store: Store,
    current: Arc<Mutex<Lease>>,
    ttl: Duration,
    chrono_ttl: chrono::Duration,
) {
    loop {
        tokio::time::sleep(ttl / 3).await;
        let lease = current.lock().expect("lease lock").clone();
        match store.renew_lease(&lease, chrono_ttl).await {
            Ok(renewed) => *current.lock().expect("lease lock") = renewed,
            // Taken over: the next fenced write fails and the executor stops for this node.
            Err(StoreError::LeaseLost { .. }) => return,
            Err(err) => tracing::warn!(
                target: "metalform::apply",
                lease = %lease.name,
                "lease renewal failed: {err}"
            ),
        }
    }
}
