//! Locks on etcd: a lock is a key attached to an etcd lease.
//!
//! # On the wire
//!
//! | key | value | lease | written by |
//! |---|---|---|---|
//! | `<key>` | token (32 hex digits), then metadata | one lease per lock, of the ttl rounded up to whole seconds | acquire, one transaction for all of a lock's keys |
//! | `<key>/queue/<token>` | the fair waiter's value | one lease per fair attempt, of its wait | a fair attempt that found the key (or every permit) taken |
//! | `<key>/shares/<folder><token>` | a share's holder's value; `<folder>` is `permits-<n>/`, `read/` or `write/` | the holder's lease | acquire of a share, one transaction |
//! | `<key>/shares/writing/<token>` | empty: a writer waiting for readers | until the writer's next attempt | a writer that found readers and waits |
//! | `<fence_key>` | the token of the lock that last wrote it | none | acquire with an explicit fence key, in the same transaction |
//!
//! Acquire grants a lease, then sends one transaction: if every key has
//! `create_revision == 0` (does not exist), and no queue entry nor share, put
//! them all with the lease, else read them. A share reads first, then takes
//! its key in a transaction that compares nothing under the shares prefix
//! changed since (see `shares.rs`). Refresh is a lease keep-alive plus a
//! read that checks the keys (or the share's key) still hold the token;
//! release deletes them in a transaction that compares their value and
//! lease, then revokes the lease. Waiters watch the key, its queue and its
//! shares for deletions (a release, or a lease running out).

mod acquire;
mod config;
mod endpoint;
mod fair;
mod inspect;
mod members;
mod refresh;
mod shares;
#[cfg(feature = "tls-rustls")]
mod tls;
mod watching;
mod wire;

pub use self::config::EtcdConfig;

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions, Txn, TxnOp};

use self::config::Credentials;
use self::members::{error, refused_by_permissions};
use self::wire::queue_prefix;
use crate::LockError;
use crate::backend::shared::{as_any_waiter, batch_of_one, boxed, forward};
use crate::backend::{Backend, BoxFuture, Capabilities, FairQueue, TOKEN_LEN};

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
/// A lock takes at most 42 keys: etcd refuses a transaction of more than 128
/// comparisons (`--max-txn-ops`), and each key needs three (the key, its
/// queue, its shares).
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
/// # Semaphores and read-write locks
///
/// Each permit, read or write is a key of its own under
/// `<key>/shares/`, on its holder's lease: it expires, is kept alive,
/// refreshed and released as a lock's key is, and its fencing token is the
/// revision it was taken at. An attempt reads the key's shares and queue,
/// and takes its share in one transaction that compares that no share was
/// added since the read (else it reads again): never more holders than
/// permits, never a writer beside anyone. Fair waiters for permits queue as
/// for a lock; the waiter with `n` others ahead takes a permit when more
/// than `n` are free, so permits go in arrival order. A writer that finds
/// readers and waits leaves a mark that holds back readers coming after it,
/// until about its next attempt. The kind is in the shares' names: a lock,
/// a semaphore of another count or a read-write lock on a key already held
/// as another kind is refused before anything is written.
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
    /// Whom to authenticate as, before the first call and whenever the
    /// member says the token has expired.
    user: Option<Credentials>,
    /// How many tokens `client` has taken: 0 before the first.
    tokens: AtomicU64,
    authenticating: tokio::sync::Mutex<()>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Held {
    lease: i64,
    value: String,
    /// The lease length asked for, in whole seconds.
    secs: i64,
    /// A fair waiter's queue lease, or a waiting writer's mark's, revoked
    /// once it is done waiting.
    queue_lease: Option<i64>,
    /// For a share, its key under the lock key's shares prefix: the one key
    /// the lease holds in place of the lock key.
    share_key: Option<String>,
}

