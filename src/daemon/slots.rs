//! `maxParallel` across replicas (seed 000 §4.4; docs/ha.md "Limits"): the profile's slots are
//! leases in the store, shared by every replica. The executor asks for one where a node's run
//! needs it (an onboarding at the deploy, or when its machine must boot before), so the nodes
//! a replica admits ahead prepare meanwhile, as `apply` does; a run with no profile (an
//! agent-only decommission) runs alone under a slot of its own taken before it starts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::sharing::Sharing;
use crate::apply::{HeldSlot, NodeLease, SharedSlots};
use crate::model::SiteName;
use crate::store::{SlotOutcome, SlotPick, SlotRequest, Store};

/// The slots of every (site, profile) group, counted in the store, and the nodes of this
/// replica admitted to run.
pub(super) struct StoreSlots {
    store: Store,
    sharing: Arc<Sharing>,
    ttl: Duration,
    /// Between asks of a waiting group, when no slot of this replica frees first.
    pause: Duration,
    gates: Mutex<BTreeMap<String, Arc<SlotGate>>>,
    admissions: Mutex<BTreeMap<String, Arc<Admission>>>,
}

/// The runs of one group this replica lets start, for a kind that prepares ahead (onboardings)
/// or one that does not (decommissions): `limit` at first; the former as many again once every
/// slot of the group is taken, so the first nodes prepare alone and deploy sooner.
struct Admission {
    runs: Arc<Semaphore>,
    limit: usize,
    /// Whether the nodes ahead are admitted (or never will be).
    ahead: std::sync::atomic::AtomicBool,
}

/// The nodes of one (site, profile) group waiting for a slot on this replica. They queue for
/// their turn in order and only the first asks the store, so a wave of thousands of waiting
/// nodes costs one store query per poll step, not one per node; a slot this replica frees
/// wakes the first at once.
#[derive(Default)]
struct SlotGate {
    turn: tokio::sync::Mutex<()>,
    freed: Notify,
    /// The group's slots this replica holds.
    held: std::sync::atomic::AtomicUsize,
}

/// A slot of the store, renewed while held.
pub(super) struct StoreSlot {
    lease: NodeLease,
    gate: Arc<SlotGate>,
}

impl StoreSlot {
    /// Give the slot back and wake the next node of this replica waiting for one.
    pub(super) async fn release(self) {
        self.lease.release().await;
        self.gate
            .held
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.gate.freed.notify_one();
    }
}

impl HeldSlot for StoreSlot {
    fn release(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(StoreSlot::release(*self))
    }
}

impl StoreSlots {
    pub(super) fn new(
        store: Store,
        sharing: Arc<Sharing>,
        ttl: Duration,
        poll_interval: Duration,
    ) -> Self {
        Self {
            store,
            sharing,
            ttl,
            pause: poll_interval.clamp(Duration::from_millis(100), Duration::from_secs(1)),
            gates: Mutex::new(BTreeMap::new()),
            admissions: Mutex::new(BTreeMap::new()),
        }
    }

    /// Wait until a node that starts a job may start on this replica: `limit` runs of its
    /// group at once, twice as many for a kind that `prepares_ahead` once every slot is taken.
    /// Kept until dropped.
    pub(super) async fn admit(
        &self,
        group: &str,
        limit: u32,
        prepares_ahead: bool,
    ) -> Option<OwnedSemaphorePermit> {
        let limit = limit.max(1) as usize;
        let admission = self
            .admissions
            .lock()
            .expect("lock")
            .entry(admission_key(group, limit, prepares_ahead))
            .or_insert_with(|| {
                Arc::new(Admission {
                    runs: Arc::new(Semaphore::new(limit)),
                    limit,
                    ahead: (!prepares_ahead).into(),
                })
            })
            .clone();
        admission.runs.clone().acquire_owned().await.ok()
    }

