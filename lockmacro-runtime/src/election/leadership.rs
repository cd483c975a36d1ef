//! The role held: [`Leadership`], what a campaign returns, and [`Term`],
//! what the body of [`Election::run`] runs in.

use std::sync::atomic::Ordering;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{LockError, LockGuard};

#[cfg(doc)]
use super::Election;

/// The role, held: what [`Election::campaign`] returns.
///
/// The locker's watchdog keeps the lease alive until the leadership is
/// resigned or dropped, or the lease is lost ([`is_lost`](Self::is_lost),
/// [`lost`](Self::lost)); leading code should stop at the latter, which
/// comes before another candidate can be elected. Dropping it resigns in the
/// background, as dropping a [`Lock`](crate::Lock) releases it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
/// use std::time::Duration;
/// use lockmacro_runtime::Locker;
///
/// let locker = Locker::memory();
/// let leader = locker.election("scheduler", Duration::from_secs(10)).campaign().await?;
/// tokio::select! {
///     () = leader.lost() => println!("no longer the leader: stop"),
///     () = tokio::time::sleep(Duration::from_millis(10)) => println!("jobs of term {} done", leader.term()),
/// }
/// leader.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Leadership {
    guard: LockGuard,
    term: u64,
    /// Set once the role was given back, or is being given back.
    ended: bool,
}

impl Leadership {
    pub(super) fn new(guard: LockGuard, term: u64) -> Self {
        Leadership {
            guard,
            term,
            ended: false,
        }
    }

    /// The lease that holds the role.
    pub(super) fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// A [`Term`] for the body that runs while this leadership lasts.
    pub(super) fn term_handle(&self) -> Term {
        Term {
            guard: self.guard.share(),
            number: self.term,
        }
    }

    /// The role held.
    pub fn role(&self) -> &str {
        self.guard.key()
    }

    /// The term: the fencing token minted when the role was taken. It
    /// strictly increases per role; pass it with every write made as
    /// leader.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The metadata stored with the role's key.
    pub fn metadata(&self) -> &str {
        self.guard.metadata()
    }

    /// When the lease ends unless a refresh is confirmed before, on this
    /// process's monotonic clock; the watchdog moves it with each refresh.
    pub fn deadline(&self) -> Instant {
        self.guard.deadline()
    }

    /// True once the lease is lost: a refresh was refused, or the deadline
    /// passed without a confirmed refresh. Never turns back to false: a
    /// leader that lost the role campaigns again for a new term.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Completes when the lease is lost (at once if it already is), on the
    /// local deadline at the latest, without waiting for the backend.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// True while the term is at risk: renewals have gone unconfirmed for
    /// two thirds of the ttl (see [`LockGuard::is_at_risk`](crate::LockGuard::is_at_risk)).
    pub fn is_at_risk(&self) -> bool {
        self.guard.is_at_risk()
    }

    /// Completes when the term is at risk, before [`lost`](Self::lost),
    /// while a third of the lease still stands (see
    /// [`LockGuard::at_risk`](crate::LockGuard::at_risk)).
    pub async fn at_risk(&self) {
        self.guard.at_risk().await;
    }

    /// A token cancelled when this term ends: the lease lost (as
    /// [`lost`](Self::lost) completes), the role given back, or taken by
    /// the locker's [`shutdown`](crate::Locker::shutdown). For the tasks a
    /// leader spawns, so that they stop with its term whoever holds the
    /// `Leadership`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::Locker;
    ///
    /// let locker = Locker::memory();
    /// let leader = locker.election("scheduler", Duration::from_secs(10)).campaign().await?;
    /// let term_over = leader.cancellation_token();
    /// let jobs = tokio::spawn(async move {
    ///     term_over.run_until_cancelled(std::future::pending::<()>()).await
    /// });
    /// leader.resign().await?;
    /// assert_eq!(jobs.await.unwrap(), None); // stopped with the term
    /// # Ok(()) }
    /// ```
    pub fn cancellation_token(&self) -> CancellationToken {
        self.guard.cancellation_token()
    }

