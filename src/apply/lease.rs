//! The executor's lease (DESIGN.md §4: "a second executor never runs a stage a live holder
//! owns, and a stale one cannot move a node back"): a node's, or — seed 003 — a provisioning
//! job's own row.
//!
//! The lease is named after the node's site and hostname, because the node record only exists
//! from `render_cloud_init` on. It is renewed in the background every third of its TTL, with
//! the executor's other leases in one transaction ([`LeaseKeeper`]); every journal write
//! carries its fence, which the store checks in the write's transaction. A lease held by a
//! dead executor (killed apply) expires after its TTL and is then taken over, with a higher
//! fencing generation.

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

/// A held lease, renewed by its [`LeaseKeeper`].
pub struct NodeLease {
    store: Store,
    current: Arc<Mutex<Lease>>,
    keeper: LeaseKeeper,
    key: u64,
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
    /// live one. It is renewed on its own.
    pub async fn acquire(
        store: &Store,
        target: &LeaseTarget,
        holder: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<NodeLease, LeaseRefusal> {
        LeaseKeeper::new(store, ttl)
            .acquire(target, holder, wait)
            .await
    }

    /// Keep a lease taken elsewhere (a concurrency slot) renewed until it is released.
    pub fn hold(store: &Store, lease: Lease, ttl: Duration) -> NodeLease {
        LeaseKeeper::new(store, ttl).hold(lease)
    }

    /// The fence to pass with every write made under this lease.
    pub fn fence(&self) -> Fence {
        self.current.lock().expect("lease lock").fence()
    }

    /// Stop renewing and give the lease up, so the next executor need not wait for expiry.
    pub async fn release(self) {
        self.keeper.forget(self.key);
        let lease = self.current.lock().expect("lease lock").clone();
        let _ = self.store.release_lease(&lease).await;
    }
}

impl Drop for NodeLease {
    /// A lease dropped without `release` (a panic, an aborted task) stops being renewed and
    /// expires after its TTL, as a killed process's would.
    fn drop(&mut self) {
        self.keeper.forget(self.key);
    }
}

/// Renews a set of held leases of one lifetime, all of them in one store transaction every
/// third of it (an executor with thousands of nodes in flight writes one renewal, not
/// thousands). A lease taken over or released is dropped from the set: the next fenced write
/// under it fails and its holder stops for that node.
#[derive(Clone)]
pub struct LeaseKeeper {
    inner: Arc<Keeper>,
}

struct Keeper {
    store: Store,
    ttl: Duration,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    next_key: u64,
    leases: std::collections::HashMap<u64, Arc<Mutex<Lease>>>,
    /// The renewal task, started with the first lease.
    rounds: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Keeper {
    fn drop(&mut self) {
        if let Some(rounds) = self.held.get_mut().ok().and_then(|held| held.rounds.take()) {
            rounds.abort();
        }
    }
}

impl LeaseKeeper {
    pub fn new(store: &Store, ttl: Duration) -> Self {
        Self {
            inner: Arc::new(Keeper {
                store: store.clone(),
                ttl,
                held: Mutex::new(Held::default()),
            }),
        }
    }

