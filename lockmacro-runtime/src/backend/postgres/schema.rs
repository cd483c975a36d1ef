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

/// Taken while the migration runs, so that backends starting together do
/// not create the same functions at once (which PostgreSQL refuses with
/// "tuple concurrently updated").
const MIGRATION_LOCK: &str = "SELECT pg_advisory_xact_lock(1819239275, 0)";

impl PostgresBackend {
    /// Creates the schema when it is missing, or says which migration to
    /// run when it may not.
    pub(super) async fn ensure_schema(&self) -> Result<(), LockError> {
        let what = "check the schema";
        let present = self
            .rows(
                what,
                "SELECT (to_regprocedure('lockmacro_schema_version()') IS NOT NULL)::integer"
                    .to_owned(),
            )
            .await?;
        let present: Option<i32> = present
            .first()
            .and_then(|row| sqlx::Row::try_get(row, 0).ok());
        if present == Some(1) {
            return Ok(());
        }
        if !self.config.create_schema {
            return Err(BackendError::new(
                BackendErrorKind::Other,
                format!("postgres {}: {what}", self.server),
                format!("lockmacro's tables are missing: {RUN_THE_MIGRATION}"),
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
            Ok(Err(err)) => Err(self.error(what, err)),
            Err(_) => Err(self.late(what)),
        }
    }
}
