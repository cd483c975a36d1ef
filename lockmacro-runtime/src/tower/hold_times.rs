//! How long a layer's requests hold their keys: the `Retry-After` a
//! [`LockLayer`](crate::LockLayer) advises when it is given none.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A running mean of how long the layer's requests held their keys, over
/// all its keys: each request that finished moves it an eighth of the way
/// to its own time (the smoothing of TCP's round-trip estimate), so that it
/// follows a change in the handlers within a few dozen requests and one
/// slow request does not dominate it.
#[derive(Debug, Default)]
pub(super) struct HoldTimes {
    /// In microseconds; 0 until a request has finished.
    mean: AtomicU64,
}

/// The advice before any request has finished: come back soon.
const FIRST_GUESS: Duration = Duration::from_secs(1);

impl HoldTimes {
    pub(super) fn record(&self, held: Duration) {
        // At least 1: 0 is "nothing recorded yet".
        let sample = u64::try_from(held.as_micros()).unwrap_or(u64::MAX).max(1);
        let _ = self
            .mean
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |mean| {
                Some(if mean == 0 {
                    sample
                } else {
                    mean - mean / 8 + sample / 8
                })
            });
    }

    /// How long a key is held, as far as the layer has seen.
    pub(super) fn estimate(&self) -> Duration {
        match self.mean.load(Ordering::Relaxed) {
            0 => FIRST_GUESS,
            mean => Duration::from_micros(mean),
        }
    }
}
