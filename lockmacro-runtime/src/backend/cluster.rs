use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{ErrorKind, FromRedisValue, Script, ServerErrorKind};

use super::redis::retry::{self, Policy};
use super::redis::{
    ACQUIRE, ACQUIRE_FAIR, ACQUIRE_FAIR_LUA, ACQUIRE_LUA, ACQUIRE_SHARED, ACQUIRE_SHARED_LUA,
    CONFIRM, CONFIRM_LUA, Companions, REFRESH, REFRESH_BATCH, REFRESH_LUA, REFRESH_MANY,
    REFRESH_MANY_LUA, RELEASE, RELEASE_LUA, REMAINING, REMAINING_LUA, Wakeups,
    acknowledged_acquire_pipe, acknowledged_outcome, acquire_args, acquire_fair_args,
    acquire_shared_args, acquired, backend_error, check_replica_timeout, millis, not_a_fence,
    not_shares, open_client, plain_outcome, plain_set, prepare_tls, pttl, redact, refresh_many_cmd,
    refreshed, release_args,
};
use super::slot::{check_same_slot, slot};
use super::{
    AcquireRequest, Acquired, Backend, BoxFuture, FairQueue, RefreshRequest, ReleaseListener,
    TOKEN_LEN,
};
use crate::error::{BackendError, BackendErrorKind};
use crate::{LockError, RedisConfig};

/// Retries of one command inside the cluster client, on redirections and on a
/// node that cannot be reached. The client counts retries rather than time,
/// and these run out within about a second, before a failover is over: the
/// backend then sends the command again itself (see [`ClusterBackend::follow`])
/// until its budget, the response timeout, is spent.
const RETRIES: u32 = 8;
/// Bounds of the cluster client's randomised wait between two retries, in
/// milliseconds: short, so that a failover is noticed soon after it happened.
const RETRY_WAIT_MS: (u64, u64) = (10, 250);

/// Locks on a Redis Cluster.
///
/// The same keys, values and scripts as [`RedisBackend`](super::RedisBackend),
/// sent through the `redis` crate's cluster client: each call goes to the
/// master of the key's hash slot, redirections (`MOVED`, `ASK`) are followed,
/// and the slot map is reloaded when a node fails or a replica takes over.
/// Scripts run by `EVALSHA`; a node that has not seen one yet (a new node, a
/// replica just promoted) gets it with `EVAL`, which also caches it there.
///
/// # Keys that must share a slot
///
/// A script can only touch keys of one slot. The keys of one
/// [`obtain_many`](crate::Locker::obtain_many) and an explicit
/// [fence key](crate::ObtainOptions::fence_key) must therefore hash to the
/// lock key's slot; otherwise the call fails with [`LockError::InvalidKey`],
/// naming the keys, before anything is sent. Give such keys a shared hash tag
/// (only the text between the first `{` and `}` is hashed): `{order:7}:stock`
/// and `{order:7}:payment`, or put the tag in the namespace
/// (`with_namespace("{billing}")`) to keep every key of a locker in one slot.
/// The derived fence key (`{K}:fence`) shares its lock's slot, except for a
/// key with a `}` but no hashtag (`a}b`, `{}x`): such a fenced lock is refused
/// the same way.
///
/// # Wake-ups and fair obtains
///
/// Waiters are woken by releases as on a single server: the release script
/// publishes on `lockmacro:released:<key>`, and Redis Cluster forwards every
/// message to every node over its bus, so a [`Locker`](crate::Locker)
/// subscribes on one seed node (one RESP3 connection, shared by its waiters),
/// whichever master holds the key. When that node goes away (its connection
/// closes, or it stops answering the `PING` the locker sends it once a second
/// while anyone waits), waiters try again at once and listen on the next seed
/// that answers; give several seeds for that.
///
/// Fair waiters queue at `{K}:queue` and waiters flag themselves at
/// `{K}:waiters`, in the lock's slot, and releases hand the key to the first
/// one, as on a single server. A key with a `}` but no hash tag has no name
/// of that kind in its slot: its releases always publish.
///
/// # Failover
///
/// Redis Cluster replicates asynchronously: a lock acknowledged by a master
/// that dies before its replica received it is gone after the failover, and
/// so are the fence counter's latest increments. Another client can then take
/// the lock while the first still believes it holds it, until its next
/// refresh finds the key gone. Where a failover must not lose a lock, use
/// [`RedlockBackend`](super::RedlockBackend).
///
/// Calls made while a failover is in progress are sent again until the new
/// master answers, within a budget of one [response
/// timeout](RedisConfig::response_timeout) per call (3 s by default): the
/// redirections (`MOVED`, `ASK`) and the passing errors of a failover
/// (`TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY`, `LOADING`, a refused
/// connection to the dead master) are never returned while the budget lasts.
/// When no master serves the key's slot for longer than that, the call fails
/// with [`BackendErrorKind::Timeout`] and a message that names the slot and
/// the cluster's last answer. A failover takes about two
/// `cluster-node-timeout`s (15 s each by default) plus an election: to ride
/// one out, make the response timeout longer than that, or lower the node
/// timeout. Sending again is safe: the acquire script reports `Obtained` to
/// a retry of the same value (and mints no second fencing token), refresh and
/// release act only on the caller's token, so a release never deletes a key
/// someone else took meanwhile. A release that fails this way leaves the key
/// locked until its ttl runs out, as on any backend that cannot be reached:
/// keep ttls short enough for that wait.
///
/// ```no_run
/// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
/// use lockmacro_runtime::{ClusterBackend, Locker};
///
/// let backend = ClusterBackend::connect(["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/"]).await?;
/// let locker = Locker::new(backend);
/// # let _ = locker; Ok(()) }
/// ```
#[derive(Clone)]
pub struct ClusterBackend {
    conn: ClusterConnection,
    /// How long one call may keep sending its command while the cluster
    /// fails over: the response timeout.
    budget: Duration,
    /// `redis cluster 10.0.0.1:6379,10.0.0.2:6379`: names it in error messages.
    name: String,
    /// Subscribes on one of the seed nodes.
    wakeups: Arc<Wakeups>,
    /// Opens the connection of the acquires that wait for replicas.
    client: redis::cluster::ClusterClient,
    /// That connection, opened on the first such acquire: `WAIT` holds up
    /// its connection to the node until the replicas answer, and would hold
    /// up every other call to that node on the shared one.
    acknowledged: Arc<tokio::sync::OnceCell<ClusterConnection>>,
    /// `RedisConfig::fence_expiry` and `grant_lease`, in ms.
    fence_expiry: String,
    grant_lease: String,
}

