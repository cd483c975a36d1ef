use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo,
    RedisError, ServerErrorKind, Value,
};
use tokio::time::Instant;

use super::redis::retry::{self, Policy};
use super::redis::{enable_tls, open_client, redact};
use super::{
    AcquireRequest, Acquired, Backend, BoxFuture, FairQueue, RedisBackend, RefreshRequest,
    ReleaseListener,
};
use crate::error::{BackendError, BackendErrorKind};
use crate::{LockError, RedisConfig};

/// Locks on the master of a Redis Sentinel deployment: one master, its
/// replicas, and the sentinels that watch them and promote a replica when the
/// master fails.
///
/// The backend asks the sentinels for the master's address (`SENTINEL
/// GET-MASTER-ADDR-BY-NAME`, all of them at once, so that one that is down or
/// frozen does not hold up the others), checks with `ROLE` that the server
/// named is a master (the first one that is wins), and runs a
/// [`RedisBackend`] on it: the same keys, scripts, fencing, wake-ups and fair
/// hand-off as on one server. The sentinels are asked again only when a call
/// meets a failover, not on every call.
///
/// # Following a failover
///
/// A call that meets a failover (the master's connection refused or dropped,
/// `READONLY` from a master demoted to a replica, `MASTERDOWN`, `LOADING`)
/// asks the sentinels for the master again and is sent again to the one they
/// name, until it gets another answer or its budget, one [response
/// timeout](RedisConfig::response_timeout), is spent: then it fails with
/// [`BackendErrorKind::Timeout`], naming the master and the last answer. A
/// call whose reply did not come within the response timeout (a frozen
/// master, a network cut) fails with it as on one server, and the sentinels
/// are asked again in the background, so that the next calls go to the new
/// master if there is one. Sending again is safe, as on a cluster: the
/// acquire reports `Obtained` to a retry of the same value, refresh and
/// release act only on the caller's token.
///
/// Sentinels notice a dead master after `down-after-milliseconds` (30 s by
/// default), then agree, elect one of them and promote a replica: with
/// `down-after-milliseconds 1000`, the test suite's sentinels promoted one
/// 2.25 s after the master was killed, and an obtain sent at the kill
/// returned, obtained, 2.2 s later. To ride a failover out rather than fail the calls made
/// meanwhile, make the response timeout longer than that, or the sentinels'
/// `down-after-milliseconds` shorter. Leases whose ttl is shorter than the
/// failover are lost, as under any outage.
///
/// Waiters listen for releases on the master (one pub/sub connection per
/// locker, as on one server). When the master dies, their connection closes;
/// each waiter tries again at once, which follows the failover as above, then
/// listens on the new master, where the holder's release (which follows the
/// failover too) is published.
/// The sentinels close the client connections of a master they demote
/// while it runs (a failover by hand), so its waiters listen again on the new
/// master, as when it dies; its callers reconnect to it, are refused with
/// `READONLY`, and follow. A master
/// cut off by the network rather than killed can leave its waiters'
/// connection open and silent: those waiters do not hear releases on the new
/// master, and try again when the holder's lease, as they last saw it, runs
/// out (or their retry strategy says so, whichever comes first).
///
/// # What a failover can lose
///
/// Redis replicates asynchronously: the master answers a write before its
/// replicas have it. A failover promotes a replica, and whatever the old
/// master had not yet sent to it is gone:
///
/// - **a lock just granted**: another client can take the key on the new
///   master while the first still holds it by its own clock, until the
///   first one's next refresh finds the key gone (it then reports the lease
///   lost). The same goes for a refresh: a lease extended on the old master
///   only may expire earlier on the new one.
/// - **the latest fence increments**: a counter that reached the replica
///   continues from the replica's value, so a token already handed out can
///   be handed out again. A counter that had not reached the replica at all
///   starts again from the new master's clock (microseconds), above every
///   token minted before, as long as the clocks of the two servers agree to
///   within the tokens minted meanwhile.
///
/// Two settings narrow this:
///
/// - [`ObtainOptions::replicas`](crate::ObtainOptions::replicas) (the
///   attribute's `replicas = 1`): the obtain returns only once that many
///   replicas have the lock and its fence increment (`WAIT`), and gives the
///   lock back otherwise. A failover that promotes one of those replicas
///   keeps both. Sentinel promotes the replica with the most data it can
///   reach, but can promote one that had not acknowledged, so with two
///   replicas `replicas = 2` is the only setting under which any promoted
///   replica has the lock. Refreshes are not waited for.
/// - `min-replicas-to-write 1` with `min-replicas-max-lag 10` on the master:
///   a master cut off from its replicas refuses writes after the lag, so a
///   master isolated by a partition stops granting locks that its
///   replacement would not know about. Calls fail with the server's
///   `NOREPLICAS` error meanwhile.
///
/// Neither makes the lock survive every failure: where that matters, use
/// fencing tokens checked by the resource, or
/// [`RedlockBackend`](super::RedlockBackend).
///
/// # Addresses, users and TLS
///
/// The sentinels are given by URL (`redis://[user:password@]host:26379`,
/// `rediss://` for TLS), each with the sentinels' own credentials. The
/// master is given by name, or by a URL whose host is the name and which
/// carries the master's user, password and database:
/// `redis://app:secret@mymaster/2`; its port is ignored, the sentinels give
/// it. The master is reached with TLS when its URL says `rediss://`, or,
/// given by name alone, when the sentinels' URLs do; its certificate must
/// then name the IP address the sentinels announce. [`RedisConfig`]'s
/// timeouts and TLS certificates apply to the sentinels and the master
/// alike.
///
/// ```no_run
/// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
/// use std::time::Duration;
/// use lockmacro_runtime::{Locker, RedisConfig, SentinelBackend};
///
/// let config = RedisConfig::default().response_timeout(Duration::from_secs(10));
/// let backend = SentinelBackend::connect_with(
///     "redis://app:master-secret@mymaster/0",
///     [
///         "redis://:sentinel-secret@10.0.0.1:26379",
///         "redis://:sentinel-secret@10.0.0.2:26379",
///         "redis://:sentinel-secret@10.0.0.3:26379",
///     ],
///     config,
/// )
/// .await?;
/// let locker = Locker::new(backend);
/// # let _ = locker; Ok(()) }
/// ```
#[derive(Clone)]
pub struct SentinelBackend {
    inner: Arc<Inner>,
}

