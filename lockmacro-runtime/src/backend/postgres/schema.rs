//! The tables and functions the backend needs: the migration, and creating
//! it when it is missing.

use super::PostgresBackend;
use super::errors::RUN_THE_MIGRATION;
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
/// has run (6: a plain lock in one insert, and releases that notify only
/// when a waiter listens; 5: a retried acquire is minted a fencing token of
/// its own; 4: version 3's tables with functions that cost the server less; 3: shares and transaction-scoped locks; 2 was either one of them
/// alone): a schema older than that is brought up to date (or, where the
/// backend may not, named as out of date) like a missing one.
const SCHEMA_VERSION: i32 = 6;

/// Taken while the migration runs, so that backends starting together do
/// not create the same functions at once (which PostgreSQL refuses with
/// "tuple concurrently updated").
const MIGRATION_LOCK: &str = "SELECT pg_advisory_xact_lock(1819239275, 0)";

impl PostgresBackend {
    /// The version of the schema in the database; `None` when it has none
    /// of lockmacro's functions. Only reads.
    pub(super) async fn schema_version(&self) -> Result<Option<i32>, LockError> {
        let what = "check the schema";
        match self
            .scalar(
                &what,
                "SELECT (to_regprocedure('lockmacro_schema_version()') IS NOT NULL)::integer",
            )
            .await?
        {
            Some(1) => {
                self.scalar(&what, "SELECT lockmacro_schema_version()")
                    .await
            }
            _ => Ok(None),
        }
    }

    /// Creates the schema when it is missing or older than this crate's,
    /// or says which migration to run when it may not.
    pub(super) async fn ensure_schema(&self) -> Result<(), LockError> {
        self.update_schema(self.schema_version().await?).await
    }

    /// [`ensure_schema`](Self::ensure_schema), for the schema found at
    /// `version`.
    pub(super) async fn update_schema(&self, version: Option<i32>) -> Result<(), LockError> {
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
                BackendErrorKind::Other,
                format!("postgres {}: {what}", self.server),
                format!("{state}: {RUN_THE_MIGRATION}"),
            )
            .into());
        }
        let what = "create the schema";
        let create = async {
            let mut tx = self.pool.begin().await?;
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

    /// The one integer `sql` selects.
    async fn scalar(
        &self,
        what: &(dyn std::fmt::Display + Sync),
        sql: &str,
    ) -> Result<Option<i32>, LockError> {
        let rows = self.rows(what, sql.to_owned()).await?;
        Ok(rows.first().and_then(|row| sqlx::Row::try_get(row, 0).ok()))
    }
}
