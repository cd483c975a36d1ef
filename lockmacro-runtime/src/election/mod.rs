//! Leader election ([`Locker::election`]), built on the lock: a role is a
//! lock key, a term is the fencing token minted when the role is taken, and
//! holding the role is the watchdog keeping that lock's lease.

mod campaign;
mod leadership;
mod next;
mod observe;
mod run;

use std::sync::Arc;
use std::time::Duration;

use crate::{Locker, RetryStrategy};

pub use self::leadership::{Leadership, Term};
pub use self::next::{IntoNext, Next};
pub use self::observe::LeaderInfo;

/// The pause after the first failure (an attempt that could not reach the
/// backend, a term ended by an error); it doubles with each failure that
/// follows, up to the ttl (at most [`MAX_BACKOFF`]), with full jitter,
/// unless [`Election::backoff`] says otherwise.
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
            backoff: None,
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
///   cure ([`LockError::is_transient`](crate::LockError::is_transient): the backend could not be reached,
///   did not answer in time or answered with an error of its own) is
///   logged as a warning and tried again after a backoff
///   ([`backoff`](Self::backoff): from 50 ms, at most the ttl or 5 s, with
///   jitter), for as long as the campaign lasts: a follower waits through
///   an outage. Errors that trying again cannot cure are returned: an
///   invalid role, ttl or refresh period, refused credentials, a missing
///   permission, a TLS failure, a custom backend that mints no fencing
///   tokens.
/// - **Leader loops survive.** Under [`run`](Self::run) and
///   [`run_until`](Self::run_until), a term that ends in an error (the
///   body's `Err` or [`Next::Retry`], or a lease lost to an outage) is
///   followed by the same backoff and a new campaign: only the body's `Ok`
///   or [`Next::Stop`], the stop signal, or the locker's shutdown ends the
///   campaign (see "What ends the campaign" under [`run`](Self::run)).
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
    /// The first and the longest pause after a failure, if not the default.
    backoff: Option<(Duration, Duration)>,
}

impl Election {
    /// How often the leader refreshes its lease; a third of the ttl by
    /// default. It must be above zero and shorter than the ttl less the
    /// backend's drift margin, or a campaign fails with
    /// [`LockError::InvalidDuration`](crate::LockError::InvalidDuration) before it sends anything.
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
    /// backend keeps a queue of waiters ([`ObtainOptions::fair`](crate::ObtainOptions::fair): Redis, a
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

    /// The pauses after failures: after an attempt at the role that could
    /// not reach the backend, and, in [`run`](Self::run), after a term that
    /// ended in an error or a lost lease, before campaigning again. The
    /// n-th failure in a row waits a random time between zero and
    /// `first × 2ⁿ⁻¹`, at most `max` ("full jitter", so that instances do
    /// not retry in step). By default `first` is 50 ms and `max` the ttl, at
    /// most 5 s. A term that lasted a whole ttl or more starts the count
    /// again; so does an attempt that reached the backend.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lockmacro_runtime::Locker;
    ///
    /// let election = Locker::memory()
    ///     .election("scheduler", Duration::from_secs(10))
    ///     .backoff(Duration::from_millis(100), Duration::from_secs(30));
    /// # let _ = election;
    /// ```
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.backoff = Some((first, max.max(first)));
        self
    }

    /// The backoff after failures, as [`backoff`](Self::backoff) set it.
    fn retry_after_failures(&self) -> (RetryStrategy, Duration) {
        let (first, max) = self
            .backoff
            .unwrap_or((FIRST_BACKOFF, self.ttl.clamp(FIRST_BACKOFF, MAX_BACKOFF)));
        (RetryStrategy::exponential(first, max), max)
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
}