struct Inner {
    lookup: Lookup,
    current: Mutex<Current>,
    /// Held while the sentinels are asked, so that the calls that all meet
    /// the same failover ask once.
    switching: tokio::sync::Mutex<()>,
}

/// How to find the master.
struct Lookup {
    master_name: String,
    /// `redis sentinel mymaster (127.0.0.1:26379,…)`: names it in errors.
    name: String,
    sentinels: Vec<redis::Client>,
    /// The master's user, password and database, and whether it is reached
    /// with TLS; its address comes from the sentinels.
    master: ConnectionInfo,
    tls: bool,
    config: RedisConfig,
}

/// The master in use.
#[derive(Clone)]
struct Current {
    backend: Arc<RedisBackend>,
    /// Bumped at each switch to another master.
    generation: u64,
    /// `ip:port`, as the sentinels name it.
    addr: String,
}

impl std::fmt::Debug for SentinelBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelBackend")
            .field("sentinels", &self.inner.lookup.name)
            .field("master", &self.inner.current().addr)
            .finish_non_exhaustive()
    }
}

impl SentinelBackend {
    /// Connects to the master named `master` by the `sentinels` (URLs), with
    /// the default [`RedisConfig`]. See the type's documentation for the
    /// forms of `master`.
    pub async fn connect<I, S>(master: &str, sentinels: I) -> Result<Self, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::connect_with(master, sentinels, RedisConfig::default()).await
    }

    /// Connects to the master named `master` by the `sentinels`, with
    /// `config`. Fails with [`LockError::InvalidUrl`] for a URL that cannot
    /// be parsed, and with [`LockError::Backend`] when no sentinel names a
    /// master that answers as one, with each sentinel's answer.
    pub async fn connect_with<I, S>(
        master: &str,
        sentinels: I,
        config: RedisConfig,
    ) -> Result<Self, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let urls: Vec<String> = sentinels
            .into_iter()
            .map(|url| url.as_ref().to_owned())
            .collect();
        if urls.is_empty() {
            return Err(LockError::InvalidUrl {
                url: String::new(),
                reason: "no sentinels given; pass the URL of at least one sentinel".into(),
            });
        }
        let sentinels = urls
            .iter()
            .map(|url| open_client(url, &config))
            .collect::<Result<Vec<_>, _>>()?;
        let addrs: Vec<String> = sentinels
            .iter()
            .map(|client| client.get_connection_info().addr().to_string())
            .collect();
        let sentinels_tls = sentinels.iter().all(|client| {
            matches!(
                client.get_connection_info().addr(),
                ConnectionAddr::TcpTls { .. }
            )
        });
        let (master_name, info, tls) = parse_master(master, sentinels_tls)?;
        if tls {
            enable_tls(master)?;
        }
        let name = format!("redis sentinel {master_name} ({})", addrs.join(","));
        let lookup = Lookup {
            master_name,
            name,
            sentinels,
            master: info,
            tls,
            config,
        };
        let deadline = lookup.config.connect_timeout + lookup.config.response_timeout;
        let (client, addr) = match tokio::time::timeout(deadline, lookup.find_master()).await {
            Ok(found) => found?,
            Err(_) => {
                return Err(BackendError::new(
                    BackendErrorKind::Timeout,
                    format!("{}: connect", lookup.name),
                    "no sentinel named a master in time",
                )
                .into());
            }
        };
        let backend = RedisBackend::from_client(client, lookup.config.clone()).await?;
        let inner = Inner {
            lookup,
            current: Mutex::new(Current {
                backend: Arc::new(backend),
                generation: 1,
                addr,
            }),
            switching: tokio::sync::Mutex::new(()),
        };
        Ok(SentinelBackend {
            inner: Arc::new(inner),
        })
    }

    /// `ip:port` of the master this backend sends its calls to now, as the
    /// sentinels named it.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::SentinelBackend;
    ///
    /// let backend = SentinelBackend::connect("mymaster", ["redis://10.0.0.1:26379"]).await?;
    /// println!("locking on {}", backend.master());
    /// # Ok(()) }
    /// ```
    pub fn master(&self) -> String {
        self.inner.current().addr
    }

    /// Runs `attempt` on the current master, following a failover as the
    /// type's documentation says; `what` names the call in errors.
    async fn follow<'a, T, F>(&'a self, what: &str, attempt: F) -> Result<T, LockError>
    where
        F: Fn(Arc<RedisBackend>) -> BoxFuture<'a, Result<T, LockError>>,
    {
        let inner = &self.inner;
        let policy = Following {
            deadline: Instant::now() + inner.lookup.config.response_timeout,
            current: inner.current(),
            inner,
            what,
        };
        retry::follow(policy, attempt).await
    }

    /// Listens through `listen` on the current master; when that gives a
    /// deaf listener (no pub/sub connection to it), asks the sentinels
    /// whether the master changed and listens on the new one.
    async fn listen_with<'a, F, Fut>(&'a self, listen: F) -> ReleaseListener
    where
        F: Fn(Arc<RedisBackend>) -> Fut,
        Fut: Future<Output = ReleaseListener> + 'a,
    {
        let current = self.inner.current();
        let listener = listen(current.backend.clone()).await;
        if listener.hears() {
            return listener;
        }
        let budget = self.inner.lookup.config.response_timeout;
        match tokio::time::timeout(budget, self.inner.switch(current.generation)).await {
            Ok(Ok(next)) if next.generation != current.generation => listen(next.backend).await,
            _ => listener,
        }
    }
}

