//! One attempt at a transaction-scoped lock: a call of the migration's
//! `lockmacro_acquire_in_transaction` inside the caller's transaction.

use std::time::Duration;

use sqlx::{AssertSqlSafe, PgConnection};

use super::acquire::acquired;
use super::errors::backend_error;
use super::sql::{millis, text};
use crate::LockError;
use crate::backend::Acquired;

/// Names the server in errors: the caller's connection does not say which.
const SERVER: &str = "(the caller's transaction)";

/// Tries once to take `key` (as stored) for the rest of the transaction
/// `conn` is in, which then ends when idle or in one statement for `ttl`.
/// The statement never waits for a lock: a key held is answered busy.
pub(crate) async fn acquire_in(
    conn: &mut PgConnection,
    key: &str,
    ttl: Duration,
    fenced: bool,
) -> Result<Acquired, LockError> {
    let what = format!("obtain `{key}` in a transaction");
    let sql = format!(
        "SELECT busy, left_ms, fence FROM lockmacro_acquire_in_transaction({}, {}, {fenced})",
        text(key),
        millis(ttl),
    );
    let rows = sqlx::raw_sql(AssertSqlSafe(sql))
        .fetch_all(conn)
        .await
        .map_err(|err| LockError::from(backend_error(SERVER, &what, err)))?;
    acquired(SERVER, &what, rows.first())
}
