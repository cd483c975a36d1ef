//! Locks in PostgreSQL: a lock is a row of `lockmacro_locks`, its lease
//! judged by the server's clock.
//!
//! # In the database
//!
//! | table | row | written by |
//! |---|---|---|
//! | `lockmacro_locks` | key, token, value (token then metadata), `expires_at` | acquire (upsert over a free or expired row), refresh, release (delete by token) |
//! | `lockmacro_fences` | fence key, last token minted | acquire with a fence, in the same transaction |
//! | `lockmacro_queue` | key, fair waiter's token, arrival `seq`, `expires_at` | a fair attempt that found the key taken; its release or give-up deletes it |
//! | `lockmacro_given_back` | a token released while it held nothing, for a minute | release; an acquire with that token (cancelled, still on its way) is refused |
//! | `lockmacro_shares` | key, holder's token, `permits` (NULL: read-write), `held_as` (`permit`, `read`, `write`), value, `expires_at` | a share's acquire, refresh, release (delete by token), downgrade (`write` to `read`) |
//! | `lockmacro_writing` | key, until when readers wait behind a waiting writer | a writer's attempt that found readers; its write deletes it |
//!
//! A key is a lock row or shares of one kind, never both: an acquire of
//! another kind is refused in the statement (SQLSTATE `LMKND`, read as
//! [`LockError::WrongKind`]) before it writes anything. Force-release
//! deletes every row of a key and notifies its waiters.
//!
//! Each operation is one statement calling a function of the migration
//! ([`POSTGRES_MIGRATION`]), sent as a simple query: no session state, no
//! prepared statement, so it works through PgBouncer in transaction mode.

mod acquire;
mod config;
mod errors;
mod fair;
mod inspect;
mod kinds;
mod listen;
mod refresh;
mod schema;
mod shares;
mod sql;

pub use self::config::PostgresConfig;
pub use self::schema::POSTGRES_MIGRATION;

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, PgPool};

use self::errors::{backend_error, timed_out, unexpected};
use self::listen::Releases;
use crate::LockError;
use crate::backend::{
    AcquireRequest, Acquired, Backend, BoxFuture, Capabilities, Inspection, RefreshRequest,
    ReleaseListener,
};

/// The longest lock or fence key the backend stores, in bytes; longer ones
/// are refused before anything is sent (the table's `CHECK` says the same).
pub const POSTGRES_MAX_KEY_LEN: usize = 1024;