impl Held {
    /// The keys in the store that hold this lease, for a request naming the
    /// lock keys `keys`.
    fn names(&self, keys: &[String]) -> Vec<String> {
        match &self.share_key {
            Some(share_key) => vec![share_key.clone()],
            None => keys.to_vec(),
        }
    }
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

impl EtcdBackend {
    /// Connects to the members at `endpoints` (`http://host:port`,
    /// `https://host:port` with the `tls-rustls` feature, or `host:port`;
    /// `http://user:password@host:port` to authenticate as an etcd user),
    /// with the default [`EtcdConfig`].
    ///
    /// Fails when no member answers, naming each one and what went wrong;
    /// with [`BackendErrorKind::Authentication`](crate::BackendErrorKind::Authentication)
    /// when the user or password is wrong, and
    /// [`BackendErrorKind::Tls`](crate::BackendErrorKind::Tls) when no TLS
    /// connection can be made.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::{EtcdBackend, Locker};
    ///
    /// let backend = EtcdBackend::connect(["10.0.0.1:2379", "10.0.0.2:2379", "10.0.0.3:2379"]).await?;
    /// let locker = Locker::new(backend).with_namespace("billing");
    /// # Ok(()) }
    /// ```
    pub async fn connect(
        endpoints: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<Self, LockError> {
        Self::connect_with(endpoints, EtcdConfig::default()).await
    }

    /// Like [`connect`](Self::connect), with `config`: timeouts, a user,
    /// TLS roots and a client certificate.
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
    pub async fn connect_with(
        endpoints: impl IntoIterator<Item = impl AsRef<str>>,
        config: EtcdConfig,
    ) -> Result<Self, LockError> {
        #[cfg(feature = "tls-rustls")]
        let tls = config.tls.is_set();
        #[cfg(not(feature = "tls-rustls"))]
        let tls = false;
        let endpoints = endpoints
            .into_iter()
            .map(|given| endpoint::parse(given.as_ref(), tls))
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() {
            return Err(LockError::InvalidUrl {
                url: String::new(),
                reason: "no etcd endpoints given; pass at least one member's URL".into(),
            });
        }
        #[cfg(feature = "tls-rustls")]
        let tls_options = if endpoints.iter().any(|member| member.tls) {
            Some(config.tls.options()?)
        } else {
            None
        };
        let mut members = Vec::new();
        for member in endpoints {
            let options = ConnectOptions::new()
                .with_connect_timeout(config.connect_timeout)
                // A member cut off from its leader refuses at once rather
                // than serving stale reads or holding watches that hear
                // nothing.
                .with_require_leader(true)
                .with_keep_alive(config.response_timeout, config.response_timeout)
                .with_keep_alive_while_idle(true);
            #[cfg(feature = "tls-rustls")]
            let options = match &tls_options {
                Some(tls) if member.tls => options.with_tls(tls.clone()),
                _ => options,
            };
            // Lazy: nothing is sent yet, so a member that is down now is
            // tried again later rather than failing the connect. The user
            // authenticates on the first call (`call`).
            let client = Client::connect([member.url.as_str()], Some(options))
                .await
                .map_err(|err| error(&member.name, "connect", &err))?;
            members.push(Member {
                name: member.name,
                client,
                user: member.user.or_else(|| config.user.clone()),
                tokens: AtomicU64::new(0),
                authenticating: tokio::sync::Mutex::new(()),
            });
        }
        let backend = EtcdBackend {
            members,
            current: AtomicUsize::new(0),
            config,
            held: Mutex::default(),
        };
        // A first call finds out whether any member can be reached and
        // takes the credentials. A user that may not read this key is
        // still let in: its permissions are checked on its own keys.
        let probe = backend
            .call("connect", |mut client| async move {
                client
                    .get("lockmacro", Some(GetOptions::new().with_count_only()))
                    .await
            })
            .await;
        match probe {
            Err(LockError::Backend(err)) if refused_by_permissions(&err) => {}
            other => {
                other?;
            }
        }
        Ok(backend)
    }

    pub(super) fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        // Every change to the map is one insert or remove: a panic elsewhere
        // cannot leave it half-written.
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Backend for EtcdBackend {
    forward!(boxed: acquire => obtain);
    forward!(batch_of_one: refresh => refresh_all);
    forward!(boxed:
        /// One read of every key (128 per transaction), then the keep-alives,
        /// all in flight at once on the member's connection.
        refresh_many => refresh_all,
        listen => watch_releases,
    );
    forward!(boxed: inspect => inspect_key, keys => list_keys);
    forward!(boxed: force_release => force_release_key, downgrade => downgrade_write);

    fn name(&self) -> &'static str {
        "etcd"
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
            let names = held.names(keys);
            let mut deletes: Vec<TxnOp> = names
                .iter()
                .map(|key| TxnOp::delete(key.as_str(), None))
                .collect();
            deletes.extend(queued.iter().cloned());
            let txn = Txn::new()
                .when(Self::still_held(&names, &held))
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
            let names = match self.held().get(token) {
                Some(held) => held.names(keys),
                None => keys.to_vec(),
            };
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let found = self.read(&names, &what).await?;
            let Some(held) = Self::common_lease(&found, token) else {
                return Ok(None);
            };
            let ttl = self.lease_ttl(held.lease, &what).await?;
            Ok(ttl
                .and_then(|secs| u64::try_from(secs).ok())
                .filter(|secs| *secs > 0)
                .map(Duration::from_secs))
        })
    }

    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities::none().with_fair_queue(self).with_shares()
    }
}

impl FairQueue for EtcdBackend {
    forward!(as_any_waiter:
        /// No hand-off message: the waiter first in line hears the release
        /// (or the departure of a waiter ahead) and takes the key itself.
        listen_granted,
    );
}
