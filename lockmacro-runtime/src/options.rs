use std::time::Duration;

use crate::RetryStrategy;
use crate::backend::Share;

/// Options for [`Locker::obtain`](crate::Locker::obtain) and
/// [`Locker::obtain_many`](crate::Locker::obtain_many).
///
/// The default tries once, with no metadata and no fencing token.
///
/// ```
/// use std::time::Duration;
/// use lockmacro_runtime::{ObtainOptions, RetryStrategy};
///
/// let opts = ObtainOptions::default()
///     .retry(RetryStrategy::linear(Duration::from_millis(50)).deadline(Duration::from_secs(5)))
///     .metadata("worker-7")
///     .fence();
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ObtainOptions {
    pub(crate) retry: RetryStrategy,
    /// Borrowed when it is the attribute's default, the same for every call.
    pub(crate) metadata: std::borrow::Cow<'static, str>,
    pub(crate) fencing: Fencing,
    pub(crate) fair: bool,
    /// While the backend can wake the waiter, wait for a wake-up (or the
    /// holder's lease, or the deadline) instead of the backoff: set by the
    /// attribute's `wait`, and implied by `fair`.
    pub(crate) wakeups_only: bool,
    pub(crate) max_hold: Option<Duration>,
    /// Replicas that must acknowledge the lock (`0`: none).
    pub(crate) replicas: usize,
    /// How long to wait for them (`None`: the default bound, see
    /// `replica_bound`).
    pub(crate) replica_timeout: Option<Duration>,
    /// A share of the key (a permit, a read or the write), not the whole key.
    pub(crate) share: Option<Share>,
    /// How much longer than the lease the server keeps the key (zero: not
    /// at all); a release frees it at once.
    pub(crate) lock_delay: Duration,
}

/// Whether a fencing token is minted with the lock, and where its counter lives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fencing {
    /// No fencing token.
    #[default]
    Off,
    /// Counter at the key derived from the lock key: `{K}:fence`, or
    /// `K:fence` when `K` already has a `{hashtag}`, so that both share a
    /// Redis Cluster slot (except for a key with a `}` but no hashtag, which
    /// a cluster refuses with a fence; see the crate docs on fencing).
    Derived,
    /// Counter at this key (prefixed by the locker's namespace).
    Key(String),
}

impl ObtainOptions {
    /// Same as [`ObtainOptions::default`].
    pub fn new() -> Self {
        Self::default()
    }

    /// How to wait when the key is held.
    pub fn retry(mut self, retry: RetryStrategy) -> Self {
        self.retry = retry;
        self
    }