impl std::fmt::Debug for ClusterBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterBackend")
            .field("cluster", &self.name)
            .finish_non_exhaustive()
    }
}

impl ClusterBackend {
    /// Connects to the cluster through `seeds` (`redis://[user:password@]host:port/`,
    /// one or more nodes of the cluster; the others are discovered) with the
    /// default [`RedisConfig`].
    pub async fn connect<I, S>(seeds: I) -> Result<Self, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::connect_with(seeds, RedisConfig::default()).await
    }

    /// Connects to the cluster through `seeds` with `config`. The connect
    /// timeout applies to each node; the response timeout bounds each call,
    /// redirections and retries included.
    pub async fn connect_with<I, S>(seeds: I, config: RedisConfig) -> Result<Self, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let seeds: Vec<String> = seeds.into_iter().map(|s| s.as_ref().to_owned()).collect();
        let mut infos = Vec::new();
        for seed in seeds.iter().map(String::as_str) {
            prepare_tls(seed)?;
            let info = redis::IntoConnectionInfo::into_connection_info(seed).map_err(|err| {
                LockError::InvalidUrl {
                    url: redact(seed),
                    reason: err.to_string(),
                }
            })?;
            infos.push(info);
        }
        if infos.is_empty() {
            return Err(LockError::InvalidUrl {
                url: String::new(),
                reason: "no seed nodes given; pass the URL of at least one node of the cluster"
                    .into(),
            });
        }
        let addrs: Vec<String> = infos.iter().map(|info| info.addr().to_string()).collect();
        let name = format!("redis cluster {}", addrs.join(","));
        #[cfg(feature = "tls-rustls")]
        let tls = infos
            .iter()
            .all(|info| matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }));
        #[cfg_attr(not(feature = "tls-rustls"), allow(unused_mut))]
        let mut builder = ClusterClientBuilder::new(infos);
        #[cfg(feature = "tls-rustls")]
        if let Some(certificates) = config.tls_certificates(&name)? {
            if !tls {
                return Err(LockError::InvalidUrl {
                    url: addrs.join(","),
                    reason: "TLS certificates are configured but not every seed uses \
                             TLS; use `rediss://`"
                        .into(),
                });
            }
            builder = builder.certs(certificates);
        }
        let client = builder
            .connection_timeout(config.connect_timeout)
            .response_timeout(config.response_timeout)
            .retries(RETRIES)
            .min_retry_wait(RETRY_WAIT_MS.0)
            .max_retry_wait(RETRY_WAIT_MS.1)
            .build()
            .map_err(|err| LockError::InvalidUrl {
                url: addrs.join(","),
                reason: err.to_string(),
            })?;
        // Reading the slot map takes a round trip after the handshake with
        // each seed tried; this bounds all of it.
        let connect = client.get_async_connection();
        let conn = tokio::time::timeout(config.connect_timeout + config.response_timeout, connect)
            .await
            .map_err(|_| {
                BackendError::new(
                    BackendErrorKind::Timeout,
                    format!("{name}: connect"),
                    "no answer in time",
                )
            })?
            .map_err(|err| {
                if err.to_string().contains("cluster support disabled") {
                    // The server's words alone do not say what to do.
                    BackendError::new(
                        BackendErrorKind::Other,
                        format!("{name}: connect"),
                        format!(
                            "{err}: the seeds are not nodes of a Redis Cluster; use \
                             `Locker::connect` (`RedisBackend`) for a single server"
                        ),
                    )
                    .with_source(err)
                } else {
                    backend_error(&name, "connect", err)
                }
            })?;
        let servers = seeds
            .iter()
            .map(|seed| open_client(seed, &config))
            .collect::<Result<_, _>>()?;
        let wakeups = Arc::new(Wakeups::new(servers, &config, true));
        Ok(ClusterBackend {
            conn,
            budget: config.response_timeout,
            name,
            wakeups,
            client,
            acknowledged: Arc::default(),
            fence_expiry: millis(config.fence_expiry),
            grant_lease: millis(config.grant_lease),
        })
    }

    /// Locks on the cluster of a `client` the service already has, on a
    /// connection the backend opens from it: the client's nodes, user,
    /// password, TLS, timeouts and retries are used as they are.
    ///
    /// `nodes` (URLs, as for [`connect_with`](Self::connect_with)) are where
    /// the backend's waiters subscribe for releases: a `ClusterClient` does
    /// not tell its seed nodes, and the pub/sub connection cannot be the
    /// cluster connection (see [`RedisBackend::from_manager`](super::RedisBackend::from_manager)).
    /// `config`'s timeouts bound those connections, and its response
    /// timeout is each call's budget while the cluster fails over.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use lockmacro_runtime::{ClusterBackend, Locker, RedisConfig};
    ///
    /// let nodes = ["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/"];
    /// let client = redis::cluster::ClusterClient::new(nodes.to_vec())?;
    /// let backend = ClusterBackend::from_client(client, nodes, RedisConfig::default()).await?;
    /// let locker = Locker::new(backend);
    /// # let _ = locker; Ok(()) }
    /// ```
    pub async fn from_client<I, S>(
        client: redis::cluster::ClusterClient,
        nodes: I,
        config: RedisConfig,
    ) -> Result<Self, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let nodes: Vec<String> = nodes.into_iter().map(|n| n.as_ref().to_owned()).collect();
        let name = cluster_name(&nodes);
        let connect = client.get_async_connection();
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
        Self::from_connection(conn, client, nodes, config)
    }

    /// Locks sent on the service's own cluster connection `conn`
    /// (multiplexed: lock calls and the service's commands share it);
    /// `client` must be the one it came from, and opens the connection of
    /// the acquires that wait for replicas, which `WAIT` would block.
    /// `nodes` are where waiters subscribe, as for
    /// [`from_client`](Self::from_client). Each call is bounded by `conn`'s
    /// own response timeout, and by `config`'s while the cluster fails over.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use lockmacro_runtime::{ClusterBackend, Locker, RedisConfig};
    ///
    /// let nodes = ["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/"];
    /// let client = redis::cluster::ClusterClient::new(nodes.to_vec())?;
    /// let conn = client.get_async_connection().await?;
    /// // The service goes on using `conn`; the locks ride on it too.
    /// let backend = ClusterBackend::from_connection(conn.clone(), client, nodes, RedisConfig::default())?;
    /// let locker = Locker::new(backend);
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn from_connection<I, S>(
        conn: ClusterConnection,
        client: redis::cluster::ClusterClient,
        nodes: I,
        config: RedisConfig,
    ) -> Result<Self, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let nodes: Vec<String> = nodes.into_iter().map(|n| n.as_ref().to_owned()).collect();
        if nodes.is_empty() {
            return Err(LockError::InvalidUrl {
                url: String::new(),
                reason: "no nodes given for the waiters to subscribe on; pass the URL of at \
                         least one node of the cluster"
                    .into(),
            });
        }
        let servers = nodes
            .iter()
            .map(|node| open_client(node, &config))
            .collect::<Result<_, _>>()?;
        Ok(ClusterBackend {
            conn,
            budget: config.response_timeout,
            name: cluster_name(&nodes),
            wakeups: Arc::new(Wakeups::new(servers, &config, true)),
            client,
            acknowledged: Arc::default(),
            fence_expiry: millis(config.fence_expiry),
            grant_lease: millis(config.grant_lease),
        })
    }

    async fn invoke<T: FromRedisValue, A: redis::ToRedisArgs + Sync>(
        &self,
        what: &str,
        keys: &[String],
        script: (&Script, &str),
        args: &[A],
    ) -> Result<T, LockError> {
        let (script, source) = script;
        let command = |name: &str, body: &str| {
            let mut command = redis::cmd(name);
            command.arg(body).arg(keys.len()).arg(keys).arg(args);
            command
        };
        let reply = self
            .follow(keys, |conn| {
                let (evalsha, eval) = (
                    command("EVALSHA", script.get_hash()),
                    command("EVAL", source),
                );
                evalsha_or_eval(conn, evalsha, eval)
            })
            .await;
        reply.map_err(|failure| {
            failure
                .into_error(&self.name, &format!("{what} `{}`", keys.join("`, `")))
                .into()
        })
    }

    /// Runs `attempt` on the cluster connection, again and again while it
    /// fails with a failover's passing error, until it gives another answer
    /// or the budget (the response timeout) is spent.
    ///
    /// The cluster client follows redirections itself, but a fixed number of
    /// times: while a master is dead and not yet replaced, its replica
    /// redirects to it (`MOVED`), the dead master refuses the connection,
    /// the other nodes answer `CLUSTERDOWN`, and the client's retries run out
    /// in about a second, returning the last of those errors. Sending the
    /// whole command again starts the client's count afresh, on the slot map
    /// it has reloaded meanwhile.
    async fn follow<T, F, Fut>(&self, keys: &[String], attempt: F) -> Result<T, Failure>
    where
        F: FnMut(ClusterConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        self.follow_on(&self.conn, keys, attempt).await
    }

    /// [`follow`](Self::follow) on the connection `conn`.
    async fn follow_on<T, F, Fut>(
        &self,
        conn: &ClusterConnection,
        keys: &[String],
        attempt: F,
    ) -> Result<T, Failure>
    where
        F: FnMut(ClusterConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let policy = Failover {
            conn,
            deadline: tokio::time::Instant::now() + self.budget,
            budget: self.budget,
            slot: keys.first().map(|key| slot(key)),
        };
        retry::follow(policy, attempt).await
    }
}

