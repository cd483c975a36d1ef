//! The storage a [`Locker`](crate::Locker) runs on.
//!
//! [`RedisBackend`] (one server), [`SentinelBackend`] (Redis Sentinel),
//! [`ClusterBackend`] (Redis Cluster), [`RedlockBackend`] (independent
//! masters, by majority) and [`MemoryBackend`]
//! ship with the crate. Another store can be plugged in by implementing
//! [`Backend`]; it must give the same guarantees: a key is held by at most one
//! value at a time, until its ttl passes or the owner releases it, and only a
//! caller presenting the owner's token can refresh or release it.

#[cfg(feature = "cluster")]
mod cluster;
#[cfg(feature = "etcd")]
mod etcd;
mod memory;
mod redis;
mod redlock;
mod sentinel;
#[cfg(feature = "cluster")]
mod slot;

#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub use self::cluster::ClusterBackend;
#[cfg(feature = "etcd")]
pub use self::etcd::{EtcdBackend, EtcdConfig};
pub use self::memory::MemoryBackend;
pub use self::redis::{RedisBackend, RedisConfig};
pub(crate) use self::redis::{backend_error, open_manager};
pub use self::redlock::RedlockBackend;
pub use self::sentinel::SentinelBackend;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::watch;

use crate::LockError;

/// How long a fence counter is kept after the last token minted from it,
/// unless configured otherwise ([`RedisConfig::fence_expiry`],
/// [`MemoryBackend::fence_expiry`]): a day.
pub const DEFAULT_FENCE_EXPIRY: Duration = Duration::from_secs(24 * 3600);

/// How long a fair waiter handed a key holds it before it confirms, unless
/// configured otherwise ([`RedisConfig::grant_lease`]): a second.
pub const DEFAULT_GRANT_LEASE: Duration = Duration::from_secs(1);

/// A boxed, `Send` future, as returned by [`Backend`] methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Length of a lock token: 32 lowercase hex digits (a 128-bit uuid v4).
///
/// The value stored under a lock key starts with the token; metadata follows.
/// Backends compare exactly this many leading bytes, so that a shorter string
/// can never pass for a token.
pub const TOKEN_LEN: usize = 32;

/// One acquisition attempt, as sent to a [`Backend`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AcquireRequest<'a> {
    /// Keys to take together, all or none; namespaced, sorted, no duplicates.
    pub keys: &'a [String],
    /// Value to store under every key: the token, then the metadata.
    pub value: &'a str,
    /// Lease length.
    pub ttl: Duration,
    /// Counter to increment and return when the keys are taken.
    pub fence_key: Option<&'a str>,
    /// A fair attempt (one key only): take the key only if nobody is queued
    /// ahead, else join the key's queue (once, whatever the number of
    /// attempts) for at most this long. `Duration::ZERO` respects the queue
    /// without joining it. `None`: an ordinary attempt.
    pub queue_for: Option<Duration>,
    /// Replicas that must acknowledge the keys once taken (`0`: none); see
    /// [`Backend::acknowledges_replicas`]. A backend that takes the keys but
    /// hears fewer acknowledgements gives the keys back and fails with
    /// [`LockError::NotReplicated`].
    pub replicas: usize,
    /// How long to wait for those acknowledgements.
    pub replica_timeout: Duration,
    /// The caller listens for the release of a busy key and will wait for
    /// it: report the holder's remaining lease in [`Acquired::Busy`] if the
    /// backend can tell, so that the wait ends by itself when the lease
    /// does. Without it, a backend may answer a busy key more cheaply, with
    /// `remaining: None`.
    pub wait: bool,
    /// The number of this attempt within one obtain, from 1 (`0`: not
    /// counted). A backend that hands keys over for a grant lease names the
    /// last attempt that found the waiter in line, so that the waiter knows
    /// from when the lease runs.
    pub attempt: u32,
    /// `Some(share)`: take a share of the one key (one of its permits, or a
    /// read or the write of a read-write lock; see
    /// [`Backend::keeps_shares`]) rather than the key itself.
    pub share: Option<Share>,
}

