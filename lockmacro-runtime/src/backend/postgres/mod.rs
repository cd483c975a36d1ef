//! Locks in PostgreSQL: a lock is a row of `lockmacro_locks`, its lease
//! judged by the server's clock.
//!
//! # In the database
//!
//! | table | row | written by |
//! |---|---|---|
//! | `lockmacro_locks` | key, token, value (token then metadata), `expires_at`, `waited` (a waiter listens for its release) | acquire (upsert over a free or expired row), refresh, release (delete by token; notifies when `waited`) |
//! | `lockmacro_fences` | fence key, last token minted for it (from `lockmacro_fence_seq`, one sequence for every key) | acquire with a fence, in the same transaction |
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
//! A transaction-scoped lock ([`Locker::obtain_in`](crate::Locker::obtain_in))
//! writes no row: it is an advisory lock on the key's hash held by the
//! caller's transaction, which every acquire of a lease checks, shares
//! included (they are answered busy). It takes no key that a lease or
//! shares hold: a key held as permits or read-write is busy for it too,
//! not [`LockError::WrongKind`], since an error would abort the caller's
//! transaction. [`Locker::inspect`](crate::Locker::inspect) shows it as a
//! lock held as [`HeldAs::Transaction`](crate::HeldAs::Transaction), with no
//! metadata, no time left and the holding session's pid (read from
//! `pg_locks`); [`Locker::force_release`](crate::Locker::force_release)
//! leaves it alone: it ends with its transaction.
//!
//! Each operation is one statement calling a function of the migration
//! ([`POSTGRES_MIGRATION`]), sent as a simple query: no session state, no
//! prepared statement, so it works through PgBouncer in transaction mode.
//! A plain lock of one key, the most common obtain, has functions of its
//! own (`lockmacro_take`, `lockmacro_give`): one insert whose `WHERE` does
//! every check, and one delete by token, which notifies only when a waiter
//! marked the row.

mod acquire;
mod config;
mod connections;
mod errors;
mod fair;
mod inspect;
mod kinds;
mod listen;
mod refresh;
mod schema;
mod shares;
mod sql;
mod sweep;
mod transaction;

pub use self::config::PostgresConfig;
pub use self::schema::POSTGRES_MIGRATION;
pub(crate) use self::transaction::acquire_in;

use std::fmt::Display;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, PgPool, Row};

use self::connections::Kept;
use self::errors::{backend_error, timed_out, unexpected};
use self::listen::Releases;
use self::sweep::Sweeper;
use crate::LockError;
use crate::backend::shared::{batch_of_one, boxed, forward};
use crate::backend::{AcquireRequest, Acquired, Backend, BoxFuture, Capabilities, ReleaseListener};

/// The longest lock or fence key the backend stores, in bytes; longer ones
/// are refused before anything is sent (the table's `CHECK` says the same).
pub const POSTGRES_MAX_KEY_LEN: usize = 1024;

