//! Keeping leases, of locks and shares alike: many refreshes in one
//! statement (`unnest` of arrays), what is left of a lease, and release by
//! token.

use std::time::Duration;

use sqlx::Row;

use super::PostgresBackend;
use super::errors::Doing;
use super::sql::{millis, numbers, text, texts};
use crate::LockError;
use crate::backend::{RefreshRequest, TOKEN_LEN};
use crate::error::BackendError;

impl PostgresBackend {
    /// One statement for every request: each lease is extended if it still
    /// holds all of its keys.
    pub(super) async fn refresh_all(
        &self,
        requests: &[RefreshRequest<'_>],
    ) -> Vec<Result<bool, LockError>> {
        let (mut keys, mut tokens, mut ttls, mut leases) = (vec![], vec![], vec![], vec![]);
        for (lease, req) in requests.iter().enumerate() {
            // A string that is not a token can own nothing.
            if !storable(req.keys, req.token) {
                continue;
            }
            for key in req.keys {
                keys.push(key.as_str());
                tokens.push(req.token);
                ttls.push(millis(req.ttl));
                leases.push(lease as u64);
            }
        }
        let mut refreshed = vec![false; requests.len()];
        if keys.is_empty() {
            return refreshed.into_iter().map(Ok).collect();
        }
        let what = if requests.len() == 1 {
            format!("refresh `{}`", requests[0].keys.join("`, `"))
        } else {
            format!("refresh {} leases", requests.len())
        };
        let sql = format!(
            "SELECT lease FROM lockmacro_refresh({}, {}, {}, {}) AS lease",
            texts(keys),
            texts(tokens),
            numbers(ttls, "bigint"),
            numbers(leases, "integer"),
        );
        match self.rows(&what, sql).await {
            Ok(rows) => {
                for row in rows {
                    let lease = row
                        .try_get::<i32, _>(0)
                        .ok()
                        .and_then(|lease| usize::try_from(lease).ok());
                    if let Some(slot) = lease.and_then(|lease| refreshed.get_mut(lease)) {
                        *slot = true;
                    }
                }
                refreshed.into_iter().map(Ok).collect()
            }
            Err(err) => {
                let (kind, message) = match &err {
                    LockError::Backend(backend) => (backend.kind(), backend.to_string()),
                    other => (crate::BackendErrorKind::Other, other.to_string()),
                };
                requests
                    .iter()
                    .map(|_| Err(BackendError::new(kind, "postgres", &message).into()))
                    .collect()
            }
        }
    }

    pub(super) async fn remaining_of(
        &self,
        keys: &[String],
        token: &str,
    ) -> Result<Option<Duration>, LockError> {
        if !storable(keys, token) {
            return Ok(None);
        }
        let what = format!("ttl of `{}`", keys.join("`, `"));
        // A lock's key or a share of it: a token holds one or the other.
        let sql = format!(
            "SELECT count(*)::bigint, lockmacro_ms(min(expires_at) - clock_timestamp()) \
             FROM (SELECT expires_at FROM lockmacro_locks WHERE key = ANY ({keys}) \
             AND token = {token} UNION ALL SELECT expires_at FROM lockmacro_shares \
             WHERE key = ANY ({keys}) AND token = {token}) held \
             WHERE expires_at > clock_timestamp()",
            keys = texts(keys.iter().map(String::as_str)),
            token = text(token),
        );
        let rows = self.rows(&what, sql).await?;
        let row = rows
            .first()
            .ok_or_else(|| self.unexpected(&what, "no row"))?;
        let held: i64 = row.try_get(0).map_err(|err| self.unexpected(&what, err))?;
        let left: Option<i64> = row.try_get(1).map_err(|err| self.unexpected(&what, err))?;
        if usize::try_from(held).ok() != Some(keys.len()) {
            return Ok(None);
        }
        Ok(left
            .and_then(|ms| u64::try_from(ms).ok())
            .map(Duration::from_millis))
    }

    pub(super) async fn release_keys(
        &self,
        keys: &[String],
        token: &str,
    ) -> Result<bool, LockError> {
        if !storable(keys, token) {
            return Ok(false);
        }
        // One key, the plain lock's case, has a release of its own that
        // costs less.
        let sql = match keys {
            [key] => format!("SELECT lockmacro_give({}, {})", text(key), text(token)),
            _ => format!(
                "SELECT lockmacro_release({}, {})",
                texts(keys.iter().map(String::as_str)),
                text(token),
            ),
        };
        self.answer(&Doing("release", keys), sql).await
    }
}

/// Whether `token` can be a lock's token and `keys` can be in the table: a
/// token is [`TOKEN_LEN`] bytes, and PostgreSQL's text holds no NUL (a
/// statement carrying one would be cut short on the wire).
fn storable(keys: &[String], token: &str) -> bool {
    token.len() == TOKEN_LEN && !token.contains('\0') && !keys.iter().any(|key| key.contains('\0'))
}