/// A share of a key, as opposed to the whole key: see
/// [`AcquireRequest::share`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Share {
    /// One of this many permits: a semaphore.
    Permits(u32),
    /// A read of a read-write lock: many readers at once, no writer.
    Read,
    /// The write of a read-write lock: alone, ahead of readers that come
    /// after it.
    Write,
}

impl<'a> AcquireRequest<'a> {
    /// An ordinary attempt to take every one of `keys` (namespaced, sorted,
    /// no duplicates) for `ttl`, storing `value`: the owner's token
    /// ([`TOKEN_LEN`] hex digits), then any metadata. No fence, no queue,
    /// no replicas; add them with the methods below.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::MemoryBackend;
    /// use lockmacro_runtime::backend::{AcquireRequest, Acquired, Backend};
    ///
    /// let backend = MemoryBackend::new();
    /// let keys = ["job".to_owned()];
    /// let value = "0123456789abcdef0123456789abcdef worker-7";
    /// let request = AcquireRequest::new(&keys, value, Duration::from_secs(5)).fence_key("job:fence");
    /// assert!(matches!(backend.acquire(request).await?, Acquired::Obtained { fence: Some(_) }));
    /// assert_eq!(request.token(), "0123456789abcdef0123456789abcdef");
    /// # Ok(()) }
    /// ```
    pub fn new(keys: &'a [String], value: &'a str, ttl: Duration) -> Self {
        AcquireRequest {
            keys,
            value,
            ttl,
            fence_key: None,
            queue_for: None,
            replicas: 0,
            replica_timeout: Duration::ZERO,
            wait: false,
            attempt: 0,
            share: None,
        }
    }

    /// The caller will wait if the key is busy: see [`AcquireRequest::wait`].
    pub fn waiting(mut self) -> Self {
        self.wait = true;
        self
    }

    /// A share of the key: see [`AcquireRequest::share`].
    pub fn share(mut self, share: Share) -> Self {
        self.share = Some(share);
        self
    }

    /// Numbers this attempt: see [`AcquireRequest::attempt`].
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// True for the attempt that costs what the floor costs: one key, no
    /// fence, no queue, no replicas, nobody waiting on the answer. A Redis
    /// backend sends it as one plain `SET key value NX PX ttl`.
    pub fn is_plain(&self) -> bool {
        self.keys.len() == 1
            && self.fence_key.is_none()
            && self.queue_for.is_none()
            && self.replicas == 0
            && self.share.is_none()
            && !self.wait
    }

    /// Mints a fencing token from the counter at `fence_key`.
    pub fn fence_key(mut self, fence_key: &'a str) -> Self {
        self.fence_key = Some(fence_key);
        self
    }

    /// A fair attempt: see [`AcquireRequest::queue_for`].
    pub fn queue_for(mut self, wait: Duration) -> Self {
        self.queue_for = Some(wait);
        self
    }

    /// Waits up to `timeout` for `replicas` replicas to acknowledge the keys.
    pub fn replicas(mut self, replicas: usize, timeout: Duration) -> Self {
        self.replicas = replicas;
        self.replica_timeout = timeout;
        self
    }

    /// The owner's token: the first [`TOKEN_LEN`] bytes of the value (all
    /// of it, if shorter).
    pub fn token(&self) -> &str {
        self.value.get(..TOKEN_LEN).unwrap_or(self.value)
    }
}

/// One lease to refresh, as sent to [`Backend::refresh_many`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RefreshRequest<'a> {
    /// The lease's keys; namespaced, sorted, no duplicates.
    pub keys: &'a [String],
    /// The owner's token.
    pub token: &'a str,
    /// The new lease length.
    pub ttl: Duration,
}

