//! One Redis server: [`RedisBackend`], one file per concern.

mod config;
mod connect;
mod errors;
mod protocol;
pub(super) mod retry;
#[cfg(feature = "tls-rustls")]
mod tls;
mod wakeups;

pub use self::config::RedisConfig;
pub(crate) use self::connect::open_manager;
// What the cluster backend shares with this one.
#[cfg_attr(not(feature = "cluster"), allow(unused_imports))]
pub(super) use self::connect::{enable_tls, manager_for, open_client, prepare_tls, server_name};
pub(crate) use self::errors::{backend_error, redact};
#[cfg_attr(not(feature = "cluster"), allow(unused_imports))]
pub(super) use self::protocol::{
    ACQUIRE, ACQUIRE_FAIR, ACQUIRE_FAIR_LUA, ACQUIRE_LUA, ACQUIRE_SHARED, ACQUIRE_SHARED_LUA,
    CONFIRM, CONFIRM_LUA, Companions, REFRESH, REFRESH_BATCH, REFRESH_LUA, REFRESH_MANY,
    REFRESH_MANY_LUA, RELEASE, RELEASE_LUA, REMAINING, REMAINING_LUA, acknowledged_acquire_pipe,
    acknowledged_outcome, acquire_args, acquire_fair_args, acquire_shared_args, acquired,
    check_replica_timeout, millis, not_a_fence, not_shares, plain_outcome, plain_set, pttl,
    refresh_many_cmd, refreshed, release_args,
};
pub(super) use self::wakeups::Wakeups;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{ErrorKind, Script, ServerErrorKind};

use self::connect::preload;
use crate::LockError;
use crate::backend::{
    AcquireRequest, Acquired, Backend, BoxFuture, FairQueue, RefreshRequest, ReleaseListener,
    TOKEN_LEN,
};

