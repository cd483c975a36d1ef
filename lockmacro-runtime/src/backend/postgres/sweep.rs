//! Reaping what no lease needs any more. A lock whose holder let its lease
//! run out (a crash, or `hold_at_least`: the cron pattern, a key per fire)
//! leaves its row behind, and a fence key its counter row: nothing else
//! deletes them. Each backend calls the migration's `lockmacro_sweep`
//! now and then, a bounded number of rows per call.

use std::time::Duration;

use sqlx::{AssertSqlSafe, PgPool, Row};
use tokio::task::JoinHandle;

use super::sql::millis;

/// The most rows of each table one call deletes.
const BATCH: i64 = 1000;

/// The most calls in a row, while each finds a full batch to delete.
const ROUNDS: usize = 10;

/// The backend's sweep, ended with it.
pub(super) struct Sweeper(JoinHandle<()>);

impl Sweeper {
    /// Sweeps through `pool` every `every`, first one `every` from now,
    /// reaping fence rows idle for `fence_expiry`; each call waits at most
    /// `timeout` for its answer.
    pub(super) fn start(
        pool: PgPool,
        every: Duration,
        fence_expiry: Duration,
        timeout: Duration,
    ) -> Self {
        let sql = format!("SELECT lockmacro_sweep({BATCH}, {})", millis(fence_expiry));
        Sweeper(tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                for _ in 0..ROUNDS {
                    let call = sqlx::raw_sql(AssertSqlSafe(sql.as_str())).fetch_one(&pool);
                    let reaped = match tokio::time::timeout(timeout, call).await {
                        Ok(Ok(row)) => row.try_get::<i64, _>(0).unwrap_or_default(),
                        Ok(Err(err)) => {
                            tracing::debug!(target: "lockmacro", %err, "postgres: sweep failed");
                            break;
                        }
                        Err(_) => {
                            tracing::debug!(target: "lockmacro", "postgres: sweep timed out");
                            break;
                        }
                    };
                    tracing::trace!(target: "lockmacro", reaped, "postgres: swept");
                    if reaped < BATCH {
                        break;
                    }
                }
            }
        }))
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}