impl<'a> RefreshRequest<'a> {
    /// A request to extend `keys` to `ttl` if they still hold `token`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::MemoryBackend;
    /// use lockmacro_runtime::backend::{Backend, RefreshRequest};
    ///
    /// let backend = MemoryBackend::new();
    /// let keys = ["job".to_owned()];
    /// let token = "0123456789abcdef0123456789abcdef";
    /// let requests = [RefreshRequest::new(&keys, token, Duration::from_secs(5))];
    /// // Nothing holds `job`: the refresh is refused.
    /// assert!(!backend.refresh_many(&requests).await[0].as_ref().unwrap());
    /// # Ok(()) }
    /// ```
    pub fn new(keys: &'a [String], token: &'a str, ttl: Duration) -> Self {
        RefreshRequest { keys, token, ttl }
    }
}

/// What one acquisition attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// All keys are now ours; `fence` is the new fencing token when one was
    /// asked for.
    Obtained {
        /// The fencing token, when a fence key was given.
        fence: Option<u64>,
    },
    /// `keys[index]` is held by someone else, for about `remaining` more
    /// (`None` when the backend cannot tell, e.g. a key without expiry).
    Busy {
        /// Index in the request's keys of a key that is held.
        index: usize,
        /// The holder's remaining lease.
        remaining: Option<Duration>,
    },
}

/// A store that can hold leases.
///
/// Keys reach the backend already namespaced. Every method must be atomic with
/// respect to the others: the comparison of the token and the change it
/// guards happen as one step.
pub trait Backend: Send + Sync + 'static {
    /// Takes every key in `req.keys` for `req.ttl`, or none of them.
    ///
    /// Must be idempotent for the same value: if the keys already hold exactly
    /// `req.value` (a retry after a lost reply), it reports `Obtained`.
    fn acquire<'a>(&'a self, req: AcquireRequest<'a>)
    -> BoxFuture<'a, Result<Acquired, LockError>>;

    /// Extends every key to `ttl` if every key still starts with `token`;
    /// returns whether it did. Changes nothing otherwise.
    fn refresh<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>>;

    /// Refreshes many leases at once, as [`refresh`](Self::refresh) would
    /// each of them: one result per request, in the same order. A watchdog
    /// keeping thousands of leases alive sends its due refreshes through this.
    ///
    /// The default runs the single refreshes concurrently; backends that can
    /// send them in fewer round trips override it.
    fn refresh_many<'a>(
        &'a self,
        requests: &'a [RefreshRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, LockError>>> {
        join_all(
            requests
                .iter()
                .map(|req| self.refresh(req.keys, req.token, req.ttl))
                .collect(),
        )
    }

    /// Deletes the keys that still start with `token`; returns whether all of
    /// them did. Keys held by someone else are left alone.
    fn release<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>>;

    /// The shortest remaining lease among `keys` if every key still starts
    /// with `token`, else `None`.
    fn remaining<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Duration>, LockError>>;

    /// How much shorter than `ttl` a lease must be taken to be, locally. A
    /// lease taken or refreshed at `sent` is trusted until
    /// `sent + ttl - drift`.
    ///
    /// The server's expiry starts after `sent`, so on one server the local
    /// deadline alone is never late; but a holder stops its work some time
    /// after the deadline fires (the timer, the scheduler, dropping the body),
    /// and clocks run at slightly different rates. The default,
    /// `ttl / 100 + 2 ms` (the margin the Redlock algorithm uses), leaves
    /// room for both, so that the holder has stopped before the server can
    /// let anyone else in.
    fn drift(&self, ttl: Duration) -> Duration {
        ttl / 100 + Duration::from_millis(2)
    }

    /// Starts listening for releases of `key`, for a caller about to try a
    /// key it found held.
    ///
    /// The listener must hear every release that happens after this future
    /// completes, so that the caller can listen first, then try again, then
    /// wait without missing the release in between. The default hears
    /// nothing: waits are plain sleeps, bounded by the retry strategy and the
    /// holder's lease.
    fn listen<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ReleaseListener> {
        let _ = key;
        Box::pin(std::future::ready(ReleaseListener::deaf()))
    }

    /// A short name for logs and metrics (the `backend` label): `redis`,
    /// `sentinel`, `cluster`, `redlock`, `memory`; `custom` by default.
    fn name(&self) -> &'static str {
        "custom"
    }

    /// The backend's queue of fair waiters, if it keeps one: an acquire with
    /// [`AcquireRequest::queue_for`] then respects and joins the key's
    /// queue, and a release hands the key to the head of the queue. `None`
    /// by default: a [`Locker`](crate::Locker) refuses fair obtains on such a
    /// backend with [`BackendErrorKind::Unsupported`](crate::BackendErrorKind::Unsupported).
    fn fair_queue(&self) -> Option<&dyn FairQueue> {
        None
    }

    /// True when the backend honours [`AcquireRequest::replicas`]: it waits
    /// for that many replicas of the server that took the keys. False by
    /// default: a [`Locker`](crate::Locker) refuses obtains that ask for
    /// replicas on such a backend, rather than let them go unreplicated.
    fn acknowledges_replicas(&self) -> bool {
        false
    }

    /// True when the backend honours [`AcquireRequest::share`]: it keeps
    /// several leases on one key (permits, reads, or the write alone), each
    /// refreshed, released and measured through the same
    /// [`refresh`](Self::refresh), [`release`](Self::release) and
    /// [`remaining`](Self::remaining) calls as a lock, by key and token.
    /// False by default: a [`Locker`](crate::Locker) refuses shares on such
    /// a backend rather than let it take the whole key.
    fn keeps_shares(&self) -> bool {
        false
    }
}

