//! Listing what is held, for operators: [`Locker::list`].

use futures_util::stream::{self, StreamExt, TryStreamExt};

use crate::backend::Inspection;
use crate::{LockError, Locker};

/// How many keys a listing inspects at once.
const INSPECTED_AT_ONCE: usize = 16;

/// One held key, as [`Locker::list`] reports it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
/// use std::time::Duration;
/// use lockmacro_runtime::{KeyKind, Locker, ObtainOptions};
///
/// let locker = Locker::memory();
/// let _lock = locker.obtain("report", Duration::from_secs(30), ObtainOptions::new()).await?;
/// let listed = locker.list("").await?;
/// assert_eq!(listed[0].key, "report");
/// assert_eq!(listed[0].inspection.kind, Some(KeyKind::Lock));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyInfo {
    /// The key as given to `obtain`: without the locker's namespace.
    pub key: String,
    /// What holds it and who waits for it, as
    /// [`Locker::inspect`] reports it.
    pub inspection: Inspection,
}

impl KeyInfo {
    /// `key` (without the namespace), as `inspection` shows it.
    pub fn new(key: impl Into<String>, inspection: Inspection) -> Self {
        KeyInfo {
            key: key.into(),
            inspection,
        }
    }
}

impl Locker {
    /// Every key held under the locker's namespace whose name (as given to
    /// `obtain`) starts with `prefix` (`""` for all), sorted by name, each
    /// with what [`inspect`](Self::inspect) tells of it: its kind, holders
    /// with their metadata and remaining leases, fair waiters and last
    /// fencing token. Fence counters, queues and the other names a backend
    /// keeps beside a lock are not listed, nor keys nothing holds.
    ///
    /// For operators: on Redis it walks the keyspace with `SCAN` (on every
    /// master of a cluster, and of Redlock), on etcd it reads the prefix's
    /// range, on PostgreSQL the live rows of its lock and share tables (a
    /// lock inside a transaction leaves only a hash of its key, and is not
    /// listed), then reads each key found, so it costs a round trip per key.
    /// Keys taken or released meanwhile may or may not be listed. Fails with
    /// [`BackendErrorKind::Unsupported`](crate::BackendErrorKind::Unsupported)
    /// on a backend that cannot list its keys.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory().with_namespace("billing");
    /// let ttl = Duration::from_secs(30);
    /// let _a = locker.obtain("user:1", ttl, ObtainOptions::new().metadata("worker-1")).await?;
    /// let _b = locker.obtain("user:2", ttl, ObtainOptions::new().fence()).await?;
    /// let _c = locker.obtain("report", ttl, ObtainOptions::new()).await?;
    ///
    /// let users = locker.list("user:").await?;
    /// let keys: Vec<&str> = users.iter().map(|info| info.key.as_str()).collect();
    /// assert_eq!(keys, ["user:1", "user:2"]);
    /// assert_eq!(users[0].inspection.holders[0].metadata, "worker-1");
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, prefix: &str) -> Result<Vec<KeyInfo>, LockError> {
        let backend = self.backend();
        let names = backend.keys(&self.wire_key(prefix)).await?;
        let namespace = &self.wire_key("");
        let inspected: Vec<Option<KeyInfo>> = stream::iter(names)
            .map(|wire_key| async move {
                let key = match wire_key.strip_prefix(namespace.as_str()) {
                    Some(key) if !key.is_empty() => key.to_owned(),
                    _ => return Ok(None),
                };
                let fence_key = backend.fence_key(&wire_key);
                let inspection = backend.inspect(&wire_key, &fence_key).await?;
                Ok::<_, LockError>(
                    inspection
                        .kind
                        .is_some()
                        .then(|| KeyInfo::new(key, inspection)),
                )
            })
            .buffered(INSPECTED_AT_ONCE)
            .try_collect()
            .await?;
        Ok(inspected.into_iter().flatten().collect())
    }
}
