//! Taking keys: ordinary attempts (several keys, all or none) and fair ones
//! (one key, in the order waiters came), each one call of a function of the
//! migration; shares are in `shares.rs`. A busy answer carries the holder's
//! metadata, read in the same statement.

use sqlx::Row;
use sqlx::postgres::PgRow;

use super::errors::Doing;
use super::sql::{millis, text, text_or_null, texts};
use super::{PostgresBackend, kinds};
use crate::LockError;
use crate::backend::{AcquireRequest, Acquired};
use crate::error::{BackendError, BackendErrorKind};

impl PostgresBackend {
    pub(super) async fn acquire_keys(
        &self,
        req: &AcquireRequest<'_>,
    ) -> Result<Acquired, LockError> {
        let what = Doing("obtain", req.keys);
        if req.replicas > 0 {
            return Err(BackendError::new(
                BackendErrorKind::Unsupported,
                format!("postgres {}: {what}", self.server),
                "the PostgreSQL backend waits for no replicas",
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
        if let Some(share) = req.share {
            return self.acquire_share(req, share).await;
        }
        let ttl = millis(req.ttl);
        let fence = text_or_null(req.fence_key);
        let waiting = req.wait;
        let sql = match (req.queue_for, req.keys) {
            (Some(wait), [key]) => format!(
                "SELECT busy, left_ms, fence, lockmacro_holder({key}) AS holder \
                 FROM lockmacro_acquire_fair({key}, {}, {ttl}, {}, {fence})",
                text(req.value),
                millis(wait),
                key = text(key),
            ),
            (None, [key]) => format!(
                "SELECT busy, left_ms, fence, holder \
                 FROM lockmacro_take({}, {}, {ttl}, {fence}, {waiting})",
                text(key),
                text(req.value),
            ),
            _ => format!(
                "SELECT busy, left_ms, fence, lockmacro_holder(({keys})[busy + 1]) AS holder \
                 FROM lockmacro_acquire({keys}, {}, {ttl}, {fence}, {waiting})",
                text(req.value),
                keys = texts(req.keys.iter().map(String::as_str)),
            ),
        };
        let rows = self
            .rows(&what, sql)
            .await
            .map_err(|err| kinds::refusal(err, req))?;
        acquired(&self.server, &what, rows.first())
    }
}

/// What an acquire function's row (`busy`, `left_ms`, `fence`, and `holder`
/// when the function reads it) says.
pub(super) fn acquired(
    server: &str,
    what: &(dyn std::fmt::Display + Sync),
    row: Option<&PgRow>,
) -> Result<Acquired, LockError> {
    let unexpected = |reply: &(dyn std::fmt::Display + Sync)| -> LockError {
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
            holder: match row.try_get::<Option<String>, _>("holder") {
                Ok(holder) => holder,
                Err(sqlx::Error::ColumnNotFound(_)) => None,
                Err(err) => return Err(unexpected(&err)),
            },
        }),
        None => Ok(Acquired::Obtained {
            fence: read("fence")?.and_then(|fence| u64::try_from(fence).ok()),
        }),
    }
}