/// A backend's queue of fair waiters: the one capability a backend adds to
/// serve [`ObtainOptions::fair`](crate::ObtainOptions::fair); see
/// [`Backend::fair_queue`].
///
/// The queue lives in [`Backend::acquire`] (a request with
/// [`AcquireRequest::queue_for`] takes the key only if nobody is queued
/// ahead, else joins the queue once) and [`Backend::release`] (it hands the
/// key to the head of the queue, and removes the caller's own entry: a
/// waiter that gives up leaves the queue by releasing with its token). This
/// trait adds how a waiter hears that the key was handed to it.
pub trait FairQueue: Send + Sync {
    /// Like [`Backend::listen`], for a fair waiter holding `token` in the
    /// queue of `key`: the listener hears when a release hands the key to
    /// this waiter, and nothing else. A backend that hands the key over for
    /// good reports it with [`ReleaseListener::granted`]; one that hands it
    /// over for a short grant lease (Redis, the cluster) only ends the wait,
    /// and the waiter confirms by trying again, as the acquire of a key that
    /// already holds its value reports `Obtained` and extends it to its ttl.
    fn listen_granted<'a>(&'a self, key: &'a str, token: &'a str)
    -> BoxFuture<'a, ReleaseListener>;

    /// True when [`listen_granted`](Self::listen_granted) on `key` would
    /// cost no round trip right now. A fair waiter then listens before its
    /// first attempt, and needs no second attempt once it is queued. False
    /// by default.
    fn listening(&self, key: &str) -> bool {
        let _ = key;
        false
    }

    /// Confirms `key`, handed to the waiter holding `token` for a grant
    /// lease and already returned to its caller: extends it to `ttl` if it
    /// still holds `token` (`Ok(true)`), and tells the other waiters that the
    /// hand-off was taken up. Never takes the key when it is free: it may
    /// arrive after the caller's release. A backend whose hand-offs are for
    /// good (reported by [`ReleaseListener::granted`]) has nothing to
    /// confirm; the default answers `Ok(true)`.
    fn confirm<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        let _ = (key, token, ttl);
        Box::pin(async { Ok(true) })
    }
}

