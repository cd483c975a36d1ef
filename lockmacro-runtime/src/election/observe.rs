//! Watching a role from outside: who leads now ([`Election::leader`]) and
//! every change of leader ([`Election::observe`]), read through
//! [`Locker::inspect`](crate::Locker::inspect) and woken by the backend's
//! release announcements.

use std::time::Duration;

use futures_util::stream::{self, BoxStream, StreamExt};

use super::Election;
use crate::backend::{Inspection, ReleaseListener};
use crate::{HeldAs, LockError};

/// The first pause between reads while nobody leads: a candidate is
/// usually about to take the role, so the reads start close together, then
/// spread out to the ttl.
const FIRST_FREE_READ: Duration = Duration::from_millis(10);

/// The shortest pause between reads while someone leads: a lease read as
/// (nearly) over is read again after this.
const MIN_READ: Duration = Duration::from_millis(10);

/// The longest pause between reads where the backend announces no
/// releases (Redlock, a custom backend without `listen`): the backoff its
/// candidates wait at most between attempts.
const DEAF_READ: Duration = Duration::from_millis(200);

/// Who leads a role, as [`Election::leader`] and [`Election::observe`] read
/// it from the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The role, as given to [`Locker::election`](crate::Locker::election).
    pub role: String,
    /// The leader's term: the last fencing token minted for the role, which
    /// is what [`Leadership::term`](super::Leadership::term) says to the
    /// leader. 0 when none was minted (a holder that took the role's key
    /// with a plain `obtain`).
    pub term: u64,
    /// What the leader recorded ([`Election::metadata`]).
    pub metadata: String,
    /// The leader's lease left when it was read, if the backend can tell:
    /// the leader refreshes it, so it is how long the leader has, at most,
    /// should it stop refreshing now.
    pub remaining: Option<Duration>,
}

impl LeaderInfo {
    /// The leader of `role` that `seen` shows, if the role's key is held.
    fn from_inspection(role: &str, seen: Inspection) -> Option<Self> {
        let holder = seen
            .holders
            .into_iter()
            .find(|holder| holder.held_as == HeldAs::Lock)?;
        Some(LeaderInfo {
            role: role.to_owned(),
            term: seen.fence.unwrap_or(0),
            metadata: holder.metadata,
            remaining: holder.remaining,
        })
    }

    /// Whether `other` is the same leader in the same term; the remaining
    /// lease moves with every read.
    fn same_term(&self, other: &LeaderInfo) -> bool {
        self.term == other.term && self.metadata == other.metadata
    }
}

impl Election {
    /// Who leads the role now: its term, metadata and remaining lease;
    /// `None` when nobody does. One read of the role's key
    /// ([`Locker::inspect`](crate::Locker::inspect)); it changes nothing,
    /// and needs no campaign. Fails with
    /// [`BackendErrorKind::Unsupported`](crate::BackendErrorKind::Unsupported)
    /// on a backend that cannot inspect keys.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::Locker;
    ///
    /// let locker = Locker::memory();
    /// let election = locker.election("scheduler", Duration::from_secs(10)).metadata("instance-1");
    /// assert_eq!(election.leader().await?, None);
    /// let leadership = election.campaign().await?;
    /// let leader = election.leader().await?.expect("someone leads");
    /// assert_eq!((leader.term, leader.metadata.as_str()), (leadership.term(), "instance-1"));
    /// # Ok(()) }
    /// ```
    pub async fn leader(&self) -> Result<Option<LeaderInfo>, LockError> {
        let seen = self.locker.inspect(&self.role).await?;
        Ok(LeaderInfo::from_inspection(&self.role, seen))
    }

