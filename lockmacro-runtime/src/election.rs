//! Leader election ([`Locker::election`]), built on the lock: a role is a
//! lock key, a term is the fencing token minted when the role is taken, and
//! holding the role is the watchdog keeping that lock's lease.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::{
    BackendError, BackendErrorKind, LockError, LockGuard, Locker, ObtainOptions, RetryStrategy,
};

/// How long a fair candidate stands in the role's queue before it queues
/// again (at the back): a place in a queue lapses at its obtain's deadline,
/// so that a candidate that died without leaving does not stay in line.
const FAIR_TURN: Duration = Duration::from_secs(3600);

/// The pause after the first failed attempt to reach the backend; it doubles
/// with each failure that follows, up to the ttl (at most [`MAX_BACKOFF`]),
/// with full jitter.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl Locker {
    /// An election for `role`: instances that campaign for it take turns
    /// holding it, one at a time, each for as long as it keeps a lease of
    /// `ttl`. See [`Election`].
    ///
    /// The role is a lock key like any other (under this locker's
    /// namespace), and its terms are fencing tokens from the key's fence
    /// counter: `obtain`s of the same key contend with the candidates.
    pub fn election(&self, role: &str, ttl: Duration) -> Election {
        Election {
            locker: self.clone(),
            role: Arc::from(role),
            ttl,
            refresh: None,
            metadata: String::new(),
            fair: false,
        }
    }
}

/// Candidates for one role: [`campaign`](Self::campaign) waits until this
/// instance holds the role, [`run`](Self::run) runs a future whenever it
/// does. Made by [`Locker::election`].
///
/// - **One leader at a time.** The role is a lock on the key `role`, taken
///   with a fencing token and kept alive by the locker's watchdog (every
///   third of the ttl by default). The leader holds it until it resigns, or
///   until its lease is lost: a refresh refused, or the lease's local
///   deadline passed without a confirmed refresh (the backend unreachable,
///   the process paused).
/// - **Terms.** Each time the role is taken, it is under a new term: the
///   fencing token minted then ([`Leadership::term`]), which strictly
///   increases per role, across resignations, expiries and instances (see
///   "Fencing tokens" in the crate documentation for what it rests on, per
///   backend). Pass it with every write the leader makes, and have the
///   resource refuse terms older than the newest it has seen
///   ([`FencedStore`](crate::FencedStore)): a leader paused past its lease
///   can wake up believing it still leads, and only the resource can stop
///   its writes already on their way.
/// - **The leader learns first.** The lease's local deadline, on the
///   leader's monotonic clock, is counted from when the last confirmed
///   refresh was *sent*, less the backend's drift margin; the key expires on
///   the server no earlier than the ttl after that refresh arrived. So the
///   leader's [`lost`](Leadership::lost) completes, and [`run`](Self::run)
///   drops its future, before another candidate can take the role, unless
///   the leader's process stalls for longer than that margin (by default 1%
///   of the ttl plus 2 ms) just then: one more reason to write with the
///   term.
/// - **Followers wait without polling.** A candidate that finds the role
///   held listens for its release (Redis pub/sub, an etcd watch, in-process
///   on the memory backend) and sends nothing until it is released or the
///   leader's lease would run out without refreshes, when it tries again
///   (about once per ttl while a leader lives). On a backend that cannot
///   announce releases ([`RedlockBackend`](crate::RedlockBackend), and a
///   custom backend without [`Backend::listen`](crate::backend::Backend::listen))
///   candidates try again after a backoff of up to 200 ms.
/// - **Backend errors.** An attempt that fails in a way trying again may
///   cure ([`LockError::is_transient`]: the backend could not be reached,
///   did not answer in time or answered with an error of its own) is
///   logged as a warning and tried
///   again after an exponential backoff (from 50 ms, at most the ttl or 5 s),
///   for as long as the campaign lasts: a follower waits through an outage.
///   Errors that trying again cannot cure are returned: an invalid role, ttl
///   or refresh period, refused credentials, a missing permission, a TLS
///   failure, a custom backend that mints no fencing tokens.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
/// use std::time::Duration;
/// use lockmacro_runtime::Locker;
///
/// let locker = Locker::memory();
/// let ttl = Duration::from_secs(10);
/// let leader = locker.election("scheduler", ttl).metadata("instance-1").campaign().await?;
///
/// // Another instance campaigns, and waits.
/// let other = locker.election("scheduler", ttl).metadata("instance-2");
/// let follower = tokio::spawn(async move { other.campaign().await });
///
/// let first = leader.term();
/// leader.resign().await?; // the follower is woken, and elected
/// let next = follower.await.unwrap()?;
/// assert!(next.term() > first);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    locker: Locker,
    role: Arc<str>,
    ttl: Duration,
    refresh: Option<Duration>,
    metadata: String,
    fair: bool,
}

