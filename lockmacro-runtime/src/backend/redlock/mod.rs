//! Redlock: [`RedlockBackend`] takes a lock on a majority of independent
//! masters.

mod fanout;
mod operate;

use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio::time::Instant;

use self::fanout::{Answer, Tally, Votes};
use crate::backend::redact;
use crate::backend::redis::{Lua, RedisBackend};
use crate::backend::shared::{boxed, forward};
use crate::backend::{AcquireRequest, Acquired, Backend, BoxFuture, RefreshRequest};
use crate::error::{BackendError, BackendErrorKind};
use crate::{LockError, RedisConfig};

static RAISE_FENCE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../scripts/raise_fence.lua")));

/// The shortest per-master timeout for calls that carry a ttl: below this,
/// scheduling noise alone fails calls to healthy masters. The validity check
/// keeps short ttls safe whatever this is.
const MIN_NODE_TIMEOUT: Duration = Duration::from_millis(50);

/// Locks on several independent Redis masters, by majority (the Redlock
/// algorithm of the Redis documentation).
///
/// Every call goes to all masters at once, so it costs one round trip of wall
/// time, not one per master. A lock is held when a majority (`N / 2 + 1`) of
/// the masters granted it; each master keeps the same key and value as
/// [`RedisBackend`] would. Masters are plain, unrelated Redis servers (not
/// replicas of each other, not a cluster); an odd count (3 or 5) tolerates
/// the most failures for its size.
///
/// # Timing
///
/// - Each master has a timeout small against the ttl (a tenth of it, at least
///   50 ms, at most the [response timeout](RedisConfig::response_timeout)), so
///   a dead or frozen master costs little: the call returns as soon as the
///   outcome is known.
/// - The lease is trusted for its *validity*: ttl − elapsed − drift, where
///   elapsed is counted from when the request was sent and drift (1% of the
///   ttl plus 2 ms) allows for the masters' clocks running faster than ours.
///   When the majority's answers arrive after that, the attempt counts as
///   failed.
/// - A failed attempt is undone on every master before the next one, which
///   waits as the [`RetryStrategy`](crate::RetryStrategy) says (exponential
///   with jitter gives the random delay the algorithm asks for).
/// - Refresh succeeds when a majority extended the lease; release deletes it
///   on every master and reports whether a majority still held it.
///
/// # Fencing tokens
///
/// With fencing on, every master that grants the lock increments its own
/// counter; the token is the largest counter among the majority that granted,
/// and it is then written back to each of them (only where the lock is still
/// held). Any two majorities share a master, so the next holder's token is
/// larger: **tokens strictly increase as long as no master loses its
/// counter**. A master restarted without persistence forgets its counter (and
/// its locks); its new counter starts at its clock in microseconds (see
/// [Fencing tokens](crate#fencing-tokens)), above every token minted before
/// as long as the masters' clocks roughly agree and none steps back. Where
/// tokens must not rest on clocks, run the masters with `appendonly yes` and
/// `appendfsync always`. Taking only the largest counter
/// would not be enough: counters drift apart whenever an attempt fails after
/// some masters granted it, and the write-back is what makes the shared
/// master carry the latest token. It costs a second round trip, for fenced
/// locks only; when it fails on too many masters, the attempt fails like a
/// refused lock.
///
/// # Waiting
///
/// Waiters are not woken by releases: they retry after their retry
/// strategy's delay. Waiters woken together would all try at once and could
/// split the masters' votes so that none gets a majority; a random delay, as
/// the algorithm asks, spreads them out (exponential backoff has full jitter;
/// the attribute's `wait` backs off from 2 ms to 200 ms). No wait outlasts
/// the shortest remaining lease that a master refusing the lock reports.
///
/// # No fair hand-off
///
/// A queue of waiters would have to be kept by a majority too, and a release
/// could hand the key to different waiters on different masters. A fair
/// obtain ([`ObtainOptions::fair`](crate::ObtainOptions::fair), `fair = true`)
/// therefore fails at once with [`LockError::Backend`] saying so; nothing is
/// sent.
///
/// # Connecting
///
/// [`connect`](Self::connect) succeeds when a majority of the masters can be
/// reached: enough to take locks. The others are tried again in the course of
/// later calls, at most once a second, and join as soon as they answer. With
/// fewer than a majority reachable it fails with [`LockError::Backend`],
/// naming each master that failed and why.
///
/// ```no_run
/// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
/// use lockmacro_runtime::{Locker, RedlockBackend};
///
/// let backend = RedlockBackend::connect([
///     "redis://10.0.0.1:6379/",
///     "redis://10.0.0.2:6379/",
///     "redis://10.0.0.3:6379/",
/// ])
/// .await?;
/// assert_eq!(backend.quorum(), 2);
/// let locker = Locker::new(backend);
/// # let _ = locker; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedlockBackend {
    inner: Arc<Inner>,
}