    /// Every change of leader, as it happens: first who leads now, then
    /// each new leader or term, and `None` each time nobody leads. Terms
    /// only increase from one item to the next.
    ///
    /// The stream reads the role's key ([`leader`](Self::leader)) whenever
    /// the backend announces a release (Redis pub/sub, an etcd watch, the
    /// memory backend in process), and on a timer: when the leader's
    /// remaining lease is over (an expiry without a release, such as a
    /// leader's crash, is seen then), at most one ttl apart, and close
    /// together while nobody leads, when a new leader is usually about to
    /// be elected. Where the backend announces no releases (Redlock), it
    /// reads at least every 200 ms. A leader that comes and goes between
    /// two reads is not seen. Failures that trying again may cure are logged and read again
    /// after a backoff; another error is the stream's last item. Nothing
    /// runs once the stream is dropped.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use futures_util::StreamExt;
    /// use lockmacro_runtime::Locker;
    ///
    /// let locker = Locker::memory();
    /// let election = locker.election("scheduler", Duration::from_secs(10));
    /// let mut changes = election.observe();
    /// assert_eq!(changes.next().await.unwrap()?, None);
    ///
    /// let leadership = election.clone().metadata("instance-1").campaign().await?;
    /// let leader = changes.next().await.unwrap()?.expect("a leader");
    /// assert_eq!(leader.term, leadership.term());
    /// leadership.resign().await?;
    /// assert_eq!(changes.next().await.unwrap()?, None);
    /// # Ok(()) }
    /// ```
    pub fn observe(&self) -> BoxStream<'static, Result<Option<LeaderInfo>, LockError>> {
        let observer = Observer {
            election: self.clone(),
            listener: None,
            seen: None,
            next_read: None,
            free_reads: 0,
            done: false,
        };
        stream::unfold(observer, |mut observer| async move {
            let item = observer.next_change().await?;
            Some((item, observer))
        })
        .boxed()
    }
}

/// The state of an [`Election::observe`] stream between two items.
struct Observer {
    election: Election,
    listener: Option<ReleaseListener>,
    /// The last item handed out: `None` before the first.
    seen: Option<Option<LeaderInfo>>,
    /// How long to wait for a release before the next read; `None` to read
    /// at once.
    next_read: Option<Duration>,
    /// Reads in a row that found nobody leading.
    free_reads: u32,
    done: bool,
}

impl Observer {
    /// Waits for the next change of leader; `None` once the stream is over.
    async fn next_change(&mut self) -> Option<Result<Option<LeaderInfo>, LockError>> {
        if self.done {
            return None;
        }
        let (backoff, max_backoff) = self.election.retry_after_failures();
        let mut failures = 0;
        loop {
            self.listen().await;
            if let (Some(wait), Some(listener)) = (self.next_read.take(), &mut self.listener) {
                listener.wait(wait).await;
            }
            let leader = match self.election.leader().await {
                Ok(leader) => leader,
                Err(err) if err.is_transient() => {
                    failures += 1;
                    let delay = backoff.delay_after(failures).unwrap_or(max_backoff);
                    tracing::warn!(target: "lockmacro", role = %self.election.role, error = %err, failures, ?delay, "observing the role: cannot read it; trying again");
                    self.next_read = Some(delay);
                    continue;
                }
                Err(err) => {
                    self.done = true;
                    return Some(Err(err));
                }
            };
            failures = 0;
            let mut pause = self.pause_after(leader.as_ref());
            if !self.listener.as_ref().is_some_and(ReleaseListener::hears) {
                pause = pause.min(DEAF_READ);
            }
            self.next_read = Some(pause);
            let changed = match (&self.seen, &leader) {
                (None, _) => true,
                (Some(Some(before)), Some(now)) => !before.same_term(now),
                (Some(before), now) => before.is_some() != now.is_some(),
            };
            if changed {
                self.seen = Some(leader.clone());
                return Some(Ok(leader));
            }
        }
    }

    /// Listens for the role's releases, unless already listening: before
    /// the read, so that a release after it is heard.
    async fn listen(&mut self) {
        if self.listener.as_ref().is_some_and(ReleaseListener::hears) {
            return;
        }
        let wire_key = self.election.locker.wire_key(&self.election.role);
        self.listener = Some(self.election.locker.backend().listen(&wire_key).await);
    }

    /// How long to wait for a release before reading again, after reading
    /// `leader`.
    fn pause_after(&mut self, leader: Option<&LeaderInfo>) -> Duration {
        let ttl = self.election.ttl;
        match leader {
            Some(leader) => {
                self.free_reads = 0;
                leader
                    .remaining
                    .unwrap_or(ttl)
                    .clamp(MIN_READ, ttl.max(MIN_READ))
            }
            None => {
                self.free_reads += 1;
                let doubled = FIRST_FREE_READ.saturating_mul(1 << (self.free_reads - 1).min(16));
                doubled.min(ttl.max(FIRST_FREE_READ))
            }
        }
    }
}
