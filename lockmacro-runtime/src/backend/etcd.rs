//! Locks on etcd: a lock is a key attached to an etcd lease.
//!
//! # On the wire
//!
//! | key | value | lease | written by |
//! |---|---|---|---|
//! | `<key>` | token (32 hex digits), then metadata | one lease per lock, of the ttl rounded up to whole seconds | acquire, one transaction for all of a lock's keys |
//! | `<key>/queue/<token>` | the fair waiter's value | one lease per fair attempt, of its wait | a fair attempt that found the key taken |
//! | `<fence_key>` | the token of the lock that last wrote it | none | acquire with an explicit fence key, in the same transaction |
//!
//! Acquire grants a lease, then sends one transaction: if every key has
//! `create_revision == 0` (does not exist), put them all with the lease,
//! else read them. Refresh is a lease keep-alive plus a read that checks the
//! keys still hold the token; release deletes the keys in a transaction that
//! compares their value and lease, then revokes the lease. Waiters watch the
//! key for deletions (a release, or the lease running out).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, KeyValue, PutOptions,
    SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, TxnResponse, WatchFilterType, WatchOptions,
};
use tokio::sync::watch;

use super::{
    AcquireRequest, Acquired, Backend, BoxFuture, FairQueue, RefreshRequest, ReleaseListener,
    TOKEN_LEN,
};
use crate::LockError;
use crate::error::{BackendError, BackendErrorKind};

/// Most operations etcd accepts in one transaction (`--max-txn-ops`, 128 by
/// default): longer batches of reads are split.
const MAX_TXN_OPS: usize = 128;

/// Settings for [`EtcdBackend::connect_with`].
///
/// ```
/// use std::time::Duration;
/// use lockmacro_runtime::EtcdConfig;
///
/// let config = EtcdConfig::default().response_timeout(Duration::from_secs(1));
/// # let _ = config;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EtcdConfig {
    connect_timeout: Duration,
    response_timeout: Duration,
    user: Option<(String, String)>,
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig {
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            user: None,
        }
    }
}

impl EtcdConfig {
    /// How long to wait for a TCP connection to one member; then the next
    /// member is tried. Default: 2 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one member may take to answer a request; then the next member
    /// is tried, so that a member that is frozen or cut off costs this much
    /// once, not every call. Also how long a call keeps going round the
    /// members while none can serve it (a cluster electing a leader refuses
    /// everywhere for an election timeout or two). Default: 2 s.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Authenticates as `user` with `password` (etcd's own users and roles).
    /// The user needs read and write on the lock keys, their `/queue/`
    /// prefixes and any fence keys, and the lease permissions.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::{EtcdBackend, EtcdConfig, Locker};
    ///
    /// let config = EtcdConfig::default().user("billing", "s3cret");
    /// let locker = Locker::new(EtcdBackend::connect_with(["http://10.0.0.1:2379"], config).await?);
    /// # Ok(()) }
    /// ```
    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }
}

/// Locks on an etcd cluster: keys attached to leases, wake-ups by watch,
/// fencing tokens from revisions.
///
/// Give it every member's client URL. It keeps one connection per member and
/// talks to one at a time; when that member does not answer (killed, frozen,
/// cut off, or without a leader) it moves to the next one. A single
/// `etcd_client::Client` over all members would keep dialing a dead member
/// after its leader is killed (etcdv3/etcd-client#39).
///
/// # Leases are whole seconds
///
/// etcd grants leases in whole seconds, and at least its minimum (1.5 × the
/// election timeout, rounded up: 2 s with the default settings). A ttl is
/// rounded up to that on the server, never refused: `ttl = "500ms"` keeps
/// the key on the server for at least a second. The holder still trusts the
/// lease for the ttl it asked for (less the drift margin, as on Redis): the
/// watchdog declares it lost after 500 ms without a confirmed refresh, while
/// the server may keep others out for up to the rounded lease. The rounding
/// only ever delays the next holder (after a crash), never lets two in. The
/// default drift margin ([`Backend::drift`], `ttl / 100 + 2 ms`) fits etcd
/// as it fits Redis: the leader counts a renewal from when it applies it,
/// after the request was sent; it checks for expired leases only every
/// half second; and a new leader extends every lease by an election timeout.
/// All of these make the server's expiry later than `sent + ttl`, never
/// earlier.
///
/// A lock takes at most 64 keys: etcd refuses a transaction of more than 128
/// comparisons (`--max-txn-ops`), and each key needs two.
///
/// # Fencing tokens are revisions
///
/// A lock's fencing token is the etcd revision at which it took its keys
/// (their `create_revision`). Revisions are assigned by the Raft leader in
/// log order and are part of the replicated state, so they strictly increase
/// across all keys, through leader elections and member restarts: a newer
/// holder of any key always has a larger token than every older one. This is
/// the token Kleppmann's "How to do distributed locking" (2016) asks for, and
/// the property Jepsen's etcd 3.4.3 analysis (2020) found held, while it
/// showed that the lease alone cannot stop a paused holder from acting late:
/// only a resource that checks the token can. With an explicit fence key,
/// the same transaction also writes that key (its value is the token of the
/// lock), so its `mod_revision` is the lock's token; tokens are then not
/// consecutive, but still strictly increasing per fence key and across them.
///
/// # Fair waiters
///
/// A fair waiter puts `<key>/queue/<token>` under a lease of its wait; the
/// entry with the lowest `create_revision` is first in line, and takes the
/// key when it is free (a transaction checks that no entry is older). Every
/// waiter is woken by the deletions it watches, so the release costs nothing
/// more; the next in line takes the key with one more round trip.
///
/// ```no_run
/// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
/// use lockmacro_runtime::{EtcdBackend, Locker};
///
/// let backend = EtcdBackend::connect(["http://10.0.0.1:2379", "http://10.0.0.2:2379", "http://10.0.0.3:2379"]).await?;
/// let locker = Locker::new(backend);
/// # Ok(()) }
/// ```
pub struct EtcdBackend {
    members: Vec<Member>,
    /// Index of the member the last successful call went to.
    current: AtomicUsize,
    config: EtcdConfig,
    /// What this process knows of the locks it took, by token: spares a read
    /// before each refresh and release. Never trusted alone: every change is
    /// conditional on the store's own state.
    held: Mutex<HashMap<String, Held>>,
}

