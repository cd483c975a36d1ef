//! How a [`PostgresBackend`](super::PostgresBackend) connects and how long it
//! waits.

use std::time::Duration;

/// Settings of a [`PostgresBackend`](super::PostgresBackend).
///
/// ```
/// use std::time::Duration;
/// use lockmacro_runtime::PostgresConfig;
///
/// let config = PostgresConfig::default()
///     .max_connections(4)
///     .response_timeout(Duration::from_secs(2))
///     .listen_url("postgres://locks@db-direct:5432/app");
/// # let _ = config;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PostgresConfig {
    /// Connections in the backend's own pool, which the backend keeps
    /// once opened (handing one back to sqlx's pool costs a round trip).
    /// Default 10. The listener that wakes waiters has one more, of its
    /// own.
    pub max_connections: u32,
    /// How long to wait for a connection (a new one, or a free one of the
    /// pool). Default 5 s.
    pub connect_timeout: Duration,
    /// How long one statement may take before the call fails with
    /// [`BackendErrorKind::Timeout`](crate::BackendErrorKind::Timeout).
    /// Default 5 s.
    pub response_timeout: Duration,
    /// Where the listener for releases connects, when not to the same URL:
    /// `LISTEN` needs a session of its own, which a pooler in transaction
    /// mode (PgBouncer's `pool_mode = transaction`) does not keep. `None`:
    /// the URL the backend was given.
    pub listen_url: Option<String>,
    /// Create the tables and functions when they are missing. Default true;
    /// with false, a missing schema is an error naming the migration to run.
    pub create_schema: bool,
    /// How often the backend deletes what no lease needs any more: rows of
    /// leases that ran out without a release (a holder that crashed, a
    /// `hold_at_least` lock, a key per cron fire), places in fair queues
    /// and marks whose wait ended, and fence rows idle for
    /// [`fence_expiry`](Self::fence_expiry). At most a thousand rows of
    /// each table per call, a few calls in a row when there are more.
    /// Default every minute; `None`: never (another backend, or a job of
    /// your own calling `SELECT lockmacro_sweep(1000, 86400000)`, does it).
    pub sweep_every: Option<Duration>,
    /// How long after its last token a fence key's row is kept: the row
    /// only remembers the last token, for
    /// [`Locker::inspect`](crate::Locker::inspect), which shows none for a
    /// lease held longer than this. Tokens come from one sequence and never
    /// go backwards, with the row or without it. Default a day.
    pub fence_expiry: Duration,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            max_connections: 10,
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(5),
            listen_url: None,
            create_schema: true,
            sweep_every: Some(Duration::from_secs(60)),
            fence_expiry: Duration::from_secs(24 * 60 * 60),
        }
    }
}

impl PostgresConfig {
    /// Sets [`max_connections`](Self::max_connections) (at least 1).
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// Sets [`connect_timeout`](Self::connect_timeout).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`response_timeout`](Self::response_timeout).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Sets [`listen_url`](Self::listen_url).
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen_url = Some(url.into());
        self
    }

    /// Sets [`create_schema`](Self::create_schema).
    pub fn create_schema(mut self, create: bool) -> Self {
        self.create_schema = create;
        self
    }

    /// Sets [`sweep_every`](Self::sweep_every) (`None`: never sweep).
    ///
    /// ```
    /// use std::time::Duration;
    /// use lockmacro_runtime::PostgresConfig;
    ///
    /// let often = PostgresConfig::default().sweep_every(Duration::from_secs(10));
    /// let never = PostgresConfig::default().sweep_every(None);
    /// # let _ = (often, never);
    /// ```
    pub fn sweep_every(mut self, every: impl Into<Option<Duration>>) -> Self {
        self.sweep_every = every.into().filter(|every| !every.is_zero());
        self
    }

    /// Sets [`fence_expiry`](Self::fence_expiry).
    pub fn fence_expiry(mut self, expiry: Duration) -> Self {
        self.fence_expiry = expiry;
        self
    }
}
