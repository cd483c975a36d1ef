use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::time::Instant;

use super::{
    AcquireRequest, Acquired, Backend, BoxFuture, RefreshRequest, ReleaseListener, TOKEN_LEN,
};
use crate::LockError;

/// Locks held in this process's memory, with the same semantics as Redis:
/// leases expire on the tokio clock, tokens guard refresh and release, fence
/// counters survive release (and start at the system clock in microseconds),
/// several keys are taken all or none.
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

#[derive(Debug, Default)]
struct State {
    leases: HashMap<String, Lease>,
    fences: HashMap<String, u64>,
    /// Leases count at the last sweep of expired entries; sweeping when the
    /// map has doubled since keeps the cost amortised O(1) per acquisition.
    swept_at: usize,
    /// Per key with listeners: bumped by each release of that key.
    releases: HashMap<String, watch::Sender<u64>>,
    /// Size of `releases` at its last sweep of keys nobody listens to.
    releases_swept_at: usize,
}

#[derive(Debug)]
struct Lease {
    value: String,
    expires: Instant,
}

impl Lease {
    fn owned_by(&self, token: &str) -> bool {
        self.value.as_bytes().get(..TOKEN_LEN) == Some(token.as_bytes())
    }
}

impl MemoryBackend {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while the lock was held cannot leave a lease half-written
        // (every change is a single map operation), so the data is still sound.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    fn live(&mut self, key: &str, now: Instant) -> Option<&mut Lease> {
        if self
            .leases
            .get(key)
            .is_some_and(|lease| lease.expires <= now)
        {
            self.leases.remove(key);
        }
        self.leases.get_mut(key)
    }

    fn sweep(&mut self, now: Instant) {
        if self.leases.len() >= 2 * self.swept_at.max(512) {
            self.leases.retain(|_, lease| lease.expires > now);
            self.swept_at = self.leases.len();
        }
    }

    fn acquire(&mut self, req: &AcquireRequest<'_>) -> Acquired {
        let now = Instant::now();
        self.sweep(now);
        let mut ours = 0;
        for (index, key) in req.keys.iter().enumerate() {
            if let Some(lease) = self.live(key, now) {
                if lease.value != req.value {
                    return Acquired::Busy {
                        index,
                        remaining: Some(lease.expires - now),
                    };
                }
                ours += 1;
            }
        }
        let expires = now + req.ttl;
        for key in req.keys {
            self.leases.insert(
                key.clone(),
                Lease {
                    value: req.value.to_owned(),
                    expires,
                },
            );
        }
        let retried = ours == req.keys.len();
        let fence = req.fence_key.map(|fence_key| {
            // Seeded from the clock like the Redis script's, so that tokens
            // from a restarted process still exceed those of the one before.
            let counter = self
                .fences
                .entry(fence_key.to_owned())
                .or_insert_with(clock_micros);
            // A retry after a lost reply gets the token minted the first time.
            if !retried {
                *counter += 1;
            }
            *counter
        });
        Acquired::Obtained { fence }
    }

    fn listen(&mut self, key: &str) -> watch::Receiver<u64> {
        if self.releases.len() >= 2 * self.releases_swept_at.max(512) {
            self.releases
                .retain(|_, sender| sender.receiver_count() > 0);
            self.releases_swept_at = self.releases.len();
        }
        match self.releases.get(key) {
            Some(sender) => sender.subscribe(),
            None => {
                let (sender, receiver) = watch::channel(0);
                self.releases.insert(key.to_owned(), sender);
                receiver
            }
        }
    }

    fn released(&mut self, key: &str) {
        if let Some(sender) = self.releases.get(key) {
            if sender.receiver_count() == 0 {
                self.releases.remove(key);
            } else {
                sender.send_modify(|releases| *releases += 1);
            }
        }
    }

    fn refresh(&mut self, keys: &[String], token: &str, ttl: Duration, now: Instant) -> bool {
        let owned = self.all_owned(keys, token, now);
        if owned {
            for key in keys {
                if let Some(lease) = self.leases.get_mut(key) {
                    lease.expires = now + ttl;
                }
            }
        }
        owned
    }

    fn all_owned(&mut self, keys: &[String], token: &str, now: Instant) -> bool {
        keys.iter().all(|key| {
            self.live(key, now)
                .is_some_and(|lease| lease.owned_by(token))
        })
    }
}

/// The system clock in microseconds since the Unix epoch: where a new fence
/// counter starts.
fn clock_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

fn ready<'a, T: Send + 'a>(value: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

impl Backend for MemoryBackend {
    fn acquire<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        ready(Ok(self.state().acquire(&req)))
    }

    fn refresh<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        ready(Ok(self.state().refresh(keys, token, ttl, Instant::now())))
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
            if state
                .live(key, now)
                .is_some_and(|lease| lease.owned_by(token))
            {
                state.leases.remove(key);
                state.released(key);
            } else {
                all = false;
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
                .filter_map(|key| state.leases.get(key).map(|lease| lease.expires - now))
                .min()
        } else {
            None
        };
        ready(Ok(remaining))
    }

    fn listen<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ReleaseListener> {
        ready(ReleaseListener::new(self.state().listen(key), ()))
    }
}