/// Locks on one Redis server.
///
/// A lock is a plain string key, taken with `SET key value NX PX ttl`
/// semantics, whose value starts with the owner's 32-character token. Other
/// clients that lock the same keys the same way (redis-py's `Lock`,
/// bsm/redislock, Redisson's `RLock` excepted, as it uses hashes) exclude this
/// library and are excluded by it. Refresh, release and fencing run as Lua
/// scripts (`EVALSHA`, loaded on `NOSCRIPT`).
///
/// The connection reconnects by itself. A command that fails because the
/// connection dropped (a server restart, an idle connection cut by a proxy) is
/// sent once more on the new connection; every script is safe to repeat.
///
/// Waiters are woken by releases: the release script publishes on the channel
/// `lockmacro:released:<key>`, and a waiting [`Locker`](crate::Locker)
/// subscribes to it on a second connection (RESP3, opened on the first wait,
/// shared by all its waiters) before its next attempt. A waiter sends nothing
/// between wake-ups. When that connection cannot be had, or the Redis user
/// lacks `+publish +subscribe +unsubscribe` or the channels
/// `&lockmacro:released:*`, waiters fall back to their retry strategy's
/// backoff, still bounded by the holder's remaining lease.
///
/// An attempt that finds a key held, from a caller that listens, sets a flag
/// at `{K}:waiters` (`K:waiters` when `K` has a hash tag) that lasts the
/// holder's remaining lease plus a second; a release publishes only while
/// the flag is there, so a release nobody waits for does no pub/sub or queue
/// work.
///
/// Fair obtains ([`ObtainOptions::fair`](crate::ObtainOptions::fair)) queue in
/// a list at `{K}:queue` (`K:queue` when `K` has a hash tag); the release
/// script hands the key to the first live waiter for its grant lease
/// ([`RedisConfig::grant_lease`]) and publishes
/// `grant:<token>:<lease>:<fence>:<attempt>` on the same channel; the waiter
/// goes on at once and confirms in the background, which extends the key to
/// its ttl and publishes `confirm:<token>`.
///
/// Fence counters expire [`RedisConfig::fence_expiry`] after their last use.
///
/// ```no_run
/// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
/// use lockmacro_runtime::{Locker, RedisBackend};
///
/// let backend = RedisBackend::connect("redis://127.0.0.1:6379/").await?;
/// let locker = Locker::new(backend);
/// # let _ = locker; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisBackend {
    conn: ConnectionManager,
    /// `redis 127.0.0.1:6379`: names the server in error messages.
    name: String,
    wakeups: Arc<Wakeups>,
    /// The connection of the acquires that wait for replicas.
    acknowledged: Arc<Acknowledged>,
    /// `RedisConfig::fence_expiry` and `grant_lease`, in ms, as the scripts
    /// take them.
    pub(super) fence_expiry: String,
    grant_lease: String,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("server", &self.name)
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Connects to the server at `url` (`redis://[user:password@]host:port/[db]`,
    /// `rediss://` for TLS) with the default [`RedisConfig`].
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::connect_with(url, RedisConfig::default()).await
    }

    /// Connects to the server at `url` with `config`.
    pub async fn connect_with(url: &str, config: RedisConfig) -> Result<Self, LockError> {
        let client = open_client(url, &config)?;
        let (conn, name) = manager_for(&client, &config).await?;
        Ok(Self::assemble(conn, name, client, &config).await)
    }

    /// Locks on the server of a `client` the service already has: its
    /// address, user, password, database and TLS settings are used as they
    /// are (`config`'s TLS certificates are not applied to it), and the
    /// backend opens its own command connection from it, with `config`'s
    /// timeouts.
    ///
    /// To share the service's command connection as well, use
    /// [`from_manager`](Self::from_manager).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use lockmacro_runtime::{Locker, RedisBackend, RedisConfig};
    ///
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let backend = RedisBackend::from_client(client.clone(), RedisConfig::default()).await?;
    /// let locker = Locker::new(backend);
    /// # let _ = locker; Ok(()) }
    /// ```
    pub async fn from_client(
        client: redis::Client,
        config: RedisConfig,
    ) -> Result<Self, LockError> {
        let (conn, name) = manager_for(&client, &config).await?;
        Ok(Self::assemble(conn, name, client, &config).await)
    }

    /// Locks sent on the service's own `manager`, a multiplexed connection
    /// that the backend shares with the service (lock calls and the
    /// service's commands are pipelined on it, in no particular order).
    ///
    /// `client` must reach the same server: the backend opens two
    /// connections of its own from it, only when needed, because the shared
    /// connection cannot carry them:
    ///
    /// - the **pub/sub connection** of waiters ([`Locker::obtain`](crate::Locker::obtain)
    ///   with a retry), opened on the first wait: a connection that
    ///   subscribes receives release messages as pushes, which only a
    ///   connection created with a push sender can deliver (the manager's
    ///   belong to the service), and RESP2 would turn it into a pub/sub-only
    ///   connection, refusing the service's commands;
    /// - the connection of the acquires that wait for replicas
    ///   ([`ObtainOptions::replicas`](crate::ObtainOptions::replicas)):
    ///   `WAIT` blocks the connection it is sent on until the replicas
    ///   answer, which would hold up every command of the service meanwhile.
    ///
    /// Those two use `config`'s timeouts; lock calls on `manager` are bounded
    /// by the **manager's own response timeout** (500 ms for a manager made
    /// with `ConnectionManager::new`, see `ConnectionManagerConfig`), not by
    /// `config`'s. Keep it well below your ttls, and above your servers'
    /// slowest script call. A command that fails because the connection
    /// dropped is sent once more, as on the backend's own connection; how
    /// and when the manager reconnects is the manager's configuration.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use lockmacro_runtime::{Locker, RedisBackend, RedisConfig};
    ///
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let manager = redis::aio::ConnectionManager::new(client.clone()).await?;
    /// // The service goes on using `manager`; the locks ride on it too.
    /// let backend = RedisBackend::from_manager(manager.clone(), client, RedisConfig::default()).await;
    /// let locker = Locker::new(backend);
    /// # let _ = locker; Ok(()) }
    /// ```
    pub async fn from_manager(
        manager: ConnectionManager,
        client: redis::Client,
        config: RedisConfig,
    ) -> Self {
        let name = server_name(&client);
        Self::assemble(manager, name, client, &config).await
    }

    /// A backend sending its commands on `conn`, opening its pub/sub and
    /// replica-wait connections from `client`.
    async fn assemble(
        conn: ConnectionManager,
        name: String,
        client: redis::Client,
        config: &RedisConfig,
    ) -> Self {
        preload(conn.clone(), config.response_timeout).await;
        // The pub/sub connection goes to the server that holds the keys: when
        // it freezes, nothing can be locked anyway.
        let wakeups = Arc::new(Wakeups::new(vec![client.clone()], config, false));
        let acknowledged = Arc::new(Acknowledged::new(client, config));
        RedisBackend {
            conn,
            name,
            wakeups,
            acknowledged,
            fence_expiry: millis(config.fence_expiry),
            grant_lease: millis(config.grant_lease),
        }
    }

    pub(super) async fn invoke<T: redis::FromRedisValue, A: redis::ToRedisArgs>(
        &self,
        what: &str,
        keys: &[String],
        script: &Script,
        args: &[A],
    ) -> Result<T, LockError> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(arg);
        }
        let mut conn = self.conn.clone();
        let first = invocation.invoke_async(&mut conn).await;
        match first {
            Err(err) if err.is_connection_dropped() => {
                tracing::debug!(target: "lockmacro", server = %self.name, error = %err, "connection dropped, sending again");
                invocation.invoke_async(&mut conn).await
            }
            other => other,
        }
        .map_err(|err| backend_error(&self.name, &format!("{what} `{}`", keys.join("`, `")), err).into())
    }
}

