//! Retry policy for MAAS calls (API_REFERENCE §1 "Two kinds of 409"; seed 000 §4.6).
//!
//! Capped exponential backoff with jitter, honouring `Retry-After`. Which failures are retried
//! depends on whether the request is idempotent: GETs (and PUT updates) retry on every
//! transient failure; non-idempotent POSTs only when MAAS provably did not apply them. The
//! delay computation is pure; randomness and sleeping are injected so tests are deterministic.
//!
//! How long one attempt may take depends on what it does (issue 16 point 7): a read of one
//! object answers in well under a second, so a hung one is abandoned after `read_timeout` and
//! retried early; a write gets `write_timeout`; only listings that grow with the site get the
//! client's whole-request timeout.

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How often and how patiently a call is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Requests per call, including the first (1 = never retry).
    pub max_attempts: u32,
    /// Backoff before the first retry, doubled for each further retry.
    pub base_delay: Duration,
    /// Upper bound of the exponential backoff.
    pub max_delay: Duration,
    /// A `Retry-After` longer than this is not waited for inside the client: the call fails
    /// with a transient error carrying `retry_after`, and the caller reschedules.
    pub max_retry_after: Duration,
    /// One attempt of a read of one object (a machine, its interfaces, the version, whoami).
    /// Reads are idempotent: a hung one is abandoned after this and retried.
    pub read_timeout: Duration,
    /// One attempt of a write (deploy, release, commission, power on). MAAS answers once the
    /// work is started; a write that times out is not retried (its outcome is unknown).
    pub write_timeout: Duration,
}

impl Default for RetryPolicy {
    /// 5 attempts (gomaasapi retries 4 times), 0.5 s doubling to at most 30 s, and MAAS's own
    /// `Retry-After` values (5 s, 10 s) honoured up to 2 minutes; reads of one object abandoned
    /// after 10 s, writes after 45 s.
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(120),
            read_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(45),
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retries.
    pub fn never() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// The un-jittered backoff before retry number `retry` (0 = the first retry):
    /// `min(max_delay, base_delay * 2^retry)`.
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.min(31));
        self.base_delay
            .checked_mul(factor)
            .map_or(self.max_delay, |delay| delay.min(self.max_delay))
    }

    /// The wait before retry number `retry`, given MAAS's `Retry-After` (if any) and a uniform
    /// sample `unit` in `[0, 1)`:
    /// * without `Retry-After`: uniformly in `[backoff/2, backoff)` ("equal jitter": never
    ///   hammering, never synchronised);
    /// * with `Retry-After`: at least what MAAS asked, plus up to `backoff/2` of jitter so that a
    ///   fleet of clients told "5 s" does not come back in the same instant.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>, unit: f64) -> Duration {
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let backoff = self.backoff(retry);
        let half = backoff / 2;
        let spread = half.mul_f64(unit);
        match retry_after {
            None => half + spread,
            Some(asked) => asked + spread,
        }
    }
}

/// A source of uniform samples in `[0, 1)` for jitter.
pub trait Jitter: Send + Sync + fmt::Debug {
    fn sample(&self) -> f64;
}

/// Jitter from a ChaCha8 generator: seeded for reproducible runs, or from the OS.
#[derive(Debug)]
pub struct SeededJitter {
    rng: Mutex<ChaCha8Rng>,
}

impl SeededJitter {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)),
        }
    }

    pub fn from_os() -> Self {
        Self {
            rng: Mutex::new(rand::make_rng()),
        }
    }
}

impl Jitter for SeededJitter {
    fn sample(&self) -> f64 {
        // A poisoned lock only means another thread panicked mid-sample; the state is fine.
        let mut rng = self
            .rng
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        rng.random::<f64>()
    }
}

/// Waiting between attempts. The default uses tokio's timer, so `tokio::time::pause()` makes
/// retry tests instantaneous and exact.
pub trait Sleeper: Send + Sync + fmt::Debug {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
}

#[derive(Debug, Default, Clone, Copy)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(120),
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn backoff_doubles_then_caps() {
        let p = policy();
        let backoffs: Vec<u64> = (0..9).map(|n| p.backoff(n).as_millis() as u64).collect();
        assert_eq!(
            backoffs,
            [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]
        );
        assert_eq!(p.backoff(u32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn jitter_spans_the_upper_half_of_the_backoff() {
        let p = policy();
        assert_eq!(p.delay(2, None, 0.0), Duration::from_millis(1000));
        assert_eq!(p.delay(2, None, 0.5), Duration::from_millis(1500));
        assert!(p.delay(2, None, 0.999_999) < Duration::from_millis(2000));
        // Out-of-range samples cannot push the delay outside the bounds.
        assert_eq!(p.delay(2, None, f64::NAN), Duration::from_millis(1000));
        assert_eq!(p.delay(2, None, 7.0), Duration::from_millis(2000));
    }

    #[test]
    fn retry_after_is_a_floor_with_jitter_on_top() {
        let p = policy();
        let asked = Some(Duration::from_secs(5));
        assert_eq!(p.delay(0, asked, 0.0), Duration::from_secs(5));
        assert_eq!(p.delay(0, asked, 0.5), Duration::from_millis(5125));
    }

    #[test]
    fn seeded_jitter_is_reproducible() {
        let a = SeededJitter::new(7);
        let b = SeededJitter::new(7);
        let xs: Vec<f64> = (0..5).map(|_| a.sample()).collect();
        let ys: Vec<f64> = (0..5).map(|_| b.sample()).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        assert_ne!(xs[0], xs[1]);
    }

    proptest! {
        #[test]
        fn delay_stays_within_bounds(retry in 0u32..64, unit in 0.0f64..1.0, asked in proptest::option::of(0u64..600)) {
            let p = policy();
            let asked = asked.map(Duration::from_secs);
            let d = p.delay(retry, asked, unit);
            let backoff = p.backoff(retry);
            prop_assert!(backoff <= p.max_delay);
            match asked {
                None => {
                    prop_assert!(d >= backoff / 2);
                    prop_assert!(d <= backoff);
                    prop_assert!(d <= p.max_delay);
                }
                Some(asked) => {
                    prop_assert!(d >= asked);
                    prop_assert!(d <= asked + p.max_delay / 2);
                }
            }
        }
    }
}
