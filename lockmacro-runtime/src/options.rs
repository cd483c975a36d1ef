use std::time::Duration;

use crate::RetryStrategy;

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
    pub(crate) metadata: String,
    pub(crate) fencing: Fencing,
    pub(crate) fair: bool,
    /// While the backend can wake the waiter, wait for a wake-up (or the
    /// holder's lease, or the deadline) instead of the backoff: set by the
    /// attribute's `wait`, and implied by `fair`.
    pub(crate) wakeups_only: bool,
    pub(crate) max_hold: Option<Duration>,
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
    /// Read it back with [`Lock::metadata`](crate::Lock::metadata).
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = metadata.into();
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
}