struct Inner {
    masters: Vec<Master>,
    quorum: usize,
    config: RedisConfig,
    /// `redlock 10.0.0.1:6379,10.0.0.2:6379,…`: names it in error messages.
    name: String,
}

struct Master {
    url: String,
    /// `redis 10.0.0.1:6379`, as `RedisBackend` names it.
    name: String,
    backend: OnceCell<RedisBackend>,
    /// While not connected: when the next connection attempt may start.
    retry_at: Mutex<Instant>,
}

impl std::fmt::Debug for RedlockBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockBackend")
            .field("masters", &self.inner.name)
            .field("quorum", &self.inner.quorum)
            .finish_non_exhaustive()
    }
}

impl RedlockBackend {
    /// `rediss://` for TLS) with the default [`RedisConfig`].
    ///
    /// Fails with [`LockError::InvalidUrl`] when a URL cannot be parsed, none
    /// is given, or two name the same server (it would be counted twice
    /// towards the majority), and with [`LockError::Backend`] when fewer than
    /// a majority can be reached.
    pub async fn connect(
        urls: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<Self, LockError> {
        Self::connect_with(urls, RedisConfig::default()).await
    }

    /// Connects to the masters at `urls` with `config`, which applies to each
    /// master.
    pub async fn connect_with(
        urls: impl IntoIterator<Item = impl AsRef<str>>,
        config: RedisConfig,
    ) -> Result<Self, LockError> {
        let mut masters: Vec<Master> = Vec::new();
        for url in urls {
            let url = url.as_ref();
            let invalid = |reason: String| LockError::InvalidUrl {
                url: redact(url),
                reason,
            };
            let client = redis::Client::open(url).map_err(|err| invalid(err.to_string()))?;
            let name = format!("redis {}", client.get_connection_info().addr());
            if masters.iter().any(|master| master.name == name) {
                return Err(invalid(format!(
                    "{name} is given twice; each Redlock master must be a separate server"
                )));
            }
            masters.push(Master {
                url: url.to_owned(),
                name,
                backend: OnceCell::new(),
                retry_at: Mutex::new(Instant::now()),
            });
        }
        if masters.is_empty() {
            return Err(LockError::InvalidUrl {
                url: String::new(),
                reason: "no masters given; pass the URLs of the independent Redis masters".into(),
            });
        }
        let servers: Vec<&str> = masters
            .iter()
            .map(|master| master.name.trim_start_matches("redis "))
            .collect();
        let name = format!("redlock {}", servers.join(","));
        let backend = RedlockBackend {
            inner: Arc::new(Inner {
                quorum: masters.len() / 2 + 1,
                masters,
                config,
                name,
            }),
        };
        // Each attempt is bounded by the connect and response timeouts.
        let mut set = backend.fan_out(backend.masters(), Duration::MAX, "connect", |_| async {
            Ok(Answer::<(), ()>::Yes(()))
        });
        let mut tally = Tally::default();
        while let Some(reply) = set.next().await {
            tally.add(reply);
        }
        if tally.yes.len() < backend.inner.quorum {
            return Err(backend.no_quorum("connect", &tally).into());
        }
        Ok(backend)
    }

    /// How many masters must agree: a majority of all configured masters,
    /// whether or not they are reachable.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// The per-master timeout for a call with this ttl.
    fn node_timeout(&self, ttl: Duration) -> Duration {
        (ttl / 10)
            .max(MIN_NODE_TIMEOUT)
            .min(self.inner.config.response_timeout)
    }
}

impl RedlockBackend {
    /// One attempt on every master at once, decided by a majority: the
    /// keys, and the fence above every master's, or none of it.
    async fn obtain(&self, req: AcquireRequest<'_>) -> Result<Acquired, LockError> {
        let sent = Instant::now();
        let timeout = self.node_timeout(req.ttl);
        let keys: Arc<[String]> = req.keys.into();
        let value: Arc<str> = req.value.into();
        let fence_key: Option<Arc<str>> = req.fence_key.map(Into::into);
        let (ttl, wait) = (req.ttl, req.wait);
        let mut set = {
            let (keys, value, fence_key) = (keys.clone(), value.clone(), fence_key.clone());
            self.fan_out(self.masters(), timeout, "obtain", move |backend| {
                let (keys, value, fence_key) = (keys.clone(), value.clone(), fence_key.clone());
                async move {
                    let req = AcquireRequest {
                        keys: &keys,
                        value: &value,
                        ttl,
                        fence_key: fence_key.as_deref(),
                        queue_for: None,
                        replicas: 0,
                        replica_timeout: Duration::ZERO,
                        // A first attempt is a plain one on each
                        // master, as cheap as on one server.
                        wait,
                        attempt: 0,
                        share: None,
                    };
                    Ok(match backend.protocol().acquire(req).await? {
                        Acquired::Obtained { fence } => Answer::Yes(fence),
                        Acquired::Busy {
                            index,
                            remaining,
                            holder,
                        } => Answer::No((index, remaining, holder)),
                    })
                }
            })
        };
        let tally = self.tally(&mut set).await;
        // The masters that have not answered are not waited for. A request
        // already sent still lands, and a release (or the undo below)
        // follows it on the same connection. One still waiting for a
        // connection is cancelled: sent later, when its master comes
        // back, it would grant a lock that may be released by then.
        drop(set);
        let mut outcome = self.verdict("obtain", &tally);
        let mut fence = None;
        if let (Ok(true), Some(fence_key)) = (&outcome, &fence_key) {
            let token = tally
                .yes
                .iter()
                .filter_map(|&(_, fence)| fence)
                .max()
                .unwrap_or(0);
            let granted = tally.yes.iter().map(|&(index, _)| index).collect();
            outcome = self
                .raise_fence(granted, keys.to_vec(), fence_key, &value, token, timeout)
                .await;
            fence = Some(token);
        }
        let valid = sent.elapsed() + self.drift(ttl) < ttl;
        match outcome {
            Ok(true) if valid => return Ok(Acquired::Obtained { fence }),
            Ok(true) => tracing::debug!(
                target: "lockmacro",
                elapsed = ?sent.elapsed(),
                ?ttl,
                "a majority granted the lock after its validity ran out"
            ),
            _ => {}
        }
        self.undo(&keys, req.token(), timeout).await;
        // A fence key refused by a master is refused as such, not as a
        // lack of quorum: asking again cannot help.
        if outcome.is_err()
            && let Some(refused) = tally
                .failed
                .iter()
                .find(|err| matches!(err, LockError::InvalidKey { .. }))
        {
            let LockError::InvalidKey { key, reason } = refused else {
                unreachable!("matched above")
            };
            return Err(LockError::InvalidKey {
                key: key.clone(),
                reason: reason.clone(),
            });
        }
        outcome?;
        let (index, remaining, holder) = tally
            .no
            .into_iter()
            .map(|(_, busy)| busy)
            .min_by_key(|(_, remaining, _)| remaining.unwrap_or(Duration::MAX))
            .unwrap_or((0, None, None));
        Ok(Acquired::Busy {
            index,
            remaining,
            holder,
        })
    }

