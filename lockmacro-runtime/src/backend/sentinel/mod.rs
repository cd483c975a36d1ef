//! Redis Sentinel: [`SentinelBackend`] follows the master the sentinels
//! name, and locks on it as on one server.

mod follow;
mod lookup;

use std::future::Future;
use std::sync::{Arc, Mutex};

use redis::ConnectionAddr;
use tokio::time::Instant;

use self::follow::{Following, failing_over};
use self::lookup::{Lookup, parse_master};
use crate::backend::redis::retry;
use crate::backend::redis::{enable_tls, open_client, refuse_dial};
use crate::backend::shared::forward;
use crate::backend::{
    Backend, BoxFuture, Capabilities, FairQueue, RedisBackend, RefreshRequest, ReleaseListener,
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
    pub async fn connect(
        master: &str,
        sentinels: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<Self, LockError> {
        Self::connect_with(master, sentinels, RedisConfig::default()).await
    }

    /// Connects to the master named `master` by the `sentinels`, with
    /// `config`. Fails with [`LockError::InvalidUrl`] for a URL that cannot
    /// be parsed, and with [`LockError::Backend`] when no sentinel names a
    /// master that answers as one, with each sentinel's answer.
    pub async fn connect_with(
        master: &str,
        sentinels: impl IntoIterator<Item = impl AsRef<str>>,
        config: RedisConfig,
    ) -> Result<Self, LockError> {
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
        refuse_dial(&config, &urls, "Sentinel")?;
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
    fn follow<'a, T, F, Fut>(
        &'a self,
        what: String,
        attempt: F,
    ) -> BoxFuture<'a, Result<T, LockError>>
    where
        T: Send + 'a,
        F: Fn(Arc<RedisBackend>) -> Fut + Send + 'a,
        Fut: Future<Output = Result<T, LockError>> + Send + 'a,
    {
        Box::pin(async move {
            let inner = &self.inner;
            let policy = Following {
                deadline: Instant::now() + inner.lookup.config.response_timeout,
                current: inner.current(),
                inner,
                what: &what,
            };
            retry::follow(policy, attempt).await
        })
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

/// For [`forward!`]: the call made on the current master, and made again
/// on the new one after a failover (see [`SentinelBackend::follow`]).
macro_rules! on_master {
    ($self:ident, $verb:literal, $subject:expr, $method:ident($($arg:ident),*)) => {
        $self.follow(format!("{} `{}`", $verb, $subject), move |backend| async move {
            backend.$method($($arg),*).await
        })
    };
}

impl Backend for SentinelBackend {
    forward!(on_master: acquire, refresh, release, release_value, remaining, inspect, keys, force_release);
    forward!(on_master: downgrade);

    fn name(&self) -> &'static str {
        "sentinel"
    }

    fn refresh_many<'a>(
        &'a self,
        requests: &'a [RefreshRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, LockError>>> {
        Box::pin(async move {
            // All on one server: a failover fails them all, and all are sent
            // again (a refresh acts only on its token, so that is safe).
            let outcome = self
                .follow("refresh".to_owned(), move |backend| async move {
                    let mut results = backend.refresh_many(requests).await;
                    match results
                        .iter()
                        .position(|result| result.as_ref().is_err_and(failing_over))
                    {
                        Some(index) => Err(results.swap_remove(index).unwrap_err()),
                        None => Ok(results),
                    }
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

    fn listen<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ReleaseListener> {
        Box::pin(self.listen_with(move |backend| async move { backend.listen(key).await }))
    }

    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities::none()
            .with_fair_queue(self)
            .with_shares()
            .with_replicas()
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

    forward!(on_master: confirm);
}
