use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::backend::Backend;
use crate::lease::{Lease, check_duration};
use crate::options::Fencing;
use crate::registry::{Registry, shut_down};
use crate::wait::{First, Request, Wait};
use crate::watchdog::Watchdog;
use crate::{Lock, LockError, MemoryBackend, ObtainOptions};
#[cfg(feature = "redis")]
use crate::{RedisBackend, RedlockBackend};

/// Takes locks on one backend, under an optional namespace.
///
/// Cheap to clone (clones share the backend and its connection) and
/// `Send + Sync + 'static`, so it can live in application state or in the
/// global slot ([`set_global`](crate::set_global)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
/// use std::time::Duration;
/// use lockmacro_runtime::{Locker, ObtainOptions};
///
/// let locker = Locker::memory().with_namespace("billing");
/// let lock = locker.obtain("user:42", Duration::from_secs(30), ObtainOptions::default()).await?;
/// // … charge user 42 …
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locker {
    shared: Arc<Shared>,
    /// Empty, or the namespace followed by `:`.
    prefix: Arc<str>,
}

struct Shared {
    backend: Arc<dyn Backend>,
    watchdog: Arc<Watchdog>,
    registry: Arc<Registry>,
}

impl std::fmt::Debug for Locker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locker")
            .field("namespace", &self.namespace())
            .finish_non_exhaustive()
    }
}

pub(crate) fn check_key(key: &str) -> Result<(), LockError> {
    if key.is_empty() {
        return Err(LockError::InvalidKey {
            key: String::new(),
            reason: "a lock key cannot be empty; name the resource, e.g. `user:42`".into(),
        });
    }
    Ok(())
}

impl Locker {
    /// A locker on `backend`.
    pub fn new(backend: impl Backend) -> Self {
        crate::metrics::describe();
        Locker {
            shared: Arc::new(Shared {
                backend: Arc::new(backend),
                watchdog: Arc::default(),
                registry: Arc::default(),
            }),
            prefix: Arc::from(""),
        }
    }