impl RedisBackend {
    /// One call of the refresh script for `requests` (all with a well-formed
    /// token, at most [`REFRESH_BATCH`] of them).
    async fn refresh_batch(
        &self,
        requests: &[&RefreshRequest<'_>],
    ) -> Vec<Result<bool, LockError>> {
        let mut conn = self.conn.clone();
        let evalsha = refresh_many_cmd("EVALSHA", REFRESH_MANY.get_hash(), requests);
        let mut reply = evalsha.query_async(&mut conn).await;
        if let Err(err) = &reply
            && err.is_connection_dropped()
        {
            tracing::debug!(target: "lockmacro", server = %self.name, error = %err, "connection dropped, sending again");
            reply = evalsha.query_async(&mut conn).await;
        }
        if let Err(err) = &reply
            && err.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
        {
            // A server restarted or flushed since `preload`: `EVAL` caches it.
            reply = refresh_many_cmd("EVAL", REFRESH_MANY_LUA, requests)
                .query_async(&mut conn)
                .await;
        }
        refreshed(reply, requests, &self.name)
    }
}

impl Backend for RedisBackend {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn acquire<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        Box::pin(async move {
            if req.replicas > 0 {
                return self.acquire_acknowledged(req).await;
            }
            if req.is_plain() {
                let mut conn = self.conn.clone();
                let set = plain_set(&req);
                let first = set.query_async(&mut conn).await;
                let previous: Option<String> = match first {
                    Err(err) if err.is_connection_dropped() => {
                        tracing::debug!(target: "lockmacro", server = %self.name, error = %err, "connection dropped, sending again");
                        set.query_async(&mut conn).await
                    }
                    other => other,
                }
                .map_err(|err| backend_error(&self.name, &format!("obtain `{}`", req.keys[0]), err))?;
                if let Some(plain) = plain_outcome(&req, previous) {
                    return Ok(plain);
                }
            }
            let expiry = self.fence_expiry.as_str();
            let reply: Result<Vec<i64>, LockError> = if let Some(share) = req.share {
                let mut keys = vec![req.keys[0].clone()];
                keys.extend(req.fence_key.map(str::to_owned));
                let args = acquire_shared_args(
                    &req,
                    share,
                    expiry,
                    &self.grant_lease,
                    Companions::Derived,
                );
                self.invoke("obtain", &keys, &ACQUIRE_SHARED, &args)
                    .await
                    .map_err(|err| not_shares(err, &req.keys[0]))
                    .map_err(|err| not_a_fence(err, req.fence_key))
            } else if let Some(wait) = req.queue_for {
                let mut keys = vec![req.keys[0].clone()];
                keys.extend(req.fence_key.map(str::to_owned));
                let queue = Companions::Derived.queue(&req.keys[0]);
                let args = acquire_fair_args(
                    &req,
                    wait,
                    queue,
                    expiry,
                    &self.grant_lease,
                    Companions::Derived,
                );
                self.invoke("obtain", &keys, &ACQUIRE_FAIR, &args).await
            } else {
                let mut keys = req.keys.to_vec();
                keys.extend(req.fence_key.map(str::to_owned));
                let args = acquire_args(&req, expiry, Companions::Derived);
                self.invoke("obtain", &keys, &ACQUIRE, &args).await
            };
            let reply = reply.map_err(|err| not_a_fence(err, req.fence_key))?;
            acquired(&reply, req.fence_key.is_some(), &self.name)
        })
    }

