//! What the lock protocol needs from the wire, and the single server's
//! answer to it. The cluster's is in `cluster.rs`; the protocol over either
//! is in `locks.rs`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError};
use tokio::time::Instant;

use super::config::RedisConfig;
use super::connect::connection_for;
use super::errors::{Failure, backend_error};
use super::protocol::Companions;
use super::retry::Policy;
use super::scripts::Load;
use super::server_conn::ServerConn;
use super::wakeups::Wakeups;
use super::watched::Exclusive;
use crate::LockError;

/// How the lock protocol reaches its keys: a single server, or the master of
/// each key's cluster slot.
pub(in crate::backend) trait Transport: Send + Sync + 'static {
    /// The connection a command goes on.
    type Conn: ConnectionLike + Clone + Send + Sync + 'static;

    /// How a node that does not know a script is taught it.
    const LOAD: Load;
    /// Where the scripts keep a key's queue and waiters flag.
    const COMPANIONS: Companions;

    /// Names the server or cluster in error messages.
    fn name(&self) -> &str;

    /// The connection shared by every call.
    fn conn(&self) -> &Self::Conn;

    /// Refuses, before anything is sent, `keys` (with `fence_key`) that one
    /// call cannot carry.
    fn check(&self, keys: &[String], fence_key: Option<&str>) -> Result<(), LockError>;

    /// Which refreshes one call may carry together: those of leases whose
    /// first keys give the same number.
    fn batch(&self, key: &str) -> u16;

    /// How a call is sent again: on a dropped connection, through a
    /// failover.
    type Policy<'a>: Policy<Target = Self::Conn, Error = RedisError, Failure = Failure> + Send
    where
        Self: 'a;

    /// The policy of one call on `conn` with `keys`.
    fn policy<'a>(&'a self, conn: &'a Self::Conn, keys: &[String]) -> Self::Policy<'a>;

    /// The connection of the acquires that wait for replicas, opened on the
    /// first one: `WAIT` holds up its connection until the replicas answer,
    /// and on the shared one would hold up every other call, the watchdog's
    /// refreshes among them. `keys` name the acquire in errors.
    fn acknowledged(
        &self,
        keys: &[String],
    ) -> impl Future<Output = Result<Self::Conn, LockError>> + Send;

    /// Bounds every call: a replica wait must end before it.
    fn response_timeout(&self) -> Duration;

    /// The pub/sub side, which hears releases and hand-offs.
    fn wakeups(&self) -> &Arc<Wakeups>;

    /// Every key matching `pattern` (`SCAN MATCH`), on each master.
    fn scan(&self, pattern: &str) -> impl Future<Output = Result<Vec<String>, LockError>> + Send;

    /// The connections of `WATCH`/`MULTI`/`EXEC` transactions, for the
    /// protocol without scripts; `None` where it is not available.
    fn exclusive(&self) -> Option<&Exclusive> {
        None
    }
}

/// One Redis server, through a reconnecting connection.
#[derive(Clone)]
pub(in crate::backend) struct Server {
    pub(super) conn: ServerConn,
    /// `redis 127.0.0.1:6379`: names the server in error messages.
    pub(super) name: String,
    pub(super) wakeups: Arc<Wakeups>,
    pub(super) acknowledged: Arc<Acknowledged>,
    pub(super) exclusive: Arc<Exclusive>,
}

/// What opens the connection of the acquires that wait for replicas, and
/// that connection once open.
pub(in crate::backend) struct Acknowledged {
    client: redis::Client,
    config: RedisConfig,
    conn: tokio::sync::OnceCell<ServerConn>,
}

impl Acknowledged {
    pub(super) fn new(client: redis::Client, config: &RedisConfig) -> Self {
        Acknowledged {
            client,
            config: config.clone(),
            conn: tokio::sync::OnceCell::new(),
        }
    }
}

impl Transport for Server {
    type Conn = ServerConn;

    const LOAD: Load = Load::ScriptLoad;
    const COMPANIONS: Companions = Companions::Derived;

    fn name(&self) -> &str {
        &self.name
    }

    fn conn(&self) -> &ServerConn {
        &self.conn
    }

    fn check(&self, _: &[String], _: Option<&str>) -> Result<(), LockError> {
        Ok(())
    }

    fn batch(&self, _: &str) -> u16 {
        0
    }

