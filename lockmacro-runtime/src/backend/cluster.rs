use std::sync::Arc;
use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{ErrorKind, ServerErrorKind};

use super::redact;
use super::redis::retry::Policy;
use super::redis::{
    Companions, Failure, Load, Protocol, Transport, Wakeups, backend_error, not_redis, open_client,
    prepare_tls, refuse_dial, speaks_protocol,
};
use super::slot::{check_same_slot, slot};
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
    protocol: Protocol<Cluster>,
}

/// A Redis Cluster, each call sent to the master of its keys' slot.
#[derive(Clone)]
struct Cluster {
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
}

impl std::fmt::Debug for ClusterBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterBackend")
            .field("cluster", &self.protocol.transport.name)
            .finish_non_exhaustive()
    }
}

impl ClusterBackend {
    /// Connects to the cluster through `seeds` (`redis://[user:password@]host:port/`,
    /// one or more nodes of the cluster; the others are discovered) with the
    /// default [`RedisConfig`].
    pub async fn connect(
        seeds: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<Self, LockError> {
        Self::connect_with(seeds, RedisConfig::default()).await
    }

    /// Connects to the cluster through `seeds` with `config`. The connect
    /// timeout applies to each node; the response timeout bounds each call,
    /// redirections and retries included.
    pub async fn connect_with(
        seeds: impl IntoIterator<Item = impl AsRef<str>>,
        config: RedisConfig,
    ) -> Result<Self, LockError> {
        let seeds: Vec<String> = seeds.into_iter().map(|s| s.as_ref().to_owned()).collect();
        refuse_dial(&config, &seeds, "a cluster client")?;
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
        let conn = open_connection(&client, &name, &config)
            .await?
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
                } else if let Some(error) = not_redis(&name, &err) {
                    error.with_source(err)
                } else {
                    backend_error(&name, "connect", err)
                }
            })?;
        let servers = seeds
            .iter()
            .map(|seed| open_client(seed, &config))
            .collect::<Result<_, _>>()?;
        let wakeups = Arc::new(Wakeups::new(servers, &config, true));
        let cluster = Cluster {
            conn,
            budget: config.response_timeout,
            name,
            wakeups,
            client,
            acknowledged: Arc::default(),
        };
        Ok(ClusterBackend {
            protocol: Protocol::new(cluster, &config),
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
    pub async fn from_client(
        client: redis::cluster::ClusterClient,
        nodes: impl IntoIterator<Item = impl AsRef<str>>,
        config: RedisConfig,
    ) -> Result<Self, LockError> {
        let nodes: Vec<String> = nodes.into_iter().map(|n| n.as_ref().to_owned()).collect();
        refuse_dial(&config, &nodes, "a cluster client")?;
        let name = cluster_name(&nodes);
        let conn = open_connection(&client, &name, &config)
            .await?
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
    pub fn from_connection(
        conn: ClusterConnection,
        client: redis::cluster::ClusterClient,
        nodes: impl IntoIterator<Item = impl AsRef<str>>,
        config: RedisConfig,
    ) -> Result<Self, LockError> {
        let nodes: Vec<String> = nodes.into_iter().map(|n| n.as_ref().to_owned()).collect();
        refuse_dial(&config, &nodes, "a cluster client")?;
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
        let cluster = Cluster {
            conn,
            budget: config.response_timeout,
            name: cluster_name(&nodes),
            wakeups: Arc::new(Wakeups::new(servers, &config, true)),
            client,
            acknowledged: Arc::default(),
        };
        Ok(ClusterBackend {
            protocol: Protocol::new(cluster, &config),
        })
    }
}

/// How a call follows a slot while the cluster fails over: sent again on
/// the failover's passing errors, until the budget (the response timeout)
/// is spent.
///
/// The cluster client follows redirections itself, but a fixed number of
/// times: while a master is dead and not yet replaced, its replica
/// redirects to it (`MOVED`), the dead master refuses the connection, the
/// other nodes answer `CLUSTERDOWN`, and the client's retries run out in
/// about a second, returning the last of those errors. Sending the whole
/// command again starts the client's count afresh, on the slot map it has
/// reloaded meanwhile.
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

/// A connection from `client` (`name` in errors), or its error; `Err` when
/// none came in time. Reading the slot map takes a round trip after the
/// handshake with each seed tried; the connect timeout bounds all of it, as
/// its documentation promises.
async fn open_connection(
    client: &redis::cluster::ClusterClient,
    name: &str,
    config: &RedisConfig,
) -> Result<redis::RedisResult<ClusterConnection>, BackendError> {
    let connect = client.get_async_connection();
    tokio::time::timeout(config.connect_timeout, connect)
        .await
        .map_err(|_| {
            BackendError::new(
                BackendErrorKind::Timeout,
                format!("{name}: connect"),
                "no answer in time",
            )
        })
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

impl Transport for Cluster {
    type Conn = ClusterConnection;

    const LOAD: Load = Load::Eval;
    const COMPANIONS: Companions = Companions::SameSlot;

    type Policy<'a> = Failover<'a>;

    fn name(&self) -> &str {
        &self.name
    }

    fn conn(&self) -> &ClusterConnection {
        &self.conn
    }

    fn check(&self, keys: &[String], fence_key: Option<&str>) -> Result<(), LockError> {
        check_same_slot(keys, fence_key)
    }

    fn batch(&self, key: &str) -> u16 {
        slot(key)
    }

    fn policy<'a>(&'a self, conn: &'a ClusterConnection, keys: &[String]) -> Failover<'a> {
        Failover {
            conn,
            deadline: tokio::time::Instant::now() + self.budget,
            budget: self.budget,
            slot: keys.first().map(|key| slot(key)),
        }
    }

    async fn acknowledged(&self, keys: &[String]) -> Result<ClusterConnection, LockError> {
        self.acknowledged
            .get_or_try_init(|| self.client.get_async_connection())
            .await
            .cloned()
            .map_err(|err| {
                let what = format!("obtain `{}`", keys.join("`, `"));
                backend_error(&self.name, &what, err).into()
            })
    }

    fn response_timeout(&self) -> Duration {
        self.budget
    }

    fn wakeups(&self) -> &Arc<Wakeups> {
        &self.wakeups
    }

    async fn scan(&self, pattern: &str) -> Result<Vec<String>, LockError> {
        super::cluster_scan::scan_masters(&self.conn, &self.name, pattern).await
    }
}

speaks_protocol!(ClusterBackend, "cluster");
