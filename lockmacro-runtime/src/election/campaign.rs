//! Campaigning: attempts at the role until one takes it, through the
//! backend's failures.

use std::time::Duration;

use super::{Election, Leadership};
use crate::{BackendError, BackendErrorKind, LockError, ObtainOptions, RetryStrategy};

/// How long a fair candidate stands in the role's queue before it queues
/// again (at the back): a place in a queue lapses at its obtain's deadline,
/// so that a candidate that died without leaving does not stay in line.
const FAIR_TURN: Duration = Duration::from_secs(3600);

impl Election {
    /// Waits until this instance holds the role, and returns the
    /// [`Leadership`], already kept alive by the watchdog.
    ///
    /// There is no deadline: wrap the call in [`tokio::time::timeout`] or a
    /// `select!` to give up. A campaign dropped before it returns leaves
    /// nothing behind: an attempt whose reply it did not read, and its place
    /// in a fair queue, are given back in the background. Backend failures
    /// are retried as [`Election`] says; other errors are returned.
    pub async fn campaign(&self) -> Result<Leadership, LockError> {
        let period = self.period()?;
        let options = self.options();
        let (backoff, max_backoff) = self.retry_after_failures();
        let mut failures = 0;
        loop {
            match self
                .locker
                .obtain(&self.role, self.ttl, options.clone())
                .await
            {
                Ok(lock) => {
                    let Some(term) = lock.fence_token() else {
                        // Given back in the background as the lock drops.
                        return Err(BackendError::new(
                            BackendErrorKind::Unsupported,
                            format!("campaign for `{}`", self.role),
                            "the backend minted no fencing token with the role, and a term is \
                             one; an election needs a backend that honours \
                             `AcquireRequest::fence_key`",
                        )
                        .into());
                    };
                    let guard = lock.keep_alive_every(period)?;
                    tracing::debug!(target: "lockmacro", role = %self.role, term, "elected");
                    return Ok(Leadership::new(guard, term));
                }
                // A fair candidate's turn in the queue is over: queue again.
                Err(LockError::NotObtained { .. }) => failures = 0,
                Err(err) if err.is_transient() => {
                    failures += 1;
                    let delay = backoff.delay_after(failures).unwrap_or(max_backoff);
                    tracing::warn!(target: "lockmacro", role = %self.role, error = %err, failures, ?delay, "campaign could not reach the backend; trying again");
                    tokio::time::sleep(delay).await;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// The watchdog's period, checked before anything is sent.
    fn period(&self) -> Result<Duration, LockError> {
        crate::lease::check_duration(&self.role, "ttl", self.ttl)?;
        let period = self.refresh.unwrap_or(self.ttl / 3);
        let usable = self
            .ttl
            .saturating_sub(self.locker.backend().drift(self.ttl));
        if period.is_zero() || period >= usable {
            return Err(LockError::InvalidDuration {
                key: self.role.to_string(),
                what: "refresh period",
                value: period,
                reason: format!(
                    "must be above zero and shorter than {usable:?} (the ttl of {:?} less its \
                     drift margin), or the leader's lease lapses between refreshes; a third of \
                     the ttl is the default",
                    self.ttl
                ),
            });
        }
        Ok(period)
    }

    fn options(&self) -> ObtainOptions {
        let mut options = ObtainOptions::new().fence().metadata(self.metadata.clone());
        // Waits as the attribute's `wait` does: for a release the backend
        // announces, or the end of the leader's lease, with a backoff where
        // the backend cannot wake waiters; but without a deadline.
        let mut retry =
            RetryStrategy::exponential(Duration::from_millis(2), Duration::from_millis(200));
        if self.fair && self.locker.backend().capabilities().fair_queue.is_some() {
            options = options.fair();
            retry = retry.deadline(FAIR_TURN);
        }
        options = options.retry(retry);
        options.wakeups_only = true;
        options
    }
}
