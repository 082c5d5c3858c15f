//! The randomness of automatic stage retries and of failed jobs' next tries (DESIGN.md §4,
//! seed 000 §4.6; the delays are `crate::backoff`'s): a seeded generator (DESIGN.md §8:
//! injected RNG), one stream per node so concurrent nodes do not perturb each other's draws.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

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

/// The jitter sample of a node's job after its `failures`th failure in a row, in `[0, 1)`: a
/// function of (seed, node, count) alone, so the next try a failure records is the same
/// whichever executor wrote it, and exact under test.
pub fn failure_unit(seed: u64, node: &str, failures: u32) -> f64 {
    let mut rng = node_rng(seed ^ u64::from(failures).rotate_left(32), node);
    rng.random::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_jobs_wait_doubles_to_the_cap_and_is_the_same_on_every_run() {
        let options = crate::apply::ExecutorOptions {
            seed: 7,
            ..crate::apply::ExecutorOptions::default()
        };
        let wait = |failures| options.failed_retry_wait("dc1/gpu00001", failures);
        let minutes = |m: u64| std::time::Duration::from_secs(60 * m);
        for (failures, ceiling) in [(1, 1), (2, 2), (3, 4), (6, 32), (7, 60), (40, 60)] {
            let w = wait(failures);
            assert!(
                w >= minutes(ceiling) / 2 && w < minutes(ceiling),
                "{failures}: {w:?}"
            );
            assert_eq!(w, wait(failures));
        }
        assert_ne!(wait(1), options.failed_retry_wait("dc1/gpu00002", 1));
    }

    #[test]
    fn a_failure_draws_the_same_sample_on_every_run() {
        let unit = failure_unit(7, "dc1/x", 3);
        assert_eq!(unit, failure_unit(7, "dc1/x", 3));
        assert!((0.0..1.0).contains(&unit));
        assert_ne!(unit, failure_unit(7, "dc1/x", 4));
        assert_ne!(unit, failure_unit(7, "dc1/y", 3));
        assert_ne!(unit, failure_unit(8, "dc1/x", 3));
    }

    #[test]
    fn one_node_draws_the_same_samples_every_run_and_nodes_differ() {
        let draw = |seed, node| -> Vec<f64> {
            let mut rng = node_rng(seed, node);
            (0..4).map(|_| rng.random::<f64>()).collect()
        };
        assert_eq!(draw(1, "dc1/x"), draw(1, "dc1/x"));
        assert_ne!(draw(1, "dc1/x"), draw(1, "dc1/y"));
        assert_ne!(draw(1, "dc1/x"), draw(2, "dc1/x"));
    }
}
