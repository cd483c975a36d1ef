use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{AcquireRequest, Acquired, Backend, ReleaseListener, derived_fence_key};
use crate::lock::{Lease, Timing};
use crate::options::Fencing;
use crate::watchdog::Watchdog;
use crate::{
    ClusterBackend, Lock, LockError, MemoryBackend, ObtainOptions, RedisBackend, RedlockBackend,
};

/// The longest ttl accepted: ten years.
pub const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Takes locks on one backend, under an optional namespace.
///
/// Cheap to clone (clones share the backend and its connection) and
/// `Send + Sync + 'static`, so it can live in application state or in the
/// global slot ([`set_global`](crate::set_global)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
/// use std::time::Duration;
/// use lockmacro_runtime::{Locker, ObtainOptions};
///
/// let locker = Locker::memory().with_namespace("billing");
/// let lock = locker.obtain("user:42", Duration::from_secs(30), ObtainOptions::default()).await?;
/// // … charge user 42 …
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locker {
    shared: Arc<Shared>,
    /// Empty, or the namespace followed by `:`.
    prefix: Arc<str>,
}

struct Shared {
    backend: Box<dyn Backend>,
    watchdog: Arc<Watchdog>,
}

impl std::fmt::Debug for Locker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locker")
            .field("namespace", &self.namespace())
            .finish_non_exhaustive()
    }
}

pub(crate) fn check_duration(
    key: &str,
    what: &'static str,
    value: Duration,
) -> Result<(), LockError> {
    if value < Duration::from_millis(1) || value > MAX_TTL {
        return Err(LockError::InvalidDuration {
            key: key.to_owned(),
            what,
            value,
        });
    }
    Ok(())
}

fn check_key(key: &str) -> Result<(), LockError> {
    if key.is_empty() {
        return Err(LockError::InvalidKey {
            key: String::new(),
            reason: "a lock key cannot be empty; name the resource, e.g. `user:42`".into(),
        });
    }
    Ok(())
}

impl Locker {
    /// A locker on `backend`.
    pub fn new(backend: impl Backend) -> Self {
        Locker {
            shared: Arc::new(Shared {
                backend: Box::new(backend),
                watchdog: Arc::default(),
            }),
            prefix: Arc::from(""),
        }
    }

