//! The storage a [`Locker`](crate::Locker) runs on.
//!
//! `RedisBackend` (one server), `SentinelBackend` (Redis Sentinel, feature
//! `sentinel`), `ClusterBackend` (Redis Cluster, feature `cluster`), `RedlockBackend`
//! (independent masters, by majority; these two with the default feature
//! `redis`), `EtcdBackend` (an etcd cluster,
//! feature `etcd`), `PostgresBackend` (a PostgreSQL database, feature
//! `postgres`) and [`MemoryBackend`] ship with the crate. Another store can be plugged in by implementing
//! [`Backend`]; it must give the same guarantees: a key is held by at most one
//! value at a time, until its ttl passes or the owner releases it, and only a
//! caller presenting the owner's token can refresh or release it.

#[cfg(feature = "cluster")]
mod cluster;
#[cfg(feature = "cluster")]
mod cluster_scan;
#[cfg(feature = "etcd")]
mod etcd;
mod inspect;
mod keys;
mod listener;
mod memory;
// What the TLS of Redis and of etcd share.
#[cfg(all(feature = "tls-rustls", any(feature = "redis", feature = "etcd")))]
mod pem;
#[cfg(feature = "postgres")]
mod postgres;
mod redact;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
mod redlock;
mod request;
#[cfg(feature = "sentinel")]
mod sentinel;
mod shared;
#[cfg(feature = "cluster")]
mod slot;

#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub use self::cluster::ClusterBackend;
#[cfg(feature = "etcd")]
pub use self::etcd::{EtcdBackend, EtcdConfig};
pub use self::inspect::{HeldAs, Holder, Inspection};
pub use self::listener::{HandOff, Handed, ReleaseListener};
pub use self::memory::MemoryBackend;
#[cfg(feature = "postgres")]
pub(crate) use self::postgres::acquire_in;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use self::postgres::{
    POSTGRES_MAX_KEY_LEN, POSTGRES_MIGRATION, PostgresBackend, PostgresConfig,
};
pub(crate) use self::redact::redact;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::{Dial, DialedStream, Dialing, RedisBackend, RedisConfig, Scripts};
#[cfg(feature = "redis")]
pub(crate) use self::redis::{ServerConn, open_connection, send_once_more};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redlock::RedlockBackend;
pub use self::request::{AcquireRequest, Acquired, RefreshRequest, Share, TOKEN_LEN};
#[cfg(feature = "redis")]
pub(crate) use self::request::{WAITED_MARK, unmarked};
#[cfg(feature = "sentinel")]
#[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
pub use self::sentinel::SentinelBackend;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::{BackendError, BackendErrorKind, LockError};

/// How long a fence counter is kept after the last token minted from it,
/// unless configured otherwise ([`RedisConfig::fence_expiry`],
/// [`MemoryBackend::fence_expiry`]): a day.
pub const DEFAULT_FENCE_EXPIRY: Duration = Duration::from_secs(24 * 3600);

/// How long a fair waiter handed a key holds it before it confirms, unless
/// configured otherwise ([`RedisConfig::grant_lease`]): a second.
pub const DEFAULT_GRANT_LEASE: Duration = Duration::from_secs(1);