struct Member {
    /// `host:port`, for errors.
    name: String,
    client: Client,
}

#[derive(Debug, Clone)]
struct Held {
    lease: i64,
    value: String,
    /// The lease length asked for, in whole seconds.
    secs: i64,
    /// A fair waiter's queue lease, revoked once it is done waiting.
    queue_lease: Option<i64>,
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field(
                "members",
                &self.members.iter().map(|m| &m.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// `ttl` in whole seconds, rounded up: etcd's lease unit.
fn lease_secs(ttl: Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

fn member_name(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.trim_end_matches('/').to_owned()
}

/// Whether another member may succeed where this one failed: the member is
/// unreachable, too slow, or has no leader.
fn moves_on(err: &etcd_client::Error) -> bool {
    use etcd_client::Error;
    match err {
        Error::IoError(_) | Error::TransportError(_) | Error::WatchError(_) => true,
        Error::GRpcStatus(status) => matches!(
            status.code(),
            tonic::Code::Unavailable
                | tonic::Code::DeadlineExceeded
                | tonic::Code::Unknown
                | tonic::Code::Cancelled
                | tonic::Code::Internal
                | tonic::Code::Aborted
        ),
        _ => false,
    }
}

fn error(member: &str, what: &str, err: &etcd_client::Error) -> BackendError {
    use etcd_client::Error;
    let kind = match err {
        Error::IoError(_) | Error::TransportError(_) => BackendErrorKind::Unreachable,
        Error::GRpcStatus(status) => match status.code() {
            tonic::Code::Unavailable => BackendErrorKind::Unreachable,
            tonic::Code::DeadlineExceeded => BackendErrorKind::Timeout,
            tonic::Code::Unauthenticated => BackendErrorKind::Authentication,
            tonic::Code::PermissionDenied => BackendErrorKind::Permission,
            _ => BackendErrorKind::Other,
        },
        _ => BackendErrorKind::Other,
    };
    let message = match kind {
        BackendErrorKind::Unreachable => format!("server unreachable: {err}"),
        BackendErrorKind::Authentication => format!("authentication failed: {err}"),
        BackendErrorKind::Permission => format!(
            "permission denied: {err}; grant the user read and write on the lock keys, \
             their `/queue/` prefixes and the fence keys"
        ),
        _ => err.to_string(),
    };
    BackendError::new(kind, format!("etcd {member}: {what}"), message)
}

fn lease_not_found(err: &etcd_client::Error) -> bool {
    match err {
        etcd_client::Error::GRpcStatus(status) => status.code() == tonic::Code::NotFound,
        etcd_client::Error::LeaseKeepAliveError(message) => message.contains("not found"),
        _ => false,
    }
}

fn revision(response: &TxnResponse) -> i64 {
    response.header().map_or(0, |header| header.revision())
}

/// The single key-value of each `get` in `response`, in order.
fn gets(response: &TxnResponse) -> Vec<Option<KeyValue>> {
    response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get.kvs().first().cloned()),
            _ => None,
        })
        .collect()
}

fn owned_by(kv: &KeyValue, token: &str) -> bool {
    token.len() == TOKEN_LEN && kv.value().get(..TOKEN_LEN) == Some(token.as_bytes())
}

fn fence(revision: i64) -> u64 {
    u64::try_from(revision).unwrap_or(0)
}

/// The queue of fair waiters of `key`, as a key prefix.
fn queue_prefix(key: &str) -> String {
    format!("{key}/queue/")
}

impl EtcdBackend {
    /// Connects to the members at `endpoints` (`http://host:port` or
    /// `host:port`), with the default [`EtcdConfig`].
    ///
    /// Fails when no member answers, naming each one and what went wrong.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::{EtcdBackend, Locker};
    ///
    /// let backend = EtcdBackend::connect(["10.0.0.1:2379", "10.0.0.2:2379", "10.0.0.3:2379"]).await?;
    /// let locker = Locker::new(backend).with_namespace("billing");
    /// # Ok(()) }
    /// ```
    pub async fn connect<I, S>(endpoints: I) -> Result<Self, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::connect_with(endpoints, EtcdConfig::default()).await
    }

