//! The resource side of fencing: a store that refuses stale writes.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use redis::Script;

use crate::backend::{ServerConn, open_connection, send_once_more};
use crate::{LockError, RedisConfig};

static FENCED_SET: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("backend/scripts/fenced_set.lua")));

/// A key-value store that applies a write only when it carries a fencing
/// token not older than the newest token already applied to that key.
///
/// This is where fencing is enforced: a lock holder that was paused past its
/// ttl still has its old token ([`Lock::fence_token`](crate::Lock::fence_token)),
/// and once a newer holder has written, [`set`](Self::set) refuses it. The
/// comparison and the write are one atomic step, and an equal token is
/// accepted, so a holder can write several times under one lock.
///
/// Two stores behind one type, like [`Locker`](crate::Locker):
/// [`FencedStore::memory`] keeps the keys in this process (for single-process
/// programs and tests), [`FencedStore::connect`] keeps each one in a Redis
/// hash with the fields `fence` and `value`, written by a Lua script. The
/// Redis store reconnects by itself, as a locker does: a call that meets a
/// dropped or refused connection (a server restart) is sent once more on a
/// new one, which is safe since a write with the same token and value is
/// accepted again.
///
/// [`with_namespace`](Self::with_namespace) prefixes every key, as
/// [`Locker::with_namespace`](crate::Locker::with_namespace) does; give the
/// store the locker's namespace to keep both side by side:
/// `FencedStore::connect(url).await?.with_namespace(locker.namespace())`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
/// use lockmacro_runtime::{FencedStore, FencedValue};
///
/// let store = FencedStore::memory();
/// assert!(store.set("report", "from the holder with token 2", 2).await?);
/// // A holder that still believes it owns the lock, with an older token:
/// assert!(!store.set("report", "stale", 1).await?);
/// assert!(store.set("report", "token 2 again", 2).await?);
/// assert_eq!(
///     store.get("report").await?,
///     Some(FencedValue { token: 2, value: "token 2 again".into() })
/// );
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FencedStore {
    inner: Inner,
    /// `namespace:` (nested ones joined), or empty.
    prefix: Arc<str>,
}

#[derive(Clone)]
enum Inner {
    Memory(Arc<Mutex<HashMap<String, FencedValue>>>),
    Redis {
        conn: ServerConn,
        /// `redis 127.0.0.1:6379`, for error messages.
        server: String,
    },
}

impl std::fmt::Debug for FencedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let store = match &self.inner {
            Inner::Memory(_) => "memory",
            Inner::Redis { server, .. } => server,
        };
        match self.namespace() {
            "" => write!(f, "FencedStore({store})"),
            namespace => write!(f, "FencedStore({store}, namespace `{namespace}`)"),
        }
    }
}

/// What a fenced key holds: the last value applied and its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedValue {
    /// The fencing token of the write that is applied.
    pub token: u64,
    /// The value it wrote.
    pub value: String,
}

impl FencedStore {
    /// An empty store in this process's memory. Clones share the keys.
    pub fn memory() -> Self {
        FencedStore {
            inner: Inner::Memory(Arc::default()),
            prefix: Arc::from(""),
        }
    }

    /// The same store, with every key prefixed by `namespace:`, as
    /// [`Locker::with_namespace`](crate::Locker::with_namespace) does.
    /// Namespaces nest: `a` then `b` gives `a:b:`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::{FencedStore, Locker};
    ///
    /// let locker = Locker::memory().with_namespace("shop");
    /// let store = FencedStore::memory();
    /// let shop = store.with_namespace(locker.namespace());
    /// assert!(shop.set("report", "written", 1).await?);
    /// // Kept at `shop:report`, beside the locker's `shop:…` keys.
    /// assert!(store.get("shop:report").await?.is_some());
    /// assert!(store.get("report").await?.is_none());
    /// # Ok(()) }
    /// ```
    pub fn with_namespace(&self, namespace: &str) -> Self {
        if namespace.is_empty() {
            return self.clone();
        }
        FencedStore {
            inner: self.inner.clone(),
            prefix: Arc::from(format!("{}{namespace}:", self.prefix)),
        }
    }