/// A boxed, `Send` future, as returned by [`Backend`] methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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
        Box::pin(futures_util::future::join_all(
            requests
                .iter()
                .map(|req| self.refresh(req.keys, req.token, req.ttl)),
        ))
    }

    /// Deletes the keys that still start with `token`; returns whether all of
    /// them did. Keys held by someone else are left alone.
    fn release<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>>;

    /// [`release`](Self::release), told the lease's `metadata` too: the
    /// value stored is `token` followed by it, which a backend that stores
    /// that value compares whole, at the cost of a compare-and-delete,
    /// rather than reading its token as a prefix. By default, `release`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::MemoryBackend;
    /// use lockmacro_runtime::backend::{AcquireRequest, Backend};
    ///
    /// let backend = MemoryBackend::new();
    /// let keys = ["report".to_owned()];
    /// let token = "0123456789abcdef0123456789abcdef";
    /// let value = format!("{token}web-3");
    /// backend.acquire(AcquireRequest::new(&keys, &value, Duration::from_secs(5))).await?;
    /// assert!(backend.release_value(&keys, token, "web-3").await?);
    /// # Ok(()) }
    /// ```
    fn release_value<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        metadata: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        let _ = metadata;
        self.release(keys, token)
    }

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
    /// `sentinel`, `cluster`, `redlock`, `etcd`, `postgres`, `memory`; `custom` by
    /// default.
    fn name(&self) -> &'static str {
        "custom"
    }

    /// The fence counter that [`Fencing::Derived`](crate::Fencing::Derived)
    /// gives the lock key `key` (as sent, namespaced): the backend lays out
    /// the keys it keeps beside a lock. The default, `{key}:fence` (with
    /// `key` as the hash tag unless it has one, so that the counter shares
    /// the key's Redis Cluster slot), is what every backend of the crate
    /// uses, so that a lock moves between backends unchanged.
    ///
    /// ```
    /// use lockmacro_runtime::MemoryBackend;
    /// use lockmacro_runtime::backend::Backend;
    ///
    /// assert_eq!(MemoryBackend::new().fence_key("user:1"), "{user:1}:fence");
    /// ```
    fn fence_key(&self, key: &str) -> String {
        keys::derived_fence_key(key)
    }

    /// Refuses, before anything is sent, lock keys and a fence key that
    /// collide with what the backend lays out beside a lock: a key that is
    /// another's fence counter, fair queue or waiters flag, or a fence key
    /// that is one of the keys locked. The default refuses the names of the
    /// default layout (see [`fence_key`](Self::fence_key)) with
    /// [`LockError::InvalidKey`].
    ///
    /// ```
    /// use lockmacro_runtime::MemoryBackend;
    /// use lockmacro_runtime::backend::Backend;
    ///
    /// let backend = MemoryBackend::new();
    /// assert!(backend.check_keys(&["user:1".to_owned()], Some("{user:1}:fence")).is_ok());
    /// assert!(backend.check_keys(&["{user:1}:fence".to_owned()], None).is_err());
    /// ```
    fn check_keys(&self, keys: &[String], fence_key: Option<&str>) -> Result<(), LockError> {
        keys::check_reserved(keys, fence_key)
    }

    /// What the backend can do beyond taking whole keys (see
    /// [`Capabilities`]). None of it by default: a
    /// [`Locker`](crate::Locker) then refuses fair obtains, shares and
    /// replica waits on it before anything is sent.
    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities::none()
    }

    /// What holds `key` (namespaced) and who waits for it: its kind, every
    /// lease on it with its holder's metadata and remaining lease, the fair
    /// waiters in line, and the last token minted from `fence_key`, its
    /// fence counter. For operators; it changes nothing. The default fails
    /// with [`BackendErrorKind::Unsupported`].
    fn inspect<'a>(
        &'a self,
        key: &'a str,
        fence_key: &'a str,
    ) -> BoxFuture<'a, Result<Inspection, LockError>> {
        let _ = fence_key;
        Box::pin(std::future::ready(Err(unsupported(
            self.name(),
            "inspect",
            key,
        ))))
    }

    /// The lock keys (namespaced) that start with `prefix`, for operators
    /// listing what is held ([`Locker::list`](crate::Locker::list)): every
    /// key the backend stores under `prefix`, without the names it keeps
    /// beside a lock (fence counters, fair queues, waiters flags, shares).
    /// It may name keys nothing holds any more, or that are not locks (other
    /// data under the prefix): the caller inspects each. Changes nothing.
    /// The default fails with [`BackendErrorKind::Unsupported`].
    fn keys<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>, LockError>> {
        let backend = self.name();
        Box::pin(std::future::ready(Err(LockError::Backend(
            BackendError::new(
                BackendErrorKind::Unsupported,
                format!("{backend}: list `{prefix}*`"),
                format!("the {backend} backend cannot list its keys"),
            ),
        ))))
    }

    /// Deletes every lease on `key` whoever holds it (and any grant to its
    /// fair queue), so that each holder's next refresh fails and it reports
    /// [`LockError::Lost`]; waiters are woken as by a release. Returns
    /// whether anything was held. For operators clearing a stuck key. The
    /// default fails with [`BackendErrorKind::Unsupported`].
    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(std::future::ready(Err(unsupported(
            self.name(),
            "force_release",
            key,
        ))))
    }

    /// Turns the write of the read-write key `key` held by `token` into a
    /// read, in one step and with the same expiry, and wakes the readers
    /// waiting behind it; returns whether `token` held the write (changing
    /// nothing otherwise). No writer can take the key in between. The
    /// default fails with [`BackendErrorKind::Unsupported`].
    fn downgrade<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        let _ = token;
        Box::pin(std::future::ready(Err(unsupported(
            self.name(),
            "downgrade",
            key,
        ))))
    }
}