    /// Every slot of `group` is taken (this replica holds them all, or a node of it found none
    /// free): the onboardings ahead may start.
    fn all_taken(&self, group: &str, limit: u32) {
        let key = admission_key(group, limit.max(1) as usize, true);
        let admission = self.admissions.lock().expect("lock").get(&key).cloned();
        if let Some(admission) = admission
            && !admission
                .ahead
                .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            admission.runs.add_permits(admission.limit);
        }
    }

    /// Whether the node `label` (`site/hostname`) is no longer this replica's to run: its site
    /// went to another replica, or another replica holds the node's lease.
    pub(super) async fn elsewhere(&self, label: &str) -> bool {
        let Some((site, hostname)) = label.split_once('/') else {
            return true;
        };
        let node = crate::apply::onboarding_lease_name(site, hostname);
        !self.sharing.holds(&SiteName::new(site))
            || matches!(
                self.store.lease(&node).await,
                Ok(Some(lease)) if lease.holder != self.sharing.replica()
            )
    }

    /// Wait for a free slot of `group`; `None` when the node is no longer this replica's to
    /// run.
    pub(super) async fn take(&self, group: &str, parallel: u32, label: &str) -> Option<StoreSlot> {
        let (site, hostname) = label.split_once('/')?;
        let gate = self
            .gates
            .lock()
            .expect("lock")
            .entry(group.to_owned())
            .or_default()
            .clone();
        let replica = self.sharing.replica();
        let ttl = chrono::Duration::from_std(self.ttl).unwrap_or(chrono::Duration::seconds(60));
        let ask = SlotRequest {
            group,
            limit: parallel,
            site,
            hostname,
        };
        let take =
            async |pick: SlotPick| match self.store.acquire_slot(&ask, pick, replica, ttl).await {
                Ok(outcome) => outcome,
                Err(err) => {
                    tracing::warn!(group, error = %err, "cannot take a concurrency slot; retrying");
                    SlotOutcome::Busy
                }
            };
        // A node whose run stopped mid-operation (its replica died or stalled) takes back the
        // slot it ran under, ahead of the queue: the slot is kept for it, and nodes queued
        // before it could otherwise wait on it for ever.
        let lease = loop {
            if self.elsewhere(label).await {
                return None;
            }
            match take(SlotPick::Left).await {
                SlotOutcome::Taken(lease) => break Some(lease),
                SlotOutcome::NoneLeft => break None,
                SlotOutcome::Busy => tokio::time::sleep(self.pause).await,
            }
        };
        let _turn;
        let lease = match lease {
            Some(lease) => lease,
            None => {
                _turn = gate.turn.lock().await;
                loop {
                    if self.elsewhere(label).await {
                        return None;
                    }
                    if let SlotOutcome::Taken(lease) = take(SlotPick::Free).await {
                        break lease;
                    }
                    self.all_taken(group, parallel);
                    // Another replica's slots free without telling this one: look again after
                    // a pause.
                    tokio::select! {
                        _ = tokio::time::sleep(self.pause) => {}
                        _ = gate.freed.notified() => {}
                    }
                }
            }
        };
        let slot = StoreSlot {
            lease: NodeLease::hold(&self.store, lease, self.ttl),
            gate: gate.clone(),
        };
        let held = gate.held.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        if held >= parallel as usize {
            self.all_taken(group, parallel);
        }
        // Another replica may have taken the node while this one waited.
        if self.elsewhere(label).await {
            slot.release().await;
            return None;
        }
        Some(slot)
    }
}

fn admission_key(group: &str, limit: usize, prepares_ahead: bool) -> String {
    let kind = if prepares_ahead { "ahead" } else { "alone" };
    format!("{kind}:{group}#{limit}")
}

impl SharedSlots for StoreSlots {
    fn take<'a>(
        &'a self,
        group: &'a str,
        parallel: usize,
        label: &'a str,
    ) -> BoxFuture<'a, Option<Box<dyn HeldSlot>>> {
        Box::pin(async move {
            let parallel = u32::try_from(parallel).unwrap_or(u32::MAX);
            let slot = StoreSlots::take(self, group, parallel, label).await?;
            Some(Box::new(slot) as Box<dyn HeldSlot>)
        })
    }
}