impl Inner {
    fn current(&self) -> Current {
        self.lock_current().clone()
    }

    fn lock_current(&self) -> MutexGuard<'_, Current> {
        // Replaced whole: a panic cannot leave it torn.
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The master once the sentinels were asked, unless another call already
    /// switched since generation `seen`: the same one when they still name
    /// it, a new backend on the new one otherwise.
    async fn switch(&self, seen: u64) -> Result<Current, LockError> {
        let _one = self.switching.lock().await;
        let current = self.current();
        if current.generation != seen {
            return Ok(current);
        }
        let (client, addr) = self.lookup.find_master().await?;
        if addr == current.addr {
            return Ok(current);
        }
        let backend = RedisBackend::from_client(client, self.lookup.config.clone()).await?;
        let next = Current {
            backend: Arc::new(backend),
            generation: seen + 1,
            addr,
        };
        tracing::info!(target: "lockmacro", master = %self.lookup.master_name, from = %current.addr, to = %next.addr, "following the master the sentinels name");
        *self.lock_current() = next.clone();
        Ok(next)
    }

    /// Asks the sentinels again in the background, after a call that got no
    /// answer in time from master generation `seen`.
    fn recheck(self: &Arc<Self>, seen: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = self.clone();
        let budget = self.lookup.config.connect_timeout + self.lookup.config.response_timeout;
        runtime.spawn(async move {
            let _ = tokio::time::timeout(budget, inner.switch(seen)).await;
        });
    }