    /// Deletes the lock on every master and waits for each (within the
    /// timeout): the next attempt reuses the token, and must not be
    /// overtaken by this cleanup on any master.
    async fn undo(&self, keys: &Arc<[String]>, token: &str, timeout: Duration) {
        let (keys, value, token_len): (_, Arc<str>, _) = (keys.clone(), token.into(), token.len());
        let mut set = self.fan_out(self.masters(), timeout, "release", move |backend| {
            release_on(backend, keys.clone(), value.clone(), token_len)
        });
        while set.next().await.is_some() {}
    }

    /// Writes `fence` back to the fence counter of each master in `granted`,
    /// where the lock still holds `value`; true when a majority did.
    async fn raise_fence(
        &self,
        granted: Vec<usize>,
        mut keys: Vec<String>,
        fence_key: &str,
        value: &str,
        fence: u64,
        timeout: Duration,
    ) -> Result<bool, LockError> {
        keys.push(fence_key.to_owned());
        let keys: Arc<[String]> = keys.into();
        let args: Arc<[String]> = [value.to_owned(), fence.to_string()].into();
        let mut set = self.fan_out(granted, timeout, "fence", move |backend| {
            let (keys, args) = (keys.clone(), args.clone());
            async move {
                let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
                args.push(backend.fence_expiry());
                let done: i64 = backend.invoke("fence", &keys, &RAISE_FENCE, &args).await?;
                Ok(if done == 1 {
                    Answer::Yes(())
                } else {
                    Answer::No(())
                })
            }
        });
        let tally = self.tally(&mut set).await;
        // A write-back that lands late still helps the next holder.
        set.detach();
        self.verdict("fence", &tally)
    }
}

/// The release on one master of the lease whose value is `value`, its
/// token the first `token_len` bytes. The fan-out boxes its future, once.
async fn release_on(
    backend: RedisBackend,
    keys: Arc<[String]>,
    value: Arc<str>,
    token_len: usize,
) -> Result<Answer<(), ()>, LockError> {
    let (token, metadata) = value.split_at(token_len);
    let released = backend.protocol().release_value(&keys, token, metadata);
    Ok(if released.await? {
        Answer::Yes(())
    } else {
        Answer::No(())
    })
}

impl Backend for RedlockBackend {
    forward!(boxed: acquire => obtain, inspect => inspect_all, keys => keys_all, force_release => force_release_all);

