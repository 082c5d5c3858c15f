//! The state the simulator's request handlers, ticker and simulated agents share: the region
//! behind one lock, the clock, an HTTP client for the agents, and the ticker's wake-up.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::world::World;
use crate::clock::Clock;

/// State shared by the request handlers, the ticker and the agents.
#[derive(Debug)]
pub struct Shared {
    pub(super) world: Mutex<World>,
    pub clock: Arc<dyn Clock>,
    pub http: reqwest::Client,
    pub(super) wake: Notify,
    pub(super) api_hash: String,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, World> {
        // A panic while holding the lock would be a simulator bug; keep serving the data.
        self.world
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on the world after running due background work. Agents that booted meanwhile
    /// are started by the ticker (woken here).
    pub fn with_world<T>(&self, f: impl FnOnce(&mut World) -> T) -> T {
        let now = self.clock.now();
        let mut world = self.lock();
        world.advance(now);
        let result = f(&mut world);
        let woke = !world.outbox.is_empty();
        drop(world);
        if woke {
            self.wake.notify_one();
        }
        result
    }
}
