//! Giving back what a locker holds when the service stops:
//! [`Locker::shutdown`], over the locker's registry (`registry.rs`).

use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;

use crate::{Locker, ShutdownReport};

/// How long [`Locker::shutdown`] waits for the leases to be given back.
const DEFAULT_LIMIT: Duration = Duration::from_secs(10);

/// How many leases a shutdown gives back at once: each is a round trip, and
/// a locker may hold many thousands.
const CONCURRENT_RELEASES: usize = 256;

impl Locker {
    /// Gives back every lease held through this locker and its clones, and
    /// takes no more locks: call it when the service stops, before `main`
    /// returns. Waits at most ten seconds; see
    /// [`shutdown_within`](Self::shutdown_within) for another limit.
    ///
    /// Without it, a lock dropped as the process ends is given back by a
    /// task that the ending runtime never runs: the key stays held until its
    /// ttl runs out, and the next instance (in a rolling deploy, the one
    /// that replaces this one) waits that long.
    ///
    /// What it does, in order:
    ///
    /// - obtains through the locker or a clone fail from now on with
    ///   [`LockError::ShutDown`](crate::LockError::ShutDown), and those still waiting end with it, giving
    ///   back their place in a fair queue;
    /// - the watchdog stops, and every lease held (locks, guards, permits,
    ///   read and write shares, leaderships, `#[distributed_lock]` bodies)
    ///   is ended for its holder: [`LockGuard::lost`](crate::LockGuard::lost)
    ///   completes, [`LockGuard::cancellation_token`](crate::LockGuard::cancellation_token)
    ///   is cancelled, a body under [`OnLost::Abort`](crate::OnLost::Abort)
    ///   is dropped and its call returns [`LockError::ShutDown`](crate::LockError::ShutDown);
    /// - each lease is given back, and the releases that dropped locks left
    ///   running are waited for.
    ///
    /// A key that `hold_at_least` keeps after its body ended is left to
    /// expire, as it asked. A handle whose lease was given back this way
    /// releases without sending anything (`Ok`), and refuses to refresh
    /// ([`LockError::ShutDown`](crate::LockError::ShutDown)). Calling it again waits again and reports
    /// the same leases.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{LockError, Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// let ttl = Duration::from_secs(30);
    /// let guard = locker.obtain("nightly-report", ttl, ObtainOptions::new()).await?.keep_alive();
    /// let dropped = locker.obtain("cleanup", ttl, ObtainOptions::new()).await?;
    /// drop(dropped); // given back in the background, which shutdown waits for
    ///
    /// let report = locker.shutdown().await;
    /// assert!(report.is_complete());
    /// assert!(guard.is_lost());
    /// let again = locker.obtain("nightly-report", ttl, ObtainOptions::new()).await;
    /// assert!(matches!(again, Err(LockError::ShutDown { .. })));
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self) -> ShutdownReport {
        self.shutdown_within(DEFAULT_LIMIT).await
    }

    /// [`shutdown`](Self::shutdown), waiting at most `limit` for the leases
    /// to be given back. What is still held then is left to expire with its
    /// ttl ([`ShutdownReport::left_to_expire`]); the releases still under
    /// way go on in the background while the runtime runs.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// let lock = locker.obtain("job", Duration::from_secs(30), ObtainOptions::new()).await?;
    /// let report = locker.shutdown_within(Duration::from_secs(2)).await;
    /// assert_eq!(report.given_back, 1);
    /// lock.release().await?; // already given back: sends nothing
    /// # Ok(()) }
    /// ```
    pub async fn shutdown_within(&self, limit: Duration) -> ShutdownReport {
        let deadline = Instant::now() + limit;
        let registry = self.registry();
        let leases = registry.close();
        self.watchdog().stop();
        tracing::debug!(target: "lockmacro", leases = leases.len(), "shutting down");
        for lease in &leases {
            lease.revoke();
        }
        let giving_back = futures_util::stream::iter(leases)
            .for_each_concurrent(CONCURRENT_RELEASES, |lease| lease.give_back());
        let finished = tokio::time::timeout_at(deadline, async {
            giving_back.await;
            registry.tracker().wait().await;
            registry.emptied().await;
        })
        .await;
        if finished.is_err() {
            tracing::warn!(target: "lockmacro", ?limit, "shutdown: not every lease was given back in time; the rest expire with their ttl");
            registry.abandon();
        }
        let report = registry.report();
        tracing::debug!(target: "lockmacro", ?report, "shut down");
        report
    }
}
