//! Turning the write of a read-write lock into a read, in one step:
//! [`Lock::downgrade`] and [`LockGuard::downgrade`], as tokio's
//! `RwLockWriteGuard::downgrade`.

use std::sync::atomic::Ordering;

use crate::backend::Share;
use crate::lease::Lease;
use crate::{Lock, LockError, LockGuard};

impl Lock {
    /// Turns this write of a read-write lock into a read of the same key,
    /// atomically: no writer can take the key in between, and the readers
    /// waiting behind the write may then enter. The token, the fencing
    /// token and the lease's expiry are kept.
    ///
    /// Fails with [`LockError::InvalidKey`] for a lock that is not the write
    /// of a read-write lock (taken with
    /// [`ObtainOptions::write`](crate::ObtainOptions::write)), with
    /// [`LockError::NotHeld`] when the write is no longer ours, and with
    /// [`BackendErrorKind::Unsupported`](crate::BackendErrorKind::Unsupported)
    /// on a backend without shares; the lock is then released in the
    /// background, as when dropped.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// let ttl = Duration::from_secs(30);
    /// let write = locker.obtain("config", ttl, ObtainOptions::new().write()).await?;
    /// // … write the new configuration, then keep reading it while others read too …
    /// let read = write.downgrade().await?;
    /// let other_reader = locker.obtain("config", ttl, ObtainOptions::new().read()).await?;
    /// assert!(locker.obtain("config", ttl, ObtainOptions::new().write()).await.is_err());
    /// # drop((read, other_reader)); Ok(()) }
    /// ```
    pub async fn downgrade(self) -> Result<Lock, LockError> {
        downgrade(&self.lease).await?;
        Ok(self)
    }
}

impl LockGuard {
    /// Turns this write of a read-write lock into a read, as
    /// [`Lock::downgrade`] does; the watchdog goes on keeping the lease.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// let ttl = Duration::from_secs(30);
    /// let write = locker.obtain("config", ttl, ObtainOptions::new().write()).await?.keep_alive();
    /// let read = write.downgrade().await?;
    /// let _other = locker.obtain("config", ttl, ObtainOptions::new().read()).await?;
    /// read.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn downgrade(self) -> Result<LockGuard, LockError> {
        downgrade(self.lease()).await?;
        Ok(self)
    }
}

async fn downgrade(lease: &Lease) -> Result<(), LockError> {
    if lease.share() != Some(Share::Write) {
        return Err(LockError::InvalidKey {
            key: lease.key().to_owned(),
            reason: "only the write of a read-write lock can be downgraded; this lock was not \
                     obtained with `write`, or was downgraded already"
                .into(),
        });
    }
    if !lease
        .backend
        .downgrade(&lease.wire_keys()[0], lease.token())
        .await?
    {
        return Err(LockError::NotHeld {
            key: lease.key().to_owned(),
        });
    }
    lease.downgraded.store(true, Ordering::Release);
    tracing::debug!(target: "lockmacro", key = %lease.key(), "downgraded to a read");
    Ok(())
}
