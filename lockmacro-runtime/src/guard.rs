use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{Lock, LockError};

/// A lock kept alive by its locker's watchdog: what
/// [`Lock::keep_alive`] returns and what `#[distributed_lock(guard = name)]`
/// binds inside the function.
///
/// The watchdog refreshes the lease every `period` (a third of the ttl by
/// default) and tracks its local deadline, counted from when each refresh was
/// sent. When a refresh is refused, or the deadline passes without a confirmed
/// refresh (even while the backend cannot be reached), the lease is *lost*:
/// [`is_lost`](Self::is_lost) turns true and [`lost`](Self::lost) completes.
/// Dropping the guard stops the watchdog for it and releases the lock in the
/// background. [`cancellation_token`](Self::cancellation_token) hands the
/// end of the lease to the tasks that work under it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
/// use std::time::Duration;
/// use lockmacro_runtime::{Locker, ObtainOptions};
///
/// let locker = Locker::memory();
/// let guard = locker
///     .obtain("nightly-report", Duration::from_millis(300), ObtainOptions::default())
///     .await?
///     .keep_alive();
/// // Far longer than the ttl: the watchdog keeps the lease.
/// tokio::time::sleep(Duration::from_secs(1)).await;
/// assert!(!guard.is_lost());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LockGuard {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    lock: Lock,
    id: u64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.lock.watchdog.unwatch(self.id);
    }
}

impl Lock {
    /// Hands the lock to the watchdog, which refreshes it every third of its
    /// ttl until the guard is released or dropped. Must be called within a
    /// tokio runtime.
    pub fn keep_alive(self) -> LockGuard {
        let period = self.lease.timing().ttl / 3;
        self.watch(period)
    }

    /// Like [`keep_alive`](Self::keep_alive), refreshing every `period`.
    ///
    /// The period must be above zero and shorter than the ttl less the
    /// backend's [drift margin](crate::backend::Backend::drift), or the lease would
    /// lapse between two refreshes: other periods are refused with
    /// [`LockError::InvalidDuration`], and the lock is then released in the
    /// background.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// let ttl = Duration::from_secs(3);
    /// let lock = locker.obtain("report", ttl, ObtainOptions::default()).await?;
    /// let guard = lock.keep_alive_every(Duration::from_secs(1))?;
    /// guard.release().await?;
    ///
    /// let lock = locker.obtain("report", ttl, ObtainOptions::default()).await?;
    /// assert!(lock.keep_alive_every(ttl).is_err());
    /// # Ok(()) }
    /// ```
    pub fn keep_alive_every(self, period: Duration) -> Result<LockGuard, LockError> {
        let ttl = self.lease.timing().ttl;
        let usable = ttl.saturating_sub(self.lease.backend.drift(ttl));
        if period.is_zero() || period >= usable {
            return Err(LockError::InvalidDuration {
                key: self.key().to_owned(),
                what: "refresh period",
                value: period,
                reason: format!(
                    "must be above zero and shorter than {usable:?} (the ttl of {ttl:?} less \
                     its drift margin), or the lease lapses between refreshes; a third of the \
                     ttl is the default"
                ),
            });
        }
        Ok(self.watch(period))
    }

    fn watch(self, period: Duration) -> LockGuard {
        let id = self.watchdog.watch(self.lease.clone(), period);
        LockGuard {
            inner: Arc::new(Inner { lock: self, id }),
        }
    }
}

impl LockGuard {
    fn lock(&self) -> &Lock {
        &self.inner.lock
    }

    /// Another handle on the same lease, for a nested call that re-enters it.
    pub(crate) fn share(&self) -> LockGuard {
        LockGuard {
            inner: self.inner.clone(),
        }
    }

    pub(crate) fn lease(&self) -> &crate::lease::Lease {
        &self.lock().lease
    }

    /// The key (the first one, for a lock on several keys).
    pub fn key(&self) -> &str {
        self.lock().key()
    }

    /// Every key held, in sorted order.
    pub fn keys(&self) -> &[String] {
        self.lock().keys()
    }

    /// The token that proves ownership.
    pub fn token(&self) -> &str {
        self.lock().token()
    }

    /// The fencing token minted with the lock, if fencing was asked for.
    pub fn fence_token(&self) -> Option<u64> {
        self.lock().fence_token()
    }