    /// Gives the role up: the next candidate is woken and elected.
    /// [`LockError::NotHeld`] when the role was no longer this instance's
    /// (the lease was lost, and someone else may lead).
    pub async fn resign(mut self) -> Result<(), LockError> {
        let guard = self.end();
        tracing::debug!(target: "lockmacro", role = %guard.key(), term = self.term, "resigning");
        drop(self);
        guard.release().await
    }

    /// Ends the term for its [`Term`]s, and returns a handle on the lease to
    /// give it back with: `self` then drops without releasing.
    fn end(&mut self) -> LockGuard {
        self.ended = true;
        let guard = self.guard.share();
        let lease = guard.lease();
        lease.done.store(true, Ordering::Release);
        lease.lost_notify.notify_waiters();
        guard
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // Through a handle of its own, so that the role is given back now
        // even if the body's `Term`s outlive the leadership.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let guard = self.end();
        runtime.spawn(async move {
            if let Err(err) = guard.release().await {
                tracing::debug!(target: "lockmacro", error = %err, "background resign failed");
            }
        });
    }
}

/// The term [`Election::run`] calls its body in: the term's number (the
/// fencing token to write with) and whether it is still on.
///
/// Cheap to clone. A `Term` kept after its body ended says the term is
/// over once the role was given up or lost.
#[derive(Debug)]
pub struct Term {
    guard: LockGuard,
    number: u64,
}

impl Clone for Term {
    fn clone(&self) -> Self {
        Term {
            guard: self.guard.share(),
            number: self.number,
        }
    }
}

impl Term {
    /// The term's number: the fencing token minted when the role was taken,
    /// as [`Leadership::term`].
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The role held.
    pub fn role(&self) -> &str {
        self.guard.key()
    }

    /// When the lease ends unless a refresh is confirmed before, on this
    /// process's monotonic clock.
    pub fn deadline(&self) -> Instant {
        self.guard.deadline()
    }

    /// True once the term is over: the lease was lost, or the role given up.
    /// Never turns back to false.
    pub fn is_lost(&self) -> bool {
        self.guard.is_done() || self.guard.is_lost()
    }

    /// A token cancelled when the term is over: the lease lost, the role
    /// given back (by [`Election::run`] once the body returned, or on its
    /// stop), or taken by the locker's [`shutdown`](crate::Locker::shutdown).
    /// For the tasks a body spawns, which its future being dropped does not
    /// stop.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use lockmacro_runtime::Locker;
    ///
    /// let locker = Locker::memory();
    /// let election = locker.election("scheduler", Duration::from_secs(10));
    /// let worker = election
    ///     .run(|term| async move {
    ///         let term_over = term.cancellation_token();
    ///         Ok::<_, Infallible>(tokio::spawn(async move {
    ///             term_over.run_until_cancelled(std::future::pending::<()>()).await
    ///         }))
    ///     })
    ///     .await?;
    /// assert_eq!(worker.await.unwrap(), None); // stopped as `run` resigned
    /// # Ok(()) }
    /// ```
    pub fn cancellation_token(&self) -> CancellationToken {
        self.guard.cancellation_token()
    }

    /// Completes when the term is over (at once if it already is): on the
    /// lease's local deadline at the latest when it is lost, without waiting
    /// for the backend.
    pub async fn lost(&self) {
        let lease = self.guard.lease();
        loop {
            let notified = lease.lost_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.guard.is_done() {
                return;
            }
            if lease.is_lost() {
                return;
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(lease.timing().deadline) => {}
            }
        }
    }

    /// True while the term is at risk: renewals have gone unconfirmed for
    /// two thirds of the ttl (see [`LockGuard::is_at_risk`](crate::LockGuard::is_at_risk)).
    pub fn is_at_risk(&self) -> bool {
        self.guard.is_at_risk()
    }

    /// Completes when the term is at risk, before [`lost`](Self::lost),
    /// while a third of the lease still stands, or once it is over (see
    /// [`LockGuard::at_risk`](crate::LockGuard::at_risk)).
    pub async fn at_risk(&self) {
        self.guard.at_risk().await;
    }
}
