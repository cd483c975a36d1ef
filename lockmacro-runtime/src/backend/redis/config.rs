//! Connection settings and TLS: [`RedisConfig`].

use std::time::Duration;

#[cfg(feature = "tls-rustls")]
use super::tls::{ClientIdentity, RootCertificate};
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
}