    /// The metadata stored with the lock.
    pub fn metadata(&self) -> &str {
        self.lock().metadata()
    }

    /// When the lease ends unless a refresh is confirmed before: the moment
    /// the last successful refresh was sent, plus the ttl.
    pub fn deadline(&self) -> Instant {
        self.lock().deadline()
    }

    /// True once the lease is lost: a refresh was refused, or the deadline
    /// passed without a confirmed refresh; or once the locker's
    /// [`shutdown`](crate::Locker::shutdown) gave it back. Never turns back
    /// to false.
    pub fn is_lost(&self) -> bool {
        self.lease().is_lost()
    }

    /// Completes when the lease is lost, or given back by the locker's
    /// shutdown (at once if it already is).
    pub async fn lost(&self) {
        let lease = self.lease();
        loop {
            let notified = lease.lost_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if lease.is_lost() {
                return;
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(lease.timing().deadline) => {}
            }
        }
    }

    /// True while the lease is at risk: no refresh has been confirmed for
    /// two thirds of its ttl (the watchdog refreshes every third), so a
    /// third of it or less still stands; or once it is over. Turns false
    /// again when a refresh is confirmed in time.
    pub fn is_at_risk(&self) -> bool {
        self.lease().is_at_risk()
    }

    /// Completes when the lease is at risk (see
    /// [`is_at_risk`](Self::is_at_risk)), before it is lost, while a third
    /// of it still stands: time to stop taking new work, or to save what
    /// was done. At once if it already is, or once the lease is over.
    /// Renewals that fail for good make it complete before
    /// [`lost`](Self::lost), at the latest a third of the ttl before the
    /// local deadline.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// let guard = locker
    ///     .obtain("reindex", Duration::from_secs(10), ObtainOptions::new())
    ///     .await?
    ///     .keep_alive();
    /// let batches = async { /* works batch after batch */ };
    /// tokio::select! {
    ///     () = batches => {}
    ///     () = guard.at_risk() => { /* renewals are failing: checkpoint, stop */ }
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn at_risk(&self) {
        self.lease().at_risk(|| self.is_done()).await;
    }

    /// A token cancelled when the lease ends for this holder: lost (as
    /// [`lost`](Self::lost) completes), given back, or taken by the
    /// locker's [`shutdown`](crate::Locker::shutdown). Cancelled at once if
    /// it already has. For the tasks a holder spawns: a task that stops when
    /// it is cancelled stops when the lease ends, whoever holds the guard.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// let guard = locker
    ///     .obtain("reindex", Duration::from_secs(10), ObtainOptions::new())
    ///     .await?
    ///     .keep_alive();
    /// let token = guard.cancellation_token();
    /// let worker = tokio::spawn(async move {
    ///     // Works in batches until the lease ends.
    ///     token.run_until_cancelled(std::future::pending::<()>()).await
    /// });
    /// guard.release().await?;
    /// assert_eq!(worker.await.unwrap(), None); // stopped by the release
    /// # Ok(()) }
    /// ```
    pub fn cancellation_token(&self) -> CancellationToken {
        self.lease().cancellation_token()
    }

    /// How long the lease has left, as the backend sees it;
    /// [`LockError::NotHeld`] when it is no longer ours.
    pub async fn remaining(&self) -> Result<Duration, LockError> {
        self.lock().remaining().await
    }

    /// The remaining lease, under its first name: the same as
    /// [`remaining`](Self::remaining), not the ttl the lock was obtained
    /// with.
    pub async fn ttl(&self) -> Result<Duration, LockError> {
        self.remaining().await
    }

    /// Refreshes now, to `ttl`; later refreshes by the watchdog use `ttl` too.
    pub async fn refresh(&self, ttl: Duration) -> Result<(), LockError> {
        self.lock().refresh(ttl).await
    }

    /// Stops the watchdog for this lease and gives the lock back.
    /// [`LockError::NotHeld`] when it was no longer ours.
    pub async fn release(self) -> Result<(), LockError> {
        let lease = self.lease();
        self.inner.lock.watchdog.unwatch(self.inner.id);
        lease.release().await
    }

    pub(crate) fn is_done(&self) -> bool {
        self.lease().done.load(Ordering::Acquire)
    }
}