/// How a call follows a slot while the cluster fails over: sent again on
/// the failover's passing errors, until the budget is spent.
struct Failover<'a> {
    conn: &'a ClusterConnection,
    deadline: tokio::time::Instant,
    budget: Duration,
    /// The slot of the call's keys, for the error.
    slot: Option<u16>,
}

impl Policy for Failover<'_> {
    type Target = ClusterConnection;
    type Error = redis::RedisError;
    type Failure = Failure;

    fn deadline(&self) -> Option<tokio::time::Instant> {
        Some(self.deadline)
    }

    fn target(&self) -> ClusterConnection {
        self.conn.clone()
    }

    fn retry(&mut self, err: &redis::RedisError) -> bool {
        let retry = passing(err);
        if retry {
            tracing::debug!(target: "lockmacro", error = %err, "cluster reconfiguring; sending again");
        }
        retry
    }

    async fn recover(&mut self) -> Result<bool, redis::RedisError> {
        Ok(true)
    }

    fn fail(&mut self, err: redis::RedisError, last: Option<redis::RedisError>) -> Failure {
        // The client's own response timeout is the budget too: when it
        // fires a moment before ours, the budget ran out all the same.
        if err.is_timeout() {
            return self.spent(last, false);
        }
        Failure::Redis(err)
    }

    fn spent(&mut self, last: Option<redis::RedisError>, _: bool) -> Failure {
        Failure::Spent {
            slot: self.slot,
            budget: self.budget,
            last,
        }
    }
}

