//! In-process notices from the agent channel (seed 000 §4.3 WaitForAgentEnrollment; issue 17
//! "Big waves"): a stage waiting on a node's agent is woken when this process's listener
//! records that agent's enrollment, instead of reading the store every poll step. Ten thousand
//! nodes waiting for their agents at once made ten thousand store reads (and full MAAS
//! machine reads) per poll step.
//!
//! The store stays the source of truth: a notice only says "look again now", and the waiting
//! stage still reads the enrollment from the store. An agent that enrolled through another
//! replica's listener is announced through PostgreSQL (the daemon relays
//! `Store::enrollment_notices` here); one whose notice was lost, and any on a store without
//! notices, is seen at the slow fallback poll ([`AgentSignals::fallback`]): sixty poll
//! intervals, at most 30 s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use uuid::Uuid;

/// The fallback poll of a wait that the listener wakes, in poll intervals: how late an
/// enrollment recorded by another replica (or another process on the same store) is noticed,
/// at worst. Capped by [`MAX_FALLBACK`].
pub const FALLBACK_POLLS: u32 = 60;
/// The longest fallback poll (the default poll interval of 10 s gives this).
pub const MAX_FALLBACK: Duration = Duration::from_secs(30);

/// Who waits on which node's agent. Cheap to clone; clones share the waiters.
#[derive(Clone, Default)]
pub struct AgentSignals {
    waiters: Arc<Mutex<HashMap<Uuid, Weak<Notify>>>>,
    /// `None`: [`FALLBACK_POLLS`] poll intervals, at most [`MAX_FALLBACK`].
    fallback: Option<Duration>,
}

impl std::fmt::Debug for AgentSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSignals")
            .field("waiting", &self.waiting())
            .field("fallback", &self.fallback)
            .finish()
    }
}

impl AgentSignals {
    /// The same waiters, with a fixed fallback poll.
    pub fn with_fallback(&self, fallback: Duration) -> Self {
        Self {
            waiters: self.waiters.clone(),
            fallback: Some(fallback),
        }
    }

    /// How long a wait this wakes sleeps at most before it reads the store anyway, for an
    /// executor polling every `poll` (never less than `poll`).
    pub fn fallback(&self, poll: Duration) -> Duration {
        self.fallback
            .unwrap_or_else(|| (poll * FALLBACK_POLLS).min(MAX_FALLBACK))
            .max(poll)
    }

    /// Start watching `node`'s agent. Watch before reading the store: a notice that comes
    /// between the read and the sleep is kept, so the sleep ends at once.
    pub fn watch(&self, node: Uuid) -> AgentWatch {
        let mut waiters = self.waiters.lock().expect("agent signals lock");
        let notify = match waiters.get(&node).and_then(Weak::upgrade) {
            Some(notify) => notify,
            None => {
                let notify = Arc::new(Notify::new());
                waiters.insert(node, Arc::downgrade(&notify));
                notify
            }
        };
        AgentWatch {
            node,
            notify,
            signals: self.clone(),
        }
    }

    /// Something of `node`'s agent was recorded in the store (it enrolled): wake whoever
    /// watches it. Nobody watching: nothing to do (the next watcher reads the store first).
    pub fn notify(&self, node: Uuid) {
        let waiters = self.waiters.lock().expect("agent signals lock");
        if let Some(notify) = waiters.get(&node).and_then(Weak::upgrade) {
            // One stored permit: a notice before the watcher sleeps is not lost.
            notify.notify_one();
        }
    }

    /// How many nodes are watched now.
    pub fn waiting(&self) -> usize {
        self.waiters.lock().map(|w| w.len()).unwrap_or_default()
    }
}

/// A watch on one node's agent, held by a waiting stage until its sleep ends.
pub struct AgentWatch {
    node: Uuid,
    notify: Arc<Notify>,
    signals: AgentSignals,
}

impl Clone for AgentWatch {
    fn clone(&self) -> Self {
        // Under the lock, as in `watch`: a drop in between sees this count.
        let _waiters = self.signals.waiters.lock().expect("agent signals lock");
        Self {
            node: self.node,
            notify: self.notify.clone(),
            signals: self.signals.clone(),
        }
    }
}

/// Two watches are equal when they watch the same node through the same signals.
impl PartialEq for AgentWatch {
    fn eq(&self, other: &Self) -> bool {
        self.node == other.node && Arc::ptr_eq(&self.notify, &other.notify)
    }
}

impl std::fmt::Debug for AgentWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentWatch")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl AgentWatch {
    /// Until the node's agent is notified, or the fallback poll is due (`fallback`, or sooner).
    pub async fn wait(&self, fallback: Duration) {
        let _ = tokio::time::timeout(fallback, self.notify.notified()).await;
    }

    /// The fallback poll of the signals this watch came from ([`AgentSignals::fallback`]).
    pub fn fallback(&self, poll: Duration) -> Duration {
        self.signals.fallback(poll)
    }
}

impl Drop for AgentWatch {
    fn drop(&mut self) {
        let mut waiters = self.signals.waiters.lock().expect("agent signals lock");
        // The last watch of the node leaves the map (another pass of the same node may have
        // taken a watch of its own meanwhile; it keeps the entry).
        if Arc::strong_count(&self.notify) == 1 {
            waiters.remove(&self.node);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_notice_before_the_sleep_is_kept_and_only_the_watched_node_wakes() {
        let signals = AgentSignals::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let watch_a = signals.watch(a);
        let watch_b = signals.watch(b);
        assert_eq!(signals.waiting(), 2);
        signals.notify(a);
        // Already notified: returns before the hour is out.
        tokio::time::timeout(
            Duration::from_secs(5),
            watch_a.wait(Duration::from_secs(3600)),
        )
        .await
        .expect("a notice given before the wait ends it");
        // b was not notified: its wait runs to its fallback.
        let paused = tokio::time::timeout(
            Duration::from_millis(50),
            watch_b.wait(Duration::from_secs(3600)),
        );
        assert!(paused.await.is_err(), "b was never notified");
        drop((watch_a, watch_b));
        assert_eq!(signals.waiting(), 0, "the last watch leaves the map");
    }

    #[tokio::test]
    async fn a_notice_with_nobody_watching_is_dropped() {
        let signals = AgentSignals::default();
        let node = Uuid::new_v4();
        signals.notify(node);
        assert_eq!(signals.waiting(), 0);
        let watch = signals.watch(node);
        let waited = tokio::time::timeout(
            Duration::from_millis(50),
            watch.wait(Duration::from_secs(3600)),
        );
        assert!(
            waited.await.is_err(),
            "a notice before the watch is not kept: the watcher reads the store first"
        );
    }

    #[test]
    fn the_fallback_follows_the_poll_interval_up_to_its_cap() {
        let signals = AgentSignals::default();
        let ms = Duration::from_millis;
        assert_eq!(signals.fallback(ms(40)), ms(2_400));
        assert_eq!(signals.fallback(ms(500)), MAX_FALLBACK);
        assert_eq!(
            signals.fallback(Duration::from_secs(60)),
            Duration::from_secs(60)
        );
        assert_eq!(signals.with_fallback(ms(7)).fallback(ms(5)), ms(7));
    }

    #[tokio::test]
    async fn two_watches_of_one_node_share_the_entry() {
        let signals = AgentSignals::default();
        let node = Uuid::new_v4();
        let first = signals.watch(node);
        let second = signals.watch(node);
        drop(first);
        assert_eq!(signals.waiting(), 1, "the second watch keeps the entry");
        drop(second);
        assert_eq!(signals.waiting(), 0);
    }
}