/// Interest in the releases of one key; see [`Backend::listen`].
///
/// Backends signal a release by bumping the value in a
/// [`tokio::sync::watch`] channel: a receiver remembers the last value it saw,
/// so a release that comes while nobody is waiting is not lost.
pub struct ReleaseListener {
    releases: Option<watch::Receiver<u64>>,
    /// A fair waiter's: `Some(fence)` once the key was handed to it (`0`
    /// when no fencing token was minted).
    grant: Option<watch::Receiver<Option<u64>>>,
    /// A fair waiter's: the hand-offs on its key that wait for confirmation.
    hand_offs: Option<HandOffs>,
    /// Kept until the listener is dropped: the backend stops listening then.
    _subscription: Option<Box<dyn Send + Sync>>,
}

impl std::fmt::Debug for ReleaseListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseListener")
            .field("hears", &self.hears())
            .finish_non_exhaustive()
    }
}

impl ReleaseListener {
    /// A listener that hears nothing: [`wait`](Self::wait) sleeps its whole
    /// `max`.
    pub fn deaf() -> Self {
        ReleaseListener {
            releases: None,
            grant: None,
            hand_offs: None,
            _subscription: None,
        }
    }

    /// A listener woken whenever `releases` changes; `subscription` lives as
    /// long as the listener (a guard that unsubscribes on drop).
    pub fn new(releases: watch::Receiver<u64>, subscription: impl Send + Sync + 'static) -> Self {
        ReleaseListener {
            releases: Some(releases),
            grant: None,
            hand_offs: None,
            _subscription: Some(Box::new(subscription)),
        }
    }

    /// A fair waiter's listener (see [`FairQueue::listen_granted`]): the backend
    /// sends `Some(fence)` on `grant` when a release hands it the key (`0` as
    /// the fence when none was minted).
    pub fn granting(
        grant: watch::Receiver<Option<u64>>,
        subscription: impl Send + Sync + 'static,
    ) -> Self {
        ReleaseListener {
            releases: None,
            grant: Some(grant),
            hand_offs: None,
            _subscription: Some(Box::new(subscription)),
        }
    }

    /// A fair waiter's listener that also follows the key's hand-offs made
    /// with a grant lease (see `grant.lua`): [`wait`](Self::wait) returns
    /// when the key is handed to `token` (on `mine`, this waiter's own slot,
    /// when the message names the fence and the attempt), and when a
    /// hand-off to another waiter was not confirmed by the end of its lease,
    /// so that this one tries again and the key goes on down the line.
    pub(crate) fn hearing_hand_offs(
        mut self,
        hand_offs: watch::Receiver<Option<HandOff>>,
        token: &str,
        mine: watch::Receiver<Option<Handed>>,
    ) -> Self {
        self.hand_offs = Some(HandOffs {
            receiver: hand_offs,
            token: token.to_owned(),
            acted: None,
            mine,
        });
        self
    }

    /// True while the backend can wake this listener; false for a deaf one,
    /// whose waits are plain sleeps.
    pub fn hears(&self) -> bool {
        self.releases.is_some() || self.grant.is_some()
    }

    /// For a fair waiter: `Some(fence)` once a release handed it the key.
    pub fn granted(&self) -> Option<u64> {
        self.grant.as_ref().and_then(|grant| *grant.borrow())
    }

    /// For a fair waiter whose last [`wait`](Self::wait) returned because
    /// the key was handed to it for a grant lease: the lease, the fence and
    /// the attempt the hand-off followed, when its message named them.
    pub(crate) fn handed(&mut self) -> Option<Handed> {
        let hand_offs = self.hand_offs.as_mut()?;
        if let Some(handed) = *hand_offs.mine.borrow_and_update() {
            return Some(handed);
        }
        let acted = hand_offs.acted.as_ref()?;
        (acted.token == hand_offs.token).then_some(acted.named?)
    }

