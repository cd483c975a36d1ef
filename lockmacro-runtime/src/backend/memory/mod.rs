//! Locks in this process's memory: [`MemoryBackend`].

mod kinds;
mod queues;
mod state;

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use self::state::{Held, State};
use crate::LockError;
use crate::backend::shared::forward;
use crate::backend::{
    AcquireRequest, Acquired, Backend, BoxFuture, Capabilities, FairQueue, RefreshRequest,
    ReleaseListener,
};

/// Locks held in this process's memory, with the same semantics as Redis:
/// leases expire on the tokio clock, tokens guard refresh and release, fence
/// counters survive release and expire a day after their last use (and
/// start at the system clock in microseconds, above any expired counter),
/// several keys are taken all or none, fair waiters queue per key and a
/// release hands the key to the first of them. Unlike Redis, the hand-off
/// needs no confirmation: a waiter's future that is dropped leaves the queue
/// at once, and there is no other process that could die in it.
///
/// For programs that run as a single process, for examples, and for unit tests
/// of code that uses locks (it follows `tokio::time::pause`). It cannot
/// exclude other processes: use [`RedisBackend`](super::RedisBackend) for
/// that.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// use lockmacro_runtime::{Locker, ObtainOptions};
///
/// let locker = Locker::memory();
/// let lock = locker.obtain("job", Duration::from_secs(5), ObtainOptions::default()).await.unwrap();
/// assert!(locker.obtain("job", Duration::from_secs(5), ObtainOptions::default()).await.is_err());
/// lock.release().await.unwrap();
/// # }
/// ```
#[derive(Debug, Default)]
pub struct MemoryBackend {
    state: Mutex<State>,
}

impl MemoryBackend {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long a fence counter is kept after the last token minted from it,
    /// as [`RedisConfig::fence_expiry`](super::RedisConfig::fence_expiry)
    /// sets it for Redis. Default [`DEFAULT_FENCE_EXPIRY`](super::DEFAULT_FENCE_EXPIRY),
    /// a day; at least 1 ms. A counter created after one expired starts
    /// above every token minted before, so tokens never go backwards.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, MemoryBackend, ObtainOptions};
    ///
    /// let locker = Locker::new(MemoryBackend::new().fence_expiry(Duration::from_secs(3600)));
    /// let lock = locker.obtain("job", Duration::from_secs(5), ObtainOptions::new().fence()).await?;
    /// assert!(lock.fence_token().is_some());
    /// # Ok(()) }
    /// ```
    pub fn fence_expiry(self, expiry: Duration) -> Self {
        self.state().fence_expiry = expiry.clamp(Duration::from_millis(1), crate::MAX_TTL);
        self
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while the lock was held cannot leave a lease half-written
        // (every change is a single map operation), so the data is still sound.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The system clock in microseconds since the Unix epoch: where a new fence
/// counter starts.
pub(super) fn clock_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

fn ready<'a, T: Send + 'a>(value: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

/// For [`forward!`]: the call is one step on the state, at the time of the
/// call, and cannot fail.
macro_rules! on_state {
    ($self:ident, $verb:literal, $subject:expr, $method:ident($($arg:ident),*)) => {
        ready(Ok($self.state().$method($($arg,)* Instant::now())))
    };
}

impl Backend for MemoryBackend {
    forward!(on_state: refresh, inspect, keys, force_release, downgrade);

    fn name(&self) -> &'static str {
        "memory"
    }

    fn acquire<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        let mut state = self.state();
        match (req.share, req.queue_for) {
            (Some(share), _) => ready(state.acquire_shared(&req, share)),
            (None, Some(wait)) => ready(state.acquire_fair(&req, wait)),
            (None, None) => ready(state.acquire(&req)),
        }
    }

    fn refresh_many<'a>(
        &'a self,
        requests: &'a [RefreshRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, LockError>>> {
        let now = Instant::now();
        let mut state = self.state();
        let refreshed = requests
            .iter()
            .map(|req| Ok(state.refresh(req.keys, req.token, req.ttl, now)))
            .collect();
        ready(refreshed)
    }

    fn release<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        let now = Instant::now();
        let mut state = self.state();
        let mut all = true;
        for key in keys {
            let held = state.held_by(key, token, now);
            match held {
                Some(Held::Lock) => {
                    state.leases.remove(key);
                }
                Some(Held::Permit) => {
                    if let Some(permits) = state.permits.get_mut(key) {
                        permits.retain(|permit| permit.token != token);
                        if permits.is_empty() {
                            state.permits.remove(key);
                        }
                    }
                }
                None => all = false,
            }
            let owned = held == Some(Held::Lock);
            let handed = state.hand_over(key, token, owned, now);
            if held == Some(Held::Permit) {
                state.hand_over_permits(key, now);
            }
            // Waiters that do not queue are woken whenever a share is given
            // back: one may be left.
            if (!handed || held == Some(Held::Permit)) && held.is_some() {
                state.released(key);
            }
        }
        ready(Ok(all))
    }

    fn remaining<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Duration>, LockError>> {
        let now = Instant::now();
        let mut state = self.state();
        let remaining = if state.all_owned(keys, token, now) {
            keys.iter()
                .filter_map(|key| state.expiry(key, token).map(|expires| expires - now))
                .min()
        } else {
            None
        };
        ready(Ok(remaining))
    }

    fn listen<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ReleaseListener> {
        ready(ReleaseListener::new(self.state().listen(key), ()))
    }

    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities::none().with_fair_queue(self).with_shares()
    }
}

impl FairQueue for MemoryBackend {
    fn listen_granted<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, ReleaseListener> {
        let _ = key;
        ready(ReleaseListener::granting(
            self.state().listen_granted(token),
            (),
        ))
    }

    fn listening(&self, key: &str) -> bool {
        let _ = key;
        true
    }
}