/// Locks in a PostgreSQL database, through sqlx: leases kept in a table and
/// judged by the server's clock, fencing tokens from per-key counters that
/// never go backwards, waiters woken by `LISTEN`/`NOTIFY`, fair waiters in
/// arrival order, semaphores and read-write locks, and
/// [`Locker::inspect`](crate::Locker::inspect) and
/// [`Locker::force_release`](crate::Locker::force_release).
///
/// # Leases on the server's clock
///
/// A lock is a row of `lockmacro_locks` whose `expires_at` the server sets
/// from its own `clock_timestamp()`; refreshes (many leases in one
/// statement, from the locker's watchdog) and releases compare the token,
/// and a row whose lease ended is free for the next acquire. The holder
/// trusts its lease until `sent + ttl - drift` on its own clock, as on
/// Redis. Nothing depends on holding a session: a connection that drops, a
/// pooler that moves statements between server connections, or a server
/// restart change nothing in the table. After a restart, holders refresh on
/// the watchdog's next attempt; a restart longer than a lease's local
/// deadline loses that lease (the holder is told, and the row has expired
/// by the time anyone else can take it).
///
/// # Fencing tokens
///
/// Each fence key has a counter in `lockmacro_fences`, advanced in the
/// transaction that takes the lock: tokens count one by one per fence key,
/// are committed with the lock (a restart cannot roll one back without the
/// lock) and are never reset.
///
/// # Semaphores and read-write locks
///
/// A permit, a read or the write is a row of `lockmacro_shares` on a lease
/// of its own, on the server's clock like a lock's: refreshed by the same
/// batched statement, released by its token (which notifies the waiters),
/// and free once expired, so a dead holder's share comes back after its
/// ttl, never sooner. One statement counts the live shares and takes one,
/// under the key's transaction-scoped advisory lock. Fair waiters for
/// permits queue in `lockmacro_queue` with fair lock waiters; a writer
/// waiting for readers holds back the readers after it. A key keeps one
/// kind while held ([`KeyKind`](crate::KeyKind)); an obtain of another is
/// refused before anything is written.
///
/// # Schema
///
/// The backend creates its tables and functions when they are missing
/// ([`POSTGRES_MIGRATION`], the file
/// `lockmacro-runtime/migrations/postgres/0001_lockmacro.sql`), and runs it
/// again over the tables of an earlier version, which it adds to. A user
/// who may not create tables gets an error naming that migration: run it as
/// one who may.
///
/// # Poolers
///
/// Statements are sent as simple queries, without prepared statements, so
/// PgBouncer in transaction mode works as is. `LISTEN` needs a session of
/// its own: behind such a pooler, point
/// [`PostgresConfig::listen_url`] at the server itself, or waiters wait by
/// their retry strategy alone.
///
/// ```no_run
/// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
/// use lockmacro_runtime::{Locker, PostgresBackend};
///
/// let backend = PostgresBackend::connect("postgres://app:secret@10.0.0.5/app").await?;
/// let locker = Locker::new(backend);
/// # let _ = locker; Ok(()) }
/// ```
pub struct PostgresBackend {
    pool: PgPool,
    /// `host:port`, for errors.
    server: String,
    config: PostgresConfig,
    releases: Releases,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl PostgresBackend {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db`)
    /// with the default [`PostgresConfig`], and creates the schema if it is
    /// missing.
    ///
    /// Fails within the connect timeout when the server cannot be reached or
    /// refuses the credentials, and when the schema is missing and the user
    /// may not create it (naming the migration to run).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::{Locker, PostgresBackend};
    ///
    /// let locker = Locker::new(PostgresBackend::connect("postgres://app@db/app").await?);
    /// # let _ = locker; Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::connect_with(url, PostgresConfig::default()).await
    }

    /// Like [`connect`](Self::connect), with `config`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::{PostgresBackend, PostgresConfig};
    ///
    /// // Through PgBouncer in transaction mode; LISTEN goes to the server.
    /// let config = PostgresConfig::default().listen_url("postgres://app@db:5432/app");
    /// let backend = PostgresBackend::connect_with("postgres://app@pgbouncer:6432/app", config).await?;
    /// # let _ = backend; Ok(()) }
    /// ```
    pub async fn connect_with(url: &str, config: PostgresConfig) -> Result<Self, LockError> {
        let options = parse(url)?;
        let server = format!("{}:{}", options.get_host(), options.get_port());
        let pool = pool_options(&config, config.max_connections).connect_lazy_with(options);
        let listen_pool = match &config.listen_url {
            Some(listen_url) => pool_options(&config, 1).connect_lazy_with(parse(listen_url)?),
            None => pool.clone(),
        };
        Self::start(pool, listen_pool, server, config).await
    }

    /// A backend on the service's own pool, with the default
    /// [`PostgresConfig`] (its pool settings do not apply: the pool's own
    /// do). Creates the schema if it is missing.
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool) -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::{Locker, PostgresBackend};
    ///
    /// let locker = Locker::new(PostgresBackend::from_pool(pool).await?);
    /// # let _ = locker; Ok(()) }
    /// ```
    pub async fn from_pool(pool: PgPool) -> Result<Self, LockError> {
        Self::from_pool_with(pool, PostgresConfig::default()).await
    }

