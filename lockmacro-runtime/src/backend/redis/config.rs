//! Connection settings and TLS: [`RedisConfig`].

use std::time::Duration;

use super::capabilities::Scripts;
use super::dial::{Dial, Dialer, Endpoint};
#[cfg(feature = "tls-rustls")]
use super::tls::{ClientIdentity, RootCertificate, certificates};
#[cfg(feature = "tls-rustls")]
use crate::LockError;
use crate::backend::{DEFAULT_FENCE_EXPIRY, DEFAULT_GRANT_LEASE};

/// Connection settings for [`RedisBackend`](super::RedisBackend), [`ClusterBackend`](crate::backend::ClusterBackend)
/// [`RedlockBackend`](crate::backend::RedlockBackend) and
/// [`SentinelBackend`](crate::backend::SentinelBackend), and how long the keys the
/// library keeps next to the locks last: fence counters
/// ([`fence_expiry`](Self::fence_expiry)) and keys handed to fair waiters
/// before they confirm ([`grant_lease`](Self::grant_lease)).
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
    pub(in crate::backend) connect_timeout: Duration,
    pub(in crate::backend) response_timeout: Duration,
    #[cfg(feature = "tls-rustls")]
    pub(in crate::backend) tls_root: Option<RootCertificate>,
    #[cfg(feature = "tls-rustls")]
    pub(in crate::backend) tls_client: Option<ClientIdentity>,
    pub(in crate::backend) fence_expiry: Duration,
    pub(in crate::backend) grant_lease: Duration,
    pub(in crate::backend) scripts: Scripts,
    pub(in crate::backend) dial: Option<Dialer>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            connect_timeout: Duration::from_secs(3),
            response_timeout: Duration::from_secs(3),
            #[cfg(feature = "tls-rustls")]
            tls_root: None,
            #[cfg(feature = "tls-rustls")]
            tls_client: None,
            fence_expiry: DEFAULT_FENCE_EXPIRY,
            grant_lease: DEFAULT_GRANT_LEASE,
            scripts: Scripts::Auto,
            dial: None,
        }
    }
}

/// `value` within what Redis takes as an expiry: 1 ms to ten years.
fn clamp_expiry(value: Duration) -> Duration {
    value.clamp(Duration::from_millis(1), crate::MAX_TTL)
}

impl RedisConfig {
    /// How long connecting to a server may take, in all: the TCP
    /// connection, the TLS handshake, `AUTH` and a `TIME` that checks the
    /// credentials and that the peer speaks Redis. Default 3 s. A connect
    /// that does not finish in time fails with
    /// [`BackendErrorKind::Timeout`](crate::BackendErrorKind::Timeout); the
    /// same bound applies to each reconnection and, on a cluster, to reading
    /// the slot map as well.
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

    /// Whether locks go through the Lua scripts: [`Scripts::Auto`] (the
    /// default) uses them while the server runs them and goes on without
    /// them once it refuses them (an ACL denying `@scripting`);
    /// [`Scripts::Required`] always uses them; [`Scripts::Never`] never
    /// sends one. Without scripts, fair queues, semaphores, read-write
    /// locks, downgrades and replica waits are refused before anything is
    /// written; see [`Scripts`] for what works and how.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::{Locker, RedisBackend, RedisConfig, Scripts};
    ///
    /// let config = RedisConfig::default().scripts(Scripts::Never);
    /// let backend = RedisBackend::connect_with("redis://locker:pw@127.0.0.1:6379/", config).await?;
    /// let locker = Locker::new(backend);
    /// let lock = locker.obtain("report", std::time::Duration::from_secs(30), Default::default()).await?;
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn scripts(mut self, scripts: Scripts) -> Self {
        self.scripts = scripts;
        self
    }

    /// Opens every connection through `dial` instead of TCP: see [`Dial`]
    /// for when it is asked and what it must return. Single servers, Redlock
    /// masters and [`FencedStore`](crate::FencedStore) take it; a cluster or
    /// Sentinel refuses it, and so does a `rediss://` URL (TLS over the
    /// dialled stream is the dial's own business).
    pub fn dial(mut self, dial: impl Dial) -> Self {
        self.dial = Some(Dialer(std::sync::Arc::new(dial)));
        self
    }
}

#[cfg(feature = "tls-rustls")]
impl RedisConfig {
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
        self.tls_root = Some(RootCertificate::new(pem.into()));
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
        self.tls_client = Some(ClientIdentity::new(certificate_pem.into(), key_pem.into()));
        self
    }

    /// The certificates to trust and to present, checked: `server` names the
    /// server in the error when one cannot be used.
    pub(in crate::backend) fn tls_certificates(
        &self,
        server: &str,
    ) -> Result<Option<redis::TlsCertificates>, LockError> {
        certificates(self.tls_root.as_ref(), self.tls_client.as_ref(), server)
    }
}

impl RedisConfig {
    /// Where the connections to `client`'s server come from, with this
    /// config's dial and connect timeout.
    pub(in crate::backend) fn endpoint(&self, client: redis::Client) -> Endpoint {
        Endpoint::new(client, self.dial.clone(), self.connect_timeout)
    }
}

/// Refuses `config` for a `client` (a cluster, Sentinel) that opens its own
/// connections to `urls` and so could not use its [`Dial`].
#[cfg(any(feature = "cluster", feature = "sentinel"))]
pub(in crate::backend) fn refuse_dial(
    config: &RedisConfig,
    urls: &[impl AsRef<str>],
    client: &str,
) -> Result<(), crate::LockError> {
    if config.dial.is_none() {
        return Ok(());
    }
    let urls: Vec<String> = urls
        .iter()
        .map(|url| crate::backend::redact(url.as_ref()))
        .collect();
    Err(crate::LockError::InvalidUrl {
        url: urls.join(","),
        reason: format!(
            "`RedisConfig::dial` is for single servers and Redlock masters; {client} opens its \
             own connections: leave the dial out of this config"
        ),
    })
}