    /// Take the lease of `target` (see [`NodeLease::acquire`]) and keep it renewed.
    pub async fn acquire(
        &self,
        target: &LeaseTarget,
        holder: &str,
        wait: Duration,
    ) -> Result<NodeLease, LeaseRefusal> {
        let (store, ttl) = (&self.inner.store, self.inner.ttl);
        let started = tokio::time::Instant::now();
        let mut store_errors = 0;
        let lease = loop {
            match store.take_lease(target, holder, chrono_ttl(ttl)).await {
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
        Ok(self.hold(lease))
    }

    /// Keep `lease` renewed until the returned handle is released or dropped.
    pub fn hold(&self, lease: Lease) -> NodeLease {
        let current = Arc::new(Mutex::new(lease));
        let mut held = self.inner.held.lock().expect("keeper lock");
        let key = held.next_key;
        held.next_key += 1;
        held.leases.insert(key, current.clone());
        if held.rounds.is_none() {
            held.rounds = Some(tokio::spawn(rounds(Arc::downgrade(&self.inner))));
        }
        NodeLease {
            store: self.inner.store.clone(),
            current,
            keeper: self.clone(),
            key,
        }
    }

    fn forget(&self, key: u64) {
        self.inner
            .held
            .lock()
            .expect("keeper lock")
            .leases
            .remove(&key);
    }

    /// How many leases it keeps.
    pub fn len(&self) -> usize {
        self.inner.held.lock().expect("keeper lock").leases.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn chrono_ttl(ttl: Duration) -> chrono::Duration {
    chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::seconds(60))
}

/// Every third of the TTL, renew every kept lease in one transaction, until the keeper is gone.
async fn rounds(keeper: std::sync::Weak<Keeper>) {
    let Some(ttl) = keeper.upgrade().map(|k| k.ttl) else {
        return;
    };
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + ttl / 3, ttl / 3);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(keeper) = keeper.upgrade() else {
            return;
        };
        let kept: Vec<(u64, Lease)> = keeper
            .held
            .lock()
            .expect("keeper lock")
            .leases
            .iter()
            .map(|(key, lease)| (*key, lease.lock().expect("lease lock").clone()))
            .collect();
        if kept.is_empty() {
            continue;
        }
        let leases: Vec<Lease> = kept.iter().map(|(_, lease)| lease.clone()).collect();
        let renewed = match keeper.store.renew_leases(&leases, chrono_ttl(ttl)).await {
            Ok(renewed) => renewed,
            Err(err) => {
                tracing::warn!(
                    target: "metalform::apply",
                    leases = leases.len(),
                    "lease renewal failed: {err}"
                );
                continue;
            }
        };
        let mut held = keeper.held.lock().expect("keeper lock");
        for ((key, _), outcome) in kept.iter().zip(renewed) {
            match outcome {
                Ok(lease) => {
                    // Released meanwhile: nothing to update.
                    if let Some(current) = held.leases.get(key) {
                        *current.lock().expect("lease lock") = lease;
                    }
                }
                // Taken over: the next fenced write fails and the executor stops for this node.
                Err(_) => {
                    held.leases.remove(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_round_renews_every_kept_lease_and_drops_a_lost_one() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("store.db").display());
        let store = Store::open(&url, Arc::new(crate::clock::SystemClock))
            .await
            .unwrap();
        let ttl = Duration::from_millis(600);
        let keeper = LeaseKeeper::new(&store, ttl);
        let mut held = Vec::new();
        for host in ["a", "b", "c"] {
            let target = LeaseTarget::Named(onboarding_lease_name("dc1", host));
            held.push(keeper.acquire(&target, "exec-a", ttl).await.unwrap());
        }
        assert_eq!(keeper.len(), 3);
        let current = |lease: &NodeLease| lease.current.lock().unwrap().clone();
        let taken: Vec<Lease> = held.iter().map(current).collect();
        // b's lease ends behind its holder's back (as a takeover would).
        assert!(store.release_lease(&taken[1]).await.unwrap());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while keeper.len() == 3 {
            assert!(std::time::Instant::now() < deadline, "no renewal round");
            tokio::time::sleep(ttl / 10).await;
        }
        // The round that found b lost renewed a and c: later expiry, same generation, as
        // stored; b is dropped from the set, its fence unchanged.
        assert_eq!(keeper.len(), 2);
        for i in [0, 2] {
            let now = current(&held[i]);
            assert!(now.expires_at > taken[i].expires_at, "{now:?}");
            assert_eq!(now.fence(), taken[i].fence());
            assert_eq!(store.lease(&now.name).await.unwrap(), Some(now));
        }
        assert_eq!(current(&held[1]), taken[1]);
        assert_eq!(store.lease(&taken[1].name).await.unwrap(), None);
        // Released or dropped handles leave the set.
        held.pop().unwrap().release().await;
        assert_eq!(keeper.len(), 1);
        drop(held);
        assert!(keeper.is_empty());
    }
}
