use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};
use std::time::Duration;

use redis::aio::{
    AsyncPushSender, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection, SendError,
};
use redis::{
    AsyncConnectionConfig, ClientTlsConfig, ConnectionAddr, ErrorKind, IntoConnectionInfo,
    ProtocolVersion, PushInfo, PushKind, RedisError, Script, ServerErrorKind, TlsCertificates,
    Value,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;

use super::{
    AcquireRequest, Acquired, Backend, BoxFuture, DEFAULT_FENCE_EXPIRY, DEFAULT_GRANT_LEASE,
    HandOff, RefreshRequest, ReleaseListener, TOKEN_LEN, derived_queue_key, join_all,
};
use crate::LockError;
use crate::error::{BackendError, BackendErrorKind};

// The sources are kept next to their `Script`s for the cluster backend, which
// falls back to `EVAL` with the source itself (see `cluster.rs`).
pub(super) const ACQUIRE_LUA: &str = concat!(
    include_str!("scripts/fence.lua"),
    include_str!("scripts/acquire.lua")
);
pub(super) const ACQUIRE_FAIR_LUA: &str = concat!(
    include_str!("scripts/fence.lua"),
    include_str!("scripts/grant.lua"),
    include_str!("scripts/acquire_fair.lua")
);
pub(super) const REFRESH_LUA: &str = include_str!("scripts/refresh.lua");
pub(super) const RELEASE_LUA: &str = concat!(
    include_str!("scripts/fence.lua"),
    include_str!("scripts/grant.lua"),
    include_str!("scripts/release.lua")
);
pub(super) const REMAINING_LUA: &str = include_str!("scripts/remaining.lua");
pub(super) const REFRESH_MANY_LUA: &str = include_str!("scripts/refresh_many.lua");

pub(super) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));
pub(super) static ACQUIRE_FAIR: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_FAIR_LUA));
pub(super) static REFRESH: LazyLock<Script> = LazyLock::new(|| Script::new(REFRESH_LUA));
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
pub(super) static REMAINING: LazyLock<Script> = LazyLock::new(|| Script::new(REMAINING_LUA));
pub(super) static REFRESH_MANY: LazyLock<Script> = LazyLock::new(|| Script::new(REFRESH_MANY_LUA));

/// The most leases one call of the refresh script carries. Redis runs a
/// script to its end before serving anyone else: this bounds that pause and
/// the size of one request.
pub(super) const REFRESH_BATCH: usize = 500;

/// Connection settings for [`RedisBackend`], [`ClusterBackend`](super::ClusterBackend),
/// [`RedlockBackend`](super::RedlockBackend) and
/// [`SentinelBackend`](super::SentinelBackend).
///
/// ```
/// use std::time::Duration;
/// use lockmacro_runtime::RedisConfig;
///
/// let config = RedisConfig::default()
///     .connect_timeout(Duration::from_secs(1))
///     .response_timeout(Duration::from_millis(500));
/// # let _ = config;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisConfig {
    pub(super) connect_timeout: Duration,
    pub(super) response_timeout: Duration,
    pub(super) tls_root: Option<RootCertificate>,
    pub(super) tls_client: Option<ClientIdentity>,
    pub(super) fence_expiry: Duration,
    pub(super) grant_lease: Duration,
}

/// PEM text of the certificates to trust; shown by its size only.
#[derive(Clone)]
pub(super) struct RootCertificate(Vec<u8>);

impl std::fmt::Debug for RootCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RootCertificate({} bytes of PEM)", self.0.len())
    }
}

/// PEM text of the client's certificate chain and private key; never shown.
#[derive(Clone)]
pub(super) struct ClientIdentity {
    certificate: Vec<u8>,
    key: Vec<u8>,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ClientIdentity({} bytes of certificate PEM, private key hidden)",
            self.certificate.len()
        )
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            connect_timeout: Duration::from_secs(3),
            response_timeout: Duration::from_secs(3),
            tls_root: None,
            tls_client: None,
            fence_expiry: DEFAULT_FENCE_EXPIRY,
            grant_lease: DEFAULT_GRANT_LEASE,
        }
    }
}

/// `value` within what Redis takes as an expiry: 1 ms to ten years.
fn clamp_expiry(value: Duration) -> Duration {
    value.clamp(Duration::from_millis(1), crate::MAX_TTL)
}

impl RedisConfig {
    /// How long to wait for a TCP (and TLS) connection. Default 3 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long to wait for the reply to one command. Default 3 s. Keep it
    /// well below your ttls: a reply that comes later than this is treated as
    /// a failure.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long a fence counter (`{K}:fence`, or an explicit fence key) is
    /// kept after the last token minted from it. Default
    /// [`DEFAULT_FENCE_EXPIRY`], a day; between 1 ms and ten years (values
    /// outside are brought within).
    ///
    /// Every fenced acquisition sets the counter to expire this long after
    /// it, so the counters of keys nobody locks any more go by themselves
    /// instead of piling up. Tokens still never go backwards: a counter that
    /// does not exist starts at the server's clock in microseconds, and the
    /// last token of an expired one was below the clock at its last use (it
    /// started at the clock, and gained one per acquisition, each a script
    /// call taking more than a microsecond), while the new one is read at
    /// least this long after, on the clock by which Redis expires keys.
    /// Under Redlock each master keeps its own counter, so the expiry should
    /// stay far longer than the masters' clocks can differ.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lockmacro_runtime::RedisConfig;
    ///
    /// // Keys fenced at least once a week keep their counter.
    /// let config = RedisConfig::default().fence_expiry(Duration::from_secs(7 * 24 * 3600));
    /// # let _ = config;
    /// ```
    pub fn fence_expiry(mut self, expiry: Duration) -> Self {
        self.fence_expiry = clamp_expiry(expiry);
        self
    }