    /// The error of a call whose budget ran out while no master answered;
    /// `last` is the last failure met.
    fn spent(&self, what: &str, last: Option<String>) -> LockError {
        let budget = self.lookup.config.response_timeout;
        let message = match last {
            Some(last) => format!(
                "no master answered within the response timeout ({budget:?}): the sentinels \
                 are failing over or have no master; last answer: {last}"
            ),
            None => format!("no answer within the response timeout ({budget:?})"),
        };
        BackendError::new(
            BackendErrorKind::Timeout,
            format!("{}: {what}", self.lookup.name),
            message,
        )
        .into()
    }
}

/// How a call follows the master: a failover's failures are sent again to
/// the master the sentinels name next, until the response timeout.
struct Following<'a> {
    inner: &'a Arc<Inner>,
    current: Current,
    what: &'a str,
    deadline: Instant,
}

impl Policy for Following<'_> {
    type Target = Arc<RedisBackend>;
    type Error = LockError;
    type Failure = LockError;

    fn deadline(&self) -> Option<Instant> {
        Some(self.deadline)
    }

    fn target(&self) -> Arc<RedisBackend> {
        self.current.backend.clone()
    }

    fn retry(&mut self, err: &LockError) -> bool {
        let failing = failing_over(err);
        if failing {
            tracing::debug!(target: "lockmacro", master = %self.current.addr, error = %err, "master failing; asking the sentinels");
        }
        failing
    }

    async fn recover(&mut self) -> Result<bool, LockError> {
        let next = self.inner.switch(self.current.generation).await?;
        // The same master: its connection is being made again; give it a
        // moment.
        let same = next.generation == self.current.generation;
        self.current = next;
        Ok(same)
    }

    fn fail(&mut self, err: LockError, _: Option<LockError>) -> LockError {
        if timed_out(&err) {
            self.inner.recheck(self.current.generation);
        }
        err
    }

    fn spent(&mut self, last: Option<LockError>, cut: bool) -> LockError {
        if cut {
            self.inner.recheck(self.current.generation);
            return self.inner.spent(self.what, None);
        }
        self.inner
            .spent(self.what, last.map(|last| last.to_string()))
    }
}

