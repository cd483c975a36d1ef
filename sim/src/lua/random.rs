//! `math.random` as Redis 7 has it: its own 48-bit generator (`rand48`),
//! never seeded unless a script calls `math.randomseed`, so a server draws
//! the same sequence from its start, across scripts (Redis 7 no longer
//! reseeds it before each script, as Redis 6 did): a freshly started
//! Redis 7.0 answers `math.random(100)` with 40, then 85.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The generator's 48-bit state.
#[derive(Debug, Clone)]
pub struct Rand48(Arc<AtomicU64>);

const MASK: u64 = (1 << 48) - 1;
/// `INT32_MAX`, Redis's `REDIS_LRAND48_MAX`.
const MAX: u64 = i32::MAX as u64;

impl Rand48 {
    /// The generator's state before any seed: `0x1234ABCD330E`.
    pub fn new() -> Self {
        Rand48(Arc::new(AtomicU64::new(0x1234_ABCD_330E)))
    }

    /// `redisSrand48`: the low 16 bits fixed to `0x330E`, the seed above.
    pub fn seed(&self, seed: i32) {
        let seed = seed as u32 as u64;
        self.0
            .store(((seed << 16) | 0x330E) & MASK, Ordering::Relaxed);
    }

    /// `redisLrand48`: the next 31 bits.
    pub fn next(&self) -> u64 {
        let x = self.0.load(Ordering::Relaxed);
        let x = (x.wrapping_mul(0x5_DEEC_E66D).wrapping_add(0xB)) & MASK;
        self.0.store(x, Ordering::Relaxed);
        x >> 17
    }

    /// `math.random()`'s fraction in [0, 1).
    pub fn fraction(&self) -> f64 {
        (self.next() % MAX) as f64 / MAX as f64
    }
}

#[cfg(test)]
mod tests {
    use super::Rand48;

    #[test]
    fn an_unseeded_generator_draws_what_redis_7_draws() {
        let rand = Rand48::new();
        let draws: Vec<f64> = (0..4)
            .map(|_| (rand.fraction() * 100.0).floor() + 1.0)
            .collect();
        assert_eq!(draws, [40.0, 85.0, 36.0, 45.0]);
    }

    #[test]
    fn reseeding_repeats_the_sequence() {
        let rand = Rand48::new();
        rand.seed(0);
        // Redis 7.0: `math.randomseed(0); return tostring(math.random())`.
        assert_eq!(format!("{:.14}", rand.fraction()), "0.17082803611217");
        rand.seed(0);
        let first: Vec<u64> = (0..3).map(|_| rand.next()).collect();
        rand.seed(0);
        let again: Vec<u64> = (0..3).map(|_| rand.next()).collect();
        assert_eq!(first, again);
        assert!(rand.fraction() < 1.0);
    }
}