    /// How long a fair waiter ([`ObtainOptions::fair`](crate::ObtainOptions::fair))
    /// holds a key handed to it before it confirms. Default
    /// [`DEFAULT_GRANT_LEASE`], a second; at most the waiter's ttl.
    ///
    /// A release hands the key to the first waiter in line for this lease
    /// only; the waiter, woken by the release's message, confirms with one
    /// round trip, which extends the key to its ttl. A waiter whose process
    /// died in the queue never confirms, so the waiter after it is delayed by
    /// this lease, not by the dead waiter's ttl. A waiter that cannot confirm
    /// in time (a pause longer than the lease) loses its turn and queues
    /// again. Each waiter's own setting is kept in its queue entry.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lockmacro_runtime::RedisConfig;
    ///
    /// let config = RedisConfig::default().grant_lease(Duration::from_millis(250));
    /// # let _ = config;
    /// ```
    pub fn grant_lease(mut self, lease: Duration) -> Self {
        self.grant_lease = clamp_expiry(lease);
        self
    }

    /// Trusts the certificate authorities in `pem` (one or more PEM
    /// certificates, as in a `ca.crt` file) for `rediss://` connections,
    /// *instead of* the system's roots: for servers whose certificate is
    /// signed by a private CA.
    ///
    /// Without it, `rediss://` trusts the operating system's certificate
    /// store. The server's certificate must name the host of the URL (a DNS
    /// name, or the IP address as a subject alternative name). A `redis://`
    /// URL with a root certificate is refused, rather than connecting without
    /// TLS.
    ///
    /// TLS is provided by rustls with the *ring* crypto provider, installed as
    /// the process default on the first `rediss://` connection unless the
    /// program installed another one before.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use lockmacro_runtime::{Locker, RedisBackend, RedisConfig};
    ///
    /// let ca = std::fs::read("/etc/redis/tls/ca.crt")?;
    /// let config = RedisConfig::default().tls_root_certificate(ca);
    /// let backend = RedisBackend::connect_with("rediss://redis.internal:6380/", config).await?;
    /// let locker = Locker::new(backend);
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root = Some(RootCertificate(pem.into()));
        self
    }

    /// Presents the certificate chain in `certificate_pem` (the client's
    /// certificate first) and its private key in `key_pem` (PKCS#8, PKCS#1
    /// or SEC1 PEM) to servers that check clients (mutual TLS:
    /// `tls-auth-clients yes`). Only used with `rediss://` URLs; a `redis://`
    /// URL with a client certificate is refused, rather than connecting
    /// without TLS. Both are checked when connecting, and the key is never
    /// printed.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use lockmacro_runtime::{Locker, RedisBackend, RedisConfig};
    ///
    /// let config = RedisConfig::default()
    ///     .tls_root_certificate(std::fs::read("/etc/redis/tls/ca.crt")?)
    ///     .tls_client_certificate(
    ///         std::fs::read("/etc/locks/client.crt")?,
    ///         std::fs::read("/etc/locks/client.key")?,
    ///     );
    /// let backend = RedisBackend::connect_with("rediss://redis.internal:6380/", config).await?;
    /// # let _ = backend; Ok(()) }
    /// ```
    pub fn tls_client_certificate(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls_client = Some(ClientIdentity {
            certificate: certificate_pem.into(),
            key: key_pem.into(),
        });
        self
    }

    /// True when the config holds TLS settings, which need `rediss://`.
    fn has_tls_settings(&self) -> bool {
        self.tls_root.is_some() || self.tls_client.is_some()
    }

    /// The certificates to trust and to present, checked: `server` names the
    /// server in the error when one cannot be used.
    pub(super) fn tls_certificates(
        &self,
        server: &str,
    ) -> Result<Option<TlsCertificates>, LockError> {
        if !self.has_tls_settings() {
            return Ok(None);
        }
        // `what` was given to `RedisConfig::{method}` and cannot be used.
        let unusable = |method: &str, what: &str, reason: String| -> LockError {
            BackendError::new(
                BackendErrorKind::Tls,
                format!("{server}: connect"),
                format!("the {what} given to `RedisConfig::{method}` {reason}"),
            )
            .into()
        };
        let certificates = |method: &str, what: &str, pem: &[u8]| -> Result<(), LockError> {
            let mut count = 0;
            for certificate in CertificateDer::pem_slice_iter(pem) {
                certificate
                    .map_err(|err| unusable(method, what, format!("is not valid PEM: {err}")))?;
                count += 1;
            }
            if count == 0 {
                return Err(unusable(
                    method,
                    what,
                    "holds no certificate (expected `-----BEGIN CERTIFICATE-----`)".into(),
                ));
            }
            Ok(())
        };
        if let Some(RootCertificate(pem)) = &self.tls_root {
            certificates("tls_root_certificate", "root certificate", pem)?;
        }
        if let Some(identity) = &self.tls_client {
            let method = "tls_client_certificate";
            certificates(method, "client certificate", &identity.certificate)?;
            PrivateKeyDer::from_pem_slice(&identity.key).map_err(|err| {
                unusable(
                    method,
                    "client key",
                    format!(
                        "is not a PEM private key (expected `-----BEGIN PRIVATE KEY-----`, or an \
                         RSA or EC key): {err}"
                    ),
                )
            })?;
        }
        Ok(Some(TlsCertificates {
            client_tls: self.tls_client.as_ref().map(|identity| ClientTlsConfig {
                client_cert: identity.certificate.clone(),
                client_key: identity.key.clone(),
            }),
            root_cert: self
                .tls_root
                .as_ref()
                .map(|RootCertificate(pem)| pem.clone()),
        }))
    }
}

