//! Polls without a read per poll (seed 000 §6.3 task long-poll and heartbeat).
//!
//! One query per poll step answers, for every node at once, which nodes have a task to claim
//! (`Store::claimable_nodes`: the queued and lease-expired tasks, found through their status
//! index — a handful of rows, however many agents poll). Waiting long-polls of those nodes are
//! woken and claim under their lease (`Store::claim_task`); another poll of the same node that
//! loses the race waits on.
//!
//! Heartbeats: [`Known`] remembers the agent tokens checked (by hash) while the store serial
//! stays the same — a revocation or an enrollment moves it, and it is read every step, so a
//! revoked token stops working within a step — and the nodes that had a task to claim at the
//! last step. A heartbeat of a known agent whose node has nothing to claim is answered from
//! memory.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use uuid::Uuid;

use super::Channel;

#[derive(Debug, Default)]
pub(super) struct Waiters {
    slots: Mutex<HashMap<Uuid, Slot>>,
}

#[derive(Debug)]
struct Slot {
    notify: Arc<Notify>,
    count: usize,
}

/// A registered waiting poll; dropping it unregisters.
pub(super) struct Waiting<'a> {
    waiters: &'a Waiters,
    node: Uuid,
    pub(super) notify: Arc<Notify>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut slots = self.waiters.slots.lock().expect("waiters lock");
        if let Some(slot) = slots.get_mut(&self.node) {
            slot.count -= 1;
            if slot.count == 0 {
                slots.remove(&self.node);
            }
        }
    }
}

impl Waiters {
    pub(super) fn register(&self, node: Uuid) -> Waiting<'_> {
        let mut slots = self.slots.lock().expect("waiters lock");
        let slot = slots.entry(node).or_insert_with(|| Slot {
            notify: Arc::new(Notify::new()),
            count: 0,
        });
        slot.count += 1;
        Waiting {
            waiters: self,
            node,
            notify: slot.notify.clone(),
        }
    }

    fn wake(&self, nodes: &BTreeSet<Uuid>) {
        let slots = self.slots.lock().expect("waiters lock");
        for node in nodes {
            if let Some(slot) = slots.get(node) {
                slot.notify.notify_waiters();
            }
        }
    }

    /// How many polls wait now (for tests and metrics).
    pub(super) fn count(&self) -> usize {
        self.slots
            .lock()
            .expect("waiters lock")
            .values()
            .map(|s| s.count)
            .sum()
    }
}

/// What the channel knows without asking the store.
#[derive(Debug, Default)]
pub(super) struct Known {
    state: Mutex<KnownState>,
}

#[derive(Debug, Default)]
struct KnownState {
    /// The store serial the tokens below were checked under (`None`: not read yet).
    serial: Option<i64>,
    /// Token hash → (node, enrollment) of agent tokens in use.
    tokens: HashMap<String, crate::store::AgentIdentity>,
    /// The nodes with a task to claim at the last step.
    claimable: HashSet<Uuid>,
}

impl Known {
    /// The identity of a token (by hash) checked under the current serial, and whether its
    /// node had a task to claim at the last refresh.
    pub(super) fn token(&self, hash: &str) -> Option<(crate::store::AgentIdentity, bool)> {
        let state = self.state.lock().expect("known lock");
        state.serial?;
        let identity = state.tokens.get(hash)?.clone();
        let claimable = state.claimable.contains(&identity.node_id);
        Some((identity, claimable))
    }

    /// The serial tokens are checked under now (read it before asking the store).
    pub(super) fn current_serial(&self) -> Option<i64> {
        self.state.lock().expect("known lock").serial
    }

    /// A token checked against the store (in use) while the serial was `serial`, for the next
    /// polls — unless the serial moved meanwhile (the check may predate a revocation).
    pub(super) fn remember(
        &self,
        hash: String,
        identity: crate::store::AgentIdentity,
        serial: Option<i64>,
    ) {
        let mut state = self.state.lock().expect("known lock");
        if serial.is_some() && state.serial == serial {
            state.tokens.insert(hash, identity);
        }
    }

    /// The node's tokens changed (an enrollment through this channel): forget them at once.
    pub(super) fn forget_node(&self, node: Uuid) {
        let mut state = self.state.lock().expect("known lock");
        state.tokens.retain(|_, identity| identity.node_id != node);
    }

    /// Take the serial read now: a different one forgets every token.
    fn serial(&self, serial: i64) {
        let mut state = self.state.lock().expect("known lock");
        if state.serial != Some(serial) {
            state.tokens.clear();
            state.serial = Some(serial);
        }
    }

    fn refreshed(&self, claimable: BTreeSet<Uuid>) {
        self.state.lock().expect("known lock").claimable = claimable.into_iter().collect();
    }

    /// A claim found nothing or took the task: the node is not known to have one any more.
    pub(super) fn claimed(&self, node: Uuid) {
        self.state
            .lock()
            .expect("known lock")
            .claimable
            .remove(&node);
    }
}

/// The dispatcher: every `step` while the channel lives.
pub(super) async fn run(channel: Weak<Channel>, step: Duration) {
    let mut tick = tokio::time::interval(step.max(Duration::from_millis(5)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(channel) = channel.upgrade() else {
            return;
        };
        match channel.store.serial_now().await {
            Ok(serial) => channel.known.serial(serial),
            Err(err) => tracing::debug!(error = %err, "agent poll dispatch: serial not read"),
        }
        match channel.store.claimable_nodes().await {
            Ok(ready) => {
                channel.waiters.wake(&ready);
                channel.known.refreshed(ready);
            }
            Err(err) => tracing::debug!(error = %err, "agent poll dispatch: store read failed"),
        }
    }
}