/// Locks in a PostgreSQL database, through sqlx: leases kept in a table and
/// judged by the server's clock, locks held by the caller's own transaction
/// ([`Locker::obtain_in`](crate::Locker::obtain_in)), fencing tokens from
/// one sequence that never goes backwards, waiters woken by
/// `LISTEN`/`NOTIFY`, fair waiters in arrival order, semaphores and
/// read-write locks, and [`Locker::inspect`](crate::Locker::inspect) and
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
/// Every token comes from one sequence, `lockmacro_fence_seq`, advanced in
/// the transaction that takes the lock: tokens strictly increase across
/// every key (locks, permits, reads and writes, leases and
/// transaction-scoped locks alike), are committed
/// with the lock (a restart cannot roll one back without the lock) and
/// never go backwards; they may skip (a sequence does, after a crash or a
/// rollback). Each fence key's row in `lockmacro_fences` remembers its last
/// token, for an acquire sent again. A schema from before the sequence is
/// upgraded with the sequence started above every per-key counter.
///
/// # Transaction-scoped locks
///
/// [`Locker::obtain_in`](crate::Locker::obtain_in) takes a key inside the
/// caller's transaction: an advisory lock (`pg_advisory_xact_lock`) on the
/// key's hash, seen at once by every session, committed or not, and given
/// back by the commit or rollback. A lease's acquire (a lock, a permit, a
/// read or the write) answers a key so held busy (without waiting), and a
/// transaction answers busy for a key with a live lease, live shares of
/// any kind or fair waiters (busy rather than [`LockError::WrongKind`]:
/// an error would abort the caller's transaction). `inspect` lists it,
/// from `pg_locks`, as held by a transaction
/// ([`HeldAs::Transaction`](crate::HeldAs::Transaction)), with no metadata,
/// no time left and the pid of the session that holds it; `force_release`
/// cannot end it (`pg_terminate_backend` of that pid can). Its ttl sets
/// `idle_in_transaction_session_timeout` and
/// `statement_timeout` for the rest of the transaction (`SET LOCAL`), so the
/// server ends a stalled holder; PgBouncer in transaction mode keeps the
/// transaction on one server connection, so it works there too.
///
/// # Failover to a replica
///
/// Point the backend at a name or address that follows the primary (a
/// virtual IP, a DNS name, a proxy): sqlx connects to one host. After a
/// failover the pool's connections to the old primary fail, and the next
/// statements reconnect to the new one; a lease is kept if its refreshes
/// reach it within the lease's local deadline. What the new primary knows
/// is what its replication had received:
///
/// - a lease the replica had is kept: the holder refreshes and releases it
///   on the new primary, contenders find the key taken, and the next fence
///   token is larger;
/// - with asynchronous replication (PostgreSQL's default), a lease taken
///   just before the failover may never have reached the replica: the
///   holder is told it is lost at its next refresh, another client can take
///   the key at once, and the fence sequence's last steps may be gone with
///   it, so the token of the lost lease, or one below it, is handed out
///   again (PostgreSQL writes a sequence to the WAL 32 values ahead, so
///   this takes more than 32 tokens the replica missed). Fencing across a failover
///   needs the replica named in `synchronous_standby_names`: then a commit,
///   and so an obtain, returns only once the replica has it.
///
/// The fault suite shows both cases (`tests/faults/postgres_failover.rs`).
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
/// one who may. [`Locker::from_url_if_set_up`](crate::Locker::from_url_if_set_up)
/// opens a database without creating anything, for tools that only look.
///
/// # Poolers
///
/// Statements are sent as simple queries, without prepared statements, so
/// PgBouncer in transaction mode works as is, with its configuration as it
/// comes (the backend's connections send no `extra_float_digits`, which
/// PgBouncer refuses unless told to ignore it). `LISTEN` needs a session of
/// its own: behind such a pooler, point [`PostgresConfig::listen_url`] at
/// the server itself. Without it, the listener finds out that it hears
/// nothing (it sends itself a notification, which never comes), says so
/// once in the logs (a warning, target `lockmacro`), and waiters wait by
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
    /// Connections of `pool` kept between statements.
    kept: Kept,
    /// `host:port`, for errors.
    server: String,
    config: PostgresConfig,
    releases: Releases,
    /// Ends the sweep when the backend goes.
    _sweeper: Option<Sweeper>,
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
        let (backend, options) = Self::open(url, config)?;
        backend.ensure_schema(&options).await?;
        Ok(backend.sweeping())
    }

    /// A backend on the database at `url` that writes nothing there (no
    /// schema created, no sweep): `None` when the database has no
    /// lockmacro schema, an error naming the migration when its schema is
    /// older than this crate's.
    pub(crate) async fn connect_if_set_up(url: &str) -> Result<Option<Self>, LockError> {
        let config = PostgresConfig::default()
            .create_schema(false)
            .sweep_every(None);
        let (backend, options) = Self::open(url, config)?;
        Ok(backend.schema_found(&options).await?.then_some(backend))
    }

    /// A backend on its own pool of connections to `url`, none opened yet,
    /// and the options to connect with.
    fn open(url: &str, config: PostgresConfig) -> Result<(Self, PgConnectOptions), LockError> {
        let options = parse(url)?;
        let server = format!("{}:{}", options.get_host(), options.get_port());
        let listen_pool = listen_pool(&config, &options)?;
        let pool = pool_options(&config, config.max_connections).connect_lazy_with(options.clone());
        let keep = config.max_connections as usize;
        let backend = Self::build(pool, keep, listen_pool, server, config);
        Ok((backend, options))
    }

    /// A backend on the service's own pool, with the default
    /// [`PostgresConfig`] (its pool settings do not apply: the pool's own
    /// do). Creates the schema if it is missing. The listener that wakes
    /// waiters opens one connection of its own, with the pool's connect
    /// options, when a first waiter listens: it keeps it, and a pool of
    /// one connection is left for the statements. The backend keeps none
    /// of the pool's connections between its statements (a backend of its
    /// own pool does: [`connect`](Self::connect) is the faster one), so
    /// each statement pays sqlx's test of the connection it takes back.
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
        let listen_pool = listen_pool(&config, &options)?;
        // A connection kept would be one the service's own statements
        // could not have.
        let backend = Self::build(pool, 0, listen_pool, server, config);
        backend.ensure_schema(&options).await?;
        Ok(backend.sweeping())
    }

    fn build(
        pool: PgPool,
        keep: usize,
        listen_pool: PgPool,
        server: String,
        config: PostgresConfig,
    ) -> Self {
        PostgresBackend {
            releases: Releases::new(
                listen_pool,
                config.listen_url.is_some(),
                pool.clone(),
                config.connect_timeout,
            ),
            kept: Kept::new(pool.clone(), keep, config.connect_timeout),
            pool,
            server,
            config,
            _sweeper: None,
        }
    }

    /// The backend, with its sweep started when its config asks for one.
    fn sweeping(self) -> Self {
        let config = &self.config;
        let sweeper = config.sweep_every.map(|every| {
            Sweeper::start(
                self.pool.clone(),
                every,
                config.fence_expiry,
                config.response_timeout,
            )
        });
        PostgresBackend {
            _sweeper: sweeper,
            ..self
        }
    }

    /// The pool the backend sends its statements through. A backend made
    /// by [`connect`](Self::connect) keeps the connections it took from it
    /// between statements: the pool counts them as in use.
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
    ///
    /// A statement whose session ended under it (an operator's
    /// `pg_terminate_backend`, a server shutting down or restarted, a
    /// connection the network dropped) is sent once more, on a connection
    /// from the pool, which tests it first: the connections kept between
    /// statements are not tested, so a connection found dead this way is
    /// how a restart is noticed. Every statement sent here may be sent
    /// twice (an acquire that went through is taken as its own retry, a
    /// refresh or a release by token again).
    async fn rows(
        &self,
        what: &(dyn Display + Sync),
        sql: String,
    ) -> Result<Vec<PgRow>, LockError> {
        let query = async {
            match self.send(&sql).await {
                Err(err) if session_ended(&err) => {
                    self.kept.forget();
                    self.send(&sql).await
                }
                answer => answer,
            }
        };
        match tokio::time::timeout(self.config.response_timeout, query).await {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(err)) => Err(self.error(what, err)),
            Err(_) => Err(self.late(what)),
        }
    }

    /// Sends `sql` on a kept connection, kept again if it answered.
    async fn send(&self, sql: &str) -> Result<Vec<PgRow>, sqlx::Error> {
        let mut borrowed = self.kept.take().await?;
        let rows = sqlx::raw_sql(AssertSqlSafe(sql))
            .fetch_all(&mut *borrowed.conn)
            .await;
        match &rows {
            Err(err) if session_ended(err) => {}
            Ok(_) | Err(sqlx::Error::Database(_)) => self.kept.put_back(borrowed),
            Err(_) => {}
        }
        rows
    }

    /// Runs `sql`, a call of one of the migration's functions that answers
    /// whether it changed anything, and returns that answer.
    async fn answer(&self, what: &(dyn Display + Sync), sql: String) -> Result<bool, LockError> {
        let rows = self.rows(what, sql).await?;
        let row = rows
            .first()
            .ok_or_else(|| self.unexpected(what, "no row"))?;
        row.try_get::<bool, _>(0)
            .map_err(|err| self.unexpected(what, err))
    }

    fn error(&self, what: &(dyn Display + Sync), err: sqlx::Error) -> LockError {
        backend_error(&self.server, what, err).into()
    }

    fn late(&self, what: &(dyn Display + Sync)) -> LockError {
        timed_out(&self.server, what, self.config.response_timeout).into()
    }

    fn unexpected(&self, what: &(dyn Display + Sync), reply: impl Display) -> LockError {
        unexpected(&self.server, what, reply).into()
    }
}