impl Lookup {
    /// The master's client and `ip:port`, from the first sentinel to name a
    /// server answering `ROLE` as a master. The sentinels are asked all at
    /// once, so that one that is down or frozen costs nothing while another
    /// answers.
    async fn find_master(&self) -> Result<(redis::Client, String), LockError> {
        type Asking<'a> = BoxFuture<'a, Result<(redis::Client, String), Answer>>;
        let mut pending: Vec<Option<Asking<'_>>> = self
            .sentinels
            .iter()
            .map(|sentinel| Some(Box::pin(self.ask(sentinel)) as Asking<'_>))
            .collect();
        let mut failed: Vec<Option<Answer>> = self.sentinels.iter().map(|_| None).collect();
        let found = std::future::poll_fn(|cx| {
            let mut left = 0;
            for (slot, answer) in pending.iter_mut().zip(failed.iter_mut()) {
                let Some(asking) = slot else {
                    continue;
                };
                match asking.as_mut().poll(cx) {
                    Poll::Ready(Ok(found)) => return Poll::Ready(Some(found)),
                    Poll::Ready(Err(why)) => {
                        *answer = Some(why);
                        *slot = None;
                    }
                    Poll::Pending => left += 1,
                }
            }
            if left == 0 {
                Poll::Ready(None)
            } else {
                Poll::Pending
            }
        })
        .await;
        if let Some(found) = found {
            return Ok(found);
        }
        let mut answers = Vec::new();
        let (mut unknown, mut refused) = (0, 0);
        for (sentinel, answer) in self.sentinels.iter().zip(failed) {
            let addr = sentinel.get_connection_info().addr().to_string();
            match answer {
                Some(Answer::Unknown) => {
                    unknown += 1;
                    answers.push(format!(
                        "{addr} knows no master named `{}`",
                        self.master_name
                    ));
                }
                Some(Answer::Refused(why)) => {
                    refused += 1;
                    answers.push(format!("{addr}: {why}"));
                }
                Some(Answer::Failed(why)) => answers.push(format!("{addr}: {why}")),
                None => answers.push(format!("{addr}: no answer")),
            }
        }
        let kind = if refused > 0 {
            BackendErrorKind::Authentication
        } else if unknown == self.sentinels.len() {
            BackendErrorKind::Other
        } else {
            BackendErrorKind::Unreachable
        };
        Err(BackendError::new(
            kind,
            format!("{}: find the master", self.name),
            format!(
                "no sentinel named a master that answers as one: {}",
                answers.join("; ")
            ),
        )
        .into())
    }

    /// What `sentinel` says of the master, checked on the master itself.
    async fn ask(&self, sentinel: &redis::Client) -> Result<(redis::Client, String), Answer> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.config.connect_timeout))
            .set_response_timeout(Some(self.config.response_timeout));
        let failed = |err: RedisError| Answer::from_error(err, "");
        let mut conn = sentinel
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(failed)?;
        let named: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.master_name)
            .query_async(&mut conn)
            .await
            .map_err(failed)?;
        let (ip, port) = named.ok_or(Answer::Unknown)?;
        let addr = format!("{ip}:{port}");
        let client = self
            .master_client(ip, port)
            .map_err(|err| Answer::Failed(err.to_string()))?;
        let mut master = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|err| Answer::from_error(err, &format!("master {addr}: ")))?;
        let role: Value = redis::cmd("ROLE")
            .query_async(&mut master)
            .await
            .map_err(|err| Answer::from_error(err, &format!("master {addr}: ")))?;
        match role_name(&role) {
            Some("master") => Ok((client, addr)),
            other => Err(Answer::Failed(format!(
                "names {addr}, whose role is {}",
                other.unwrap_or("unknown")
            ))),
        }
    }

    /// A client for the master at `ip:port`, with the master's user,
    /// password, database and TLS.
    fn master_client(&self, ip: String, port: u16) -> Result<redis::Client, LockError> {
        let addr = if self.tls {
            ConnectionAddr::TcpTls {
                host: ip,
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(ip, port)
        };
        let info = self.master.clone().set_addr(addr);
        let invalid = |reason: String| LockError::InvalidUrl {
            url: info.addr().to_string(),
            reason,
        };
        #[cfg(feature = "tls-rustls")]
        if self.tls
            && let Some(certificates) = self.config.tls_certificates(&self.name)?
        {
            return redis::Client::build_with_tls(info.clone(), certificates)
                .map_err(|err| invalid(err.to_string()));
        }
        redis::Client::open(info.clone()).map_err(|err| invalid(err.to_string()))
    }
}