    /// Text stored with the lock after its token (who holds it, why).
    /// Read it back with [`Lock::metadata`](crate::Lock::metadata). On
    /// Redis, a waiter appends one NUL to the stored value (see
    /// [`RedisBackend`](crate::RedisBackend)), which is never shown: metadata
    /// that ends with a NUL itself is shown without it by `inspect` and in
    /// a refusal.
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = std::borrow::Cow::Owned(metadata.into());
        self
    }

    /// Mint a fencing token with the lock from the derived counter key.
    pub fn fence(mut self) -> Self {
        self.fencing = Fencing::Derived;
        self
    }

    /// Mint a fencing token with the lock from the counter at `key`.
    pub fn fence_key(mut self, key: impl Into<String>) -> Self {
        self.fencing = Fencing::Key(key.into());
        self
    }

    /// Sets the fencing mode.
    pub fn fencing(mut self, fencing: Fencing) -> Self {
        self.fencing = fencing;
        self
    }

    /// Wait in line: waiters get the key in the order they first found it
    /// held, each handed the key by the release before it. See "Fair
    /// hand-off" in the crate documentation.
    ///
    /// A fair obtain takes one key, and its retry strategy needs a
    /// [deadline](crate::RetryStrategy::deadline): the waiter's place in the
    /// queue lapses then (with no retry at all it only respects the queue,
    /// without joining it). It fails with [`LockError::InvalidKey`] for
    /// several keys, [`LockError::InvalidDuration`] without a deadline, and
    /// [`LockError::Backend`] on a backend with no queue
    /// ([`RedlockBackend`](crate::RedlockBackend)).
    ///
    /// [`LockError::InvalidKey`]: crate::LockError::InvalidKey
    /// [`LockError::InvalidDuration`]: crate::LockError::InvalidDuration
    /// [`LockError::Backend`]: crate::LockError::Backend
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions, RetryStrategy};
    ///
    /// let locker = Locker::memory();
    /// let wait = RetryStrategy::linear(Duration::from_millis(100)).deadline(Duration::from_secs(5));
    /// let lock = locker
    ///     .obtain("printer", Duration::from_secs(30), ObtainOptions::new().fair().retry(wait))
    ///     .await?;
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fair(mut self) -> Self {
        self.fair = true;
        self
    }

    /// Bounds how long the lock can be held: once `max_hold` has passed
    /// since it was taken, its local deadline stops moving, the watchdog
    /// stops renewing it, and it is lost at that moment like any other lease
    /// (the attribute drops the body under `on_lost = "abort"`). A stuck
    /// holder then cannot keep a key forever. Hand refreshes cannot move the
    /// deadline past it either.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// let opts = ObtainOptions::new().max_hold(Duration::from_millis(200));
    /// let guard = locker.obtain("migrations", Duration::from_secs(30), opts).await?.keep_alive();
    /// guard.lost().await; // after 200 ms, not 30 s
    /// # Ok(()) }
    /// ```
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// Keeps the key from anyone else for `delay` after the lease runs out
    /// without a release (a holder that crashed, hung or lost its network),
    /// so that what it was still doing can drain before the next holder
    /// acts, as Consul's lock-delay and Chubby's do. A release frees the
    /// key at once, and the holder's own deadline does not move: the
    /// server is asked for the ttl plus `delay`, on the acquire and on
    /// every refresh, while the holder trusts the ttl alone. Zero (the
    /// default): none.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// let opts = ObtainOptions::new().lock_delay(Duration::from_secs(15));
    /// let lock = locker.obtain("payments", Duration::from_secs(10), opts).await?;
    /// lock.release().await?; // freed at once: the delay is for holders that vanish
    /// assert!(locker.obtain("payments", Duration::from_secs(10), ObtainOptions::new()).await.is_ok());
    /// # Ok(()) }
    /// ```
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }
}

/// The longest a replica acknowledgement is waited for by default.
const REPLICA_TIMEOUT: Duration = Duration::from_secs(1);