    /// A locker on one Redis server: `redis://[user:password@]host:port/[db]`,
    /// or `rediss://…` for TLS.
    ///
    /// Fails with [`LockError::InvalidUrl`] for a URL that cannot be parsed and
    /// [`LockError::Backend`] when the server cannot be reached, refuses the
    /// credentials, or does not answer within the connect timeout (3 s; see
    /// [`RedisBackend::connect_with`] to change it).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// let locker = lockmacro_runtime::Locker::connect("redis://127.0.0.1:6379/").await?;
    /// # let _ = locker; Ok(()) }
    /// ```
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Ok(Locker::new(RedisBackend::connect(url).await?))
    }

    /// A locker whose calls ride on the service's own `manager`, with the
    /// default [`RedisConfig`](crate::RedisConfig): one call for
    /// [`RedisBackend::from_manager`], which says what is shared and what
    /// is not. `client` is the one `manager` was made from (a
    /// `ConnectionManager` does not hand it out): waiters' pub/sub and
    /// replica waits get connections of their own from it, when first
    /// needed.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use lockmacro_runtime::Locker;
    ///
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let manager = redis::aio::ConnectionManager::new(client.clone()).await?;
    /// let locker = Locker::from_manager(manager.clone(), client).await;
    /// # let _ = locker; Ok(()) }
    /// ```
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub async fn from_manager(
        manager: redis::aio::ConnectionManager,
        client: redis::Client,
    ) -> Self {
        let config = crate::RedisConfig::default();
        Locker::new(RedisBackend::from_manager(manager, client, config).await)
    }

    /// A locker on the master that Redis Sentinel names `master`, found
    /// through the `sentinels` (URLs as for [`connect`](Self::connect),
    /// with the sentinels' own credentials), and followed to the replica the
    /// sentinels promote when it fails.
    ///
    /// `master` is the name the sentinels monitor, or a URL whose host is
    /// that name and which carries the master's credentials and database
    /// (`redis://app:secret@mymaster/0`). See [`SentinelBackend`] for how
    /// calls ride out a failover, what a failover can lose, and
    /// [`SentinelBackend::connect_with`] for timeouts and TLS. Needs the
    /// `sentinel` feature.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::Locker;
    ///
    /// let locker = Locker::sentinel(
    ///     "mymaster",
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    /// )
    /// .await?;
    /// # let _ = locker; Ok(()) }
    /// ```
    ///
    /// [`SentinelBackend`]: crate::SentinelBackend
    /// [`SentinelBackend::connect_with`]: crate::SentinelBackend::connect_with
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub async fn sentinel(
        master: &str,
        sentinels: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<Self, LockError> {
        Ok(Locker::new(
            crate::SentinelBackend::connect(master, sentinels).await?,
        ))
    }

    /// A locker on a Redis Cluster, reached through one or more of its nodes
    /// (`seeds`, URLs as for [`connect`](Self::connect)); the other nodes are
    /// discovered.
    ///
    /// Keys locked together, and a lock with an explicit fence key, must share
    /// a hash slot; see [`ClusterBackend`](crate::ClusterBackend). Fails like [`connect`](Self::connect)
    /// when no seed can be reached or none is part of a cluster.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::Locker;
    ///
    /// let locker = Locker::cluster(["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/"]).await?;
    /// # let _ = locker; Ok(()) }
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub async fn cluster(
        seeds: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<Self, LockError> {
        Ok(Locker::new(crate::ClusterBackend::connect(seeds).await?))
    }

    /// A locker on independent Redis masters (`urls`, URLs as for
    /// [`connect`](Self::connect)) that grant a lock by majority: the Redlock
    /// algorithm. See [`RedlockBackend`] for its timing and for what fencing
    /// tokens guarantee there.
    ///
    /// Succeeds when a majority of the masters can be reached; the others join
    /// when they come up. Fails with [`LockError::Backend`] when fewer can,
    /// and with [`LockError::InvalidUrl`] for a bad, missing or repeated URL.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::Locker;
    ///
    /// let locker = Locker::redlock([
    ///     "redis://10.0.0.1:6379/",
    ///     "redis://10.0.0.2:6379/",
    ///     "redis://10.0.0.3:6379/",
    /// ])
    /// .await?;
    /// # let _ = locker; Ok(()) }
    /// ```
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub async fn redlock(
        urls: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<Self, LockError> {
        Ok(Locker::new(RedlockBackend::connect(urls).await?))
    }

    /// A locker on an etcd cluster, given its members' client URLs
    /// (`http://host:port`): keys attached to leases, waiters woken by watch,
    /// fencing tokens from etcd revisions (which never go backwards, through
    /// leader elections too). Needs the `etcd` feature; see [`EtcdBackend`]
    /// for the wire layout and how ttls map to etcd's whole-second leases.
    ///
    /// Fails when no member answers, naming each one.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::Locker;
    ///
    /// let locker = Locker::etcd(["http://10.0.0.1:2379", "http://10.0.0.2:2379", "http://10.0.0.3:2379"]).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// [`EtcdBackend`]: crate::EtcdBackend
    #[cfg(feature = "etcd")]
    #[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
    pub async fn etcd(
        endpoints: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<Self, LockError> {
        Ok(Locker::new(crate::EtcdBackend::connect(endpoints).await?))
    }

    /// A locker on the PostgreSQL database at `url`
    /// (`postgres://user:password@host:port/db`): see [`PostgresBackend`]
    /// for the lease model, fencing and poolers. Creates the backend's
    /// tables when they are missing.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// let locker = lockmacro_runtime::Locker::postgres("postgres://app:secret@10.0.0.5/app").await?;
    /// # let _ = locker; Ok(()) }
    /// ```
    ///
    /// [`PostgresBackend`]: crate::PostgresBackend
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub async fn postgres(url: &str) -> Result<Self, LockError> {
        Ok(Locker::new(crate::PostgresBackend::connect(url).await?))
    }

    /// A locker on the service's own sqlx `PgPool`: nothing depends on
    /// holding one of its connections (see [`PostgresBackend`]).
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool) -> Result<(), lockmacro_runtime::LockError> {
    /// let locker = lockmacro_runtime::Locker::postgres_pool(pool).await?;
    /// # let _ = locker; Ok(()) }
    /// ```
    ///
    /// [`PostgresBackend`]: crate::PostgresBackend
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub async fn postgres_pool(pool: sqlx::PgPool) -> Result<Self, LockError> {
        Ok(Locker::new(crate::PostgresBackend::from_pool(pool).await?))
    }

    /// A locker on a fresh in-process [`MemoryBackend`].
    pub fn memory() -> Self {
        Locker::new(MemoryBackend::new())
    }

    /// The same backend, with every key (and derived fence key) prefixed by
    /// `namespace:`. Namespaces nest: `a` then `b` gives `a:b:`.
    pub fn with_namespace(&self, namespace: &str) -> Self {
        if namespace.is_empty() {
            return self.clone();
        }
        Locker {
            shared: self.shared.clone(),
            prefix: Arc::from(format!("{}{namespace}:", self.prefix)),
        }
    }

    /// The namespace, without its trailing `:` (empty when there is none).
    pub fn namespace(&self) -> &str {
        self.prefix.strip_suffix(':').unwrap_or("")
    }

    /// The backend this locker runs on.
    pub fn backend(&self) -> &dyn Backend {
        &*self.shared.backend
    }

    /// The key as stored by the backend: the namespace prefix, then `key`.
    pub fn wire_key(&self, key: &str) -> String {
        // Copied rather than formatted: this runs for every obtain.
        let mut wire = String::with_capacity(self.prefix.len() + key.len());
        wire.push_str(&self.prefix);
        wire.push_str(key);
        wire
    }

    /// True when both lockers share one backend (whatever their namespaces).
    pub fn same_backend(&self, other: &Locker) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    pub(crate) fn registry(&self) -> &Registry {
        &self.shared.registry
    }

    pub(crate) fn watchdog(&self) -> &Watchdog {
        &self.shared.watchdog
    }

    /// Takes `key` for `ttl`.
    ///
    /// With the default options this tries once and fails with
    /// [`LockError::NotObtained`] when someone else holds the key; give a
    /// [`RetryStrategy`](crate::RetryStrategy) to wait.
    ///
    /// The key is copied when this is called: the future borrows the
    /// locker only.
    pub fn obtain<'a>(
        &'a self,
        key: &str,
        ttl: Duration,
        opts: ObtainOptions,
    ) -> impl Future<Output = Result<Lock, LockError>> + Send + use<'a> {
        // Not an `async fn`: one would be a layer around `obtain_keys`
        // holding its own copy of the options, and every obtain's future
        // (copied as it starts) would grow by it.
        self.obtain_keys(vec![key.to_owned()], ttl, opts)
    }

    /// Takes every key in `keys` for `ttl`, or none of them.
    ///
    /// Keys are taken in sorted order in one atomic step, so two callers
    /// locking overlapping sets never deadlock. A fencing token, when asked
    /// for, comes from the fence key of the first key in sorted order (or the
    /// explicit fence key).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// let ttl = Duration::from_secs(5);
    /// let held = locker.obtain("account:2", ttl, ObtainOptions::default()).await?;
    /// let both = locker.obtain_many(["account:1", "account:2"], ttl, ObtainOptions::default()).await;
    /// assert!(both.unwrap_err().is_not_obtained());
    /// // All or nothing: account:1 was not left locked.
    /// locker.obtain("account:1", ttl, ObtainOptions::default()).await?;
    /// # drop(held); Ok(()) }
    /// ```
    pub fn obtain_many(
        &self,
        keys: impl IntoIterator<Item = impl AsRef<str>>,
        ttl: Duration,
        opts: ObtainOptions,
    ) -> impl Future<Output = Result<Lock, LockError>> + Send {
        // The keys are copied here, as `obtain` copies its key.
        let keys: Vec<String> = keys
            .into_iter()
            .map(|key| key.as_ref().to_owned())
            .collect();
        self.obtain_keys(keys, ttl, opts)
    }

    /// [`obtain_many`](Locker::obtain_many) of keys already owned, as
    /// `hold` has them. The keys and durations are checked when this is
    /// called, and a refusal is the future's answer: it saves every obtain's
    /// future a layer (and a copy) around the wait.
    pub(crate) fn obtain_keys(
        &self,
        mut keys: Vec<String>,
        ttl: Duration,
        opts: ObtainOptions,
    ) -> impl Future<Output = Result<Lock, LockError>> + Send + use<'_> {
        keys.sort_unstable();
        keys.dedup();
        let span = tracing::debug_span!(target: "lockmacro", "obtain", key = %Joined(&keys), ?ttl);
        // A refusal is the future's answer too, from the same future: one
        // type, copied once less than a choice between two.
        self.obtain_request(self.request(keys, ttl, opts))
            .instrument(span)
    }

    /// The request for sorted `keys`, or why no obtain can take the keys,
    /// the `ttl` or the options; checked when the obtain is called, before
    /// anything is sent. Made here rather than in the obtain's future, which
    /// then holds the keys and options once, in the request: every obtain's
    /// future is copied as it starts.
    fn request(
        &self,
        keys: Vec<String>,
        ttl: Duration,
        opts: ObtainOptions,
    ) -> Result<Request, LockError> {
        let Some(first) = keys.first() else {
            return Err(LockError::InvalidKey {
                key: String::new(),
                reason: "no keys given; pass at least one key".into(),
            });
        };
        for key in &keys {
            check_key(key)?;
        }
        check_duration(first, "ttl", ttl)?;
        let drift = self.backend().drift(ttl);
        if drift > ttl / 2 {
            return Err(LockError::InvalidDuration {
                key: first.clone(),
                what: "ttl",
                value: ttl,
                reason: format!(
                    "the lease is trusted for the ttl less a drift margin of {drift:?}, which \
                     must be at most half the ttl; use a longer ttl"
                ),
            });
        }
        if let Some(hold) = opts.max_hold {
            check_duration(first, "max_hold", hold)?;
        }
        if !opts.lock_delay.is_zero() {
            check_duration(first, "lock_delay", opts.lock_delay)?;
            check_duration(first, "ttl plus lock_delay", ttl + opts.lock_delay)?;
        }
        let keys: Arc<[String]> = keys.into();
        let namespaced: Option<Arc<[String]>> =
            (!self.prefix.is_empty()).then(|| keys.iter().map(|key| self.wire_key(key)).collect());
        let wire_keys = namespaced.as_deref().unwrap_or(&keys);
        let fence_key = match &opts.fencing {
            Fencing::Off => None,
            Fencing::Derived => Some(self.backend().fence_key(&wire_keys[0])),
            Fencing::Key(key) => {
                check_key(key)?;
                Some(self.wire_key(key))
            }
        };
        self.backend().check_keys(wire_keys, fence_key.as_deref())?;
        crate::rules::check(self.backend(), &keys, ttl, &opts)?;
        Ok(Request::new(
            self.shared.backend.clone(),
            self.shared.registry.clone(),
            keys,
            namespaced,
            fence_key,
            ttl,
            opts,
        ))
    }

    /// Waits for the keys of `request`, in the span `obtain_keys` opened;
    /// a request refused when it was made is the answer at once.
    ///
    /// Not an `async fn`, whose future would hold the request twice: every
    /// obtain's future is copied as it starts.
    #[allow(
        clippy::manual_async_fn,
        reason = "an async fn's future holds its arguments twice"
    )]
    fn obtain_request(
        &self,
        request: Result<Request, LockError>,
    ) -> impl Future<Output = Result<Lock, LockError>> + Send + '_ {
        async move {
            // Borrowed rather than moved out: moved, the request would be
            // held twice in this future.
            let request = match request {
                Ok(ref request) => request,
                Err(err) => return Err(err),
            };
            let registry = &self.shared.registry;
            // Held until the wait, dropped or ended, has spawned what gives
            // back its claim: a shutdown waits for both.
            let _obtaining = registry.obtaining(request.key())?;
            // A local the wait borrows, rather than moved into its future:
            // that future is then a third of the size, and every obtain's
            // future, which is copied as it starts, with it.
            let mut wait = Wait::new(request, self.namespace());
            // The first attempt is not raced with the shutdown, which would
            // cost every obtain a waiter on the shutdown signal: one in
            // flight as the locker shuts down ends within the response
            // timeout, and what it took is given back below. A shutdown ends
            // the waiting after it at once.
            // Bound before the match: a temporary of the scrutinee would
            // live through the wait below, and widen every obtain's future.
            let first = wait.first().await?;
            let lease = match first {
                First(Ok(lease)) => lease,
                // Boxed: only an obtain that finds the keys busy goes on,
                // and inline its state would make every obtain's future
                // half as large again.
                First(Err(busy)) => tokio::select! {
                    biased;
                    lease = Box::pin(wait.rest(busy)) => lease?,
                    () = registry.closing() => return Err(shut_down(request.key())),
                },
            };
            drop(wait);
            if !registry.admit(lease.id, Arc::<Lease>::downgrade(&lease)) {
                // Obtained as the locker shut down: given back at once.
                let _ = lease.release().await;
                return Err(shut_down(request.key()));
            }
            Ok(Lock {
                lease,
                watchdog: self.shared.watchdog.clone(),
            })
        }
    }
}

/// Keys as a span shows them, separated by commas: written out only when
/// the span is recorded, rather than joined into a string for every obtain.
struct Joined<'a>(&'a [String]);

impl std::fmt::Display for Joined<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, key) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(key)?;
        }
        Ok(())
    }
}