    /// A locker on one Redis server: `redis://[user:password@]host:port/[db]`,
    /// or `rediss://…` for TLS.
    ///
    /// Fails with [`LockError::InvalidUrl`] for a URL that cannot be parsed and
    /// [`LockError::Backend`] when the server cannot be reached, refuses the
    /// credentials, or does not answer within the connect timeout (3 s; see
    /// [`RedisBackend::connect_with`] to change it).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// let locker = lockmacro_runtime::Locker::connect("redis://127.0.0.1:6379/").await?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Ok(Locker::new(RedisBackend::connect(url).await?))
    }

    /// A locker on a Redis Cluster, reached through one or more of its nodes
    /// (`seeds`, URLs as for [`connect`](Self::connect)); the other nodes are
    /// discovered.
    ///
    /// Keys locked together, and a lock with an explicit fence key, must share
    /// a hash slot; see [`ClusterBackend`]. Fails like [`connect`](Self::connect)
    /// when no seed can be reached or none is part of a cluster.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::Locker;
    ///
    /// let locker = Locker::cluster(["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/"]).await?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub async fn cluster<I, S>(seeds: I) -> Result<Self, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Ok(Locker::new(ClusterBackend::connect(seeds).await?))
    }

    /// A locker on independent Redis masters (`urls`, URLs as for
    /// [`connect`](Self::connect)) that grant a lock by majority: the Redlock
    /// algorithm. See [`RedlockBackend`] for its timing and for what fencing
    /// tokens guarantee there.
    ///
    /// Succeeds when a majority of the masters can be reached; the others join
    /// when they come up. Fails with [`LockError::Backend`] when fewer can,
    /// and with [`LockError::InvalidUrl`] for a bad, missing or repeated URL.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::Locker;
    ///
    /// let locker = Locker::redlock([
    ///     "redis://10.0.0.1:6379/",
    ///     "redis://10.0.0.2:6379/",
    ///     "redis://10.0.0.3:6379/",
    /// ])
    /// .await?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub async fn redlock<I, S>(urls: I) -> Result<Self, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Ok(Locker::new(RedlockBackend::connect(urls).await?))
    }

    /// A locker on a fresh in-process [`MemoryBackend`].
    pub fn memory() -> Self {
        Locker::new(MemoryBackend::new())
    }

    /// The same backend, with every key (and derived fence key) prefixed by
    /// `namespace:`. Namespaces nest: `a` then `b` gives `a:b:`.
    pub fn with_namespace(&self, namespace: &str) -> Self {
        if namespace.is_empty() {
            return self.clone();
        }
        Locker {
            shared: self.shared.clone(),
            prefix: Arc::from(format!("{}{namespace}:", self.prefix)),
        }
    }

    /// The namespace, without its trailing `:` (empty when there is none).
    pub fn namespace(&self) -> &str {
        self.prefix.strip_suffix(':').unwrap_or("")
    }

    /// The backend this locker runs on.
    pub fn backend(&self) -> &dyn Backend {
        &*self.shared.backend
    }

    pub(crate) fn watchdog(&self) -> &Arc<Watchdog> {
        &self.shared.watchdog
    }

    /// The key as stored by the backend: the namespace prefix, then `key`.
    pub fn wire_key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// True when both lockers share one backend (whatever their namespaces).
    pub fn same_backend(&self, other: &Locker) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Takes `key` for `ttl`.
    ///
    /// With the default options this tries once and fails with
    /// [`LockError::NotObtained`] when someone else holds the key; give a
    /// [`RetryStrategy`](crate::RetryStrategy) to wait.
    pub async fn obtain(
        &self,
        key: &str,
        ttl: Duration,
        opts: ObtainOptions,
    ) -> Result<Lock, LockError> {
        self.obtain_many([key], ttl, opts).await
    }

    /// Takes every key in `keys` for `ttl`, or none of them.
    ///
    /// Keys are taken in sorted order in one atomic step, so two callers
    /// locking overlapping sets never deadlock. A fencing token, when asked
    /// for, comes from the fence key of the first key in sorted order (or the
    /// explicit fence key).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// let ttl = Duration::from_secs(5);
    /// let held = locker.obtain("account:2", ttl, ObtainOptions::default()).await?;
    /// let both = locker.obtain_many(["account:1", "account:2"], ttl, ObtainOptions::default()).await;
    /// assert!(both.unwrap_err().is_not_obtained());
    /// // All or nothing: account:1 was not left locked.
    /// locker.obtain("account:1", ttl, ObtainOptions::default()).await?;
    /// # drop(held); Ok(()) }
    /// ```
    pub async fn obtain_many<I, K>(
        &self,
        keys: I,
        ttl: Duration,
        opts: ObtainOptions,
    ) -> Result<Lock, LockError>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
    {
        let mut keys: Vec<String> = keys
            .into_iter()
            .map(|key| key.as_ref().to_owned())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let Some(first) = keys.first() else {
            return Err(LockError::InvalidKey {
                key: String::new(),
                reason: "no keys given; pass at least one key".into(),
            });
        };
        for key in &keys {
            check_key(key)?;
        }
        check_duration(first, "ttl", ttl)?;
        let span = tracing::debug_span!(target: "lockmacro", "obtain", key = %keys.join(","), ?ttl);
        self.obtain_sorted(keys, ttl, opts).instrument(span).await
    }

    async fn obtain_sorted(
        &self,
        keys: Vec<String>,
        ttl: Duration,
        opts: ObtainOptions,
    ) -> Result<Lock, LockError> {
        let wire_keys: Vec<String> = keys.iter().map(|key| self.wire_key(key)).collect();
        let fence_key = match &opts.fencing {
            Fencing::Off => None,
            Fencing::Derived => Some(derived_fence_key(&wire_keys[0])),
            Fencing::Key(key) => {
                check_key(key)?;
                Some(self.wire_key(key))
            }
        };
        let token = uuid::Uuid::new_v4().simple().to_string();
        let value = format!("{token}{}", opts.metadata);
        let start = Instant::now();
        let deadline = opts.retry.get_deadline().map(|wait| start + wait);
        let mut attempts = 0;
        // Listens for the release of the key last found busy (its index), so
        // that a wait ends when the holder releases rather than at the end of
        // the backoff.
        let mut listening: Option<(usize, ReleaseListener)> = None;
        loop {
            attempts += 1;
            let sent = Instant::now();
            let request = AcquireRequest {
                keys: &wire_keys,
                value: &value,
                ttl,
                fence_key: fence_key.as_deref(),
            };
            let (index, remaining) = match self.backend().acquire(request).await? {
                Acquired::Obtained { fence } => {
                    tracing::debug!(target: "lockmacro", fence, attempts, "obtained");
                    return Ok(Lock {
                        lease: Arc::new(Lease {
                            locker: self.clone(),
                            keys,
                            wire_keys,
                            token,
                            metadata: opts.metadata,
                            fence,
                            acquired_at: sent,
                            timing: Mutex::new(Timing {
                                ttl,
                                deadline: sent + ttl.saturating_sub(self.backend().drift(ttl)),
                            }),
                            lost: AtomicBool::new(false),
                            lost_notify: Notify::new(),
                            done: AtomicBool::new(false),
                        }),
                    });
                }
                Acquired::Busy { index, remaining } => (index, remaining),
            };
            let busy = || LockError::NotObtained {
                key: keys.get(index).unwrap_or(&keys[0]).clone(),
            };
            let Some(mut delay) = opts.retry.delay_after(attempts) else {
                tracing::debug!(target: "lockmacro", attempts, "busy");
                return Err(busy());
            };
            // The holder's lease bounds the wait: once it runs out the key is
            // free, whether or not its release is ever seen.
            if let Some(remaining) = remaining {
                delay = delay.min(remaining + Duration::from_millis(1));
            }
            if let Some(deadline) = deadline {
                let now = Instant::now();
                if now >= deadline {
                    tracing::debug!(target: "lockmacro", attempts, "busy until the deadline");
                    return Err(busy());
                }
                delay = delay.min(deadline - now);
            }
            match &mut listening {
                Some((listened, listener)) if *listened == index => {
                    tracing::trace!(target: "lockmacro", ?delay, attempts, "busy, retrying");
                    listener.wait(delay).await;
                }
                _ => {
                    // Listen first, then try again at once: a release before
                    // the listener was in place is seen by that attempt, any
                    // later one by the listener. The first such attempt does
                    // not count against the strategy.
                    if listening.is_none() {
                        attempts -= 1;
                    }
                    listening = Some((index, self.backend().listen(&wire_keys[index]).await));
                }
            }
        }
    }
}