    /// Like [`connect`](Self::connect), with `config`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{EtcdBackend, EtcdConfig};
    ///
    /// // Give up on a member after 500 ms and try the next one.
    /// let config = EtcdConfig::default().response_timeout(Duration::from_millis(500));
    /// let backend = EtcdBackend::connect_with(["http://10.0.0.1:2379", "http://10.0.0.2:2379"], config).await?;
    /// # let _ = backend;
    /// # Ok(()) }
    /// ```
    pub async fn connect_with<I, S>(endpoints: I, config: EtcdConfig) -> Result<Self, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut members = Vec::new();
        for endpoint in endpoints {
            let url = endpoint.as_ref();
            let name = member_name(url);
            let url = if url.contains("://") {
                url.to_owned()
            } else {
                format!("http://{url}")
            };
            let mut options = ConnectOptions::new()
                .with_connect_timeout(config.connect_timeout)
                // A member cut off from its leader refuses at once rather
                // than serving stale reads or holding watches that hear
                // nothing.
                .with_require_leader(true)
                .with_keep_alive(config.response_timeout, config.response_timeout)
                .with_keep_alive_while_idle(true);
            if let Some((user, password)) = &config.user {
                options = options.with_user(user.clone(), password.clone());
            }
            let connect = Client::connect([url.as_str()], Some(options));
            let client = match tokio::time::timeout(config.connect_timeout, connect).await {
                Ok(Ok(client)) => client,
                Ok(Err(err)) => return Err(error(&name, "connect", &err).into()),
                Err(_) => {
                    return Err(BackendError::new(
                        BackendErrorKind::Timeout,
                        format!("etcd {name}: connect"),
                        format!("no answer within {:?}", config.connect_timeout),
                    )
                    .into());
                }
            };
            members.push(Member { name, client });
        }
        if members.is_empty() {
            return Err(LockError::InvalidUrl {
                url: String::new(),
                reason: "no etcd endpoints given; pass at least one member's URL".into(),
            });
        }
        let backend = EtcdBackend {
            members,
            current: AtomicUsize::new(0),
            config,
            held: Mutex::default(),
        };
        // The clients connect lazily: a first call finds out whether any
        // member can be reached.
        backend
            .call("connect", |mut client| async move {
                client
                    .get("lockmacro", Some(GetOptions::new().with_count_only()))
                    .await
            })
            .await?;
        Ok(backend)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        // Every change to the map is one insert or remove: a panic elsewhere
        // cannot leave it half-written.
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `op` on the current member, then on each other one in turn while
    /// the failure is one another member may not have (unreachable, slow, no
    /// leader), for up to the response timeout: a cluster electing a leader
    /// answers "no leader" everywhere for about an election timeout, and an
    /// operation that waits that out (a release above all) spares the next
    /// holder a wait for the lease. Every operation sent here is safe to
    /// repeat: a retry of an acquire that went through finds its own value
    /// and reports it taken.
    async fn call<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T, LockError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        /// Between two rounds over every member.
        const PAUSE: Duration = Duration::from_millis(50);
        let give_up = tokio::time::Instant::now() + self.config.response_timeout;
        let start = self.current.load(Ordering::Relaxed);
        let count = self.members.len();
        let mut failures = Vec::new();
        let mut last = None;
        for step in 0.. {
            if step > 0 && step % count == 0 {
                if tokio::time::Instant::now() + PAUSE >= give_up {
                    break;
                }
                tokio::time::sleep(PAUSE).await;
                // Only the last round's failures are reported.
                failures.clear();
            }
            let index = (start + step) % count;
            let member = &self.members[index];
            match tokio::time::timeout(self.config.response_timeout, op(member.client.clone()))
                .await
            {
                Ok(Ok(value)) => {
                    if index != start {
                        self.current.store(index, Ordering::Relaxed);
                        tracing::debug!(target: "lockmacro", member = %member.name, "etcd: moved to another member");
                    }
                    return Ok(value);
                }
                Ok(Err(err)) if !moves_on(&err) => {
                    return Err(error(&member.name, what, &err).with_source(err).into());
                }
                Ok(Err(err)) => {
                    let err = error(&member.name, what, &err).with_source(err);
                    failures.push(err.to_string());
                    last = Some(err.kind());
                }
                Err(_) => {
                    failures.push(format!(
                        "etcd {}: {what}: no answer within {:?}",
                        member.name, self.config.response_timeout
                    ));
                    last = Some(BackendErrorKind::Timeout);
                }
            }
        }
        let names: Vec<&str> = self.members.iter().map(|m| m.name.as_str()).collect();
        Err(BackendError::new(
            last.unwrap_or(BackendErrorKind::Unreachable),
            format!("etcd {}: {what}", names.join(", ")),
            format!("no member answered ({})", failures.join("; ")),
        )
        .into())
    }

    async fn grant(&self, secs: i64, what: &str) -> Result<i64, LockError> {
        self.call(what, |mut client| async move {
            client.lease_grant(secs, None).await.map(|lease| lease.id())
        })
        .await
    }

    /// Revokes `lease`, which deletes every key still attached to it; a lease
    /// already gone is no error.
    async fn revoke(&self, lease: i64, what: &str) -> Result<(), LockError> {
        self.call(what, |mut client| async move {
            match client.lease_revoke(lease).await {
                Ok(_) => Ok(()),
                Err(err) if lease_not_found(&err) => Ok(()),
                Err(err) => Err(err),
            }
        })
        .await
    }

    /// Renews `lease`; whether it still existed.
    async fn keep_alive(&self, lease: i64, what: &str) -> Result<bool, LockError> {
        self.call(what, |mut client| async move {
            match client.lease_keep_alive(lease).await {
                Ok(_) => Ok(true),
                Err(err) if lease_not_found(&err) => Ok(false),
                Err(err) => Err(err),
            }
        })
        .await
    }

    async fn txn(&self, what: &str, txn: Txn) -> Result<TxnResponse, LockError> {
        self.call(what, |mut client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })
        .await
    }

    /// The current key-values of `keys`, in order, `MAX_TXN_OPS` per read.
    async fn read(&self, keys: &[&str], what: &str) -> Result<Vec<Option<KeyValue>>, LockError> {
        let mut found = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(MAX_TXN_OPS) {
            let ops: Vec<TxnOp> = chunk.iter().map(|key| TxnOp::get(*key, None)).collect();
            found.extend(gets(&self.txn(what, Txn::new().and_then(ops)).await?));
        }
        Ok(found)
    }

    /// The lease and value that `keys` hold for `token`: from what this
    /// process remembers, else read from the store. `None` when the keys do
    /// not all hold the token on one lease.
    async fn lease_of(
        &self,
        keys: &[String],
        token: &str,
        what: &str,
    ) -> Result<Option<Held>, LockError> {
        if token.len() != TOKEN_LEN {
            return Ok(None);
        }
        if let Some(held) = self.held().get(token).filter(|held| held.lease != 0) {
            return Ok(Some(held.clone()));
        }
        let names: Vec<&str> = keys.iter().map(String::as_str).collect();
        let found = self.read(&names, what).await?;
        Ok(Self::common_lease(&found, token))
    }

    /// The lease and value shared by every key in `found`, if all hold `token`.
    fn common_lease(found: &[Option<KeyValue>], token: &str) -> Option<Held> {
        let first = found.first()?.as_ref()?;
        let all = found.iter().all(|kv| {
            kv.as_ref().is_some_and(|kv| {
                owned_by(kv, token) && kv.lease() == first.lease() && kv.value() == first.value()
            })
        });
        (all && first.lease() != 0).then(|| Held {
            lease: first.lease(),
            value: String::from_utf8_lossy(first.value()).into_owned(),
            secs: 0,
            queue_lease: None,
        })
    }

    /// Compares that each key still holds `held`'s value on its lease.
    fn still_held(keys: &[String], held: &Held) -> Vec<Compare> {
        keys.iter()
            .flat_map(|key| {
                [
                    Compare::value(key.as_str(), CompareOp::Equal, held.value.as_str()),
                    Compare::lease(key.as_str(), CompareOp::Equal, held.lease),
                ]
            })
            .collect()
    }

    /// Busy at the first key held by someone else (`found`), else at the
    /// first key with fair waiters queued (`heads`), with what is left of
    /// that holder's or waiter's lease.
    async fn busy(
        &self,
        found: &[Option<KeyValue>],
        heads: &[Option<KeyValue>],
        value: &str,
        what: &str,
    ) -> Result<Acquired, LockError> {
        let other = |kvs: &[Option<KeyValue>]| {
            kvs.iter().enumerate().find_map(|(index, kv)| {
                kv.as_ref()
                    .filter(|kv| kv.value() != value.as_bytes())
                    .map(|kv| (index, kv.lease()))
            })
        };
        let Some((index, lease)) = other(found).or_else(|| other(heads)) else {
            // Changed between the comparison and the reads of another
            // attempt: try again at once.
            return Ok(Acquired::Busy {
                index: 0,
                remaining: Some(Duration::ZERO),
            });
        };
        let remaining = self.lease_left(lease, what).await?;
        Ok(Acquired::Busy { index, remaining })
    }

    /// What is left of `lease`; `None` for a key without lease.
    async fn lease_left(&self, lease: i64, what: &str) -> Result<Option<Duration>, LockError> {
        if lease == 0 {
            return Ok(None);
        }
        let ttl = self
            .call(what, |mut client| async move {
                client
                    .lease_time_to_live(lease, None)
                    .await
                    .map(|left| left.ttl())
            })
            .await?;
        // A lease about to go reports 0 or -1: it is gone within a second.
        Ok(Some(Duration::from_secs(
            u64::try_from(ttl).unwrap_or(0).max(1),
        )))
    }

    async fn acquire_plain(&self, req: &AcquireRequest<'_>) -> Result<Acquired, LockError> {
        if req.keys.len() > MAX_TXN_OPS / 2 {
            return Err(LockError::InvalidKey {
                key: req.keys.join(", "),
                reason: format!(
                    "etcd takes at most {} keys in one lock (two comparisons each, and etcd \
                     refuses a transaction of more than {MAX_TXN_OPS}); lock fewer keys",
                    MAX_TXN_OPS / 2
                ),
            });
        }
        let what = format!("obtain `{}`", req.keys.join("`, `"));
        let secs = lease_secs(req.ttl);
        let lease = self.grant(secs, &what).await?;
        self.pending_lease(req, lease, secs);
        // Free: no holder, and no fair waiter queued (an ordinary obtain
        // does not overtake them). An empty range compares as a missing key.
        let free: Vec<Compare> = req
            .keys
            .iter()
            .flat_map(|key| {
                [
                    Compare::create_revision(key.as_str(), CompareOp::Equal, 0),
                    Compare::create_revision(queue_prefix(key), CompareOp::Equal, 0).with_prefix(),
                ]
            })
            .collect();
        let mut puts: Vec<TxnOp> = req
            .keys
            .iter()
            .map(|key| {
                TxnOp::put(
                    key.as_str(),
                    req.value,
                    Some(PutOptions::new().with_lease(lease)),
                )
            })
            .collect();
        if let Some(fence_key) = req.fence_key {
            puts.push(TxnOp::put(fence_key, req.token(), None));
        }
        let reads: Vec<TxnOp> = req
            .keys
            .iter()
            .map(|key| TxnOp::get(key.as_str(), None))
            .chain(req.keys.iter().map(|key| {
                let head = GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Ascend)
                    .with_limit(1);
                TxnOp::get(queue_prefix(key), Some(head))
            }))
            .collect();
        let txn = Txn::new().when(free).and_then(puts).or_else(reads);
        let response = match self.txn(&what, txn).await {
            Ok(response) => response,
            Err(err) => {
                self.unpend_lease(req.token(), lease);
                self.forget_lease(lease, &what).await;
                return Err(err);
            }
        };
        if response.succeeded() {
            self.held().insert(
                req.token().to_owned(),
                Held {
                    lease,
                    value: req.value.to_owned(),
                    secs,
                    queue_lease: None,
                },
            );
            return Ok(Acquired::Obtained {
                fence: req.fence_key.map(|_| fence(revision(&response))),
            });
        }
        self.unpend_lease(req.token(), lease);
        self.forget_lease(lease, &what).await;
        let mut found = gets(&response);
        let heads = found.split_off(req.keys.len());
        // A retry of an attempt whose reply was lost: the keys hold our value.
        if found.iter().all(|kv| {
            kv.as_ref()
                .is_some_and(|kv| kv.value() == req.value.as_bytes())
        }) && let Some(mut held) = Self::common_lease(&found, req.token())
        {
            held.secs = secs;
            let fence = req
                .fence_key
                .map(|_| self::fence(found[0].as_ref().map_or(0, KeyValue::create_revision)));
            self.held().insert(req.token().to_owned(), held);
            return Ok(Acquired::Obtained { fence });
        }
        self.busy(&found, &heads, req.value, &what).await
    }

    /// Records `lease`, granted for an attempt of `req`'s token, before the
    /// request that attaches its keys to it is sent. A give-back that comes
    /// while that request is on its way (the obtain's future dropped, its
    /// claim released in the background) then finds the lease and revokes
    /// it: the keys go with it if the request landed first, and are never
    /// written if it lands later, as etcd refuses a put to a revoked lease.
    fn pending_lease(&self, req: &AcquireRequest<'_>, lease: i64, secs: i64) {
        let mut held = self.held();
        let entry = held.entry(req.token().to_owned()).or_insert(Held {
            lease: 0,
            value: String::new(),
            secs: 0,
            queue_lease: None,
        });
        entry.lease = lease;
        entry.value = req.value.to_owned();
        entry.secs = secs;
    }

    /// Undoes [`pending_lease`](Self::pending_lease) for a request that did
    /// not attach the lease.
    fn unpend_lease(&self, token: &str, lease: i64) {
        let mut held = self.held();
        if let Some(entry) = held.get_mut(token)
            && entry.lease == lease
        {
            if entry.queue_lease.is_none() {
                held.remove(token);
            } else {
                entry.lease = 0;
            }
        }
    }

    /// Revokes a lease that no key was attached to; failures only leave it
    /// to expire by itself.
    async fn forget_lease(&self, lease: i64, what: &str) {
        if let Err(err) = self.revoke(lease, what).await {
            tracing::debug!(target: "lockmacro", %err, "etcd: unused lease left to expire");
        }
    }

    /// A fair attempt: take the key if it is free and nobody is queued ahead,
    /// else join its queue (once) for `wait`.
    async fn acquire_fair(
        &self,
        req: &AcquireRequest<'_>,
        wait: Duration,
    ) -> Result<Acquired, LockError> {
        let key = req.keys[0].as_str();
        let what = format!("obtain `{key}` (fair)");
        let queue = queue_prefix(key);
        let mine = format!("{queue}{}", req.token());
        // A few rounds at most: each one lost to a concurrent change of the
        // queue front means another waiter made progress.
        for _ in 0..8 {
            let head_options = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_limit(1);
            let response = self
                .txn(
                    &what,
                    Txn::new().and_then([
                        TxnOp::get(key, None),
                        TxnOp::get(queue.as_str(), Some(head_options)),
                        TxnOp::get(mine.as_str(), None),
                    ]),
                )
                .await?;
            let found = gets(&response);
            let (holder, head, queued) = (&found[0], &found[1], &found[2]);
            if let Some(holder) = holder
                && holder.value() == req.value.as_bytes()
            {
                // Taken by an earlier attempt whose reply was lost.
                let fence = req.fence_key.map(|_| fence(holder.create_revision()));
                self.done_waiting(req.token(), &what).await;
                return Ok(Acquired::Obtained { fence });
            }
            let first = head
                .as_ref()
                .is_none_or(|head| head.key() == mine.as_bytes());
            if holder.is_none() && first {
                // Nobody holds it and nobody is ahead: take it, unless the
                // queue's front changed since it was read.
                let front = match head {
                    Some(head) => Compare::create_revision(
                        queue.as_str(),
                        CompareOp::Greater,
                        head.create_revision() - 1,
                    )
                    .with_prefix(),
                    None => {
                        Compare::create_revision(queue.as_str(), CompareOp::Equal, 0).with_prefix()
                    }
                };
                let secs = lease_secs(req.ttl);
                let lease = self.grant(secs, &what).await?;
                self.pending_lease(req, lease, secs);
                let mut ops = vec![
                    TxnOp::put(key, req.value, Some(PutOptions::new().with_lease(lease))),
                    TxnOp::delete(mine.as_str(), None),
                ];
                if let Some(fence_key) = req.fence_key {
                    ops.push(TxnOp::put(fence_key, req.token(), None));
                }
                let txn = Txn::new()
                    .when([Compare::create_revision(key, CompareOp::Equal, 0), front])
                    .and_then(ops);
                let response = match self.txn(&what, txn).await {
                    Ok(response) => response,
                    Err(err) => {
                        self.unpend_lease(req.token(), lease);
                        self.forget_lease(lease, &what).await;
                        return Err(err);
                    }
                };
                if response.succeeded() {
                    let queue_lease = self.held().remove(req.token()).and_then(|h| h.queue_lease);
                    if let Some(queue_lease) = queue_lease {
                        self.forget_lease(queue_lease, &what).await;
                    }
                    self.held().insert(
                        req.token().to_owned(),
                        Held {
                            lease,
                            value: req.value.to_owned(),
                            secs,
                            queue_lease: None,
                        },
                    );
                    return Ok(Acquired::Obtained {
                        fence: req.fence_key.map(|_| fence(revision(&response))),
                    });
                }
                self.unpend_lease(req.token(), lease);
                self.forget_lease(lease, &what).await;
                continue;
            }
            if !wait.is_zero() && queued.is_none() {
                let queue_lease = self.grant(lease_secs(wait), &what).await?;
                // Recorded first, as `pending_lease` does for a lock's lease:
                // a give-back while the join is on its way revokes it.
                self.held().insert(
                    req.token().to_owned(),
                    Held {
                        lease: 0,
                        value: String::new(),
                        secs: 0,
                        queue_lease: Some(queue_lease),
                    },
                );
                let joined = self
                    .txn(
                        &what,
                        Txn::new()
                            .when([Compare::create_revision(mine.as_str(), CompareOp::Equal, 0)])
                            .and_then([TxnOp::put(
                                mine.as_str(),
                                req.value,
                                Some(PutOptions::new().with_lease(queue_lease)),
                            )]),
                    )
                    .await;
                if joined
                    .as_ref()
                    .is_ok_and(etcd_client::TxnResponse::succeeded)
                {
                    // Joined behind whoever was first: the key may have been
                    // freed meanwhile, with this waiter first; look again.
                    continue;
                }
                self.held().remove(req.token());
                self.forget_lease(queue_lease, &what).await;
                joined?;
            }
            let remaining = match (holder, head) {
                (Some(holder), _) => self.lease_left(holder.lease(), &what).await?,
                (None, Some(head)) => self.lease_left(head.lease(), &what).await?,
                (None, None) => Some(Duration::ZERO),
            };
            return Ok(Acquired::Busy {
                index: 0,
                remaining,
            });
        }
        Ok(Acquired::Busy {
            index: 0,
            remaining: Some(Duration::ZERO),
        })
    }

    /// Drops `token`'s place in a queue, if it has one.
    async fn done_waiting(&self, token: &str, what: &str) {
        let queue_lease = {
            let mut held = self.held();
            match held.get_mut(token) {
                Some(entry) => entry.queue_lease.take(),
                None => None,
            }
        };
        if let Some(queue_lease) = queue_lease {
            self.forget_lease(queue_lease, what).await;
        }
    }

    async fn refresh_all(&self, requests: &[RefreshRequest<'_>]) -> Vec<Result<bool, LockError>> {
        let what = "refresh";
        // One read for every key of every request: which ones still hold
        // their token, and on which lease.
        let names: Vec<&str> = requests
            .iter()
            .flat_map(|req| req.keys.iter().map(String::as_str))
            .collect();
        let found = match self.read(&names, what).await {
            Ok(found) => found,
            Err(err) => {
                let kind = match &err {
                    LockError::Backend(err) => err.kind(),
                    _ => BackendErrorKind::Other,
                };
                let message = err.to_string();
                // The one failure, reported for each lease it left unconfirmed.
                return requests
                    .iter()
                    .map(|_| Err(BackendError::new(kind, "etcd", &message).into()))
                    .collect();
            }
        };
        let mut at = 0;
        let mut renewals = Vec::with_capacity(requests.len());
        for req in requests {
            let kvs = &found[at..at + req.keys.len()];
            at += req.keys.len();
            renewals.push(Self::common_lease(kvs, req.token));
        }
        let futures: Vec<BoxFuture<'_, Result<bool, LockError>>> = requests
            .iter()
            .zip(renewals)
            .map(|(req, current)| -> BoxFuture<'_, Result<bool, LockError>> {
                Box::pin(async move {
                    let Some(current) = current else {
                        return Ok(false);
                    };
                    let secs = lease_secs(req.ttl);
                    let asked = self
                        .held()
                        .get(req.token)
                        .filter(|held| held.lease == current.lease)
                        .map_or(secs, |held| held.secs);
                    if asked == secs {
                        return self.keep_alive(current.lease, what).await;
                    }
                    self.move_to_new_lease(req, current, secs).await
                })
            })
            .collect();
        futures_util::future::join_all(futures).await
    }

    /// A refresh to another ttl: etcd cannot change a lease's length, so the
    /// keys move to a new lease in one transaction, and the old one goes.
    async fn move_to_new_lease(
        &self,
        req: &RefreshRequest<'_>,
        current: Held,
        secs: i64,
    ) -> Result<bool, LockError> {
        let what = "refresh to a new ttl";
        let lease = self.grant(secs, what).await?;
        let moves: Vec<TxnOp> = req
            .keys
            .iter()
            .map(|key| {
                TxnOp::put(
                    key.as_str(),
                    "",
                    Some(PutOptions::new().with_lease(lease).with_ignore_value()),
                )
            })
            .collect();
        let txn = Txn::new()
            .when(Self::still_held(req.keys, &current))
            .and_then(moves);
        let moved = match self.txn(what, txn).await {
            Ok(response) => response.succeeded(),
            Err(err) => {
                self.forget_lease(lease, what).await;
                return Err(err);
            }
        };
        if !moved {
            self.forget_lease(lease, what).await;
            return Ok(false);
        }
        self.held().insert(
            req.token.to_owned(),
            Held {
                lease,
                value: current.value.clone(),
                secs,
                queue_lease: None,
            },
        );
        self.forget_lease(current.lease, what).await;
        Ok(true)
    }

    /// Watches `key` (and, for a fair waiter, its queue) for deletions from
    /// now on; deaf when no member can be watched.
    async fn watch_releases(&self, key: &str, queue: bool) -> ReleaseListener {
        let what = format!("listen on `{key}`");
        let options = || WatchOptions::new().with_filters([WatchFilterType::NoPut]);
        let watched = self
            .call(&what, |mut client| {
                let key = key.to_owned();
                async move {
                    let (mut watcher, mut stream) =
                        client.watch(key.as_str(), Some(options())).await?;
                    let mut early = 0;
                    if queue {
                        watcher
                            .watch(queue_prefix(&key), Some(options().with_prefix()))
                            .await?;
                        // Deletions are heard from the moment each watch is
                        // created: wait for the second one's confirmation.
                        loop {
                            let Some(response) = stream.message().await? else {
                                return Err(etcd_client::Error::WatchError("watch closed".into()));
                            };
                            early += response
                                .events()
                                .iter()
                                .filter(|e| e.event_type() == EventType::Delete)
                                .count();
                            if response.created() {
                                break;
                            }
                        }
                    }
                    Ok((watcher, stream, early))
                }
            })
            .await;
        let (watcher, mut stream, early) = match watched {
            Ok(watched) => watched,
            Err(err) => {
                tracing::debug!(target: "lockmacro", %err, "etcd: cannot watch; waiting by backoff");
                return ReleaseListener::deaf();
            }
        };
        let (sender, receiver) = watch::channel(0u64);
        if early > 0 {
            sender.send_modify(|n| *n += 1);
        }
        let task = tokio::spawn(async move {
            // Dropping the watcher ends the request stream: the server
            // cancels the watch.
            let _watcher = watcher;
            while let Ok(Some(response)) = stream.message().await {
                if response.canceled() {
                    break;
                }
                if response
                    .events()
                    .iter()
                    .any(|event| event.event_type() == EventType::Delete)
                {
                    sender.send_modify(|n| *n += 1);
                }
            }
            // `sender` drops here: the listener turns deaf, and its waiter
            // tries again at once.
        });
        ReleaseListener::new(receiver, AbortOnDrop(task))
    }
}

