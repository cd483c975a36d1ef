//! Connections of their own for `WATCH`/`MULTI`/`EXEC` transactions, which
//! the script-free protocol uses where a server has no native compare
//! command: what a connection watches is the connection's state, so a
//! transaction cannot share the multiplexed connection of every other call.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisResult};
use tokio::sync::{Mutex, MutexGuard};

use super::config::RedisConfig;
use super::dial::Endpoint;

/// Transactions one backend runs at the same time; more wait for a
/// connection.
const CONNECTIONS: usize = 4;

/// How many times a transaction whose watched keys changed before its
/// `EXEC` is tried again before the call answers with the error below:
/// each change is another client's progress, so this is only reached under
/// a storm of changes to the same keys.
const ROUNDS: usize = 64;

/// A few connections, opened on first use, each used by one transaction at
/// a time.
pub(in crate::backend) struct Exclusive {
    endpoint: Endpoint,
    config: AsyncConnectionConfig,
    slots: Vec<Mutex<Option<MultiplexedConnection>>>,
    next: AtomicUsize,
}

impl Exclusive {
    pub(in crate::backend) fn new(client: redis::Client, config: &RedisConfig) -> Self {
        Exclusive {
            endpoint: config.endpoint(client),
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(config.connect_timeout))
                .set_response_timeout(Some(config.response_timeout)),
            slots: (0..CONNECTIONS).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// Runs `transaction` on a connection of its own until it answers
    /// `Some` (`None`: a watched key changed before `EXEC`), at most
    /// [`ROUNDS`] times. A connection whose transaction failed, or was
    /// dropped half-way, is closed: it may still watch keys, or be inside a
    /// `MULTI`. A dropped connection is opened again and the transaction
    /// sent once more, as every other call is.
    pub(in crate::backend) async fn run<R, F, Fut>(&self, mut transaction: F) -> RedisResult<R>
    where
        F: FnMut(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<Option<R>>>,
    {
        let mut retried = false;
        for _ in 0..ROUNDS {
            let mut slot = self.slot().await?;
            let outcome = transaction(slot.conn().clone()).await;
            match outcome {
                Ok(Some(done)) => {
                    slot.clean = true;
                    return Ok(done);
                }
                Ok(None) => slot.clean = true,
                Err(err)
                    if !retried && (err.is_connection_dropped() || err.is_connection_refusal()) =>
                {
                    retried = true;
                }
                Err(err) => return Err(err),
            }
        }
        Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "the keys kept changing",
            format!("{ROUNDS} transactions in a row found a watched key changed before EXEC"),
        )))
    }

    /// A connection of the pool, opened if it is not yet: a free one, else
    /// the next in turn once its transaction ends.
    async fn slot(&self) -> RedisResult<Slot<'_>> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let count = self.slots.len();
        let free =
            (0..count).find_map(|offset| self.slots[(start + offset) % count].try_lock().ok());
        let mut guard = match free {
            Some(guard) => guard,
            None => self.slots[start % count].lock().await,
        };
        if guard.is_none() {
            let conn = self.endpoint.open(&self.config).await?;
            *guard = Some(conn);
        }
        Ok(Slot {
            guard,
            clean: false,
        })
    }
}

/// One transaction's connection; closed on drop unless it ended cleanly.
struct Slot<'a> {
    guard: MutexGuard<'a, Option<MultiplexedConnection>>,
    clean: bool,
}

impl Slot<'_> {
    fn conn(&mut self) -> &mut MultiplexedConnection {
        self.guard
            .as_mut()
            .expect("a slot is handed out with its connection open")
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.clean {
            *self.guard = None;
        }
    }
}