    /// Like [`from_pool`](Self::from_pool), with `config` (its timeouts,
    /// `listen_url` and `create_schema`).
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool) -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::{PostgresBackend, PostgresConfig};
    ///
    /// let config = PostgresConfig::default().create_schema(false);
    /// let backend = PostgresBackend::from_pool_with(pool, config).await?;
    /// # let _ = backend; Ok(()) }
    /// ```
    pub async fn from_pool_with(pool: PgPool, config: PostgresConfig) -> Result<Self, LockError> {
        let options = pool.connect_options();
        let server = format!("{}:{}", options.get_host(), options.get_port());
        let listen_pool = match &config.listen_url {
            Some(listen_url) => pool_options(&config, 1).connect_lazy_with(parse(listen_url)?),
            None => pool.clone(),
        };
        Self::start(pool, listen_pool, server, config).await
    }

    async fn start(
        pool: PgPool,
        listen_pool: PgPool,
        server: String,
        config: PostgresConfig,
    ) -> Result<Self, LockError> {
        let backend = PostgresBackend {
            releases: Releases::new(listen_pool, config.connect_timeout),
            pool,
            server,
            config,
        };
        backend.ensure_schema().await?;
        Ok(backend)
    }

    /// The pool the backend sends its statements through.
    ///
    /// ```no_run
    /// # async fn demo(backend: lockmacro_runtime::PostgresBackend) {
    /// let busy = backend.pool().size() - backend.pool().num_idle() as u32;
    /// # let _ = busy; }
    /// ```
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Runs `sql` (one simple query) and returns its rows, within the
    /// response timeout.
    async fn rows(&self, what: &str, sql: String) -> Result<Vec<PgRow>, LockError> {
        let query = sqlx::raw_sql(AssertSqlSafe(sql)).fetch_all(&self.pool);
        match tokio::time::timeout(self.config.response_timeout, query).await {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(err)) => Err(self.error(what, err)),
            Err(_) => Err(self.late(what)),
        }
    }

    fn error(&self, what: &str, err: sqlx::Error) -> LockError {
        backend_error(&self.server, what, err).into()
    }

    fn late(&self, what: &str) -> LockError {
        timed_out(&self.server, what, self.config.response_timeout).into()
    }

    fn unexpected(&self, what: &str, reply: impl std::fmt::Display) -> LockError {
        unexpected(&self.server, what, reply).into()
    }
}

fn parse(url: &str) -> Result<PgConnectOptions, LockError> {
    url.parse::<PgConnectOptions>()
        .map(|options| options.statement_cache_capacity(0))
        .map_err(|err| LockError::InvalidUrl {
            url: crate::backend::redis::redact(url),
            reason: err.to_string(),
        })
}

fn pool_options(config: &PostgresConfig, max_connections: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(config.connect_timeout)
}

impl Backend for PostgresBackend {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn acquire<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        Box::pin(async move { self.acquire_keys(&req).await })
    }

    fn refresh<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let requests = [RefreshRequest::new(keys, token, ttl)];
            self.refresh_all(&requests).await.pop().unwrap_or(Ok(false))
        })
    }

    /// One statement for every lease: the keys, tokens and ttls as arrays,
    /// `unnest`ed on the server.
    fn refresh_many<'a>(
        &'a self,
        requests: &'a [RefreshRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, LockError>>> {
        Box::pin(self.refresh_all(requests))
    }

    fn release<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(self.release_keys(keys, token))
    }

    fn remaining<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Duration>, LockError>> {
        Box::pin(self.remaining_of(keys, token))
    }

    fn listen<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ReleaseListener> {
        Box::pin(self.releases.listen(key))
    }

    /// The default refusals, and keys PostgreSQL's text cannot hold (a NUL)
    /// or longer than [`POSTGRES_MAX_KEY_LEN`].
    fn check_keys(&self, keys: &[String], fence_key: Option<&str>) -> Result<(), LockError> {
        crate::backend::keys::check_reserved(keys, fence_key)?;
        for key in keys.iter().map(String::as_str).chain(fence_key) {
            let reason = if key.contains('\0') {
                "PostgreSQL's text cannot hold a NUL character".to_owned()
            } else if key.len() > POSTGRES_MAX_KEY_LEN {
                format!(
                    "{} bytes long; the PostgreSQL backend stores keys of at most \
                     {POSTGRES_MAX_KEY_LEN} bytes",
                    key.len()
                )
            } else {
                continue;
            };
            return Err(LockError::InvalidKey {
                key: key.to_owned(),
                reason,
            });
        }
        Ok(())
    }

    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities::none().with_fair_queue(self).with_shares()
    }

    fn inspect<'a>(
        &'a self,
        key: &'a str,
        fence_key: &'a str,
    ) -> BoxFuture<'a, Result<Inspection, LockError>> {
        Box::pin(self.inspect_key(key, fence_key))
    }

    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(self.force_release_key(key))
    }

    fn downgrade<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(self.downgrade_write(key, token))
    }
}