/// Why a call on the cluster failed.
#[derive(Debug, Clone)]
enum Failure {
    /// An answer that sending again would not change.
    Redis(redis::RedisError),
    /// The budget ran out while the slot had no master that answered.
    Spent {
        slot: Option<u16>,
        budget: Duration,
        last: Option<redis::RedisError>,
    },
}

impl Failure {
    fn into_error(self, server: &str, what: &str) -> BackendError {
        match self {
            Failure::Redis(err) => backend_error(server, what, err),
            Failure::Spent { slot, budget, last } => {
                let slot = slot.map_or_else(String::new, |slot| format!(" {slot}"));
                let message = match &last {
                    Some(last) => format!(
                        "no master of slot{slot} answered within the response timeout \
                         ({budget:?}): the cluster is failing over or has lost the slot; its \
                         last answer: {last}"
                    ),
                    // A node that took the command and never answered.
                    None => format!(
                        "no master of slot{slot} answered within the response timeout \
                         ({budget:?})"
                    ),
                };
                let error = BackendError::new(
                    BackendErrorKind::Timeout,
                    format!("{server}: {what}"),
                    message,
                );
                match last {
                    Some(last) => error.with_source(last),
                    None => error,
                }
            }
        }
    }
}

/// True for the errors a cluster gives while it fails over or moves a slot,
/// which the same command sent a little later gets past.
fn passing(err: &redis::RedisError) -> bool {
    matches!(
        err.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly
                | ServerErrorKind::BusyLoading
        ) | ErrorKind::ClusterConnectionNotFound
    ) || err.is_connection_refusal()
}

