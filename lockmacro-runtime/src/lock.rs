use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::LockError;
use crate::lease::Lease;
use crate::watchdog::Watchdog;

/// A held lock, as returned by [`Locker::obtain`](crate::Locker::obtain).
///
/// The lease lasts `ttl` from when it was taken or last refreshed; nothing
/// refreshes a `Lock` by itself (the attribute's watchdog does that for the
/// functions it wraps). Call [`Lock::release`] when done. A `Lock` dropped
/// without `release` is released in the background, when a tokio runtime is
/// running; otherwise it simply expires at the end of its ttl. A runtime
/// that ends right after the drop may never run that release:
/// [`Locker::shutdown`](crate::Locker::shutdown) waits for it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
/// use std::time::Duration;
/// use lockmacro_runtime::{Locker, ObtainOptions};
///
/// let locker = Locker::memory();
/// let lock = locker.obtain("report", Duration::from_secs(10), ObtainOptions::new().fence()).await?;
/// assert_eq!(lock.key(), "report");
/// assert!(lock.fence_token().is_some());
/// lock.refresh(Duration::from_secs(10)).await?;
/// assert!(lock.remaining().await? <= Duration::from_secs(10));
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Lock {
    pub(crate) lease: Arc<Lease>,
    /// Its locker's watchdog, for [`keep_alive`](Lock::keep_alive). The
    /// lease itself does not point back to it: the watchdog holds leases.
    pub(crate) watchdog: Arc<Watchdog>,
}

impl Lock {
    /// The key, as given to `obtain` (without the locker's namespace). For a
    /// lock on several keys, the first of them in sorted order.
    pub fn key(&self) -> &str {
        self.lease.key()
    }

    /// Every key this lock holds, in sorted order.
    pub fn keys(&self) -> &[String] {
        &self.lease.keys
    }

    /// The random 128-bit token (32 hex digits) that proves ownership.
    pub fn token(&self) -> &str {
        self.lease.token()
    }

    /// The fencing token minted with this lock, if fencing was asked for.
    pub fn fence_token(&self) -> Option<u64> {
        self.lease.fence
    }

    /// The metadata stored with the lock.
    pub fn metadata(&self) -> &str {
        &self.lease.metadata
    }

    /// When the lease ends unless refreshed, on this process's monotonic
    /// clock, counted from when the last acquire or refresh was sent.
    pub fn deadline(&self) -> Instant {
        self.lease.timing().deadline
    }

    /// How long the lease has left, as the backend sees it (one round trip).
    /// The [deadline](Self::deadline) is this process's own, more cautious,
    /// view of the same.
    ///
    /// Returns [`LockError::NotHeld`] when the lock has expired or is held by
    /// someone else.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// let lock = locker.obtain("report", Duration::from_secs(10), ObtainOptions::new()).await?;
    /// let left = lock.remaining().await?;
    /// assert!(left > Duration::from_secs(5) && left <= Duration::from_secs(10));
    /// # Ok(()) }
    /// ```
    pub async fn remaining(&self) -> Result<Duration, LockError> {
        self.lease.remaining().await
    }

    /// The remaining lease, under its first name: the same as
    /// [`remaining`](Self::remaining). It is not the ttl the lock was
    /// obtained or last refreshed with.
    pub async fn ttl(&self) -> Result<Duration, LockError> {
        self.remaining().await
    }

    /// Extends the lease to `ttl` from now (never past the `max_hold` limit,
    /// when one was given: see [`ObtainOptions::max_hold`](crate::ObtainOptions::max_hold)).
    ///
    /// Returns [`LockError::NotHeld`] without touching the key when it is no
    /// longer ours, and [`LockError::Lost`] when the backend's confirmation
    /// came after the lease's [deadline](Self::deadline): a lease is not
    /// trusted again once its deadline has passed.
    ///
    /// The server may run a refresh whose answer never comes (a timeout, a
    /// lost reply), so a shorter `ttl` moves the deadline in as the refresh
    /// is sent, whatever the outcome: to no later than now plus `ttl`, less
    /// the backend's drift margin. After such a refresh goes unanswered,
    /// later refreshes count no more than that `ttl` either, since it may
    /// still be run after them.
    pub async fn refresh(&self, ttl: Duration) -> Result<(), LockError> {
        self.lease.refresh(ttl).await
    }

    /// Gives the lock back.
    ///
    /// Returns [`LockError::NotHeld`] when it was no longer ours (it expired or
    /// was taken over); the other owner's key is left alone.
    pub async fn release(self) -> Result<(), LockError> {
        self.lease.release().await
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.lease.done.load(Ordering::Acquire) {
            return;
        }
        self.lease.done.store(true, Ordering::Release);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let lease = self.lease.clone();
            let tracker = lease.registry.tracker().clone();
            tracker.spawn_on(
                async move {
                    if let Err(err) = lease.release().await {
                        tracing::debug!(target: "lockmacro", key = %lease.key(), error = %err, "background release failed");
                    }
                },
                &runtime,
            );
        }
    }
}