    type Policy<'a> = Reconnect<'a>;

    fn policy<'a>(&'a self, conn: &'a ServerConn, _: &[String]) -> Reconnect<'a> {
        Reconnect {
            conn,
            server: &self.name,
            retried: false,
        }
    }

    async fn acknowledged(&self, _: &[String]) -> Result<ServerConn, LockError> {
        let acknowledged = &self.acknowledged;
        acknowledged
            .conn
            .get_or_try_init(|| async {
                connection_for(&acknowledged.client, &acknowledged.config)
                    .await
                    .map(|(conn, _)| conn)
            })
            .await
            .cloned()
    }

    fn response_timeout(&self) -> Duration {
        self.acknowledged.config.response_timeout
    }

    fn wakeups(&self) -> &Arc<Wakeups> {
        &self.wakeups
    }

    fn exclusive(&self) -> Option<&Exclusive> {
        Some(&self.exclusive)
    }

    async fn scan(&self, pattern: &str) -> Result<Vec<String>, LockError> {
        let mut conn = self.conn.clone();
        scan_all(&mut conn, pattern)
            .await
            .map_err(|err| backend_error(&self.name, &format!("scan `{pattern}`"), err).into())
    }
}

/// Every key matching `pattern` on the server behind `conn`, by `SCAN`
/// (which, unlike `KEYS`, never blocks the server for long), in batches of
/// a thousand.
pub(in crate::backend) async fn scan_all(
    conn: &mut impl ConnectionLike,
    pattern: &str,
) -> Result<Vec<String>, RedisError> {
    let mut keys = Vec::new();
    let mut cursor = 0_u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query_async(conn)
            .await?;
        keys.extend(batch);
        if next == 0 {
            return Ok(keys);
        }
        cursor = next;
    }
}

/// How many keys one `SCAN` step looks at.
pub(in crate::backend) const SCAN_COUNT: usize = 1000;

/// A single server's: a command that failed because the connection dropped
/// (a server restart, an idle connection cut by a proxy) or was refused is
/// sent once more, on the connection opened again (`server_conn.rs`). Every command
/// the protocol sends is safe to repeat.
pub(in crate::backend) struct Reconnect<'a> {
    conn: &'a ServerConn,
    server: &'a str,
    retried: bool,
}

impl Policy for Reconnect<'_> {
    type Target = ServerConn;
    type Error = RedisError;
    type Failure = Failure;

    fn deadline(&self) -> Option<Instant> {
        None
    }

    fn target(&self) -> ServerConn {
        self.conn.clone()
    }

    fn retry(&mut self, err: &RedisError) -> bool {
        // A refusal is sent again too: a reconnection that failed while the
        // server was down is handed to the first call after it, even when
        // the server is back, and only then is the connection opened again.
        if self.retried || !(err.is_connection_dropped() || err.is_connection_refusal()) {
            return false;
        }
        tracing::debug!(target: "lockmacro", server = %self.server, error = %err, "connection dropped, sending again");
        self.retried = true;
        true
    }

    async fn recover(&mut self) -> Result<bool, RedisError> {
        Ok(false)
    }

    fn fail(&mut self, err: RedisError, _: Option<RedisError>) -> Failure {
        Failure::Redis(err)
    }

    /// Without a deadline the loop stops only by [`fail`](Self::fail).
    fn spent(&mut self, last: Option<RedisError>, _: bool) -> Failure {
        Failure::Redis(last.unwrap_or_else(|| RedisError::from((ErrorKind::Io, "no answer"))))
    }
}

/// Runs `attempt` on `conn` to the server named `server`, and once more as
/// the lock protocol's calls are sent ([`Reconnect`]); `what` names the call
/// in errors. For callers outside the protocol whose commands are safe to
/// repeat, such as the fenced store.
pub(crate) async fn send_once_more<R, F, Fut>(
    conn: &ServerConn,
    server: &str,
    what: &str,
    attempt: F,
) -> Result<R, LockError>
where
    F: FnMut(ServerConn) -> Fut,
    Fut: Future<Output = redis::RedisResult<R>>,
{
    let policy = Reconnect {
        conn,
        server,
        retried: false,
    };
    super::retry::follow(policy, attempt)
        .await
        .map_err(|failure| failure.into_error(server, what).into())
}