/// The error of a [`Backend`] method a backend does not implement.
fn unsupported(backend: &str, what: &str, key: &str) -> LockError {
    LockError::Backend(BackendError::new(
        BackendErrorKind::Unsupported,
        format!("{backend}: {what} `{key}`"),
        format!("the {backend} backend cannot {what} a key"),
    ))
}

/// Every optional capability of a backend, in one place: what
/// [`Backend::capabilities`] answers, and what the checks of an obtain read
/// before anything is sent. An obtain that asks for what its backend lacks
/// fails with [`BackendErrorKind::Unsupported`].
///
/// ```
/// use lockmacro_runtime::MemoryBackend;
/// use lockmacro_runtime::backend::{Backend, Capabilities};
///
/// let memory = MemoryBackend::new();
/// let capabilities = memory.capabilities();
/// assert!(capabilities.fair_queue.is_some() && capabilities.shares);
/// assert!(!capabilities.replicas);
/// assert!(Capabilities::none().fair_queue.is_none());
/// ```
#[derive(Clone, Copy, Default)]
#[non_exhaustive]
pub struct Capabilities<'a> {
    /// The backend's queue of fair waiters, if it keeps one: an acquire with
    /// [`AcquireRequest::queue_for`] then respects and joins the key's
    /// queue, and a release hands the key to the head of the queue.
    pub fair_queue: Option<&'a dyn FairQueue>,
    /// The backend honours [`AcquireRequest::share`]: it keeps several
    /// leases on one key (permits, reads, or the write alone), each
    /// refreshed, released and measured through the same
    /// [`refresh`](Backend::refresh), [`release`](Backend::release) and
    /// [`remaining`](Backend::remaining) calls as a lock, by key and token.
    pub shares: bool,
    /// The backend honours [`AcquireRequest::replicas`]: it waits for that
    /// many replicas of the server that took the keys.
    pub replicas: bool,
}

impl<'a> Capabilities<'a> {
    /// No optional capability: whole keys only.
    pub fn none() -> Self {
        Capabilities::default()
    }

    /// With `queue`, the backend's queue of fair waiters.
    pub fn with_fair_queue(mut self, queue: &'a dyn FairQueue) -> Self {
        self.fair_queue = Some(queue);
        self
    }

    /// Keeping shares of a key (permits, reads and writes).
    pub fn with_shares(mut self) -> Self {
        self.shares = true;
        self
    }

    /// Waiting for replicas to acknowledge the keys taken.
    pub fn with_replicas(mut self) -> Self {
        self.replicas = true;
        self
    }
}

impl std::fmt::Debug for Capabilities<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capabilities")
            .field("fair_queue", &self.fair_queue.is_some())
            .field("shares", &self.shares)
            .field("replicas", &self.replicas)
            .finish()
    }
}

/// A backend's queue of fair waiters: the one capability a backend adds to
/// serve [`ObtainOptions::fair`](crate::ObtainOptions::fair); see
/// [`Capabilities::fair_queue`].
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
