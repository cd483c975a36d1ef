use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, Script, ServerErrorKind};

use super::{AcquireRequest, Acquired, Backend, BoxFuture, TOKEN_LEN};
use crate::LockError;
use crate::error::{BackendError, BackendErrorKind};

// The sources are kept next to their `Script`s for the cluster backend, which
// falls back to `EVAL` with the source itself (see `cluster.rs`).
pub(super) const ACQUIRE_LUA: &str = include_str!("scripts/acquire.lua");
pub(super) const REFRESH_LUA: &str = include_str!("scripts/refresh.lua");
pub(super) const RELEASE_LUA: &str = include_str!("scripts/release.lua");
pub(super) const REMAINING_LUA: &str = include_str!("scripts/remaining.lua");

pub(super) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));
pub(super) static REFRESH: LazyLock<Script> = LazyLock::new(|| Script::new(REFRESH_LUA));
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
pub(super) static REMAINING: LazyLock<Script> = LazyLock::new(|| Script::new(REMAINING_LUA));

/// Connection settings for [`RedisBackend`].
///
/// ```
/// use std::time::Duration;
/// use lockmacro_runtime::RedisConfig;
///
/// let config = RedisConfig::default()
///     .connect_timeout(Duration::from_secs(1))
///     .response_timeout(Duration::from_millis(500));
/// # let _ = config;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisConfig {
    pub(super) connect_timeout: Duration,
    pub(super) response_timeout: Duration,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            connect_timeout: Duration::from_secs(3),
            response_timeout: Duration::from_secs(3),
        }
    }
}

impl RedisConfig {
    /// How long to wait for a TCP (and TLS) connection. Default 3 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long to wait for the reply to one command. Default 3 s. Keep it
    /// well below your ttls: a reply that comes later than this is treated as
    /// a failure.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }
}

/// Locks on one Redis server.
///
/// A lock is a plain string key, taken with `SET key value NX PX ttl`
/// semantics, whose value starts with the owner's 32-character token. Other
/// clients that lock the same keys the same way (redis-py's `Lock`,
/// bsm/redislock, Redisson's `RLock` excepted, as it uses hashes) exclude this
/// library and are excluded by it. Refresh, release and fencing run as Lua
/// scripts (`EVALSHA`, loaded on `NOSCRIPT`).
///
/// The connection reconnects by itself. A command that fails because the
/// connection dropped (a server restart, an idle connection cut by a proxy) is
/// sent once more on the new connection; every script is safe to repeat.
///
/// ```no_run
/// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
/// use lockmacro_runtime::{Locker, RedisBackend};
///
/// let backend = RedisBackend::connect("redis://127.0.0.1:6379/").await?;
/// let locker = Locker::new(backend);
/// # let _ = locker; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisBackend {
    conn: ConnectionManager,
    /// `redis 127.0.0.1:6379`: names the server in error messages.
    name: String,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("server", &self.name)
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Connects to the server at `url` (`redis://[user:password@]host:port/[db]`,
    /// `rediss://` for TLS) with the default [`RedisConfig`].
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::connect_with(url, RedisConfig::default()).await
    }

    /// Connects to the server at `url` with `config`.
    pub async fn connect_with(url: &str, config: RedisConfig) -> Result<Self, LockError> {
        let client = redis::Client::open(url).map_err(|err| LockError::InvalidUrl {
            url: redact(url),
            reason: err.to_string(),
        })?;
        let name = format!("redis {}", client.get_connection_info().addr());
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.response_timeout))
            // Reconnection is retried by the next command, not in the
            // background for long: a lock call must fail in bounded time.
            .set_number_of_retries(1)
            .set_max_delay(config.connect_timeout);
        let connect = ConnectionManager::new_with_config(client, manager_config);
        // The manager's own timeout covers each TCP attempt; this bounds the
        // whole handshake (AUTH, HELLO, SELECT) as well.
        let conn = tokio::time::timeout(config.connect_timeout + config.response_timeout, connect)
            .await
            .map_err(|_| {
                BackendError::new(
                    BackendErrorKind::Timeout,
                    format!("{name}: connect"),
                    "no answer in time",
                )
            })?
            .map_err(|err| backend_error(&name, "connect", err))?;
        Ok(RedisBackend { conn, name })
    }

    pub(super) async fn invoke<T: redis::FromRedisValue>(
        &self,
        what: &str,
        keys: &[String],
        script: &Script,
        args: &[&str],
    ) -> Result<T, LockError> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        let mut conn = self.conn.clone();
        let first = invocation.invoke_async(&mut conn).await;
        match first {
            Err(err) if err.is_connection_dropped() => {
                tracing::debug!(target: "lockmacro", server = %self.name, error = %err, "connection dropped, sending again");
                invocation.invoke_async(&mut conn).await
            }
            other => other,
        }
        .map_err(|err| backend_error(&self.name, &format!("{what} `{}`", keys.join("`, `")), err).into())
    }
}