/// Why a sentinel did not give a master.
enum Answer {
    /// It does not know the name.
    Unknown,
    /// The sentinel or the master refused the credentials.
    Refused(String),
    Failed(String),
}

impl Answer {
    /// `err`, met on the server that `whose` names (empty: the sentinel).
    fn from_error(err: RedisError, whose: &str) -> Self {
        let refused = err.kind() == ErrorKind::AuthenticationFailed
            || matches!(err.code(), Some("NOAUTH" | "WRONGPASS"));
        if refused {
            let side = if whose.is_empty() {
                "the sentinel's URL"
            } else {
                "the master's URL (`redis://user:password@<master name>/`)"
            };
            return Answer::Refused(format!(
                "{whose}authentication failed: {err}; give the password in {side}"
            ));
        }
        Answer::Failed(format!("{whose}{err}"))
    }
}

/// `master`, `slave` or `sentinel`: the first element of a `ROLE` reply.
fn role_name(role: &Value) -> Option<&str> {
    let Value::Array(items) = role else {
        return None;
    };
    match items.first()? {
        Value::BulkString(name) => std::str::from_utf8(name).ok(),
        Value::SimpleString(name) => Some(name),
        _ => None,
    }
}

/// The master's name, connection settings and TLS, from `master`: a name, or
/// a URL whose host is the name.
fn parse_master(
    master: &str,
    sentinels_tls: bool,
) -> Result<(String, ConnectionInfo, bool), LockError> {
    let invalid = |reason: String| LockError::InvalidUrl {
        url: redact(master),
        reason,
    };
    if !master.contains("://") {
        if master.is_empty() || master.contains(char::is_whitespace) {
            return Err(invalid(
                "the master's name is empty or has spaces; give the name the sentinels \
                 monitor it under (`sentinel monitor <name> …`)"
                    .into(),
            ));
        }
        // Parsed only for the default settings; the address is replaced.
        let info = "redis://127.0.0.1/"
            .into_connection_info()
            .map_err(|err| invalid(err.to_string()))?;
        return Ok((master.to_owned(), info, sentinels_tls));
    }
    let info = master
        .into_connection_info()
        .map_err(|err| invalid(err.to_string()))?;
    match info.addr() {
        ConnectionAddr::Tcp(name, _) => Ok((name.clone(), info.clone(), false)),
        ConnectionAddr::TcpTls { host, .. } => Ok((host.clone(), info.clone(), true)),
        _ => Err(invalid(
            "the master's URL names it by host: `redis://[user:password@]<master name>/[db]`"
                .into(),
        )),
    }
}

/// True for the failures a failover causes, which the same call sent to the
/// master the sentinels name next gets past.
fn failing_over(err: &LockError) -> bool {
    let LockError::Backend(err) = err else {
        return false;
    };
    if err.kind() == BackendErrorKind::Unreachable {
        return true;
    }
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if let Some(redis) = cause.downcast_ref::<RedisError>() {
            return matches!(
                redis.kind(),
                ErrorKind::Server(
                    ServerErrorKind::ReadOnly
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::BusyLoading
                        | ServerErrorKind::TryAgain
                )
            ) || redis.is_connection_refusal()
                || redis.is_connection_dropped()
                // A write refused inside a script on a demoted master.
                || redis.to_string().contains("READONLY");
        }
        source = cause.source();
    }
    false
}

fn timed_out(err: &LockError) -> bool {
    matches!(err, LockError::Backend(err) if err.kind() == BackendErrorKind::Timeout)
}

