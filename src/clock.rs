//! Injected time (DESIGN.md §8 "deterministic: injected clock and RNG").
//!
//! Everything that needs "now" takes a `&dyn Clock` (or `Arc<dyn Clock>`) instead of calling
//! `Utc::now()`, so the planner stays pure and the executor, simulator and store can be driven by
//! tokio's paused time or a manual clock in tests.

use std::fmt;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};

/// A source of wall-clock time.
pub trait Clock: Send + Sync + fmt::Debug {
    fn now(&self) -> DateTime<Utc>;
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// Wall-clock time derived from tokio's monotonic clock, so that `tokio::time::pause()` and
/// `advance()` in tests move "now" too. The epoch is fixed at construction.
#[derive(Debug, Clone)]
pub struct TokioClock {
    epoch: DateTime<Utc>,
    start: tokio::time::Instant,
}

impl TokioClock {
    pub fn starting_at(epoch: DateTime<Utc>) -> Self {
        Self {
            epoch,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = tokio::time::Instant::now().duration_since(self.start);
        self.epoch + Duration::from_std(elapsed).unwrap_or(Duration::MAX)
    }
}

/// A clock that only moves when told to (unit tests of time-dependent rules).
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().expect("clock lock");
        *now += by;
    }

    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock().expect("clock lock") = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().expect("clock lock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let clock = ManualClock::new(start);
        assert_eq!(clock.now(), start);
        clock.advance(Duration::minutes(15));
        assert_eq!(clock.now(), start + Duration::minutes(15));
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_time() {
        let start = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let clock = TokioClock::starting_at(start);
        tokio::time::advance(std::time::Duration::from_secs(90)).await;
        assert_eq!(clock.now(), start + Duration::seconds(90));
    }
}