impl ClusterBackend {
    /// One call of the refresh script for `requests`, all in one hash slot.
    async fn refresh_batch(
        &self,
        requests: Vec<&RefreshRequest<'_>>,
    ) -> Vec<Result<bool, LockError>> {
        let keys = requests.first().map(|req| req.keys).unwrap_or_default();
        let reply = self
            .follow(keys, |conn| {
                let evalsha = refresh_many_cmd("EVALSHA", REFRESH_MANY.get_hash(), &requests);
                let eval = refresh_many_cmd("EVAL", REFRESH_MANY_LUA, &requests);
                evalsha_or_eval(conn, evalsha, eval)
            })
            .await;
        let reply = match reply {
            Ok(flags) => Ok(flags),
            Err(Failure::Redis(err)) => Err(err),
            Err(spent) => {
                return requests
                    .iter()
                    .map(|req| {
                        let what = format!("refresh `{}`", req.keys.join("`, `"));
                        Err(spent.clone().into_error(&self.name, &what).into())
                    })
                    .collect();
            }
        };
        refreshed(reply, &requests, &self.name)
    }
}

/// `redis cluster 10.0.0.1:6379,10.0.0.2:6379`, from node URLs.
fn cluster_name(nodes: &[String]) -> String {
    let addrs: Vec<String> = nodes
        .iter()
        .map(|node| {
            redis::IntoConnectionInfo::into_connection_info(node.as_str())
                .map_or_else(|_| redact(node), |info| info.addr().to_string())
        })
        .collect();
    format!("redis cluster {}", addrs.join(","))
}

