//! Taking keys: ordinary attempts (several keys, all or none) and fair ones
//! (one key, in the order waiters came), each one call of a function of the
//! migration.

use sqlx::Row;
use sqlx::postgres::PgRow;

use super::PostgresBackend;
use super::sql::{millis, text, text_or_null, texts};
use crate::LockError;
use crate::backend::{AcquireRequest, Acquired};
use crate::error::{BackendError, BackendErrorKind};

impl PostgresBackend {
    pub(super) async fn acquire_keys(
        &self,
        req: &AcquireRequest<'_>,
    ) -> Result<Acquired, LockError> {
        let what = format!("obtain `{}`", req.keys.join("`, `"));
        if req.share.is_some() || req.replicas > 0 {
            return Err(BackendError::new(
                BackendErrorKind::Unsupported,
                format!("postgres {}: {what}", self.server),
                "the PostgreSQL backend keeps whole keys only: no permits, read-write shares \
                 or replicas",
            )
            .into());
        }
        if req.value.contains('\0') || req.keys.iter().any(|key| key.contains('\0')) {
            return Err(BackendError::new(
                BackendErrorKind::Unsupported,
                format!("postgres {}: {what}", self.server),
                "PostgreSQL's text cannot hold a NUL character: remove it from the key or \
                 the metadata",
            )
            .into());
        }
        let ttl = millis(req.ttl);
        let fence = text_or_null(req.fence_key);
        let sql = match (req.queue_for, req.keys) {
            (Some(wait), [key]) => format!(
                "SELECT busy, left_ms, fence FROM lockmacro_acquire_fair({}, {}, {ttl}, {}, {fence})",
                text(key),
                text(req.value),
                millis(wait),
            ),
            _ => format!(
                "SELECT busy, left_ms, fence FROM lockmacro_acquire({}, {}, {ttl}, {fence})",
                texts(req.keys.iter().map(String::as_str)),
                text(req.value),
            ),
        };
        let rows = self.rows(&what, sql).await?;
        acquired(&self.server, &what, rows.first())
    }
}

/// What an acquire function's row (`busy`, `left_ms`, `fence`) says.
pub(super) fn acquired(
    server: &str,
    what: &str,
    row: Option<&PgRow>,
) -> Result<Acquired, LockError> {
    let unexpected = |reply: &dyn std::fmt::Display| -> LockError {
        super::errors::unexpected(server, what, reply).into()
    };
    let row = row.ok_or_else(|| unexpected(&"no row"))?;
    let read = |column: &str| -> Result<Option<i64>, LockError> {
        row.try_get::<Option<i64>, _>(column)
            .map_err(|err| unexpected(&err))
    };
    let busy = row
        .try_get::<Option<i32>, _>("busy")
        .map_err(|err| unexpected(&err))?;
    match busy {
        Some(index) => Ok(Acquired::Busy {
            index: usize::try_from(index).map_err(|err| unexpected(&err))?,
            remaining: read("left_ms")?
                .and_then(|ms| u64::try_from(ms).ok())
                .map(std::time::Duration::from_millis),
            holder: None,
        }),
        None => Ok(Acquired::Obtained {
            fence: read("fence")?.and_then(|fence| u64::try_from(fence).ok()),
        }),
    }
}