    /// The namespace, without its trailing `:` (empty when there is none).
    pub fn namespace(&self) -> &str {
        self.prefix.strip_suffix(':').unwrap_or("")
    }

    /// `key` with the namespace, as stored.
    fn wire_key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// `key` as errors name it: as given, with the namespace beside it.
    fn described(&self, key: &str) -> String {
        crate::error::described_key(key, self.namespace())
    }

    /// A store on one Redis server (URL as for
    /// [`Locker::connect`](crate::Locker::connect)), with the default
    /// [`RedisConfig`]. Each key is a hash with the fields `fence` and
    /// `value`; other clients can read it with `HGET key value`.
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::connect_with(url, RedisConfig::default()).await
    }

    /// A store on one Redis server, with `config`: its timeouts bound every
    /// call, and (with the `tls-rustls` feature) its root certificate lets
    /// `rediss://` trust a private CA.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{FencedStore, RedisConfig};
    ///
    /// let config = RedisConfig::default().response_timeout(Duration::from_millis(500));
    /// let store = FencedStore::connect_with("redis://redis.internal:6379/", config).await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub async fn connect_with(url: &str, config: RedisConfig) -> Result<Self, LockError> {
        let (_, conn, server) = open_connection(url, &config).await?;
        Ok(FencedStore {
            inner: Inner::Redis { conn, server },
            prefix: Arc::from(""),
        })
    }

    /// Writes `value` to `key` if `token` is not older than the newest token
    /// applied to `key`; returns whether it did. A stale write changes
    /// nothing.
    ///
    /// Safe to repeat after an error: the same token and value are accepted
    /// again. A token of 0, which no backend mints, is refused with
    /// [`LockError::InvalidToken`] before anything is sent.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use lockmacro_runtime::{FencedStore, LockError};
    ///
    /// let store = FencedStore::memory();
    /// let refused = store.set("report", "unfenced", 0).await;
    /// assert!(matches!(refused, Err(LockError::InvalidToken { token: 0, .. })));
    /// # }
    /// ```
    pub async fn set(&self, key: &str, value: &str, token: u64) -> Result<bool, LockError> {
        if token == 0 {
            return Err(LockError::InvalidToken {
                key: key.to_owned(),
                token,
                reason: "no lock is fenced with 0; pass the lock's `fence_token()`, taken with \
                         fencing on"
                    .into(),
            });
        }
        let wire_key = self.wire_key(key);
        match &self.inner {
            Inner::Memory(keys) => {
                let mut keys = keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                if keys
                    .get(&wire_key)
                    .is_some_and(|newest| newest.token > token)
                {
                    return Ok(false);
                }
                keys.insert(
                    wire_key,
                    FencedValue {
                        token,
                        value: value.to_owned(),
                    },
                );
                Ok(true)
            }
            Inner::Redis { conn, server } => {
                let what = format!("fenced set {}", self.described(key));
                let token = token.to_string();
                let (wire_key, token) = (&wire_key, &token);
                let written: i64 = send_once_more(conn, server, &what, |mut conn| async move {
                    FENCED_SET
                        .key(wire_key)
                        .arg(token)
                        .arg(value)
                        .invoke_async(&mut conn)
                        .await
                })
                .await?;
                Ok(written == 1)
            }
        }
    }

    /// The value applied last to `key` and its token, if any.
    pub async fn get(&self, key: &str) -> Result<Option<FencedValue>, LockError> {
        let wire_key = self.wire_key(key);
        match &self.inner {
            Inner::Memory(keys) => Ok(keys
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .get(&wire_key)
                .cloned()),
            Inner::Redis { conn, server } => {
                let what = format!("fenced get {}", self.described(key));
                let mut read = redis::cmd("HMGET");
                read.arg(&wire_key).arg("fence").arg("value");
                let (token, value): (Option<u64>, Option<String>) =
                    send_once_more(conn, server, &what, |mut conn| {
                        let read = read.clone();
                        async move { read.query_async(&mut conn).await }
                    })
                    .await?;
                Ok(token
                    .zip(value)
                    .map(|(token, value)| FencedValue { token, value }))
            }
        }
    }
}