    fn refresh<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            if token.len() != TOKEN_LEN {
                return Ok(false);
            }
            let done: i64 = self
                .invoke("refresh", keys, &REFRESH, &[token, &millis(ttl)])
                .await?;
            Ok(done == 1)
        })
    }

    /// One script call per 500 leases, all sent at once.
    fn refresh_many<'a>(
        &'a self,
        requests: &'a [RefreshRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, LockError>>> {
        Box::pin(async move {
            let valid: Vec<&RefreshRequest<'_>> = requests
                .iter()
                .filter(|req| req.token.len() == TOKEN_LEN)
                .collect();
            let batches = valid
                .chunks(REFRESH_BATCH)
                .map(|batch| self.refresh_batch(batch));
            let mut refreshed = futures_util::future::join_all(batches)
                .await
                .into_iter()
                .flatten();
            requests
                .iter()
                .map(|req| match req.token.len() {
                    TOKEN_LEN => refreshed.next().unwrap_or(Ok(false)),
                    _ => Ok(false),
                })
                .collect()
        })
    }

    fn release<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            if token.len() != TOKEN_LEN {
                return Ok(false);
            }
            let args = release_args(keys, token, Companions::Derived);
            let done: i64 = self.invoke("release", keys, &RELEASE, &args).await?;
            Ok(done == 1)
        })
    }

    fn remaining<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Duration>, LockError>> {
        Box::pin(async move {
            if token.len() != TOKEN_LEN {
                return Ok(None);
            }
            let remaining: i64 = self.invoke("ttl", keys, &REMAINING, &[token]).await?;
            Ok(pttl(remaining))
        })
    }

    fn listen<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ReleaseListener> {
        Box::pin(self.wakeups.listen(key, None))
    }

    fn fair_queue(&self) -> Option<&dyn FairQueue> {
        Some(self)
    }

    fn acknowledges_replicas(&self) -> bool {
        true
    }

    fn keeps_shares(&self) -> bool {
        true
    }
}

/// The connection on which [`RedisBackend`] sends the acquires that wait for
/// replicas, opened on the first one. `WAIT` holds up its connection until
/// the replicas answer or the bound passes: on the shared connection it would
/// hold up every other call, the watchdog's refreshes among them.
pub(super) struct Acknowledged {
    client: redis::Client,
    config: RedisConfig,
    conn: tokio::sync::OnceCell<ConnectionManager>,
}

impl Acknowledged {
    fn new(client: redis::Client, config: &RedisConfig) -> Self {
        Acknowledged {
            client,
            config: config.clone(),
            conn: tokio::sync::OnceCell::new(),
        }
    }
}

impl RedisBackend {
    /// An acquire that waits for `req.replicas` replicas; gives the keys
    /// back when fewer acknowledge them in time.
    async fn acquire_acknowledged(&self, req: AcquireRequest<'_>) -> Result<Acquired, LockError> {
        let what = || format!("obtain `{}`", req.keys.join("`, `"));
        let acknowledged = &self.acknowledged;
        check_replica_timeout(&req, acknowledged.config.response_timeout, &self.name)?;
        let conn = acknowledged
            .conn
            .get_or_try_init(|| async {
                manager_for(&acknowledged.client, &acknowledged.config)
                    .await
                    .map(|(conn, _)| conn)
            })
            .await?;
        let pipe = acknowledged_acquire_pipe(&req, &self.fence_expiry, Companions::Derived);
        let mut conn = conn.clone();
        let (reply, acked): (Vec<i64>, usize) = match pipe.query_async(&mut conn).await {
            // As `invoke` does: the pair is safe to send again, the acquire
            // accepting a retry of the same value.
            Err(err) if err.is_connection_dropped() => {
                tracing::debug!(target: "lockmacro", server = %self.name, error = %err, "connection dropped, sending again");
                pipe.query_async(&mut conn).await
            }
            other => other,
        }
        .map_err(|err| LockError::from(backend_error(&self.name, &what(), err)))?;
        match acknowledged_outcome(&reply, acked, &req, &self.name)? {
            Ok(outcome) => Ok(outcome),
            Err(acked) => {
                if let Err(err) = self.release(req.keys, req.token()).await {
                    tracing::warn!(target: "lockmacro", server = %self.name, error = %err,
                        "could not give back a lock the replicas did not acknowledge; it expires with its ttl");
                }
                Err(LockError::NotReplicated {
                    key: req.keys[0].clone(),
                    wanted: req.replicas,
                    acknowledged: acked,
                    timeout: req.replica_timeout,
                })
            }
        }
    }
}

impl FairQueue for RedisBackend {
    fn listen_granted<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, ReleaseListener> {
        Box::pin(self.wakeups.listen(key, Some(token)))
    }

    fn listening(&self, key: &str) -> bool {
        self.wakeups.subscribed(key)
    }

    fn confirm<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let keys = [key.to_owned()];
            let done: i64 = self
                .invoke("confirm", &keys, &CONFIRM, &[token, &millis(ttl)])
                .await?;
            Ok(done == 1)
        })
    }
}
