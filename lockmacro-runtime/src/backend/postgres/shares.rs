//! Shares of a key: permits (fair or not), reads and the write, each a row
//! of `lockmacro_shares` on a lease of its own, taken by one call of
//! `lockmacro_acquire_shared`; and the downgrade of a write to a read.
//! Refresh, release and what is left of a share go through the same
//! statements as a lock's (`refresh.rs`), by key and token.

use super::acquire::acquired;
use super::sql::{millis, text, text_or_null};
use super::{PostgresBackend, kinds};
use crate::LockError;
use crate::backend::{AcquireRequest, Acquired, Share, TOKEN_LEN};

impl PostgresBackend {
    pub(super) async fn acquire_share(
        &self,
        req: &AcquireRequest<'_>,
        share: Share,
    ) -> Result<Acquired, LockError> {
        let key = &req.keys[0];
        let what = format!("obtain a share of `{key}`");
        let (permits, held_as) = match share {
            Share::Permits(permits) => (permits.to_string(), "permit"),
            Share::Read => ("NULL".to_owned(), "read"),
            Share::Write => ("NULL".to_owned(), "write"),
        };
        let wait = req
            .queue_for
            .map_or_else(|| "NULL".to_owned(), |wait| millis(wait).to_string());
        let sql = format!(
            "SELECT busy, left_ms, fence, holder FROM lockmacro_acquire_shared(\
             {}, {}, {}, {permits}, {}, {wait}, {}, {})",
            text(key),
            text(req.value),
            millis(req.ttl),
            text(held_as),
            req.wait,
            text_or_null(req.fence_key),
        );
        let rows = self
            .rows(&what, sql)
            .await
            .map_err(|err| kinds::refusal(err, req))?;
        acquired(&self.server, &what, rows.first())
    }

    /// Turns `token`'s write of `key` into a read, in one statement.
    pub(super) async fn downgrade_write(&self, key: &str, token: &str) -> Result<bool, LockError> {
        if token.len() != TOKEN_LEN || token.contains('\0') || key.contains('\0') {
            return Ok(false);
        }
        let what = format!("downgrade `{key}`");
        let sql = format!("SELECT lockmacro_downgrade({}, {})", text(key), text(token));
        self.answer(&what, sql).await
    }
}
