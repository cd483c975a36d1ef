//! Seeing and clearing a key, for operators: [`Locker::inspect`] and
//! [`Locker::force_release`].

use crate::backend::Inspection;
use crate::locker::check_key;
use crate::{LockError, Locker};

impl Locker {
    /// What holds `key` (as given to `obtain`, without the namespace) and
    /// who waits for it: its [kind](crate::KeyKind), every lease on it with
    /// the metadata its holder recorded and its remaining lease, the fair
    /// waiters in line, and the last fencing token minted for it. Changes
    /// nothing. Fails with [`BackendErrorKind::Unsupported`](crate::BackendErrorKind::Unsupported)
    /// on a backend that cannot tell.
    ///
    /// Each holder shows the metadata it gave
    /// ([`ObtainOptions::metadata`](crate::ObtainOptions::metadata)), a
    /// permit, a read or a write as a lock does, on every backend that can
    /// inspect, as below on memory. The exceptions are on Redis, where
    /// shares keep theirs in a hash beside the key (`{K}:holders`): the
    /// shares of a key with a `}` but no hash tag keep none (no such name
    /// shares its cluster slot), nor those of a user denied the hash
    /// commands; they show `""`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{KeyKind, Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// assert_eq!(locker.inspect("jobs").await?.kind, None);
    /// let opts = ObtainOptions::new().permits(3).metadata("worker-1");
    /// let _one = locker.obtain("jobs", Duration::from_secs(30), opts).await?;
    /// let seen = locker.inspect("jobs").await?;
    /// assert_eq!(seen.kind, Some(KeyKind::Semaphore { permits: 3 }));
    /// assert_eq!(seen.holders.len(), 1);
    /// assert_eq!(seen.holders[0].metadata, "worker-1");
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, key: &str) -> Result<Inspection, LockError> {
        check_key(key)?;
        let wire_key = self.wire_key(key);
        self.backend()
            .check_keys(std::slice::from_ref(&wire_key), None)?;
        let fence_key = self.backend().fence_key(&wire_key);
        self.backend().inspect(&wire_key, &fence_key).await
    }

    /// Deletes every lease on `key` (as given to `obtain`), whoever holds
    /// it, and wakes its waiters; returns whether anything was held. Each
    /// former holder's next refresh is refused and it reports
    /// [`LockError::Lost`] (a watchdog-kept guard's
    /// [`lost`](crate::LockGuard::lost) completes); a holder that does not
    /// refresh learns it at its next [`refresh`](crate::Lock::refresh) or
    /// [`release`](crate::Lock::release). For operators clearing a key whose
    /// holder is stuck: the holder may still be running its critical
    /// section, so the key is no longer exclusive until it notices. Fails
    /// with [`BackendErrorKind::Unsupported`](crate::BackendErrorKind::Unsupported)
    /// on a backend that cannot.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// let stuck = locker.obtain("report", Duration::from_secs(30), ObtainOptions::new()).await?;
    /// assert!(locker.force_release("report").await?);
    /// assert!(stuck.refresh(Duration::from_secs(30)).await.unwrap_err().is_not_held());
    /// let _mine = locker.obtain("report", Duration::from_secs(30), ObtainOptions::new()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_release(&self, key: &str) -> Result<bool, LockError> {
        check_key(key)?;
        let wire_key = self.wire_key(key);
        self.backend()
            .check_keys(std::slice::from_ref(&wire_key), None)?;
        let released = self.backend().force_release(&wire_key).await?;
        tracing::info!(target: "lockmacro", key, released, "force-released");
        Ok(released)
    }
}