impl Backend for SentinelBackend {
    fn name(&self) -> &'static str {
        "sentinel"
    }

    fn acquire<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        Box::pin(async move {
            let what = format!("obtain `{}`", req.keys.join("`, `"));
            self.follow(&what, move |backend| {
                Box::pin(async move { backend.acquire(req).await })
            })
            .await
        })
    }

    fn refresh<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let what = format!("refresh `{}`", keys.join("`, `"));
            self.follow(&what, move |backend| {
                Box::pin(async move { backend.refresh(keys, token, ttl).await })
            })
            .await
        })
    }

    fn refresh_many<'a>(
        &'a self,
        requests: &'a [RefreshRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, LockError>>> {
        Box::pin(async move {
            // All on one server: a failover fails them all, and all are sent
            // again (a refresh acts only on its token, so that is safe).
            let outcome = self
                .follow("refresh", move |backend| {
                    Box::pin(async move {
                        let mut results = backend.refresh_many(requests).await;
                        match results
                            .iter()
                            .position(|result| result.as_ref().is_err_and(failing_over))
                        {
                            Some(index) => Err(results.swap_remove(index).unwrap_err()),
                            None => Ok(results),
                        }
                    })
                })
                .await;
            match outcome {
                Ok(results) => results,
                Err(err) => {
                    let (kind, message) = match &err {
                        LockError::Backend(err) => (err.kind(), err.to_string()),
                        other => (BackendErrorKind::Other, other.to_string()),
                    };
                    requests
                        .iter()
                        .map(|req| {
                            Err(BackendError::new(
                                kind,
                                format!(
                                    "{}: refresh `{}`",
                                    self.inner.lookup.name,
                                    req.keys.join("`, `")
                                ),
                                message.clone(),
                            )
                            .into())
                        })
                        .collect()
                }
            }
        })
    }

    fn release<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let what = format!("release `{}`", keys.join("`, `"));
            self.follow(&what, move |backend| {
                Box::pin(async move { backend.release(keys, token).await })
            })
            .await
        })
    }

    fn remaining<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Duration>, LockError>> {
        Box::pin(async move {
            let what = format!("ttl `{}`", keys.join("`, `"));
            self.follow(&what, move |backend| {
                Box::pin(async move { backend.remaining(keys, token).await })
            })
            .await
        })
    }

    fn listen<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ReleaseListener> {
        Box::pin(self.listen_with(move |backend| async move { backend.listen(key).await }))
    }

    fn fair_queue(&self) -> Option<&dyn FairQueue> {
        Some(self)
    }

    fn acknowledges_replicas(&self) -> bool {
        true
    }

    fn keeps_shares(&self) -> bool {
        true
    }
}

impl FairQueue for SentinelBackend {
    fn listen_granted<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, ReleaseListener> {
        Box::pin(
            self.listen_with(
                move |backend| async move { backend.listen_granted(key, token).await },
            ),
        )
    }

    fn listening(&self, key: &str) -> bool {
        self.inner.current().backend.listening(key)
    }

    fn confirm<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let what = format!("confirm `{key}`");
            self.follow(&what, move |backend| {
                Box::pin(async move { backend.confirm(key, token, ttl).await })
            })
            .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::parse_master;

    #[test]
    fn master_is_a_name_or_a_url_naming_it_with_its_credentials() {
        let (name, info, tls) = parse_master("mymaster", false).unwrap();
        assert_eq!((name.as_str(), tls), ("mymaster", false));
        assert_eq!(info.redis_settings().password(), None);
        // Given by name alone, the master uses TLS when the sentinels do.
        assert!(parse_master("mymaster", true).unwrap().2);

        let (name, info, tls) = parse_master("redis://app:s3cret@mymaster/2", true).unwrap();
        assert_eq!((name.as_str(), tls), ("mymaster", false));
        let settings = info.redis_settings();
        assert_eq!(settings.username(), Some("app"));
        assert_eq!(settings.password(), Some("s3cret"));
        assert_eq!(settings.db(), 2);
        #[cfg(feature = "tls-rustls")]
        assert!(parse_master("rediss://mymaster", false).unwrap().2);
        #[cfg(not(feature = "tls-rustls"))]
        assert!(parse_master("rediss://mymaster", false).is_err());

        for bad in ["", "my master", "redis://:pw@/"] {
            assert!(parse_master(bad, false).is_err(), "{bad:?}");
        }
    }
}
