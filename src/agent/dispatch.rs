//! Waking waiting long-polls (seed 000 §6.3 task long-poll): instead of every waiting poll
//! asking the store for its node's tasks every step (1,000 polls, four reads a second each),
//! one query per step asks for all waiting nodes at once (`Store::nodes_with_claimable_tasks`)
//! and wakes the polls of the nodes that have something to claim. A woken poll claims under
//! its lease (`Store::claim_task`); another poll of the same node that loses the race waits on.

use std::collections::{BTreeSet, HashMap};
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

    fn waiting(&self) -> Vec<Uuid> {
        self.slots
            .lock()
            .expect("waiters lock")
            .keys()
            .copied()
            .collect()
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

/// The dispatcher: every `step` while the channel lives.
pub(super) async fn run(channel: Weak<Channel>, step: Duration) {
    let mut tick = tokio::time::interval(step.max(Duration::from_millis(5)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(channel) = channel.upgrade() else {
            return;
        };
        let nodes = channel.waiters.waiting();
        if nodes.is_empty() {
            continue;
        }
        match channel.store.nodes_with_claimable_tasks(&nodes).await {
            Ok(ready) => channel.waiters.wake(&ready),
            Err(err) => tracing::debug!(error = %err, "agent poll dispatch: store read failed"),
        }
    }
}
