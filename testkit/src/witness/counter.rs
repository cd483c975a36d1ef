//! An independent check of mutual exclusion: a counter in a Redis server of its
//! own, incremented without atomicity (GET, yield, SET) under the lock, and a
//! count of the tasks inside the critical section at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockmacro_runtime::{LockError, Locker, ObtainOptions, RetryStrategy};
use tokio::time::Instant;

use crate::RedisServer;

pub const TASKS: usize = 8;
pub const ROUNDS: usize = 300;

/// Runs `ROUNDS` increments in each of the `lockers` (one task each, as
/// separate processes would), taking the lock `counter-lock` for `ttl` around
/// every one. Panics as soon as two tasks are inside at once; returns the
/// counter, which is `lockers.len() * ROUNDS` when no update was lost.
pub async fn increments(lockers: Vec<Locker>, counter: &RedisServer, ttl: Duration) -> i64 {
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for locker in lockers {
        let mut conn = counter.witness_connection().await;
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            let retry =
                RetryStrategy::exponential(Duration::from_micros(200), Duration::from_millis(5))
                    .deadline(Duration::from_secs(60));
            for round in 0..ROUNDS {
                // A backend error (no majority answered in time while a
                // master is frozen) is retried: the witness checks safety,
                // not availability.
                let give_up = Instant::now() + Duration::from_secs(60);
                let lock = loop {
                    match locker
                        .obtain(
                            "counter-lock",
                            ttl,
                            ObtainOptions::new().retry(retry.clone()),
                        )
                        .await
                    {
                        Ok(lock) => break lock,
                        Err(LockError::Backend(_)) if Instant::now() < give_up => {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        Err(err) => panic!("round {round}: obtain: {err}"),
                    }
                };
                let others = inside.fetch_add(1, Ordering::SeqCst);
                assert_eq!(others, 0, "round {round}: {others} other holder(s) inside");
                increment(&mut conn).await;
                assert!(
                    Instant::now() < lock.deadline(),
                    "round {round}: the lease ran out inside the critical section"
                );
                inside.fetch_sub(1, Ordering::SeqCst);
                // Released after leaving: a release that fails (a master
                // frozen mid-run) leaves the key to expire, which is allowed.
                let _ = lock.release().await;
            }
        }));
    }
    for task in tasks {
        if let Err(err) = task.await {
            std::panic::resume_unwind(err.into_panic());
        }
    }
    counter.cmd::<Option<i64>>(&["GET", "counter"]).unwrap_or(0)
}

/// Adds one to `counter` on `conn` without atomicity: GET, a yield, SET. Two
/// callers at once lose an update, which is what the witnesses look for.
pub async fn increment(conn: &mut redis::aio::MultiplexedConnection) {
    let value: i64 = redis::cmd("GET")
        .arg("counter")
        .query_async::<Option<i64>>(&mut *conn)
        .await
        .unwrap()
        .unwrap_or(0);
    tokio::task::yield_now().await;
    let () = redis::cmd("SET")
        .arg("counter")
        .arg(value + 1)
        .query_async(&mut *conn)
        .await
        .unwrap();
}