/// Stops a listener's watch task when the listener goes.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Backend for EtcdBackend {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn acquire<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        Box::pin(async move {
            match req.queue_for {
                Some(wait) => self.acquire_fair(&req, wait).await,
                None => self.acquire_plain(&req).await,
            }
        })
    }

    fn refresh<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let requests = [RefreshRequest::new(keys, token, ttl)];
            self.refresh_all(&requests).await.pop().unwrap_or(Ok(false))
        })
    }

    /// One read of every key (128 per transaction), then the keep-alives,
    /// all in flight at once on the member's connection.
    fn refresh_many<'a>(
        &'a self,
        requests: &'a [RefreshRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, LockError>>> {
        Box::pin(self.refresh_all(requests))
    }

    fn release<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let what = format!("release `{}`", keys.join("`, `"));
            if token.len() != TOKEN_LEN {
                return Ok(false);
            }
            // A waiter giving up leaves its queues.
            let queued: Vec<TxnOp> = keys
                .iter()
                .map(|key| TxnOp::delete(format!("{}{token}", queue_prefix(key)), None))
                .collect();
            self.done_waiting(token, &what).await;
            let Some(held) = self.lease_of(keys, token, &what).await? else {
                self.txn(&what, Txn::new().and_then(queued)).await?;
                self.held().remove(token);
                return Ok(false);
            };
            let mut deletes: Vec<TxnOp> = keys
                .iter()
                .map(|key| TxnOp::delete(key.as_str(), None))
                .collect();
            deletes.extend(queued.iter().cloned());
            let txn = Txn::new()
                .when(Self::still_held(keys, &held))
                .and_then(deletes)
                .or_else(queued);
            let released = self.txn(&what, txn).await?.succeeded();
            // Whatever is still attached to the lease is ours: it goes too.
            if held.lease != 0 {
                self.revoke(held.lease, &what).await?;
            }
            self.held().remove(token);
            Ok(released)
        })
    }

    fn remaining<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Duration>, LockError>> {
        Box::pin(async move {
            let what = format!("ttl of `{}`", keys.join("`, `"));
            let names: Vec<&str> = keys.iter().map(String::as_str).collect();
            let found = self.read(&names, &what).await?;
            let Some(held) = Self::common_lease(&found, token) else {
                return Ok(None);
            };
            let ttl = self
                .call(&what, |mut client| async move {
                    client
                        .lease_time_to_live(held.lease, None)
                        .await
                        .map(|left| left.ttl())
                })
                .await?;
            Ok(u64::try_from(ttl)
                .ok()
                .filter(|secs| *secs > 0)
                .map(Duration::from_secs))
        })
    }

    fn listen<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ReleaseListener> {
        Box::pin(self.watch_releases(key, false))
    }

    fn fair_queue(&self) -> Option<&dyn FairQueue> {
        Some(self)
    }
}

impl FairQueue for EtcdBackend {
    fn listen_granted<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, ReleaseListener> {
        let _ = token;
        // No hand-off message: the waiter first in line hears the release
        // (or the departure of a waiter ahead) and takes the key itself.
        Box::pin(self.watch_releases(key, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_round_up_to_whole_seconds() {
        assert_eq!(lease_secs(Duration::from_millis(1)), 1);
        assert_eq!(lease_secs(Duration::from_millis(500)), 1);
        assert_eq!(lease_secs(Duration::from_secs(1)), 1);
        assert_eq!(lease_secs(Duration::from_millis(1001)), 2);
        assert_eq!(lease_secs(Duration::from_secs(30)), 30);
    }

    #[test]
    fn member_names_drop_the_scheme() {
        assert_eq!(member_name("http://127.0.0.1:2379/"), "127.0.0.1:2379");
        assert_eq!(member_name("127.0.0.1:2379"), "127.0.0.1:2379");
    }
}
