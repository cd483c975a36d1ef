//! One Redis server: [`RedisBackend`], one file per concern.

mod capabilities;
mod config;
mod connect;
mod dial;
mod dispatch;
mod errors;
mod locks;
mod native;
mod operate;
mod protocol;
pub(super) mod retry;
mod scriptless;
mod scriptless_lease;
mod scriptless_operate;
mod scripts;
mod server_conn;
#[cfg(feature = "tls-rustls")]
mod tls;
mod transport;
mod wakeups;
mod watched;

pub use self::capabilities::Scripts;
pub use self::config::RedisConfig;
#[cfg(any(feature = "cluster", feature = "sentinel"))]
pub(super) use self::config::refuse_dial;
pub(crate) use self::connect::open_connection;
pub use self::dial::{Dial, DialedStream, Dialing};
pub(crate) use self::server_conn::ServerConn;
// What the cluster and Sentinel backends share with this one.
#[cfg(feature = "sentinel")]
pub(super) use self::connect::enable_tls;
pub(super) use self::connect::open_client;
#[cfg(feature = "cluster")]
pub(super) use self::connect::prepare_tls;
#[cfg_attr(not(feature = "cluster"), allow(unused_imports))]
pub(super) use self::errors::backend_error;
#[cfg_attr(not(feature = "cluster"), allow(unused_imports))]
pub(super) use self::errors::{Failure, not_redis};
#[cfg_attr(not(feature = "cluster"), allow(unused_imports))]
pub(super) use self::locks::{Protocol, speaks_protocol};
#[cfg_attr(not(feature = "cluster"), allow(unused_imports))]
pub(super) use self::protocol::Companions;
#[cfg_attr(not(feature = "cluster"), allow(unused_imports))]
pub(super) use self::scripts::Load;
pub(super) use self::scripts::Lua;
pub(crate) use self::transport::send_once_more;
#[cfg_attr(not(feature = "cluster"), allow(unused_imports))]
pub(super) use self::transport::{SCAN_COUNT, Transport};
pub(super) use self::wakeups::Wakeups;

use std::sync::Arc;

use redis::aio::ConnectionManager;

use self::connect::{SCRIPT_SOURCES, connection_for, server_name};
use self::transport::{Acknowledged, Server};
use self::watched::Exclusive;
use crate::LockError;

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
/// holder's remaining lease plus a second, and marks the holder's value
/// (one NUL byte appended, never shown as metadata); a release reads the
/// flag only for a marked value, and publishes only while the flag is
/// there, so a release nobody waits for is a compare-and-delete and does no
/// pub/sub or queue work.
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
    /// Shared: Redlock and Sentinel hand a master's backend to every call,
    /// and a clone should not copy its names and settings.
    protocol: Arc<Protocol<Server>>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("server", &self.protocol.transport.name)
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
        let (conn, name) = connection_for(&client, &config).await?;
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
        let (conn, name) = connection_for(&client, &config).await?;
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
        Self::assemble(ServerConn::Manager(manager), name, client, &config).await
    }

    /// A backend sending its commands on `conn`, opening its pub/sub and
    /// replica-wait connections from `client`.
    async fn assemble(
        conn: ServerConn,
        name: String,
        client: redis::Client,
        config: &RedisConfig,
    ) -> Self {
        // The pub/sub connection goes to the server that holds the keys: when
        // it freezes, nothing can be locked anyway.
        let wakeups = Arc::new(Wakeups::new(vec![client.clone()], config, false));
        let exclusive = Arc::new(Exclusive::new(client.clone(), config));
        let acknowledged = Arc::new(Acknowledged::new(client, config));
        let server = Server {
            conn: conn.clone(),
            name,
            wakeups,
            acknowledged,
            exclusive,
        };
        let protocol = Protocol::new(server, config);
        let mut probed = conn;
        let probe = protocol.features.probe(&mut probed, &SCRIPT_SOURCES);
        if tokio::time::timeout(config.response_timeout, probe)
            .await
            .is_err()
        {
            tracing::debug!(target: "lockmacro", "the server's scripts and commands not probed in time");
        }
        RedisBackend {
            protocol: Arc::new(protocol),
        }
    }

    /// Calls `lua` with `keys` and `args`; `what` names the call in errors.
    pub(super) async fn invoke<T, A>(
        &self,
        what: &str,
        keys: &[String],
        lua: &Lua,
        args: &[A],
    ) -> Result<T, LockError>
    where
        T: redis::FromRedisValue + Send,
        A: redis::ToRedisArgs + Sync,
    {
        self.protocol.script(what, keys, lua, args).await
    }

    /// The protocol itself, for Redlock's requests to each master: called
    /// through it rather than through [`Backend`](crate::backend::Backend),
    /// a request's future is not boxed a second time.
    pub(in crate::backend) fn protocol(&self) -> &Protocol<Server> {
        &self.protocol
    }

    /// `RedisConfig::fence_expiry`, in ms, as the scripts take it.
    pub(super) fn fence_expiry(&self) -> &str {
        &self.protocol.fence_expiry
    }
}

speaks_protocol!(RedisBackend, "redis");
