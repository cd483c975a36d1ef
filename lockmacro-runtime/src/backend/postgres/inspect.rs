//! What an operator sees and clears of a key: its kind, holders (a
//! transaction-scoped lock among them, from `pg_locks`, with the session
//! that holds it), fair waiters and fence counter in one statement
//! (`lockmacro_inspect`), and every lease on it deleted by force
//! (`lockmacro_force_release`; a transaction-scoped lock ends only with its
//! transaction). The keys held under a prefix are the live rows of the lock
//! and share tables; a transaction-scoped lock leaves only a hash of its key
//! in `pg_locks`, so it is not listed.

use std::time::Duration;

use sqlx::Row;
use sqlx::postgres::PgRow;

use super::PostgresBackend;
use super::sql::text;
use crate::backend::{HeldAs, Holder, Inspection};
use crate::{KeyKind, LockError};

/// A subquery for the session holding a transaction-scoped lock of `key`
/// (a quoted literal), found in `pg_locks` as `lockmacro_inspect` finds the
/// lock: the migration's function does not name it.
fn holding_session(key: &str) -> String {
    format!(
        "SELECT p.pid FROM pg_locks p \
         WHERE p.locktype = 'advisory' AND p.granted AND p.mode = 'ExclusiveLock' \
             AND p.database = (SELECT d.oid FROM pg_database d \
                 WHERE d.datname = current_database()) \
             AND p.classid = 1819239276::oid AND p.objsubid = 2 \
             AND p.objid = (hashtext({key})::bigint & 4294967295)::oid \
         LIMIT 1"
    )
}

impl PostgresBackend {
    pub(super) async fn inspect_key(
        &self,
        key: &str,
        fence_key: &str,
    ) -> Result<Inspection, LockError> {
        let what = format!("inspect `{key}`");
        let key_literal = text(key);
        let sql = format!(
            "SELECT i.held_as, i.permits, i.metadata, i.left_ms, i.waiters, i.fence, \
                CASE WHEN i.held_as = 'transaction' THEN ({session}) END AS pid \
             FROM lockmacro_inspect({key}, {fence_key}) i",
            session = holding_session(&key_literal),
            key = key_literal,
            fence_key = text(fence_key),
        );
        let rows = self.rows(&what, sql).await?;
        let mut seen = Inspection::free();
        for row in &rows {
            let read = Read {
                backend: self,
                row,
                what: &what,
            };
            seen.waiters =
                usize::try_from(read.column::<i64>("waiters")?.unwrap_or(0)).unwrap_or(usize::MAX);
            seen.fence = read
                .column::<i64>("fence")?
                .and_then(|fence| u64::try_from(fence).ok());
            let Some(held_as) = read.column::<String>("held_as")? else {
                continue;
            };
            let permits = read
                .column::<i32>("permits")?
                .and_then(|permits| u32::try_from(permits).ok());
            let (kind, held_as) = match (held_as.as_str(), permits) {
                ("lock", _) => (KeyKind::Lock, HeldAs::Lock),
                ("transaction", None) => (KeyKind::Lock, HeldAs::Transaction),
                ("permit", Some(permits)) => (KeyKind::Semaphore { permits }, HeldAs::Permit),
                ("read", None) => (KeyKind::ReadWrite, HeldAs::Read),
                ("write", None) => (KeyKind::ReadWrite, HeldAs::Write),
                (other, _) => return Err(self.unexpected(&what, other)),
            };
            seen.kind = Some(kind);
            let remaining = read
                .column::<i64>("left_ms")?
                .and_then(|ms| u64::try_from(ms).ok())
                .map(Duration::from_millis);
            let metadata = read.column::<String>("metadata")?.unwrap_or_default();
            let mut holder = Holder::new(held_as, metadata, remaining);
            holder.pid = read
                .column::<i32>("pid")?
                .and_then(|pid| u32::try_from(pid).ok());
            seen.holders.push(holder);
        }
        Ok(seen)
    }

    pub(super) async fn list_keys(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let what = format!("list `{prefix}*`");
        let sql = format!(
            "SELECT key FROM lockmacro_locks \
             WHERE starts_with(key, {prefix}) AND expires_at > clock_timestamp() \
             UNION \
             SELECT key FROM lockmacro_shares \
             WHERE starts_with(key, {prefix}) AND expires_at > clock_timestamp() \
             ORDER BY 1",
            prefix = text(prefix),
        );
        self.rows(&what, sql)
            .await?
            .iter()
            .map(|row| {
                row.try_get::<String, _>(0)
                    .map_err(|err| self.unexpected(&what, err))
            })
            .collect()
    }

    pub(super) async fn force_release_key(&self, key: &str) -> Result<bool, LockError> {
        let what = format!("force the release of `{key}`");
        let sql = format!("SELECT lockmacro_force_release({})", text(key));
        self.answer(&what, sql).await
    }
}

/// One row of `lockmacro_inspect`, read column by column.
struct Read<'a> {
    backend: &'a PostgresBackend,
    row: &'a PgRow,
    what: &'a str,
}

impl Read<'_> {
    fn column<T>(&self, name: &str) -> Result<Option<T>, LockError>
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
    {
        self.row
            .try_get::<Option<T>, _>(name)
            .map_err(|err| self.backend.unexpected(&self.what, err))
    }
}
