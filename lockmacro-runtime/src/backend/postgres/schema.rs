//! The tables and functions the backend needs: the migration, and creating
//! it when it is missing.

use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, Connection, PgConnection};

use super::PostgresBackend;
use super::errors::{RUN_THE_MIGRATION, timed_out};
use crate::LockError;
use crate::error::{BackendError, BackendErrorKind};

/// The DDL of the PostgreSQL backend's tables and functions: the file
/// `lockmacro-runtime/migrations/postgres/0001_lockmacro.sql` of the crate.
///
/// A [`PostgresBackend`] runs it itself when its tables are missing (unless
/// [`PostgresConfig::create_schema`](super::PostgresConfig::create_schema)
/// is false). Run it yourself (psql, `sqlx migrate`, refinery, ...) when the
/// backend's user may not create tables. Running it twice changes nothing.
///
/// ```
/// use lockmacro_runtime::POSTGRES_MIGRATION;
///
/// assert!(POSTGRES_MIGRATION.contains("CREATE TABLE IF NOT EXISTS lockmacro_locks"));
/// ```
pub const POSTGRES_MIGRATION: &str =
    include_str!("../../../migrations/postgres/0001_lockmacro.sql");

/// What `lockmacro_schema_version()` answers once [`POSTGRES_MIGRATION`]
/// has run (7: expired and idle rows reaped; 6: a plain lock in one insert, and releases that notify only
/// when a waiter listens; 5: a retried acquire is minted a fencing token of
/// its own; 4: version 3's tables with functions that cost the server less; 3: shares and transaction-scoped locks; 2 was either one of them
/// alone): a schema older than that is brought up to date (or, where the
/// backend may not, named as out of date) like a missing one.
const SCHEMA_VERSION: i32 = 7;

/// Taken while the migration runs, so that backends starting together do
/// not create the same functions at once (which PostgreSQL refuses with
/// "tuple concurrently updated").
const MIGRATION_LOCK: &str = "SELECT pg_advisory_xact_lock(1819239275, 0)";

impl PostgresBackend {
    /// Connects once, outside the pool (whose connects retry a refused
    /// connection until the connect timeout, and report only that time ran
    /// out), so that a server that cannot be reached, credentials it
    /// refuses or a database it does not have are told at once and for
    /// what they are; then creates the schema on that connection when it
    /// is missing or older than this crate's, or says which migration to
    /// run when it may not.
    pub(super) async fn ensure_schema(&self, options: &PgConnectOptions) -> Result<(), LockError> {
        let mut conn = self.connect_once(options).await?;
        let checked = async {
            let version = self.schema_version(&mut conn).await?;
            self.update_schema(&mut conn, version).await
        };
        let checked = checked.await;
        self.close(conn).await;
        checked
    }

    /// Whether the database has lockmacro's schema, connecting as
    /// [`ensure_schema`](Self::ensure_schema) does; creates nothing, and
    /// says which migration to run when it is older than this crate's.
    pub(super) async fn schema_found(&self, options: &PgConnectOptions) -> Result<bool, LockError> {
        let mut conn = self.connect_once(options).await?;
        let found = async {
            match self.schema_version(&mut conn).await? {
                Some(version) => {
                    self.update_schema(&mut conn, Some(version)).await?;
                    Ok(true)
                }
                None => Ok(false),
            }
        };
        let found = found.await;
        self.close(conn).await;
        found
    }

    async fn connect_once(&self, options: &PgConnectOptions) -> Result<PgConnection, LockError> {
        let what = Connecting(options);
        let connect = PgConnection::connect_with(options);
        match tokio::time::timeout(self.config.connect_timeout, connect).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(err)) => Err(self.error(&what, err)),
            Err(_) => Err(timed_out(&self.server, &what, self.config.connect_timeout).into()),
        }
    }

    async fn close(&self, conn: PgConnection) {
        // A close that does not finish in time leaves nothing to undo.
        let _ = tokio::time::timeout(self.config.response_timeout, conn.close()).await;
    }

    /// The version of the schema in the database; `None` when it has none
    /// of lockmacro's functions. Only reads.
    async fn schema_version(&self, conn: &mut PgConnection) -> Result<Option<i32>, LockError> {
        let what = "check the schema";
        let found = "SELECT (to_regprocedure('lockmacro_schema_version()') IS NOT NULL)::integer";
        match self.scalar(conn, &what, found).await? {
            Some(1) => {
                self.scalar(conn, &what, "SELECT lockmacro_schema_version()")
                    .await
            }
            _ => Ok(None),
        }
    }

    /// Brings the schema found at `version` up to date, or says which
    /// migration to run when the backend may not.
    async fn update_schema(
        &self,
        conn: &mut PgConnection,
        version: Option<i32>,
    ) -> Result<(), LockError> {
        let what = "check the schema";
        if version.is_some_and(|version| version >= SCHEMA_VERSION) {
            return Ok(());
        }
        if !self.config.create_schema {
            let state = match version {
                Some(version) => format!(
                    "lockmacro's tables are out of date (version {version}; this version of \
                     lockmacro needs {SCHEMA_VERSION})"
                ),
                None => "lockmacro's tables are missing".to_owned(),
            };
            return Err(BackendError::new(
                BackendErrorKind::Configuration,
                format!("postgres {}: {what}", self.server),
                format!("{state}: {RUN_THE_MIGRATION}"),
            )
            .into());
        }
        let what = "create the schema";
        let create = async {
            let mut tx = conn.begin().await?;
            sqlx::raw_sql(MIGRATION_LOCK).execute(&mut *tx).await?;
            sqlx::raw_sql(POSTGRES_MIGRATION).execute(&mut *tx).await?;
            tx.commit().await
        };
        match tokio::time::timeout(self.config.response_timeout, create).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) => Err(self.error(&what, err)),
            Err(_) => Err(self.late(&what)),
        }
    }

    /// The one integer `sql` selects on `conn`.
    async fn scalar(
        &self,
        conn: &mut PgConnection,
        what: &(dyn std::fmt::Display + Sync),
        sql: &str,
    ) -> Result<Option<i32>, LockError> {
        let query = sqlx::raw_sql(AssertSqlSafe(sql)).fetch_all(&mut *conn);
        match tokio::time::timeout(self.config.response_timeout, query).await {
            Ok(Ok(rows)) => Ok(rows.first().and_then(|row| sqlx::Row::try_get(row, 0).ok())),
            Ok(Err(err)) => Err(self.error(what, err)),
            Err(_) => Err(self.late(what)),
        }
    }
}

/// The connect step, naming the database and the user.
struct Connecting<'a>(&'a PgConnectOptions);

impl std::fmt::Display for Connecting<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "connect")?;
        if let Some(database) = self.0.get_database() {
            write!(f, " to database `{database}`")?;
        }
        write!(f, " as `{}`", self.0.get_username())
    }
}