impl Backend for ClusterBackend {
    fn name(&self) -> &'static str {
        "cluster"
    }

    fn acquire<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        Box::pin(async move {
            check_same_slot(req.keys, req.fence_key)?;
            if req.replicas > 0 {
                return self.acquire_acknowledged(req).await;
            }
            if req.is_plain() {
                let set = plain_set(&req);
                let previous: Option<String> = self
                    .follow(req.keys, |mut conn| {
                        let set = set.clone();
                        async move { set.query_async(&mut conn).await }
                    })
                    .await
                    .map_err(|failure| {
                        LockError::from(
                            failure.into_error(&self.name, &format!("obtain `{}`", req.keys[0])),
                        )
                    })?;
                if let Some(plain) = plain_outcome(&req, previous) {
                    return Ok(plain);
                }
            }
            let mut keys = req.keys.to_vec();
            keys.extend(req.fence_key.map(str::to_owned));
            if req.queue_for.is_some() && Companions::SameSlot.queue(&req.keys[0]).is_empty() {
                return Err(LockError::InvalidKey {
                    key: req.keys[0].clone(),
                    reason: "a fair lock keeps its waiters at a key derived from the lock's, \
                             which for a key with a `}` but no hash tag is in another Redis \
                             Cluster slot; give the key a hash tag (only the text between the \
                             first `{` and `}` is hashed)"
                        .to_owned(),
                });
            }
            if let Some(share) = req.share {
                let args = acquire_shared_args(
                    &req,
                    share,
                    &self.fence_expiry,
                    &self.grant_lease,
                    Companions::SameSlot,
                );
                let script = (&*ACQUIRE_SHARED, ACQUIRE_SHARED_LUA);
                let reply: Result<Vec<i64>, _> = self.invoke("obtain", &keys, script, &args).await;
                let reply = reply
                    .map_err(|err| not_shares(err, &req.keys[0]))
                    .map_err(|err| not_a_fence(err, req.fence_key))?;
                return acquired(&reply, req.fence_key.is_some(), &self.name);
            }
            if let Some(wait) = req.queue_for {
                let mut keys = vec![req.keys[0].clone()];
                keys.extend(req.fence_key.map(str::to_owned));
                let queue = Companions::SameSlot.queue(&req.keys[0]);
                let args = acquire_fair_args(
                    &req,
                    wait,
                    queue,
                    &self.fence_expiry,
                    &self.grant_lease,
                    Companions::SameSlot,
                );
                let script = (&*ACQUIRE_FAIR, ACQUIRE_FAIR_LUA);
                let reply: Result<Vec<i64>, _> = self.invoke("obtain", &keys, script, &args).await;
                let reply = reply.map_err(|err| not_a_fence(err, req.fence_key))?;
                return acquired(&reply, req.fence_key.is_some(), &self.name);
            }
            let args = acquire_args(&req, &self.fence_expiry, Companions::SameSlot);
            let reply: Result<Vec<i64>, _> = self
                .invoke("obtain", &keys, (&ACQUIRE, ACQUIRE_LUA), &args)
                .await;
            let reply = reply.map_err(|err| not_a_fence(err, req.fence_key))?;
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
            check_same_slot(keys, None)?;
            if token.len() != TOKEN_LEN {
                return Ok(false);
            }
            let args = [token, &millis(ttl)];
            let done: i64 = self
                .invoke("refresh", keys, (&REFRESH, REFRESH_LUA), &args)
                .await?;
            Ok(done == 1)
        })
    }

    /// One script call per hash slot (and per 500 leases in it), all sent
    /// at once: a script may only touch the keys of one slot.
    fn refresh_many<'a>(
        &'a self,
        requests: &'a [RefreshRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, LockError>>> {
        Box::pin(async move {
            let mut results: Vec<Option<Result<bool, LockError>>> =
                requests.iter().map(|_| None).collect();
            let mut slots: HashMap<u16, Vec<usize>> = HashMap::new();
            for (index, req) in requests.iter().enumerate() {
                if let Err(err) = check_same_slot(req.keys, None) {
                    results[index] = Some(Err(err));
                } else if req.token.len() != TOKEN_LEN {
                    results[index] = Some(Ok(false));
                } else {
                    let first = req.keys.first().map_or(0, |key| slot(key));
                    slots.entry(first).or_default().push(index);
                }
            }
            let batches: Vec<&[usize]> = slots
                .values()
                .flat_map(|indices| indices.chunks(REFRESH_BATCH))
                .collect();
            let calls = batches
                .iter()
                .map(|batch| self.refresh_batch(batch.iter().map(|&i| &requests[i]).collect()));
            let outcomes = futures_util::future::join_all(calls).await;
            for (batch, outcome) in batches.iter().zip(outcomes) {
                for (&index, result) in batch.iter().zip(outcome) {
                    results[index] = Some(result);
                }
            }
            results
                .into_iter()
                .map(|result| result.unwrap_or(Ok(false)))
                .collect()
        })
    }

    fn release<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            check_same_slot(keys, None)?;
            if token.len() != TOKEN_LEN {
                return Ok(false);
            }
            let args = release_args(keys, token, Companions::SameSlot);
            let done: i64 = self
                .invoke("release", keys, (&RELEASE, RELEASE_LUA), &args)
                .await?;
            Ok(done == 1)
        })
    }

    fn remaining<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Duration>, LockError>> {
        Box::pin(async move {
            check_same_slot(keys, None)?;
            if token.len() != TOKEN_LEN {
                return Ok(None);
            }
            let remaining: i64 = self
                .invoke("ttl", keys, (&REMAINING, REMAINING_LUA), &[token])
                .await?;
            Ok(pttl(remaining))
        })
    }

    fn fair_queue(&self) -> Option<&dyn FairQueue> {
        Some(self)
    }

    fn listen<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ReleaseListener> {
        Box::pin(self.wakeups.listen(key, None))
    }

    fn acknowledges_replicas(&self) -> bool {
        true
    }

    fn keeps_shares(&self) -> bool {
        true
    }
}