/// Whether the session that ran a statement ended under it: the server
/// ended it (`admin_shutdown`, `crash_shutdown`: the statement was rolled
/// back), or its connection was found closed (the statement may have run).
fn session_ended(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("57P01" | "57P02")),
        sqlx::Error::Io(_) => true,
        _ => false,
    }
}

/// The connect options of `url`, refused before any connection when it
/// is not a PostgreSQL URL. No statement is prepared, and no
/// `extra_float_digits` is sent at connect (sqlx's default sends it;
/// nothing here reads a float), which a stock PgBouncer refuses.
fn parse(url: &str) -> Result<PgConnectOptions, LockError> {
    let invalid = |reason: String| LockError::InvalidUrl {
        url: crate::backend::redact(url),
        reason,
    };
    match url.split_once("://") {
        Some(("postgres" | "postgresql", _)) => {}
        Some((scheme, _)) => {
            return Err(invalid(format!(
                "`{scheme}://` is not a PostgreSQL URL: write \
                 postgres://user:password@host:port/database"
            )));
        }
        None => {
            return Err(invalid(
                "not a URL: write postgres://user:password@host:port/database".to_owned(),
            ));
        }
    }
    url.parse::<PgConnectOptions>()
        .map(|options| options.statement_cache_capacity(0).extra_float_digits(None))
        .map_err(|err| invalid(err.to_string()))
}

/// The listener's own pool of one connection, to `config.listen_url` or
/// where `options` point. `LISTEN` holds its connection for as long as the
/// backend lives: taken from the statements' pool, it would leave a pool of
/// one with none for them.
fn listen_pool(config: &PostgresConfig, options: &PgConnectOptions) -> Result<PgPool, LockError> {
    let options = match &config.listen_url {
        Some(listen_url) => parse(listen_url)?,
        None => options.clone(),
    };
    Ok(pool_options(config, 1).connect_lazy_with(options))
}

fn pool_options(config: &PostgresConfig, max_connections: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(config.connect_timeout)
}

impl Backend for PostgresBackend {
    forward!(batch_of_one: refresh => refresh_all);
    forward!(boxed:
        /// One statement for every lease: the keys, tokens and ttls as
        /// arrays, `unnest`ed on the server.
        refresh_many => refresh_all,
    );
    forward!(boxed: release => release_keys, remaining => remaining_of);
    forward!(boxed: inspect => inspect_key, keys => list_keys);
    forward!(boxed: force_release => force_release_key, downgrade => downgrade_write);

    fn name(&self) -> &'static str {
        "postgres"
    }

    fn acquire<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        Box::pin(async move { self.acquire_keys(&req).await })
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
}