    /// Returns when a release was heard since this listener was made or last
    /// returned from `wait` (for a fair waiter: when the key was handed to
    /// it, or when the grant lease of a hand-off to another waiter ended
    /// without its confirmation), or after `max`, whichever comes first; at
    /// once when the backend
    /// stops listening (its connection closed), after which the listener is
    /// deaf.
    pub async fn wait(&mut self, max: Duration) {
        let deadline = tokio::time::Instant::now() + max;
        if let Some(grant) = &mut self.grant {
            if grant.borrow().is_some() {
                return;
            }
            loop {
                if self
                    .hand_offs
                    .as_ref()
                    .is_some_and(|hand_offs| hand_offs.mine.has_changed().unwrap_or(false))
                {
                    return;
                }
                let due = self.hand_offs.as_ref().and_then(HandOffs::due);
                if let (Some((at, pending)), Some(hand_offs)) = (&due, &mut self.hand_offs)
                    && *at <= tokio::time::Instant::now()
                {
                    // Without a timer: one rounds up to the next millisecond,
                    // and this is the key handed to this waiter.
                    hand_offs.acted = Some(pending.clone());
                    return;
                }
                let wake = due.as_ref().map_or(deadline, |(at, _)| (*at).min(deadline));
                let hand_off = async {
                    match &mut self.hand_offs {
                        // `Ok(true)`: a hand-off to this waiter.
                        Some(hand_offs) => tokio::select! {
                            changed = hand_offs.receiver.changed() => changed.map(|()| false),
                            changed = hand_offs.mine.changed() => changed.map(|()| true),
                        },
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    changed = grant.changed() => {
                        if changed.is_err() {
                            // The backend stopped listening: try again at once.
                            self.grant = None;
                            self.hand_offs = None;
                        }
                        return;
                    }
                    changed = hand_off => match changed {
                        Ok(false) => {}
                        Ok(true) => return,
                        Err(_) => {
                            self.grant = None;
                            self.hand_offs = None;
                            return;
                        }
                    },
                    () = tokio::time::sleep_until(wake) => {
                        if let (Some((at, pending)), Some(hand_offs)) = (due, &mut self.hand_offs)
                            && at <= wake
                        {
                            hand_offs.acted = Some(pending);
                        }
                        return;
                    }
                }
            }
        }
        if let Some(releases) = &mut self.releases {
            match tokio::time::timeout_at(deadline, releases.changed()).await {
                Ok(Ok(())) | Err(_) => return,
                // The backend stopped listening (its connection is gone):
                // the caller may listen again.
                Ok(Err(_)) => {
                    self.releases = None;
                    return;
                }
            }
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// A hand-off of a key with a grant lease, not confirmed yet: to the waiter
/// holding `token`, whose lease ends by `until` on this process's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HandOff {
    pub(crate) token: String,
    pub(crate) until: tokio::time::Instant,
    /// The grant lease, the fencing token minted (`0`: none) and the attempt
    /// after which the key was handed over, when the message named them.
    pub(crate) named: Option<Handed>,
}

/// What a grant message says beyond whom the key goes to (see `grant.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handed {
    pub(crate) lease: Duration,
    pub(crate) fence: u64,
    pub(crate) attempt: u32,
}

struct HandOffs {
    receiver: watch::Receiver<Option<HandOff>>,
    /// Hand-offs to this waiter, each kept until this waiter has read it.
    mine: watch::Receiver<Option<Handed>>,
    /// This waiter's token.
    token: String,
    /// The hand-off this listener last returned for: it returns once for
    /// each, so that a hand-off whose confirmation went unheard costs one
    /// attempt, not a spin.
    acted: Option<HandOff>,
}

impl HandOffs {
    /// When to try again for the hand-off waiting for confirmation, if there
    /// is one this listener has not acted on: at once when it is to this
    /// waiter (to confirm it), else once its lease is over.
    fn due(&self) -> Option<(tokio::time::Instant, HandOff)> {
        let pending = self.receiver.borrow().clone()?;
        if self.acted.as_ref() == Some(&pending) {
            return None;
        }
        let at = if pending.token == self.token {
            tokio::time::Instant::now()
        } else {
            pending.until
        };
        Some((at, pending))
    }
}

/// A shared backend: several [`Locker`](crate::Locker)s built with
/// `Locker::new(backend.clone())` contend on the same locks.
impl<B: Backend + ?Sized> Backend for std::sync::Arc<B> {
    fn acquire<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        (**self).acquire(req)
    }

    fn refresh<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        (**self).refresh(keys, token, ttl)
    }