impl Election {
    /// How often the leader refreshes its lease; a third of the ttl by
    /// default. It must be above zero and shorter than the ttl less the
    /// backend's drift margin, or a campaign fails with
    /// [`LockError::InvalidDuration`] before it sends anything.
    pub fn refresh(mut self, period: Duration) -> Self {
        self.refresh = Some(period);
        self
    }

    /// Text stored with the role's key while this instance leads: its name,
    /// for whoever looks at the store (on Redis, `GET <role>` shows the
    /// owner's 32-character token followed by it).
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = metadata.into();
        self
    }

    /// Serves candidates in the order they started waiting, where the
    /// backend keeps a queue of waiters ([`ObtainOptions::fair`]: Redis, a
    /// cluster, Sentinel, etcd, memory): a resigning leader hands the role
    /// to the candidate that has waited longest, and cannot win it straight
    /// back. Elsewhere (Redlock, a custom backend without a queue) candidates
    /// race for the role as they do without it.
    ///
    /// A candidate stands in line for an hour at most, then queues again at
    /// the back: a candidate that dies without leaving the queue costs the
    /// others nothing once its hour is over.
    pub fn fair(mut self) -> Self {
        self.fair = true;
        self
    }

    /// The role, as given to [`Locker::election`].
    pub fn role(&self) -> &str {
        &self.role
    }

    /// The ttl of the leader's lease.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The locker the election runs on.
    pub fn locker(&self) -> &Locker {
        &self.locker
    }

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
        let backoff =
            RetryStrategy::exponential(FIRST_BACKOFF, self.ttl.clamp(FIRST_BACKOFF, MAX_BACKOFF));
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
                    return Ok(Leadership {
                        guard,
                        term,
                        ended: false,
                    });
                }
                // A fair candidate's turn in the queue is over: queue again.
                Err(LockError::NotObtained { .. }) => failures = 0,
                Err(err) if err.is_transient() => {
                    failures += 1;
                    let delay = backoff.delay_after(failures).unwrap_or(MAX_BACKOFF);
                    tracing::warn!(target: "lockmacro", role = %self.role, error = %err, failures, ?delay, "campaign could not reach the backend; trying again");
                    tokio::time::sleep(delay).await;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Campaigns, runs the future `body` returns while this instance leads,
    /// and campaigns again whenever the role is lost, until a `body` future
    /// completes: then resigns and returns its output.
    ///
    /// `body` is called once per term with that [`Term`] (its number is the
    /// fencing token to write with). When the lease is lost, the future is
    /// dropped on the lease's local deadline, as
    /// [`OnLost::Abort`](crate::OnLost::Abort) does under
    /// [`Locker::hold`]: it is never polled once the deadline has passed,
    /// and the output of one that completes after it is dropped, as if it
    /// had not completed. The role is given back in the background, and the
    /// campaign starts again at once; `body` is called anew in the next
    /// term.
    /// What remains is the code between two awaits, and a write already
    /// handed to a connection: pass the term to the resource so that it
    /// refuses those.
    ///
    /// A panic in the body resigns the role, then resumes. Errors are those
    /// of [`campaign`](Self::campaign); backend failures are retried, so
    /// `run` returns an error only for a role, ttl or period it cannot use,
    /// or a backend that refuses this client. Dropping the future returned
    /// by `run` drops the body's and gives the role back in the background.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{FencedStore, Locker};
    ///
    /// let locker = Locker::memory();
    /// let store = FencedStore::memory(); // or FencedStore::connect("redis://…").await?
    /// let election = locker.election("scheduler", Duration::from_secs(10));
    /// let written = election
    ///     .run(|term| {
    ///         let store = store.clone();
    ///         async move {
    ///             // Runs while this instance leads, and no longer.
    ///             store.set("last-job", "nightly report", term.number()).await
    ///         }
    ///     })
    ///     .await??;
    /// assert!(written);
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut>(&self, mut body: F) -> Result<Fut::Output, LockError>
    where
        F: FnMut(Term) -> Fut,
        Fut: Future,
    {
        loop {
            let leadership = self.campaign().await?;
            let term = Term {
                guard: leadership.guard.share(),
                number: leadership.term,
            };
            let outcome = crate::hold::supervise(&leadership.guard, body(term)).await;
            match outcome {
                Some(outcome) => {
                    if let Err(err) = leadership.resign().await {
                        tracing::debug!(target: "lockmacro", role = %self.role, error = %err, "resign after the body");
                    }
                    return match outcome {
                        Ok(value) => Ok(value),
                        Err(panic) => std::panic::resume_unwind(panic),
                    };
                }
                None => {
                    tracing::warn!(target: "lockmacro", role = %self.role, term = leadership.term, "lost the role; campaigning again");
                    drop(leadership);
                }
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
}