/// The URL with its password hidden, for error messages.
pub(super) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

pub(super) fn backend_error(server: &str, what: &str, err: RedisError) -> BackendError {
    let kind = match err.kind() {
        ErrorKind::AuthenticationFailed => BackendErrorKind::Authentication,
        ErrorKind::Server(ServerErrorKind::NoPerm) => BackendErrorKind::Permission,
        _ if err.is_timeout() => BackendErrorKind::Timeout,
        _ if err.is_connection_refusal() || err.is_connection_dropped() || err.is_io_error() => {
            BackendErrorKind::Unreachable
        }
        _ => BackendErrorKind::Other,
    };
    let message = match kind {
        BackendErrorKind::Authentication => format!("authentication failed: {err}"),
        BackendErrorKind::Permission => format!(
            "permission denied: {err} (the Redis user needs +eval +evalsha +script|load \
             and access to the lock keys)"
        ),
        BackendErrorKind::Timeout => format!("no answer in time: {err}"),
        BackendErrorKind::Unreachable => format!("server unreachable: {err}"),
        BackendErrorKind::Other => err.to_string(),
    };
    BackendError::new(kind, format!("{server}: {what}"), message).with_source(err)
}

pub(super) fn millis(ttl: Duration) -> String {
    ttl.as_millis().to_string()
}

pub(super) fn pttl(value: i64) -> Option<Duration> {
    u64::try_from(value).ok().map(Duration::from_millis)
}

/// Reads the reply of the acquire script; `server` names it in errors.
pub(super) fn acquired(reply: &[i64], fenced: bool, server: &str) -> Result<Acquired, LockError> {
    match reply {
        [1, fence] => Ok(Acquired::Obtained {
            fence: fenced.then(|| u64::try_from(*fence).unwrap_or(0)),
        }),
        [0, index, remaining] => Ok(Acquired::Busy {
            index: usize::try_from(*index - 1).unwrap_or(0),
            remaining: pttl(*remaining),
        }),
        other => Err(BackendError::new(
            BackendErrorKind::Other,
            format!("{server}: obtain"),
            format!("unexpected reply {other:?} from the acquire script"),
        )
        .into()),
    }
}

impl Backend for RedisBackend {
    fn acquire<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        Box::pin(async move {
            let n = req.keys.len().to_string();
            let ttl = millis(req.ttl);
            let reply: Vec<i64> = match req.fence_key {
                Some(fence_key) => {
                    let mut keys = req.keys.to_vec();
                    keys.push(fence_key.to_owned());
                    self.invoke("obtain", &keys, &ACQUIRE, &[req.value, &ttl, &n])
                        .await?
                }
                None => {
                    self.invoke("obtain", req.keys, &ACQUIRE, &[req.value, &ttl, &n])
                        .await?
                }
            };
            acquired(&reply, req.fence_key.is_some(), &self.name)
        })
    }

    fn refresh<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            if token.len() != TOKEN_LEN {
                return Ok(false);
            }
            let done: i64 = self
                .invoke("refresh", keys, &REFRESH, &[token, &millis(ttl)])
                .await?;
            Ok(done == 1)
        })
    }

    fn release<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            if token.len() != TOKEN_LEN {
                return Ok(false);
            }
            let done: i64 = self.invoke("release", keys, &RELEASE, &[token]).await?;
            Ok(done == 1)
        })
    }

    fn remaining<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Duration>, LockError>> {
        Box::pin(async move {
            if token.len() != TOKEN_LEN {
                return Ok(None);
            }
            let remaining: i64 = self.invoke("ttl", keys, &REMAINING, &[token]).await?;
            Ok(pttl(remaining))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn redact_hides_the_password_only() {
        assert_eq!(
            redact("redis://app:s3cret@host:6379/0"),
            "redis://app:***@host:6379/0"
        );
        assert_eq!(redact("redis://:s3cret@host"), "redis://:***@host");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
    }
}