    fn refresh_many<'a>(
        &'a self,
        requests: &'a [RefreshRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, LockError>>> {
        (**self).refresh_many(requests)
    }

    fn release<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        (**self).release(keys, token)
    }

    fn remaining<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Duration>, LockError>> {
        (**self).remaining(keys, token)
    }

    fn drift(&self, ttl: Duration) -> Duration {
        (**self).drift(ttl)
    }

    fn name(&self) -> &'static str {
        (**self).name()
    }

    fn listen<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ReleaseListener> {
        (**self).listen(key)
    }

    fn fair_queue(&self) -> Option<&dyn FairQueue> {
        (**self).fair_queue()
    }

    fn acknowledges_replicas(&self) -> bool {
        (**self).acknowledges_replicas()
    }

    fn keeps_shares(&self) -> bool {
        (**self).keeps_shares()
    }
}

/// Runs `futures` concurrently; their outputs in the same order.
pub(crate) fn join_all<'a, T: Send + 'a>(futures: Vec<BoxFuture<'a, T>>) -> BoxFuture<'a, Vec<T>> {
    let mut pending: Vec<Option<BoxFuture<'a, T>>> = futures.into_iter().map(Some).collect();
    let mut outputs: Vec<Option<T>> = pending.iter().map(|_| None).collect();
    let mut left = pending.len();
    Box::pin(std::future::poll_fn(move |cx| {
        for (slot, output) in pending.iter_mut().zip(&mut outputs) {
            if let Some(future) = slot
                && let std::task::Poll::Ready(value) = future.as_mut().poll(cx)
            {
                *output = Some(value);
                *slot = None;
                left -= 1;
            }
        }
        if left > 0 {
            return std::task::Poll::Pending;
        }
        std::task::Poll::Ready(outputs.iter_mut().filter_map(Option::take).collect())
    }))
}

/// The Redis Cluster hash tag of `key`: the text between the first `{` and the
/// next `}`, when it is not empty.
pub(crate) fn hashtag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

/// The fence counter key derived from a lock key, in the same cluster slot.
pub(crate) fn derived_fence_key(key: &str) -> String {
    if hashtag(key).is_some() {
        format!("{key}:fence")
    } else {
        format!("{{{key}}}:fence")
    }
}

/// The queue of fair waiters for a lock key, in the same cluster slot (see
/// [`derived_fence_key`]).
pub(crate) fn derived_queue_key(key: &str) -> String {
    if hashtag(key).is_some() {
        format!("{key}:queue")
    } else {
        format!("{{{key}}}:queue")
    }
}

/// The flag that says someone may wait for the release of a lock key, in
/// the same cluster slot (see [`derived_fence_key`] and `waiters.lua`).
pub(crate) fn derived_waiters_key(key: &str) -> String {
    if hashtag(key).is_some() {
        format!("{key}:waiters")
    } else {
        format!("{{{key}}}:waiters")
    }
}

/// The lock key whose derived fence counter ([`derived_fence_key`]), queue
/// ([`derived_queue_key`]) or waiters flag ([`derived_waiters_key`]) is
/// `key`, if any, and which of the three.
fn derived_from(key: &str) -> Option<(&str, &'static str)> {
    for (suffix, what, derive) in [
        (
            ":fence",
            "fence counter",
            derived_fence_key as fn(&str) -> String,
        ),
        (":queue", "queue of fair waiters", derived_queue_key),
        (":waiters", "waiters flag", derived_waiters_key),
    ] {
        let Some(base) = key.strip_suffix(suffix) else {
            continue;
        };
        // `K:fence` for a key with a hash tag, `{K}:fence` for one without.
        let inner = base
            .strip_prefix('{')
            .and_then(|base| base.strip_suffix('}'));
        for owner in std::iter::once(base).chain(inner) {
            if !owner.is_empty() && derive(owner) == key {
                return Some((owner, what));
            }
        }
    }
    None
}

/// Refuses, before anything is sent, the keys that would collide with a fence
/// counter, a fair queue or a waiters flag: a lock key that is the derived
/// counter, queue or flag of another key, and a fence key that is one of the
/// keys locked, a queue or a flag. Such an acquire would fail midway, could
/// never succeed, or would have its counter overwritten.
pub(crate) fn check_reserved(keys: &[String], fence_key: Option<&str>) -> Result<(), LockError> {
    for key in keys {
        if let Some((owner, what)) = derived_from(key) {
            return Err(LockError::InvalidKey {
                key: key.clone(),
                reason: format!(
                    "`{key}` is the name of the {what} of the lock `{owner}`, so it cannot be \
                     locked itself (it would be busy while that exists, and locking it would \
                     break `{owner}`); name the lock differently, e.g. `{key}-lock`"
                ),
            });
        }
    }
    let Some(fence_key) = fence_key else {
        return Ok(());
    };
    if keys.iter().any(|key| key == fence_key) {
        return Err(fence_key_refused(
            fence_key,
            "the fence counter is also a key being locked",
        ));
    }
    if let Some((owner, what @ ("queue of fair waiters" | "waiters flag"))) =
        derived_from(fence_key)
    {
        return Err(fence_key_refused(
            fence_key,
            &format!("it is the {what} of the lock `{owner}`"),
        ));
    }
    Ok(())
}

/// The error for a fence key that cannot count fencing tokens, `detail`
/// saying why.
pub(crate) fn fence_key_refused(fence_key: &str, detail: &str) -> LockError {
    LockError::InvalidKey {
        key: fence_key.to_owned(),
        reason: format!(
            "this fence key cannot count fencing tokens: {detail}. A fence key must be a key \
             of its own, holding nothing but its counter: use the counter derived from the \
             lock key (`ObtainOptions::fence`), or name an unused key in \
             `ObtainOptions::fence_key`; nothing was locked"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashtag_follows_the_cluster_rules() {
        assert_eq!(hashtag("user:1"), None);
        assert_eq!(hashtag("{user:1}:a"), Some("user:1"));
        assert_eq!(hashtag("a{b}{c}"), Some("b"));
        assert_eq!(hashtag("a{}{c}"), None);
        assert_eq!(hashtag("a}{b"), None);
        assert_eq!(hashtag("a{b"), None);
    }

    #[test]
    fn derived_fence_key_shares_the_slot() {
        assert_eq!(derived_fence_key("user:1"), "{user:1}:fence");
        assert_eq!(
            derived_fence_key("billing:{user:1}"),
            "billing:{user:1}:fence"
        );
        assert_eq!(derived_fence_key("a{}b"), "{a{}b}:fence");
    }

    #[test]
    fn queue_is_named_as_the_waiters_flag_with_another_suffix() {
        // The release script names the queue after the flag it is given.
        for key in ["user:1", "billing:{user:1}", "a{}b", "}b", "a}b"] {
            let flag = derived_waiters_key(key);
            let queue = format!("{}queue", flag.strip_suffix("waiters").unwrap());
            assert_eq!(queue, derived_queue_key(key), "{key}");
        }
    }

    #[test]
    fn derived_names_are_recognised() {
        for key in ["user:1", "billing:{user:1}", "a{}b", "}b", "a}b"] {
            assert!(derived_from(&derived_fence_key(key)).is_some(), "{key}");
            assert!(derived_from(&derived_queue_key(key)).is_some(), "{key}");
            assert!(derived_from(&derived_waiters_key(key)).is_some(), "{key}");
        }
        for key in [
            "user:1:fence",
            "{}:fence",
            "a{b}c:fenc",
            "fence",
            "{user:1}:queue:x",
        ] {
            assert_eq!(derived_from(key), None, "{key}");
        }
    }
}
