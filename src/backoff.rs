//! Capped exponential backoff with jitter (DESIGN.md §4, seed 000 §4.6): the one implementation
//! behind every wait after a failure — retried MAAS and Redfish requests, the job engine's
//! stage retries, event delivery to a sink that is down, and jobs that failed retryably
//! waiting for their next try.
//!
//! It computes a delay from a failure count and a uniform sample rather than iterating a
//! schedule, because the count is often persisted (a job's failures survive a restart) and
//! the randomness is injected (seeded per node, DESIGN.md §8). `backon` was considered: its
//! builders yield an iterator of delays from a fresh start with jitter drawn from their own
//! generator, added on top of the delay (so past the cap), and cannot take a `Retry-After`
//! floor; computing "the delay after failure n" from a stored n is not what it offers.

use std::time::Duration;

/// Doubling from `base` after each failure, never more than `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Backoff {
    pub const fn new(base: Duration, cap: Duration) -> Self {
        Self { base, cap }
    }

    /// The un-jittered wait after `failures` failures in a row (1 = the first):
    /// `base · 2^(failures-1)`, at most `cap`; nothing before any failure.
    pub fn ceiling(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let factor = 1u32 << failures.saturating_sub(1).min(30);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The wait after `failures` failures, given a uniform sample `unit` in `[0, 1)`: in
    /// `[ceiling/2, ceiling)` ("equal jitter": never shorter than half the backoff, so a fleet
    /// of failing clients spreads out without coming back early).
    pub fn jittered(&self, failures: u32, unit: f64) -> Duration {
        let ceiling = self.ceiling(failures);
        ceiling / 2 + self.spread(failures, unit)
    }

    /// The jitter part alone, up to half the ceiling: what goes on top of a wait the other side
    /// asked for (`Retry-After`), so that clients told the same wait do not return together.
    pub fn spread(&self, failures: u32, unit: f64) -> Duration {
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.0
        };
        (self.ceiling(failures) / 2).mul_f64(unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn doubles_from_the_first_failure_up_to_the_cap() {
        let b = Backoff::new(s(1), s(10));
        let ceilings: Vec<_> = (0..7).map(|n| b.ceiling(n)).collect();
        assert_eq!(ceilings, [s(0), s(1), s(2), s(4), s(8), s(10), s(10)]);
        assert_eq!(b.ceiling(u32::MAX), s(10));
        assert_eq!(
            Backoff::new(Duration::MAX, Duration::MAX).ceiling(40),
            Duration::MAX
        );
    }

    #[test]
    fn jitter_stays_in_the_upper_half() {
        let b = Backoff::new(s(2), s(60));
        for failures in 1..12 {
            let ceiling = b.ceiling(failures);
            assert_eq!(b.jittered(failures, 0.0), ceiling / 2);
            for unit in [0.25, 0.5, 0.999, 1.0, f64::NAN, -3.0] {
                let d = b.jittered(failures, unit);
                assert!(d >= ceiling / 2 && d <= ceiling, "{failures} {unit}: {d:?}");
            }
        }
        assert_eq!(b.jittered(3, 0.5), s(4) + s(2));
    }
}
