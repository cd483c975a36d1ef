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
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            max_connections: 10,
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(5),
            listen_url: None,
            create_schema: true,
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
}
