//! Coalesced heartbeats (seed 000 §6.3: "the agent polls …/tasks/wait: this is effectively a
//! heartbeat"). Every authenticated call is agent contact; writing each one would cost a store
//! write per poll (10,000 agents every 30 s: 333 writes a second). Contacts are noted in memory,
//! newest per node, and written every flush interval in one transaction, never moving a
//! node's last contact back.
//!
//! What stays true across a restart: the store holds every contact up to the last flush, and
//! the channel flushes when it closes, so a graceful restart loses none and a crash at most one
//! interval (seconds, against a heartbeat threshold of minutes). A node whose agent went quiet
//! before the restart is as quiet in the store after it: nothing is reset at start. The first
//! use of a new agent token is written at once, because the enrollment replay rule
//! (docs/agent-protocol.md "A lost answer") asks whether the token was ever used.

use std::collections::HashMap;
use std::sync::{Mutex, Weak};
use std::time::Duration;

use uuid::Uuid;

use super::Channel;
use crate::store::{AgentContact, StoreError};

/// Contacts noted since the last flush: the newest per node.
#[derive(Debug, Default)]
pub(super) struct ContactBook {
    pending: Mutex<HashMap<Uuid, AgentContact>>,
}

impl ContactBook {
    pub(super) fn note(&self, contact: AgentContact) {
        let mut pending = self.pending.lock().expect("contacts lock");
        keep_newest(&mut pending, contact);
    }

    fn take(&self) -> Vec<AgentContact> {
        let mut pending = self.pending.lock().expect("contacts lock");
        let mut batch: Vec<AgentContact> = pending.drain().map(|(_, c)| c).collect();
        // A stable order: the same rows lock in the same order on every flush.
        batch.sort_by_key(|c| c.node_id);
        batch
    }

    /// A batch that could not be written goes back (newer notes win).
    fn put_back(&self, batch: Vec<AgentContact>) {
        let mut pending = self.pending.lock().expect("contacts lock");
        for contact in batch {
            keep_newest(&mut pending, contact);
        }
    }
}

fn keep_newest(pending: &mut HashMap<Uuid, AgentContact>, contact: AgentContact) {
    match pending.get_mut(&contact.node_id) {
        Some(known) if known.at > contact.at => {}
        Some(known) => *known = contact,
        None => {
            pending.insert(contact.node_id, contact);
        }
    }
}

/// Write what is noted, in one transaction.
pub(super) async fn flush(channel: &Channel) -> Result<usize, StoreError> {
    let batch = channel.contacts.take();
    if batch.is_empty() {
        return Ok(0);
    }
    let n = batch.len();
    match channel.store.record_agent_contacts(&batch).await {
        Ok(()) => Ok(n),
        Err(err) => {
            channel.contacts.put_back(batch);
            Err(err)
        }
    }
}

/// The flusher: every `interval` while the channel lives.
pub(super) async fn run(channel: Weak<Channel>, interval: Duration) {
    let mut tick = tokio::time::interval(interval.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(channel) = channel.upgrade() else {
            return;
        };
        match flush(&channel).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(contacts = n, "agent contacts written"),
            Err(err) => {
                tracing::warn!(error = %err, "agent contacts not written; kept for the next flush")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn contact(node: Uuid, minute: u32) -> AgentContact {
        AgentContact {
            node_id: node,
            credential: None,
            at: Utc.with_ymd_and_hms(2026, 3, 1, 8, minute, 0).unwrap(),
        }
    }

    #[test]
    fn the_newest_contact_of_a_node_wins_even_when_a_batch_comes_back() {
        let book = ContactBook::default();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        book.note(contact(a, 1));
        book.note(contact(a, 3));
        book.note(contact(a, 2));
        book.note(contact(b, 1));
        let batch = book.take();
        assert_eq!(batch, vec![contact(a, 3), contact(b, 1)]);
        assert!(book.take().is_empty());
        // A failed flush puts its batch back; what was noted meanwhile is newer and stays.
        book.note(contact(b, 5));
        book.put_back(batch);
        assert_eq!(book.take(), vec![contact(a, 3), contact(b, 5)]);
    }
}
