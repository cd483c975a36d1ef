//! The server's clock: the simulation's, running at a rate of its own and
//! stepped, within the drift the library documents (`docs/timing.md`).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use lockmacro_sim::Clock;

/// Where the server's clock starts: an arbitrary wall-clock time, so that
/// fences seeded from the clock look like a real server's.
const EPOCH_US: u64 = 1_765_000_000_000_000;

#[derive(Clone)]
pub struct ServerClock {
    /// Parts per million faster (positive) or slower than the simulation.
    rate_ppm: i64,
    /// Steps taken so far, in microseconds.
    steps_us: Arc<AtomicI64>,
}

impl ServerClock {
    pub fn new(rate_ppm: i64) -> Self {
        ServerClock {
            rate_ppm,
            steps_us: Arc::default(),
        }
    }

    /// Steps the clock by `us`, forward or back.
    pub fn step(&self, us: i64) {
        self.steps_us.fetch_add(us, Ordering::SeqCst);
    }

    /// How far the steps have set the clock back, in all.
    pub fn behind(&self) -> std::time::Duration {
        let steps = self.steps_us.load(Ordering::SeqCst);
        std::time::Duration::from_micros(steps.min(0).unsigned_abs())
    }
}

impl Clock for ServerClock {
    fn now_us(&self) -> u64 {
        let elapsed = turmoil::sim_elapsed().unwrap_or_default().as_micros() as i64;
        let skewed = elapsed + elapsed * self.rate_ppm / 1_000_000;
        (EPOCH_US as i64 + skewed + self.steps_us.load(Ordering::SeqCst)) as u64
    }
}