impl ObtainOptions {
    /// Takes one of `permits` permits on the key instead of the whole key: a
    /// semaphore, at most `permits` holders at once across every process.
    /// Each permit is a lease of its own, refreshed, lost and released like
    /// a lock, and given back by itself `ttl` after its holder died. Waiters
    /// are woken by releases; with [`fair`](Self::fair) they queue, and each
    /// permit given back is handed to the first of them (for a grant lease
    /// it confirms, as a lock is). A fencing token ([`fence`](Self::fence))
    /// is minted per acquisition, increasing per key.
    ///
    /// One key only; not with [`replicas`](Self::replicas), and only on
    /// backends that keep permits
    /// (one Redis server, a cluster, Sentinel, memory): others refuse it
    /// with [`LockError::Backend`](crate::LockError::Backend) before
    /// anything is sent. On Redis the key is a sorted set of the holders'
    /// tokens, so it cannot also be used as a lock, and metadata stays with
    /// the [`Lock`](crate::Lock), not on the server.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// let ttl = Duration::from_secs(30);
    /// let one = locker.obtain("api:tenant-7", ttl, ObtainOptions::new().permits(2)).await?;
    /// let two = locker.obtain("api:tenant-7", ttl, ObtainOptions::new().permits(2)).await?;
    /// let three = locker.obtain("api:tenant-7", ttl, ObtainOptions::new().permits(2)).await;
    /// assert!(three.unwrap_err().is_not_obtained());
    /// one.release().await?;
    /// two.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn permits(mut self, permits: u32) -> Self {
        self.share = Some(Share::Permits(permits));
        self
    }

    /// Takes a read of the key, a read-write lock: any number of readers at
    /// once, and no writer. A writer waiting for the readers holds back the
    /// readers that come after it, so a stream of readers cannot starve it
    /// (writer preference). Each read is a lease of its own, as a permit is
    /// (see [`permits`](Self::permits) for the backends, the limits and the
    /// layout). A task that holds the write may read inside it
    /// ([`Locker::hold`](crate::Locker::hold) re-enters); one that holds a
    /// read and asks for the write is refused with
    /// [`LockError::InvalidKey`](crate::LockError::InvalidKey), as two
    /// readers doing so would wait for each other for ever.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// let ttl = Duration::from_secs(30);
    /// let one = locker.obtain("catalog", ttl, ObtainOptions::new().read()).await?;
    /// let two = locker.obtain("catalog", ttl, ObtainOptions::new().read()).await?;
    /// let write = locker.obtain("catalog", ttl, ObtainOptions::new().write()).await;
    /// assert!(write.unwrap_err().is_not_obtained());
    /// one.release().await?;
    /// two.release().await?;
    /// locker.obtain("catalog", ttl, ObtainOptions::new().write()).await?.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn read(mut self) -> Self {
        self.share = Some(Share::Read);
        self
    }

    /// Takes the write of the key, a read-write lock: alone, once every
    /// reader has gone, ahead of the readers that come after it. See
    /// [`read`](Self::read).
    pub fn write(mut self) -> Self {
        self.share = Some(Share::Write);
        self
    }

    /// Wait until `n` replicas of the server that took the lock have it
    /// (Redis `WAIT n timeout`, sent with the acquire), for at most
    /// [`replica_timeout`](Self::replica_timeout): by default 1 s or a tenth
    /// of the ttl, whichever is shorter. When fewer acknowledge in time, the
    /// lock is released and the call fails with
    /// [`LockError::NotReplicated`](crate::LockError::NotReplicated). `0`,
    /// the default, waits for nothing.
    ///
    /// For a server with replicas: [`RedisBackend`](crate::RedisBackend)
    /// (a server with no replicas fails every such obtain) and
    /// [`ClusterBackend`](crate::ClusterBackend) (the replicas of the key's
    /// master). [`RedlockBackend`](crate::RedlockBackend) and
    /// [`MemoryBackend`](crate::MemoryBackend) refuse it with
    /// [`LockError::Backend`](crate::LockError::Backend): Redlock's answer to
    /// a lost master is its majority, and memory has nothing to replicate.
    ///
    /// # What it guarantees, and what it does not
    ///
    /// An obtain that returns `Ok` was received by `n` replicas before it
    /// returned: a failover to one of them keeps the lock, where without it a
    /// master that dies just after granting the lock can take it along. It
    /// does not make Redis strongly consistent, as the Redis documentation of
    /// `WAIT` says itself: "WAIT does not make Redis a strongly consistent
    /// store: while synchronous replication is part of a replicated state
    /// machine, it is not the only thing needed"
    /// (<https://redis.io/docs/latest/commands/wait/>, "Consistency and
    /// WAIT"). A failover promotes the replica that seems most up to date as
    /// a best effort, not a promise: it can still promote one that missed the
    /// lock, and lose it. Acknowledged means
    /// received, not written to disk; refreshes are not waited for (a
    /// failover to a replica that missed the last refresh shortens the lease
    /// it knows, it does not lose the key); and the wait counts against the
    /// lease, whose local deadline runs from when the acquire was sent.
    /// Fencing is still what protects a resource.
    ///
    /// The acquire and its `WAIT` travel together on a connection of their
    /// own (one per backend), so that a wait never holds up other calls;
    /// obtains with `replicas` on one backend wait in turn on it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lockmacro_runtime::ObtainOptions;
    ///
    /// // One replica must have the lock within 200 ms, or the obtain fails.
    /// let opts = ObtainOptions::new()
    ///     .replicas(1)
    ///     .replica_timeout(Duration::from_millis(200));
    /// # let _ = opts;
    /// ```
    pub fn replicas(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    /// How long [`replicas`](Self::replicas) waits for the acknowledgements
    /// (from 1 ms; default 1 s or a tenth of the ttl, whichever is shorter).
    /// It must be shorter than the [response
    /// timeout](crate::RedisConfig::response_timeout), which bounds the
    /// whole call: a longer one is refused with
    /// [`LockError::Backend`](crate::LockError::Backend) before anything is
    /// sent.
    pub fn replica_timeout(mut self, timeout: Duration) -> Self {
        self.replica_timeout = Some(timeout);
        self
    }

    /// The bound on the replica wait for a lease of `ttl`.
    pub(crate) fn replica_bound(&self, ttl: Duration) -> Duration {
        self.replica_timeout
            .unwrap_or_else(|| REPLICA_TIMEOUT.min(ttl / 10).max(Duration::from_millis(1)))
    }
}