/// Makes *ring* the process's rustls crypto provider, unless one is already
/// installed. rustls picks a provider by itself only when exactly one is
/// compiled in; another crate of the program may bring `aws-lc-rs` as well,
/// and TLS connections would then fail.
pub(super) fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A client for `url` with `config`'s TLS settings; `Err` for a URL that
/// cannot be parsed or TLS settings that cannot be used with it.
pub(super) fn open_client(url: &str, config: &RedisConfig) -> Result<redis::Client, LockError> {
    let invalid = |reason: String| LockError::InvalidUrl {
        url: redact(url),
        reason,
    };
    let info = url
        .into_connection_info()
        .map_err(|err| invalid(err.to_string()))?;
    let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
    if tls {
        install_crypto_provider();
    }
    let name = format!("redis {}", info.addr());
    match config.tls_certificates(&name)? {
        None => redis::Client::open(info).map_err(|err| invalid(err.to_string())),
        Some(_) if !tls => Err(invalid(
            "TLS certificates are configured but the URL does not use TLS; \
             use `rediss://`"
                .into(),
        )),
        Some(certificates) => redis::Client::build_with_tls(info, certificates)
            .map_err(|err| invalid(err.to_string())),
    }
}

/// A connection manager to the server at `url`, its client, and its name
/// for error messages (`redis 127.0.0.1:6379`); connecting is bounded by the
/// config's timeouts.
pub(crate) async fn open_manager(
    url: &str,
    config: &RedisConfig,
) -> Result<(redis::Client, ConnectionManager, String), LockError> {
    let client = open_client(url, config)?;
    let (conn, name) = manager_for(&client, config).await?;
    Ok((client, conn, name))
}

/// The name of `client`'s server in error messages: `redis 127.0.0.1:6379`.
pub(super) fn server_name(client: &redis::Client) -> String {
    format!("redis {}", client.get_connection_info().addr())
}

/// A connection manager to the server of `client`, and the server's name;
/// connecting is bounded by the config's timeouts.
pub(super) async fn manager_for(
    client: &redis::Client,
    config: &RedisConfig,
) -> Result<(ConnectionManager, String), LockError> {
    let name = server_name(client);
    let tls = matches!(
        client.get_connection_info().addr(),
        ConnectionAddr::TcpTls { .. }
    );
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.response_timeout))
        // Reconnection is retried by the next command, not in the
        // background for long: a lock call must fail in bounded time.
        .set_number_of_retries(1)
        .set_max_delay(config.connect_timeout);
    let connect = ConnectionManager::new_with_config(client.clone(), manager_config);
    // The manager's own timeout covers each TCP attempt; this bounds the
    // whole handshake (AUTH, HELLO, SELECT) as well.
    let conn = tokio::time::timeout(config.connect_timeout + config.response_timeout, connect)
        .await
        .map_err(|_| {
            let mut message = "no answer in time".to_owned();
            if tls {
                message.push_str(TLS_SILENCE);
            }
            BackendError::new(
                BackendErrorKind::Timeout,
                format!("{name}: connect"),
                message,
            )
        })?
        .map_err(|err| connect_error(&name, tls, err))?;
    Ok((conn, name))
}

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
/// Fair obtains ([`ObtainOptions::fair`](crate::ObtainOptions::fair)) queue in
/// a list at `{K}:queue` (`K:queue` when `K` has a hash tag); the release
/// script hands the key to the first live waiter for its grant lease
/// ([`RedisConfig::grant_lease`]) and publishes `grant:<token>:<lease>` on
/// the same channel; the waiter confirms with one attempt, which publishes
/// `confirm:<token>`.
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

    pub(super) async fn invoke<T: redis::FromRedisValue>(
        &self,
        what: &str,
        keys: &[String],
        script: &Script,
        args: &[&str],
    ) -> Result<T, LockError> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(*arg);
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