impl ClusterBackend {
    /// An acquire that waits for `req.replicas` replicas of the key's
    /// master; gives the keys back when fewer acknowledge them in time. The
    /// acquire and its `WAIT` go in one pipeline to the slot's master, and
    /// are sent again together when the slot moves.
    async fn acquire_acknowledged(&self, req: AcquireRequest<'_>) -> Result<Acquired, LockError> {
        let what = || format!("obtain `{}`", req.keys.join("`, `"));
        check_replica_timeout(&req, self.budget, &self.name)?;
        let conn = self
            .acknowledged
            .get_or_try_init(|| self.client.get_async_connection())
            .await
            .map_err(|err| LockError::from(backend_error(&self.name, &what(), err)))?;
        let pipe = acknowledged_acquire_pipe(&req, &self.fence_expiry, Companions::SameSlot);
        let mut keys = req.keys.to_vec();
        keys.extend(req.fence_key.map(str::to_owned));
        let (reply, acked): (Vec<i64>, usize) = self
            .follow_on(conn, &keys, |mut conn| {
                let pipe = pipe.clone();
                async move { pipe.query_async(&mut conn).await }
            })
            .await
            .map_err(|failure| LockError::from(failure.into_error(&self.name, &what())))?;
        match acknowledged_outcome(&reply, acked, &req, &self.name)? {
            Ok(outcome) => Ok(outcome),
            Err(acked) => {
                if let Err(err) = self.release(req.keys, req.token()).await {
                    tracing::warn!(target: "lockmacro", server = %self.name, error = %err,
                        "could not give back a lock the replicas did not acknowledge; it expires with its ttl");
                }
                Err(LockError::NotReplicated {
                    key: req.keys[0].clone(),
                    wanted: req.replicas,
                    acknowledged: acked,
                    timeout: req.replica_timeout,
                })
            }
        }
    }
}

impl FairQueue for ClusterBackend {
    fn listen_granted<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, ReleaseListener> {
        Box::pin(self.wakeups.listen(key, Some(token)))
    }

    fn listening(&self, key: &str) -> bool {
        self.wakeups.subscribed(key)
    }

    fn confirm<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let keys = [key.to_owned()];
            let args = [token, &millis(ttl)];
            let done: i64 = self
                .invoke("confirm", &keys, (&CONFIRM, CONFIRM_LUA), &args)
                .await?;
            Ok(done == 1)
        })
    }
}

/// Sends `evalsha`, and `eval` (the script's source) when the node does not
/// know the script. `Script::invoke_async` would send `SCRIPT LOAD`, which
/// the cluster client broadcasts to every node and which fails while any
/// node is down: exactly when a promoted replica needs it.
async fn evalsha_or_eval<T: FromRedisValue>(
    mut conn: ClusterConnection,
    evalsha: redis::Cmd,
    eval: redis::Cmd,
) -> redis::RedisResult<T> {
    match evalsha.query_async(&mut conn).await {
        Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            eval.query_async(&mut conn).await
        }
        other => other,
    }
}
