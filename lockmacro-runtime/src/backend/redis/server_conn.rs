//! The connection a single server's commands go on: the backend's own, one
//! multiplexed connection opened again when it drops, or a
//! `ConnectionManager` the service handed over
//! ([`RedisBackend::from_manager`](super::RedisBackend::from_manager)).
//!
//! The backend's own connection behaves as `redis`'s `ConnectionManager`
//! does: a command that finds the connection dropped fails (the caller's
//! policy sends it again) and starts a new connection in the background,
//! which the commands after it wait for. It is not a `ConnectionManager`
//! because the manager keeps an `arc-swap` guard for as long as each
//! command waits for its answer: with more than eight commands in flight on
//! a thread (`arc-swap` keeps eight fast slots per thread), every command
//! then takes `arc-swap`'s slow path. With 64 tasks sharing one locker the
//! manager's own functions took about 0.34 µs per obtain + release, some 7 %
//! of the client's time (`BENCHMARKS.md`, run 15, a `perf` profile). Here a
//! command clones the open connection under a read lock and holds nothing
//! shared while it waits.

use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::dial::Endpoint;

/// The pause before the one retry of a connection that could not be opened
/// (at most the connect timeout), as the manager's first backoff step.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Where a single server's commands go.
#[derive(Clone)]
pub(crate) enum ServerConn {
    /// The backend's own connection.
    Own(Reopening),
    /// The service's manager, shared with the service's own commands.
    Manager(ConnectionManager),
}

impl ConnectionLike for ServerConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            ServerConn::Own(conn) => Box::pin(conn.send(cmd)),
            ServerConn::Manager(manager) => manager.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            ServerConn::Own(conn) => Box::pin(conn.send_pipeline(pipeline, offset, count)),
            ServerConn::Manager(manager) => manager.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            ServerConn::Own(conn) => conn.0.db,
            ServerConn::Manager(manager) => manager.get_db(),
        }
    }
}

/// A connection being opened, which every command that needs it awaits.
type Opening = Shared<BoxFuture<'static, RedisResult<MultiplexedConnection>>>;

enum Link {
    Open(MultiplexedConnection),
    Opening(Opening),
}

struct State {
    /// Counts the connections opened: a failure met on an older one does
    /// not replace a newer one.
    generation: u64,
    link: Link,
}

struct Inner {
    endpoint: Endpoint,
    config: AsyncConnectionConfig,
    /// Before the one retry of an open that failed.
    pause: Duration,
    db: i64,
    state: RwLock<State>,
}

/// One multiplexed connection to one server, opened again in the
/// background when a command finds it dropped.
#[derive(Clone)]
pub(crate) struct Reopening(Arc<Inner>);

impl Reopening {
    /// Opens the connection to `endpoint`, trying once more after a pause
    /// when the first try fails. Each try is bounded by `connect_timeout`,
    /// each command by `response_timeout`.
    pub(in crate::backend) async fn open(
        endpoint: Endpoint,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> RedisResult<Self> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(response_timeout));
        let pause = RETRY_PAUSE.min(connect_timeout);
        let conn = open(endpoint.clone(), config.clone(), pause).await?;
        Ok(Reopening(Arc::new(Inner {
            endpoint,
            config,
            pause,
            db: conn.get_db(),
            state: RwLock::new(State {
                generation: 0,
                link: Link::Open(conn),
            }),
        })))
    }

    async fn send(&self, cmd: &Cmd) -> RedisResult<Value> {
        let (mut conn, generation) = self.conn().await?;
        let result = conn.send_packed_command(cmd).await;
        self.after(&result, generation);
        result
    }

    async fn send_pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let (mut conn, generation) = self.conn().await?;
        let result = conn.send_packed_commands(pipeline, offset, count).await;
        self.after(&result, generation);
        result
    }

    /// The open connection and its generation, once open.
    async fn conn(&self) -> RedisResult<(MultiplexedConnection, u64)> {
        let opening = {
            let state = self.0.state.read().unwrap_or_else(PoisonError::into_inner);
            match &state.link {
                Link::Open(conn) => return Ok((conn.clone(), state.generation)),
                Link::Opening(opening) => (opening.clone(), state.generation),
            }
        };
        // Boxed: only a command sent while the connection is being opened
        // waits here, and inline the wait would grow every command's future.
        Box::pin(self.wait_for(opening)).await
    }

    async fn wait_for(
        &self,
        (opening, generation): (Opening, u64),
    ) -> RedisResult<(MultiplexedConnection, u64)> {
        match opening.await {
            Ok(conn) => {
                self.0.opened(generation, &conn);
                Ok((conn, generation))
            }
            Err(err) => {
                // The server may be back by the next command: it opens anew.
                if err.is_io_error() {
                    self.reopen(generation);
                }
                Err(err)
            }
        }
    }

    fn after<T>(&self, result: &RedisResult<T>, generation: u64) {
        if let Err(err) = result
            && err.is_unrecoverable_error()
        {
            self.reopen(generation);
        }
    }

    /// Replaces the connection of `generation`, found dropped, by one opened
    /// in the background at once; nothing when it was replaced already.
    fn reopen(&self, generation: u64) {
        let inner = &self.0;
        let mut state = inner.state.write().unwrap_or_else(PoisonError::into_inner);
        if state.generation != generation {
            return;
        }
        state.generation += 1;
        let generation = state.generation;
        let opening = open(inner.endpoint.clone(), inner.config.clone(), inner.pause)
            .boxed()
            .shared();
        state.link = Link::Opening(opening.clone());
        drop(state);
        let inner: Weak<Inner> = Arc::downgrade(inner);
        tokio::spawn(async move {
            if let Ok(conn) = opening.await
                && let Some(inner) = inner.upgrade()
            {
                inner.opened(generation, &conn);
            }
        });
    }
}

impl Inner {
    /// Keeps `conn`, opened for `generation`, unless a newer one replaced it.
    fn opened(&self, generation: u64, conn: &MultiplexedConnection) {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if state.generation == generation && matches!(state.link, Link::Opening(_)) {
            state.link = Link::Open(conn.clone());
        }
    }
}

async fn open(
    endpoint: Endpoint,
    config: AsyncConnectionConfig,
    pause: Duration,
) -> RedisResult<MultiplexedConnection> {
    match endpoint.open(&config).await {
        Ok(conn) => Ok(conn),
        Err(_) => {
            tokio::time::sleep(pause).await;
            endpoint.open(&config).await
        }
    }
}
