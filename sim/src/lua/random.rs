//! `math.random` as Redis 7 has it: its own 48-bit generator (`rand48`),
//! seeded with 0 before every script, so a script draws the same numbers on
//! every run, on every server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The generator's 48-bit state.
#[derive(Debug, Clone)]
pub struct Rand48(Arc<AtomicU64>);

const MASK: u64 = (1 << 48) - 1;
/// `INT32_MAX`, Redis's `REDIS_LRAND48_MAX`.
const MAX: u64 = i32::MAX as u64;

impl Rand48 {
    pub fn new() -> Self {
        let rand = Rand48(Arc::new(AtomicU64::new(0)));
        rand.seed(0);
        rand
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
    fn reseeding_repeats_the_sequence() {
        let rand = Rand48::new();
        let first: Vec<u64> = (0..3).map(|_| rand.next()).collect();
        rand.seed(0);
        let again: Vec<u64> = (0..3).map(|_| rand.next()).collect();
        assert_eq!(first, again);
        assert!(rand.fraction() < 1.0);
    }
}
