//! The connections the backend keeps between its statements.
//!
//! sqlx's pool tests every connection it takes back (a `Sync` round trip,
//! `PoolConnection`'s drop) and, by default, every one it hands out: two
//! round trips around each statement, which cost the server about as much
//! as a plain lock's statement itself. The backend takes connections from
//! its pool once and keeps them; a statement borrows one and puts it back
//! only after a complete answer, so a connection in an unknown state (a
//! statement cancelled halfway, a broken socket) goes back to sqlx, whose
//! test closes it.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};
use tokio::sync::{Semaphore, SemaphorePermit};

/// Connections borrowed from a pool and kept, up to a limit.
pub(super) struct Kept {
    pool: PgPool,
    idle: Mutex<Vec<PoolConnection<Postgres>>>,
    /// One per connection the backend may have out of the pool at once,
    /// kept or in use: a statement holds one, so that a statement never
    /// waits on the pool for a connection that sits idle here. None: the
    /// backend keeps no connection.
    permits: Option<Semaphore>,
    /// How long a statement waits for a permit.
    wait: Duration,
}

/// A connection lent to one statement.
pub(super) struct Borrowed<'a> {
    pub(super) conn: PoolConnection<Postgres>,
    permit: Option<SemaphorePermit<'a>>,
}

impl Kept {
    /// Keeps up to `limit` connections of `pool` (0: none, every statement
    /// takes one from the pool and gives it back); a statement waits at
    /// most `wait` for one.
    pub(super) fn new(pool: PgPool, limit: usize, wait: Duration) -> Self {
        Kept {
            pool,
            idle: Mutex::default(),
            permits: (limit > 0).then(|| Semaphore::new(limit)),
            wait,
        }
    }

    fn idle(&self) -> MutexGuard<'_, Vec<PoolConnection<Postgres>>> {
        // Each change is one push or pop: a panic cannot leave it half-done.
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A kept connection, or one from the pool (which tests it first);
    /// [`sqlx::Error::PoolTimedOut`] when none comes within the wait.
    pub(super) async fn take(&self) -> Result<Borrowed<'_>, sqlx::Error> {
        let Some(permits) = &self.permits else {
            return Ok(Borrowed {
                conn: self.pool.acquire().await?,
                permit: None,
            });
        };
        let permit = match tokio::time::timeout(self.wait, permits.acquire()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) | Err(_) => return Err(sqlx::Error::PoolTimedOut),
        };
        let kept = self.idle().pop();
        let conn = match kept {
            Some(conn) => conn,
            None => self.pool.acquire().await?,
        };
        Ok(Borrowed {
            conn,
            permit: Some(permit),
        })
    }

    /// Keeps the connection of `borrowed`, which answered a whole
    /// statement, for the next one (when the backend keeps connections).
    pub(super) fn put_back(&self, borrowed: Borrowed<'_>) {
        if borrowed.permit.is_some() {
            self.idle().push(borrowed.conn);
        }
    }

    /// Gives every kept connection back to the pool, which tests each: after
    /// one was found closed, the others may have been closed with it (a
    /// server restart).
    pub(super) fn forget(&self) {
        let idle = std::mem::take(&mut *self.idle());
        drop(idle);
    }
}
