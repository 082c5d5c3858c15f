//! Capped exponential backoff with jitter between automatic stage retries (DESIGN.md §4, seed
//! 000 §4.6). The randomness comes from a seeded generator (DESIGN.md §8: injected RNG), one
//! stream per node so concurrent nodes do not perturb each other's draws.

use std::time::Duration;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How long to wait before retry number `retry` (1-based): `base · 2^(retry-1)`, capped, then
/// drawn from its upper half ("equal jitter": never shorter than half the backoff, so a fleet
/// of failing nodes spreads out without retrying early).
pub fn delay(retry: u32, base: Duration, cap: Duration, rng: &mut ChaCha8Rng) -> Duration {
    let exponent = retry.saturating_sub(1).min(20);
    let full = base.saturating_mul(1u32 << exponent).min(cap);
    let half = full / 2;
    half + full.mul_f64(rng.random::<f64>() * 0.5)
}

/// The generator of one node's retries.
pub fn node_rng(seed: u64, node: &str) -> ChaCha8Rng {
    // FNV-1a of the node name: stable across runs and platforms.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in node.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    ChaCha8Rng::seed_from_u64(seed ^ hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_is_capped_and_jittered_in_the_upper_half() {
        let base = Duration::from_secs(2);
        let cap = Duration::from_secs(60);
        let mut rng = node_rng(7, "dc1/c07u43");
        for retry in 1..=10 {
            let full = (base * 2u32.pow(retry - 1)).min(cap);
            let d = delay(retry, base, cap, &mut rng);
            assert!(
                d >= full / 2 && d <= full,
                "retry {retry}: {d:?} vs {full:?}"
            );
        }
        let a: Vec<_> = (1..5)
            .map(|r| delay(r, base, cap, &mut node_rng(1, "x")))
            .collect();
        let b: Vec<_> = (1..5)
            .map(|r| delay(r, base, cap, &mut node_rng(1, "x")))
            .collect();
        assert_eq!(a, b, "same seed, same draws");
    }
}