    fn name(&self) -> &'static str {
        "redlock"
    }

    fn refresh<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let keys: Arc<[String]> = keys.into();
            let token: Arc<str> = token.into();
            let mut set = self.fan_out(
                self.masters(),
                self.node_timeout(ttl),
                "refresh",
                move |backend| {
                    let (keys, token) = (keys.clone(), token.clone());
                    async move {
                        Ok(if backend.refresh(&keys, &token, ttl).await? {
                            Answer::Yes(())
                        } else {
                            Answer::No(())
                        })
                    }
                },
            );
            let tally = self.tally(&mut set).await;
            // Stragglers extend the lease on more masters; let them.
            set.detach();
            self.verdict("refresh", &tally)
        })
    }

    /// Every master refreshes the whole batch at once (one script call per
    /// 500 leases); each lease is then decided by its own majority, as
    /// [`refresh`](Backend::refresh) decides one.
    fn refresh_many<'a>(
        &'a self,
        requests: &'a [RefreshRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, LockError>>> {
        Box::pin(async move {
            let Some(ttl) = requests.iter().map(|req| req.ttl).min() else {
                return Vec::new();
            };
            // Shared by the requests to all masters, which may outlive the call.
            let owned: Arc<[(Vec<String>, String, Duration)]> = requests
                .iter()
                .map(|req| (req.keys.to_vec(), req.token.to_owned(), req.ttl))
                .collect();
            let mut set = self.fan_out(
                self.masters(),
                self.node_timeout(ttl),
                "refresh",
                move |backend| {
                    let owned = owned.clone();
                    async move {
                        let requests: Vec<RefreshRequest<'_>> = owned
                            .iter()
                            .map(|(keys, token, ttl)| RefreshRequest::new(keys, token, *ttl))
                            .collect();
                        let refreshed = backend.refresh_many(&requests).await;
                        Ok(Answer::<_, std::convert::Infallible>::Yes(refreshed))
                    }
                },
            );
            let quorum = self.inner.quorum;
            let mut votes: Vec<Votes> = requests.iter().map(|_| Votes::default()).collect();
            while !votes.iter().all(|lease| lease.decided(quorum, set.len())) {
                match set.next().await {
                    Some((_, Ok(Answer::Yes(refreshed)))) => {
                        for (lease, result) in votes.iter_mut().zip(refreshed) {
                            match result {
                                Ok(true) => lease.yes += 1,
                                Ok(false) => lease.no += 1,
                                Err(err) => lease.fail(&err, err.to_string()),
                            }
                        }
                    }
                    Some((_, Ok(Answer::No(never)))) => match never {},
                    Some((_, Err(err))) => {
                        let reason = err.to_string();
                        for lease in &mut votes {
                            lease.fail(&err, reason.clone());
                        }
                    }
                    None => break,
                }
            }
            // Stragglers extend the leases on more masters; let them.
            set.detach();
            votes
                .into_iter()
                .map(|lease| {
                    if lease.yes >= quorum {
                        Ok(true)
                    } else if lease.yes + lease.no >= quorum {
                        Ok(false)
                    } else {
                        Err(BackendError::new(
                            lease.kind.unwrap_or(BackendErrorKind::Other),
                            format!("{}: refresh", self.inner.name),
                            format!(
                                "{} of {} masters answered, a majority ({quorum}) is needed: {}",
                                lease.yes + lease.no,
                                self.inner.masters.len(),
                                lease.failed.join("; "),
                            ),
                        )
                        .into())
                    }
                })
                .collect()
        })
    }

    fn release<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        self.release_value(keys, token, "")
    }

    fn release_value<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        metadata: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(async move {
            let timeout = self.inner.config.response_timeout;
            let value: Arc<str> = if metadata.is_empty() {
                token.into()
            } else {
                [token, metadata].concat().into()
            };
            let (keys, token_len): (Arc<[String]>, _) = (keys.into(), token.len());
            let mut set = self.fan_out(self.masters(), timeout, "release", move |backend| {
                release_on(backend, keys.clone(), value.clone(), token_len)
            });
            let tally = self.tally(&mut set).await;
            // The token is never used again, so the stragglers can finish
            // deleting it on their own, however slow their master.
            set.detach();
            self.verdict("release", &tally)
        })
    }

    fn remaining<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Duration>, LockError>> {
        Box::pin(async move {
            let keys: Arc<[String]> = keys.into();
            let token: Arc<str> = token.into();
            let timeout = self.inner.config.response_timeout;
            let mut set = self.fan_out(self.masters(), timeout, "ttl", move |backend| {
                let (keys, token) = (keys.clone(), token.clone());
                async move {
                    Ok(match backend.remaining(&keys, &token).await? {
                        Some(left) => Answer::Yes(left),
                        None => Answer::No(()),
                    })
                }
            });
            let tally = self.tally(&mut set).await;
            if !self.verdict("ttl", &tally)? {
                return Ok(None);
            }
            // The lock lasts while a majority holds it: the quorum-th longest
            // lease among those that answered.
            let mut left: Vec<Duration> = tally.yes.iter().map(|&(_, left)| left).collect();
            left.sort_unstable_by(|a, b| b.cmp(a));
            Ok(left.get(self.inner.quorum - 1).copied())
        })
    }
}
