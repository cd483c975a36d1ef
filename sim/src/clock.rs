//! The server's time: supplied by the harness, never read from the machine
//! by the server itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The time the server sees, in microseconds since the Unix epoch (`TIME`
/// answers seconds and microseconds; expiries are milliseconds). A
/// simulation drives it from simulated time, with skew and steps.
pub trait Clock: Send + Sync {
    fn now_us(&self) -> u64;
}

/// A clock set by hand: steps forward or back only when told.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub fn new(now_ms: u64) -> Self {
        ManualClock(Arc::new(AtomicU64::new(now_ms * 1000)))
    }

    pub fn set_ms(&self, now_ms: u64) {
        self.0.store(now_ms * 1000, Ordering::SeqCst);
    }

    pub fn advance_ms(&self, ms: u64) {
        self.0.fetch_add(ms * 1000, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The machine's clock, for tests that run the real runtime on real time
/// over loopback TCP; a simulation supplies its own.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_us(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    }
}

/// Tokio's clock, from a given start: under `tokio::time::pause` (or a
/// turmoil simulation, which drives tokio's time) the server's expiries and
/// `TIME` move with the simulated time the clients' deadlines use, so a
/// lease ends at the same simulated instant on both sides.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start_us: u64,
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// Reads `start_ms` now, then moves with tokio's clock.
    pub fn starting_at(start_ms: u64) -> Self {
        TokioClock {
            start_us: start_ms * 1000,
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now_us(&self) -> u64 {
        self.start_us + self.origin.elapsed().as_micros() as u64
    }
}