/// `EVALSHA <sha> …` (or `EVAL <source> …`) of `refresh_many.lua` for
/// `requests`. Built as one plain command: its arguments share one buffer,
/// where a `ScriptInvocation` would allocate one per key and argument.
pub(super) fn refresh_many_cmd(
    verb: &str,
    script: &str,
    requests: &[&RefreshRequest<'_>],
) -> redis::Cmd {
    let mut cmd = redis::cmd(verb);
    let keys: usize = requests.iter().map(|req| req.keys.len()).sum();
    cmd.arg(script).arg(keys);
    for req in requests {
        cmd.arg(req.keys);
    }
    for req in requests {
        let ttl = u64::try_from(req.ttl.as_millis()).unwrap_or(u64::MAX);
        cmd.arg(req.token).arg(ttl).arg(req.keys.len());
    }
    cmd
}

/// Reads the reply of `refresh_many.lua` for `requests`: one result each, the
/// error of the call for every one of them when it failed.
pub(super) fn refreshed(
    reply: redis::RedisResult<Vec<i64>>,
    requests: &[&RefreshRequest<'_>],
    server: &str,
) -> Vec<Result<bool, LockError>> {
    let what = |req: &RefreshRequest<'_>| format!("refresh `{}`", req.keys.join("`, `"));
    match reply {
        Ok(flags) if flags.len() == requests.len() => {
            flags.iter().map(|&flag| Ok(flag == 1)).collect()
        }
        Ok(flags) => requests
            .iter()
            .map(|req| {
                Err(BackendError::new(
                    BackendErrorKind::Other,
                    format!("{server}: {}", what(req)),
                    format!(
                        "the refresh script answered {} results for {} leases",
                        flags.len(),
                        requests.len()
                    ),
                )
                .into())
            })
            .collect(),
        Err(err) => requests
            .iter()
            .map(|req| Err(backend_error(server, &what(req), err.clone()).into()))
            .collect(),
    }
}

/// Loads every script in one round trip, so that the first burst of calls
/// (a watchdog refreshing thousands of leases at once) finds them cached
/// instead of each call being refused with `NOSCRIPT`, loading the script and
/// sending again. Best effort: a user not allowed `SCRIPT LOAD` is told so by
/// the first call that needs a script the server does not have.
async fn preload(mut conn: ConnectionManager, timeout: Duration) {
    let mut pipe = redis::pipe();
    for source in [
        ACQUIRE_LUA,
        ACQUIRE_FAIR_LUA,
        REFRESH_LUA,
        RELEASE_LUA,
        REMAINING_LUA,
        REFRESH_MANY_LUA,
    ] {
        pipe.cmd("SCRIPT").arg("LOAD").arg(source).ignore();
    }
    let load = pipe.query_async::<()>(&mut conn);
    if let Ok(Err(err)) = tokio::time::timeout(timeout, load).await {
        tracing::debug!(target: "lockmacro", error = %err, "scripts not preloaded; loaded on first use");
    }
}

/// How often [`Wakeups::watch`] checks a pub/sub connection, and how long it
/// waits for the answer.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// How long a fair waiter's channel stays subscribed after its last listener.
const FAIR_LINGER: Duration = Duration::from_secs(1);

/// The channel on which `release.lua` announces the release of `key`.
fn release_channel(key: &str) -> String {
    format!("lockmacro:released:{key}")
}

/// The pub/sub side of a [`RedisBackend`] or a
/// [`ClusterBackend`](super::ClusterBackend): one RESP3 connection, opened
/// when the first waiter listens and shared by all of them (a channel per key,
/// each subscribed once however many wait on it). Messages arrive as pushes
/// and are handed straight to the listeners of their channel.
///
/// Losing it never loses a lock: its waiters try again at once and listen on
/// a new connection, or, when none can be had, sleep out their backoff, as
/// without wake-ups.
pub(super) struct Wakeups {
    /// The servers it may subscribe on, tried in turn from the last one that
    /// worked: one for a single server; the seed nodes of a cluster, any of
    /// which hears every node's messages over the cluster bus.
    servers: Vec<redis::Client>,
    /// Index in `servers` of the next connection's first try.
    next: AtomicUsize,
    /// Whether to check the connection with [`Wakeups::watch`].
    heartbeat: bool,
    /// Id of the connection in use (0: none yet).
    current: AtomicU64,
    /// Bounds opening the connection and each (un)subscription, so that a
    /// waiter facing a stalled server falls back to its backoff in time.
    timeout: Duration,
    /// Held across each SUBSCRIBE and UNSUBSCRIBE together with the check of
    /// `channels` that decides it, so the two never disagree for long.
    connection: tokio::sync::Mutex<Option<Connection>>,
    channels: Mutex<HashMap<String, Channel>>,
    /// Fair waiters by token: told when a release hands them their key.
    grants: Mutex<HashMap<String, Grant>>,
    /// Id of the last connection reported closed (ids start at 1).
    closed: AtomicU64,
}

struct Connection {
    conn: MultiplexedConnection,
    id: u64,
}

struct Channel {
    /// Bumped by every message on the channel but confirmations.
    releases: watch::Sender<u64>,
    /// The last hand-off on the channel with a grant lease, until confirmed.
    hand_off: watch::Sender<Option<HandOff>>,
    listeners: usize,
    /// The connection it is subscribed on.
    connection: u64,
    /// When `listeners` last fell to zero.
    idle_since: tokio::time::Instant,
    /// A task will unsubscribe it once idle for `FAIR_LINGER`.
    lingering: bool,
}

struct Grant {
    /// Set to `Some(fence)` by the message that hands the key over.
    granted: watch::Sender<Option<u64>>,
    /// The connection its channel is subscribed on.
    connection: u64,
}

/// Keeps one listener's channel subscribed; the last one to go unsubscribes.
struct Subscription {
    wakeups: Arc<Wakeups>,
    channel: String,
    connection: u64,
    /// A fair waiter's token, forgotten with the listener.
    token: Option<String>,
}

/// Receives the pushes of one pub/sub connection.
struct Pushes {
    wakeups: Weak<Wakeups>,
    connection: u64,
}

static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

impl Wakeups {
    /// Subscribes on one of `servers`; `heartbeat` when they are not the
    /// servers that hold the keys (see [`Wakeups::watch`]).
    pub(super) fn new(servers: Vec<redis::Client>, config: &RedisConfig, heartbeat: bool) -> Self {
        Wakeups {
            servers,
            next: AtomicUsize::new(0),
            heartbeat,
            current: AtomicU64::new(0),
            timeout: config.connect_timeout + config.response_timeout,
            connection: tokio::sync::Mutex::default(),
            channels: Mutex::default(),
            grants: Mutex::default(),
            closed: AtomicU64::new(0),
        }
    }

    fn channels(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        // Every change is a single map operation: a panic cannot leave it torn.
        self.channels
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn grants(&self) -> MutexGuard<'_, HashMap<String, Grant>> {
        // As for `channels`: single map operations only.
        self.grants
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A new connection to the first server in turn that takes one, all
    /// tries together bounded by the timeout.
    async fn open(self: &Arc<Self>) -> Result<Connection, String> {
        let first = self.next.load(Ordering::Relaxed);
        let count = self.servers.len();
        let tries = async {
            let mut errors = Vec::new();
            for turn in 0..count {
                let index = (first + turn) % count;
                match self.open_on(&self.servers[index]).await {
                    Ok(connection) => {
                        self.next.store(index, Ordering::Relaxed);
                        self.current.store(connection.id, Ordering::Release);
                        if self.heartbeat {
                            self.watch(connection.conn.clone(), connection.id, index);
                        }
                        return Ok(connection);
                    }
                    Err(error) => errors.push(error),
                }
            }
            Err(errors.join("; "))
        };
        let outcome = tokio::time::timeout(self.timeout, tries)
            .await
            .unwrap_or_else(|elapsed| Err(elapsed.to_string()));
        if outcome.is_err() && count > 0 {
            // A server that does not answer at all takes the whole timeout:
            // the next listener starts with the one after it.
            self.next.store((first + 1) % count, Ordering::Relaxed);
        }
        outcome
    }

    async fn open_on(self: &Arc<Self>, server: &redis::Client) -> Result<Connection, String> {
        // Pushes (and so subscriptions on a shared, multiplexed connection)
        // need RESP3, whatever the URL asked for.
        let info = server.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let client = redis::Client::open(info.set_redis_settings(settings))
            .map_err(|err| err.to_string())?;
        let id = NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed);
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_push_sender(Pushes {
                wakeups: Arc::downgrade(self),
                connection: id,
            });
        match tokio::time::timeout(
            self.timeout,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await
        {
            Ok(Ok(conn)) => Ok(Connection { conn, id }),
            Ok(Err(err)) => Err(err.to_string()),
            Err(elapsed) => Err(elapsed.to_string()),
        }
    }

    /// Forgets connection `id`, closed or silent: its listeners turn deaf
    /// (their senders are dropped), and wake up so that they can listen
    /// again on a new one.
    fn forget(&self, id: u64) {
        self.closed.store(id, Ordering::Release);
        self.channels().retain(|_, entry| entry.connection != id);
        self.grants().retain(|_, grant| grant.connection != id);
    }

    /// Checks connection `id` to `servers[index]` every `HEARTBEAT` while
    /// anyone listens, for servers that are not the ones holding the keys (a
    /// cluster's seed node): one that freezes keeps its connection open and
    /// stays silent, while the keys' own servers still grant and release. A
    /// check unanswered within `HEARTBEAT` forgets the connection, and the
    /// next one starts on the next server.
    fn watch(self: &Arc<Self>, mut conn: MultiplexedConnection, id: u64, index: usize) {
        let wakeups = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(HEARTBEAT).await;
                let Some(wakeups) = wakeups.upgrade() else {
                    return;
                };
                if wakeups.current.load(Ordering::Acquire) != id
                    || wakeups.closed.load(Ordering::Acquire) == id
                {
                    return;
                }
                if wakeups.channels().is_empty() && wakeups.grants().is_empty() {
                    continue;
                }
                let ping = async { redis::cmd("PING").query_async::<()>(&mut conn).await };
                if !matches!(tokio::time::timeout(HEARTBEAT, ping).await, Ok(Ok(()))) {
                    tracing::debug!(target: "lockmacro", "pub/sub server silent; listening elsewhere");
                    let next = (index + 1) % wakeups.servers.len();
                    let _ = wakeups.next.compare_exchange(
                        index,
                        next,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    wakeups.forget(id);
                    return;
                }
            }
        });
    }

    /// True when the channel of `key` is subscribed on a live connection:
    /// listening to it then takes no round trip.
    pub(super) fn subscribed(&self, key: &str) -> bool {
        let closed = self.closed.load(Ordering::Acquire);
        self.channels()
            .get(&release_channel(key))
            .is_some_and(|entry| entry.connection != closed)
    }

    /// Listens for releases of `key`, or, given a fair waiter's `token`, for
    /// the release that hands `key` to it.
    pub(super) async fn listen(
        self: &Arc<Self>,
        key: &str,
        token: Option<&str>,
    ) -> ReleaseListener {
        let mut connection = self.connection.lock().await;
        if connection
            .as_ref()
            .is_some_and(|open| open.id == self.closed.load(Ordering::Acquire))
        {
            *connection = None;
        }
        // A connection opened earlier may have died unnoticed (its server
        // killed, a proxy that dropped it): when subscribing on it fails,
        // a new one gets one more try.
        let reused = connection.is_some();
        match self.listen_on(&mut connection, key, token).await {
            Some(listener) => listener,
            None if reused => self
                .listen_on(&mut connection, key, token)
                .await
                .unwrap_or_else(ReleaseListener::deaf),
            None => ReleaseListener::deaf(),
        }
    }

    /// `listen` on the shared connection, opened first if need be. `None`
    /// when the subscription failed: the connection is then dropped.
    async fn listen_on(
        self: &Arc<Self>,
        connection: &mut Option<Connection>,
        key: &str,
        token: Option<&str>,
    ) -> Option<ReleaseListener> {
        let channel = release_channel(key);
        if connection.is_none() {
            match self.open().await {
                Ok(open) => *connection = Some(open),
                Err(error) => {
                    tracing::debug!(target: "lockmacro", %error, "no pub/sub connection; waiting by backoff");
                    return Some(ReleaseListener::deaf());
                }
            }
        }
        let open = connection.as_mut()?;
        let id = open.id;
        let (releases, hand_offs, subscribed) = {
            let mut channels = self.channels();
            match channels.get_mut(&channel) {
                Some(entry) if entry.connection == id => {
                    entry.listeners += 1;
                    (entry.releases.subscribe(), entry.hand_off.subscribe(), true)
                }
                _ => {
                    let (sender, receiver) = watch::channel(0);
                    let (hand_off, hand_offs) = watch::channel(None);
                    let entry = Channel {
                        releases: sender,
                        hand_off,
                        listeners: 1,
                        connection: id,
                        idle_since: tokio::time::Instant::now(),
                        lingering: false,
                    };
                    channels.insert(channel.clone(), entry);
                    (receiver, hand_offs, false)
                }
            }
        };
        let subscription = Subscription {
            wakeups: self.clone(),
            channel,
            connection: id,
            token: None,
        };
        if !subscribed {
            let subscribe = open.conn.subscribe(&subscription.channel);
            if let Err(error) = tokio::time::timeout(self.timeout, subscribe)
                .await
                .map_err(|elapsed| elapsed.to_string())
                .and_then(|done| done.map_err(|err| err.to_string()))
            {
                tracing::debug!(target: "lockmacro", %error, "subscribe failed");
                // The connection is likely broken: the next try opens
                // another one.
                *connection = None;
                return None;
            }
        }
        match token {
            Some(token) => {
                // Registered once subscribed: a hand-off before this point is
                // seen by the caller's next attempt, which finds the key
                // holding its value.
                let (granted, receiver) = watch::channel(None);
                let grant = Grant {
                    granted,
                    connection: id,
                };
                self.grants().insert(token.to_owned(), grant);
                let mut subscription = subscription;
                subscription.token = Some(token.to_owned());
                let listener = ReleaseListener::granting(receiver, subscription);
                Some(listener.hearing_hand_offs(hand_offs, token))
            }
            None => Some(ReleaseListener::new(releases, subscription)),
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(token) = &self.token {
            self.wakeups.grants().remove(token);
        }
        // A fair waiter that got its key is likely to queue again soon: its
        // channel stays subscribed a while, so that it can listen before its
        // next first attempt at no cost (see `Wakeups::subscribed`).
        let linger = self.token.is_some() && tokio::runtime::Handle::try_current().is_ok();
        let last = {
            let mut channels = self.wakeups.channels();
            match channels.get_mut(&self.channel) {
                Some(entry) if entry.connection == self.connection => {
                    entry.listeners -= 1;
                    let last = entry.listeners == 0;
                    if last && linger {
                        entry.idle_since = tokio::time::Instant::now();
                        // One task per channel watches it.
                        !std::mem::replace(&mut entry.lingering, true)
                    } else {
                        if last {
                            channels.remove(&self.channel);
                        }
                        last
                    }
                }
                _ => false,
            }
        };
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if last => runtime,
            _ => return,
        };
        let wakeups = self.wakeups.clone();
        let channel = std::mem::take(&mut self.channel);
        let id = self.connection;
        runtime.spawn(async move {
            let mut wait = FAIR_LINGER;
            if linger {
                // Ends by `break` (idle long enough) or `return` (gone).
                loop {
                    tokio::time::sleep(wait).await;
                    let mut channels = wakeups.channels();
                    let Some(entry) = channels
                        .get(&channel)
                        .filter(|entry| entry.connection == id)
                    else {
                        return;
                    };
                    let idle = entry.idle_since.elapsed();
                    if entry.listeners > 0 || idle < FAIR_LINGER {
                        wait = FAIR_LINGER.saturating_sub(idle).max(FAIR_LINGER / 10);
                        continue;
                    }
                    channels.remove(&channel);
                    break;
                }
            }
            let mut connection = wakeups.connection.lock().await;
            // A listener may have come for the channel since: then it stays.
            if wakeups.channels().contains_key(&channel) {
                return;
            }
            if let Some(open) = connection.as_mut().filter(|open| open.id == id) {
                let unsubscribe = open.conn.unsubscribe(&channel);
                let _ = tokio::time::timeout(wakeups.timeout, unsubscribe).await;
            }
        });
    }
}

impl AsyncPushSender for Pushes {
    fn send(&self, push: PushInfo) -> Result<(), SendError> {
        let wakeups = self.wakeups.upgrade().ok_or(SendError)?;
        match push.kind {
            PushKind::Message => {
                let message = match push.data.get(1) {
                    Some(Value::BulkString(message)) => std::str::from_utf8(message).ok(),
                    _ => None,
                };
                if let Some(Value::BulkString(channel)) = push.data.first()
                    && let Ok(channel) = std::str::from_utf8(channel)
                    && let Some(entry) = wakeups.channels().get(channel)
                {
                    hand_off(entry, message.unwrap_or(""));
                }
                // A hand-off to a fair waiter by an earlier version, for
                // its whole ttl: "<token>:<fence>".
                if let Some(Value::BulkString(message)) = push.data.get(1)
                    && let Ok(message) = std::str::from_utf8(message)
                    && let Some((token, fence)) = message.split_once(':')
                    && let Some(grant) = wakeups.grants().get(token)
                {
                    grant.granted.send_replace(Some(fence.parse().unwrap_or(0)));
                }
            }
            PushKind::Disconnection => {
                tracing::debug!(target: "lockmacro", "pub/sub connection closed");
                wakeups.forget(self.connection);
            }
            _ => {}
        }
        Ok(())
    }
}

/// What `message`, heard on the channel of `entry`, says to its listeners
/// (see `grant.lua`): "grant:<token>:<lease ms>" hands the key over for a
/// lease to confirm, "confirm:<token>" confirms it; anything else is a
/// release.
fn hand_off(entry: &Channel, message: &str) {
    if let Some(token) = message.strip_prefix("confirm:") {
        entry.hand_off.send_if_modified(|pending| {
            let confirmed = pending
                .as_ref()
                .is_some_and(|pending| pending.token == token);
            if confirmed {
                *pending = None;
            }
            confirmed
        });
        return;
    }
    if let Some(grant) = message.strip_prefix("grant:")
        && let Some((token, lease)) = grant.split_once(':')
        && let Ok(lease) = lease.parse::<u64>()
    {
        // Heard after the server set the lease: it ends before this, give
        // or take the two clocks' rates, which the margin covers.
        let lease = Duration::from_millis(lease);
        let until = tokio::time::Instant::now() + lease + lease / 100 + Duration::from_millis(2);
        entry.hand_off.send_replace(Some(HandOff {
            token: token.to_owned(),
            until,
        }));
    }
    entry.releases.send_modify(|releases| *releases += 1);
}

/// The URL with its password hidden, for error messages.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

pub(crate) fn backend_error(server: &str, what: &str, err: RedisError) -> BackendError {
    if let Some((tls, hint)) = tls_failure(&err) {
        let message = format!("TLS handshake failed: {tls} ({hint})");
        return BackendError::new(BackendErrorKind::Tls, format!("{server}: {what}"), message)
            .with_source(err);
    }
    let kind = match err.kind() {
        ErrorKind::AuthenticationFailed => BackendErrorKind::Authentication,
        // A server that wants a password and got none refuses each command.
        _ if matches!(err.code(), Some("NOAUTH" | "WRONGPASS")) => BackendErrorKind::Authentication,
        ErrorKind::Server(ServerErrorKind::NoPerm) => BackendErrorKind::Permission,
        // A command called by a script is refused with a plain error.
        ErrorKind::Server(ServerErrorKind::ResponseError)
            if SCRIPT_DENIED
                .iter()
                .any(|words| err.to_string().contains(words)) =>
        {
            BackendErrorKind::Permission
        }
        _ if err.is_timeout() => BackendErrorKind::Timeout,
        _ if err.is_connection_refusal() || err.is_connection_dropped() || err.is_io_error() => {
            BackendErrorKind::Unreachable
        }
        _ => BackendErrorKind::Other,
    };
    let message = match kind {
        BackendErrorKind::Authentication => format!("authentication failed: {err}"),
        BackendErrorKind::Permission => {
            format!(
                "permission denied: {err}; {}",
                permission_fix(&err.to_string())
            )
        }
        BackendErrorKind::Timeout => format!("no answer in time: {err}"),
        BackendErrorKind::Unreachable => format!("server unreachable: {err}"),
        BackendErrorKind::Tls | BackendErrorKind::Other => err.to_string(),
    };
    BackendError::new(kind, format!("{server}: {what}"), message).with_source(err)
}

/// How Redis 7.0 (first) and later versions word the refusal of a command
/// called by a script.
const SCRIPT_DENIED: [&str; 2] = ["can't run this command", "ACL failure in script"];

/// What to grant, after the server's refusal `denied`.
fn permission_fix(denied: &str) -> String {
    let all = "the library needs `+evalsha +script|load` (and `+eval` on a cluster), the \
               commands its scripts call (`+get +set +pexpire +pttl +del +incr +time +lrange +lrem +rpush +publish`), \
               `+subscribe +unsubscribe`, the lock keys and their fence keys \
               (`~<namespace>:* ~{<namespace>:*`) and the channels \
               `&lockmacro:released:<namespace>:*`; see \"Permissions a Redis user needs\" \
               in the README";
    let command = denied
        .split("run the '")
        .nth(1)
        .and_then(|rest| rest.split('\'').next());
    match command {
        Some(command) => {
            format!("allow the command with `ACL SETUSER <user> +{command}`; {all}")
        }
        None if SCRIPT_DENIED.iter().any(|words| denied.contains(words)) => {
            format!("a command called by the lock scripts was refused; {all}")
        }
        None if denied.contains("key") => format!(
            "allow the keys with `ACL SETUSER <user> ~<namespace>:* ~{{<namespace>:*`; {all}"
        ),
        None if denied.contains("channel") => {
            format!("allow the channels with `ACL SETUSER <user> &lockmacro:released:*`; {all}")
        }
        None => all.to_owned(),
    }
}

/// The TLS error behind `err`, when the TLS layer failed it (rustls reports
/// through `std::io::Error`, whose `source` skips the error it wraps), and
/// what to check.
fn tls_failure(err: &RedisError) -> Option<(String, &'static str)> {
    use rustls::AlertDescription as Alert;
    let inner = std::error::Error::source(err)?
        .downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>()?;
    let inner: &(dyn std::error::Error + 'static) = &**inner;
    let inner = match inner.downcast_ref::<std::io::Error>() {
        Some(io) => io.get_ref()?,
        None => inner,
    };
    let hint = match inner.downcast_ref::<rustls::Error>() {
        Some(rustls::Error::AlertReceived(Alert::CertificateRequired)) => {
            "the server checks clients (`tls-auth-clients`): give a client certificate with \
             `RedisConfig::tls_client_certificate`"
        }
        Some(rustls::Error::AlertReceived(
            Alert::BadCertificate
            | Alert::UnknownCA
            | Alert::CertificateUnknown
            | Alert::UnsupportedCertificate
            | Alert::CertificateExpired
            | Alert::CertificateRevoked,
        )) => {
            "the server refused the client certificate: is it signed by a CA in the \
             server's `tls-ca-cert-file`, and still valid? see \
             `RedisConfig::tls_client_certificate`"
        }
        Some(_) => SERVER_CERTIFICATE_HINT,
        None if inner.is::<rustls::pki_types::InvalidDnsNameError>() => SERVER_CERTIFICATE_HINT,
        None => return None,
    };
    Some((inner.to_string(), hint))
}

const SERVER_CERTIFICATE_HINT: &str = "is the port a TLS port, and does the server's \
                                       certificate name this host and chain to a trusted \
                                       root? see `RedisConfig::tls_root_certificate`";

/// Why a `rediss://` connect may time out: a plain-text port reads the TLS
/// greeting as the start of a command and waits for the rest.
const TLS_SILENCE: &str = " (the TLS handshake got no reply: if the port is not the \
                           server's `tls-port`, use a `redis://` URL)";

/// A failed connect of a [`RedisBackend`]: `tls` tells whether the URL asked
/// for TLS.
fn connect_error(server: &str, tls: bool, err: RedisError) -> BackendError {
    let closed = !tls && err.is_connection_dropped() && !err.is_connection_refusal();
    let text = err.to_string();
    let error = backend_error(server, "connect", err);
    if tls && error.kind() == BackendErrorKind::Timeout {
        return BackendError::new(
            BackendErrorKind::Timeout,
            format!("{server}: connect"),
            format!("no answer in time: {text}{TLS_SILENCE}"),
        )
        .with_source(error);
    }
    if closed && error.kind() == BackendErrorKind::Unreachable {
        // A TLS-only port drops a plain-text client without a word.
        return BackendError::new(
            BackendErrorKind::Unreachable,
            format!("{server}: connect"),
            format!(
                "the server closed the connection before answering ({text}); if the port \
                 accepts only TLS, use a `rediss://` URL"
            ),
        )
        .with_source(error);
    }
    error
}

/// The arguments of the release script: the token, then the lock keys'
/// queues.
pub(super) fn release_args(keys: &[String], token: &str) -> Vec<String> {
    let queues = keys.iter().map(|key| derived_queue_key(key));
    std::iter::once(token.to_owned()).chain(queues).collect()
}

pub(super) fn millis(ttl: Duration) -> String {
    ttl.as_millis().to_string()
}

pub(super) fn pttl(value: i64) -> Option<Duration> {
    u64::try_from(value).ok().map(Duration::from_millis)
}

/// The error of an acquire script that refused `fence_key` (`NOTAFENCE`,
/// from `fence.lua`), as [`LockError::InvalidKey`]; any other error as it is.
pub(super) fn not_a_fence(err: LockError, fence_key: Option<&str>) -> LockError {
    match (&err, fence_key) {
        (LockError::Backend(backend), Some(fence_key))
            if backend.to_string().contains("NOTAFENCE") =>
        {
            let detail = backend
                .to_string()
                .split("NOTAFENCE")
                .nth(1)
                .map(|detail| {
                    let detail = detail.trim_start_matches(['"', ':', ' ']);
                    // Some servers add where the script stopped.
                    detail
                        .split(" script:")
                        .next()
                        .unwrap_or(detail)
                        .trim()
                        .to_owned()
                })
                .unwrap_or_default();
            super::fence_key_refused(fence_key, &detail)
        }
        _ => err,
    }
}

/// Reads the reply of the acquire script; `server` names it in errors.
pub(super) fn acquired(reply: &[i64], fenced: bool, server: &str) -> Result<Acquired, LockError> {
    match reply {
        [1, fence] => Ok(Acquired::Obtained {
            fence: fenced.then(|| u64::try_from(*fence).unwrap_or(0)),
        }),
        [0, index, remaining] => Ok(Acquired::Busy {
            index: usize::try_from(*index - 1).unwrap_or(0),
            remaining: pttl(*remaining),
        }),
        other => Err(BackendError::new(
            BackendErrorKind::Other,
            format!("{server}: obtain"),
            format!("unexpected reply {other:?} from the acquire script"),
        )
        .into()),
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
            let n = req.keys.len().to_string();
            let ttl = millis(req.ttl);
            let expiry = self.fence_expiry.as_str();
            let reply: Result<Vec<i64>, LockError> = if let Some(wait) = req.queue_for {
                let mut keys = vec![req.keys[0].clone()];
                keys.extend(req.fence_key.map(str::to_owned));
                let (wait, queue) = (millis(wait), derived_queue_key(&req.keys[0]));
                let args = [req.value, &ttl, &wait, &queue, expiry, &self.grant_lease];
                self.invoke("obtain", &keys, &ACQUIRE_FAIR, &args).await
            } else {
                let mut keys = req.keys.to_vec();
                keys.extend(req.fence_key.map(str::to_owned));
                let args = [req.value, &ttl, &n, expiry];
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
                .map(|batch| -> BoxFuture<'_, _> { Box::pin(self.refresh_batch(batch)) })
                .collect();
            let mut refreshed = join_all(batches).await.into_iter().flatten();
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
            let args = release_args(keys, token);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
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

    fn fair(&self) -> bool {
        true
    }

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

    fn acknowledges_replicas(&self) -> bool {
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

/// The acquire script (`EVAL`, keys, args) followed by `WAIT replicas
/// timeout` in one pipeline: `WAIT` counts the writes of its own connection,
/// so both must go on the same one, with nothing in between that could be a
/// reconnection. `EVAL` rather than `EVALSHA`: a `NOSCRIPT` in the middle of
/// a pipeline would need the pair sent again, and `EVAL` caches the script
/// all the same.
pub(super) fn acknowledged_acquire_pipe(
    req: &AcquireRequest<'_>,
    fence_expiry: &str,
) -> redis::Pipeline {
    let mut keys: Vec<&str> = req.keys.iter().map(String::as_str).collect();
    keys.extend(req.fence_key);
    let mut pipe = redis::pipe();
    pipe.cmd("EVAL")
        .arg(ACQUIRE_LUA)
        .arg(keys.len())
        .arg(&keys)
        .arg(req.value)
        .arg(millis(req.ttl))
        .arg(req.keys.len())
        .arg(fence_expiry)
        .cmd("WAIT")
        .arg(req.replicas)
        // `WAIT` with 0 waits for ever: the locker never asks for less than
        // 1 ms.
        .arg(req.replica_timeout.as_millis().max(1));
    pipe
}

/// Refuses a replica wait that the response timeout would cut short: the
/// call would fail as a timeout with the lock taken and nobody to give it
/// back.
pub(super) fn check_replica_timeout(
    req: &AcquireRequest<'_>,
    response_timeout: Duration,
    server: &str,
) -> Result<(), LockError> {
    if req.replica_timeout < response_timeout {
        return Ok(());
    }
    Err(BackendError::new(
        BackendErrorKind::Other,
        format!("{server}: obtain `{}`", req.keys.join("`, `")),
        format!(
            "the replica wait ({:?}) is not shorter than the response timeout ({response_timeout:?}), \
             which would end the call first; shorten `ObtainOptions::replica_timeout` or \
             lengthen `RedisConfig::response_timeout`",
            req.replica_timeout
        ),
    )
    .into())
}

/// What an acquire followed by `WAIT` came to: `Busy` as it is, `Obtained`
/// if enough replicas acknowledged, else `Err(acknowledged)`.
pub(super) fn acknowledged_outcome(
    reply: &[i64],
    acknowledged: usize,
    req: &AcquireRequest<'_>,
    server: &str,
) -> Result<Result<Acquired, usize>, LockError> {
    match acquired(reply, req.fence_key.is_some(), server)? {
        Acquired::Obtained { .. } if acknowledged < req.replicas => Ok(Err(acknowledged)),
        outcome => Ok(Ok(outcome)),
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
        let pipe = acknowledged_acquire_pipe(&req, &self.fence_expiry);
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

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn redact_hides_the_password_only() {
        assert_eq!(
            redact("redis://app:s3cret@host:6379/0"),
            "redis://app:***@host:6379/0"
        );
        assert_eq!(redact("redis://:s3cret@host"), "redis://:***@host");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
    }
}
