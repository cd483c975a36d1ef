//! Waking waiters: one pub/sub connection per server hears the releases
//! and the fair hand-offs, and wakes the listeners of each key.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use redis::aio::{AsyncPushSender, MultiplexedConnection, SendError};
use redis::{AsyncConnectionConfig, ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::watch;

use super::config::RedisConfig;
use super::dial::Endpoint;
use crate::backend::{HandOff, Handed, ReleaseListener};

/// How often [`Wakeups::watch`] checks a pub/sub connection, and how long it
/// waits for the answer.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// How long a fair waiter's channel stays subscribed after its last listener.
const FAIR_LINGER: Duration = Duration::from_secs(1);

/// The channel on which `release.lua` announces the release of `key`.
pub(super) fn release_channel(key: &str) -> String {
    format!("lockmacro:released:{key}")
}

/// The pub/sub side of a [`RedisBackend`] or a
/// [`ClusterBackend`](crate::backend::ClusterBackend): one RESP3 connection, opened
/// when the first waiter listens and shared by all of them (a channel per key,
/// each subscribed once however many wait on it). Messages arrive as pushes
/// and are handed straight to the listeners of their channel.
///
/// Losing it never loses a lock: its waiters try again at once and listen on
/// a new connection, or, when none can be had, sleep out their backoff, as
/// without wake-ups.
pub(in crate::backend) struct Wakeups {
    /// The servers it may subscribe on, tried in turn from the last one that
    /// worked: one for a single server; the seed nodes of a cluster, any of
    /// which hears every node's messages over the cluster bus.
    servers: Vec<Endpoint>,
    /// Index in `servers` of the next connection's first try.
    next: AtomicUsize,
    /// Whether to check the connection with [`Wakeups::watch`].
    heartbeat: bool,
    /// Id of the connection in use (0: none yet).
    current: AtomicU64,
    /// Bounds opening the connection and each (un)subscription, so that a
    /// waiter facing a stalled server falls back to its backoff in time.
    timeout: Duration,
    /// Held across each SUBSCRIBE and UNSUBSCRIBE together with the check of
    /// `channels` that decides it, so the two never disagree for long.
    connection: tokio::sync::Mutex<Option<Connection>>,
    channels: Mutex<HashMap<String, Channel>>,
    /// Fair waiters by token: told when a release hands them their key.
    grants: Mutex<HashMap<String, Grant>>,
    /// Id of the last connection reported closed (ids start at 1).
    closed: AtomicU64,
}

struct Connection {
    conn: MultiplexedConnection,
    id: u64,
}

struct Channel {
    /// Bumped by every message on the channel but confirmations.
    releases: watch::Sender<u64>,
    /// The last hand-off on the channel with a grant lease, until confirmed.
    hand_off: watch::Sender<Option<HandOff>>,
    listeners: usize,
    /// The connection it is subscribed on.
    connection: u64,
    /// When `listeners` last fell to zero.
    idle_since: tokio::time::Instant,
    /// A task will unsubscribe it once idle for `FAIR_LINGER`.
    lingering: bool,
}

struct Grant {
    /// Set to `Some(fence)` by the message that hands the key over.
    granted: watch::Sender<Option<u64>>,
    /// Set by a message that hands the key (or one of its permits) over for
    /// a grant lease, naming the fence and the attempt: this waiter's own,
    /// which a later grant to another waiter cannot overwrite (a release of
    /// a permit may hand several over at once).
    handed: watch::Sender<Option<Handed>>,
    /// The connection its channel is subscribed on.
    connection: u64,
}

/// Keeps one listener's channel subscribed; the last one to go unsubscribes.
struct Subscription {
    wakeups: Arc<Wakeups>,
    channel: String,
    connection: u64,
    /// A fair waiter's token, forgotten with the listener.
    token: Option<String>,
}

/// Receives the pushes of one pub/sub connection.
struct Pushes {
    wakeups: Weak<Wakeups>,
    connection: u64,
}

static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

impl Wakeups {
    /// Subscribes on one of `servers`; `heartbeat` when they are not the
    /// servers that hold the keys (see [`Wakeups::watch`]).
    pub(in crate::backend) fn new(
        servers: Vec<redis::Client>,
        config: &RedisConfig,
        heartbeat: bool,
    ) -> Self {
        Wakeups {
            servers: servers
                .into_iter()
                .map(|client| config.endpoint(client))
                .collect(),
            next: AtomicUsize::new(0),
            heartbeat,
            current: AtomicU64::new(0),
            timeout: config.connect_timeout + config.response_timeout,
            connection: tokio::sync::Mutex::default(),
            channels: Mutex::default(),
            grants: Mutex::default(),
            closed: AtomicU64::new(0),
        }
    }

    fn channels(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        // Every change is a single map operation: a panic cannot leave it torn.
        self.channels
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn grants(&self) -> MutexGuard<'_, HashMap<String, Grant>> {
        // As for `channels`: single map operations only.
        self.grants
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A new connection to the first server in turn that takes one, all
    /// tries together bounded by the timeout.
    async fn open(self: &Arc<Self>) -> Result<Connection, String> {
        let first = self.next.load(Ordering::Relaxed);
        let count = self.servers.len();
        let tries = async {
            let mut errors = Vec::new();
            for turn in 0..count {
                let index = (first + turn) % count;
                match self.open_on(&self.servers[index]).await {
                    Ok(connection) => {
                        self.next.store(index, Ordering::Relaxed);
                        self.current.store(connection.id, Ordering::Release);
                        if self.heartbeat {
                            self.watch(connection.conn.clone(), connection.id, index);
                        }
                        return Ok(connection);
                    }
                    Err(error) => errors.push(error),
                }
            }
            Err(errors.join("; "))
        };
        let outcome = tokio::time::timeout(self.timeout, tries)
            .await
            .unwrap_or_else(|elapsed| Err(elapsed.to_string()));
        if outcome.is_err() && count > 0 {
            // A server that does not answer at all takes the whole timeout:
            // the next listener starts with the one after it.
            self.next.store((first + 1) % count, Ordering::Relaxed);
        }
        outcome
    }

    async fn open_on(self: &Arc<Self>, server: &Endpoint) -> Result<Connection, String> {
        // Pushes (and so subscriptions on a shared, multiplexed connection)
        // need RESP3, whatever the URL asked for.
        let info = server.info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let server = server
            .with_info(info.set_redis_settings(settings))
            .map_err(|err| err.to_string())?;
        let id = NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed);
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_push_sender(Pushes {
                wakeups: Arc::downgrade(self),
                connection: id,
            });
        match tokio::time::timeout(self.timeout, server.open(&config)).await {
            Ok(Ok(conn)) => Ok(Connection { conn, id }),
            Ok(Err(err)) => Err(err.to_string()),
            Err(elapsed) => Err(elapsed.to_string()),
        }
    }

    /// Forgets connection `id`, closed or silent: its listeners turn deaf
    /// (their senders are dropped), and wake up so that they can listen
    /// again on a new one.
    fn forget(&self, id: u64) {
        self.closed.store(id, Ordering::Release);
        self.channels().retain(|_, entry| entry.connection != id);
        self.grants().retain(|_, grant| grant.connection != id);
    }

    /// Checks connection `id` to `servers[index]` every `HEARTBEAT` while
    /// anyone listens, for servers that are not the ones holding the keys (a
    /// cluster's seed node): one that freezes keeps its connection open and
    /// stays silent, while the keys' own servers still grant and release. A
    /// check unanswered within `HEARTBEAT` forgets the connection, and the
    /// next one starts on the next server.
    fn watch(self: &Arc<Self>, mut conn: MultiplexedConnection, id: u64, index: usize) {
        let wakeups = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(HEARTBEAT).await;
                let Some(wakeups) = wakeups.upgrade() else {
                    return;
                };
                if wakeups.current.load(Ordering::Acquire) != id
                    || wakeups.closed.load(Ordering::Acquire) == id
                {
                    return;
                }
                if wakeups.channels().is_empty() && wakeups.grants().is_empty() {
                    continue;
                }
                let ping = async { redis::cmd("PING").query_async::<()>(&mut conn).await };
                if !matches!(tokio::time::timeout(HEARTBEAT, ping).await, Ok(Ok(()))) {
                    tracing::debug!(target: "lockmacro", "pub/sub server silent; listening elsewhere");
                    let next = (index + 1) % wakeups.servers.len();
                    let _ = wakeups.next.compare_exchange(
                        index,
                        next,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    wakeups.forget(id);
                    return;
                }
            }
        });
    }

    /// True when the channel of `key` is subscribed on a live connection:
    /// listening to it then takes no round trip.
    pub(in crate::backend) fn subscribed(&self, key: &str) -> bool {
        let closed = self.closed.load(Ordering::Acquire);
        self.channels()
            .get(&release_channel(key))
            .is_some_and(|entry| entry.connection != closed)
    }

    /// Listens for releases of `key`, or, given a fair waiter's `token`, for
    /// the release that hands `key` to it.
    pub(in crate::backend) async fn listen(
        self: &Arc<Self>,
        key: &str,
        token: Option<&str>,
    ) -> ReleaseListener {
        let mut connection = self.connection.lock().await;
        if connection
            .as_ref()
            .is_some_and(|open| open.id == self.closed.load(Ordering::Acquire))
        {
            *connection = None;
        }
        // A connection opened earlier may have died unnoticed (its server
        // killed, a proxy that dropped it): when subscribing on it fails,
        // a new one gets one more try.
        let reused = connection.is_some();
        match self.listen_on(&mut connection, key, token).await {
            Some(listener) => listener,
            None if reused => self
                .listen_on(&mut connection, key, token)
                .await
                .unwrap_or_else(ReleaseListener::deaf),
            None => ReleaseListener::deaf(),
        }
    }

    /// `listen` on the shared connection, opened first if need be. `None`
    /// when the subscription failed: the connection is then dropped.
    async fn listen_on(
        self: &Arc<Self>,
        connection: &mut Option<Connection>,
        key: &str,
        token: Option<&str>,
    ) -> Option<ReleaseListener> {
        let channel = release_channel(key);
        if connection.is_none() {
            match self.open().await {
                Ok(open) => *connection = Some(open),
                Err(error) => {
                    tracing::debug!(target: "lockmacro", %error, "no pub/sub connection; waiting by backoff");
                    return Some(ReleaseListener::deaf());
                }
            }
        }
        let open = connection.as_mut()?;
        let id = open.id;
        let (releases, hand_offs, subscribed) = {
            let mut channels = self.channels();
            match channels.get_mut(&channel) {
                Some(entry) if entry.connection == id => {
                    entry.listeners += 1;
                    (entry.releases.subscribe(), entry.hand_off.subscribe(), true)
                }
                _ => {
                    let (sender, receiver) = watch::channel(0);
                    let (hand_off, hand_offs) = watch::channel(None);
                    let entry = Channel {
                        releases: sender,
                        hand_off,
                        listeners: 1,
                        connection: id,
                        idle_since: tokio::time::Instant::now(),
                        lingering: false,
                    };
                    channels.insert(channel.clone(), entry);
                    (receiver, hand_offs, false)
                }
            }
        };
        let subscription = Subscription {
            wakeups: self.clone(),
            channel,
            connection: id,
            token: None,
        };
        if !subscribed {
            let subscribe = open.conn.subscribe(&subscription.channel);
            if let Err(error) = tokio::time::timeout(self.timeout, subscribe)
                .await
                .map_err(|elapsed| elapsed.to_string())
                .and_then(|done| done.map_err(|err| err.to_string()))
            {
                tracing::debug!(target: "lockmacro", %error, "subscribe failed");
                // The connection is likely broken: the next try opens
                // another one.
                *connection = None;
                return None;
            }
        }
        match token {
            Some(token) => {
                // Registered once subscribed: a hand-off before this point is
                // seen by the caller's next attempt, which finds the key
                // holding its value.
                let (granted, receiver) = watch::channel(None);
                let (handed, mine) = watch::channel(None);
                let grant = Grant {
                    granted,
                    handed,
                    connection: id,
                };
                self.grants().insert(token.to_owned(), grant);
                let mut subscription = subscription;
                subscription.token = Some(token.to_owned());
                let listener = ReleaseListener::granting(receiver, subscription);
                Some(listener.hearing_hand_offs(hand_offs, token, mine))
            }
            None => Some(ReleaseListener::new(releases, subscription)),
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(token) = &self.token {
            self.wakeups.grants().remove(token);
        }
        // A fair waiter that got its key is likely to queue again soon: its
        // channel stays subscribed a while, so that it can listen before its
        // next first attempt at no cost (see `Wakeups::subscribed`).
        let linger = self.token.is_some() && tokio::runtime::Handle::try_current().is_ok();
        let last = {
            let mut channels = self.wakeups.channels();
            match channels.get_mut(&self.channel) {
                Some(entry) if entry.connection == self.connection => {
                    entry.listeners -= 1;
                    let last = entry.listeners == 0;
                    if last && linger {
                        entry.idle_since = tokio::time::Instant::now();
                        // One task per channel watches it.
                        !std::mem::replace(&mut entry.lingering, true)
                    } else {
                        if last {
                            channels.remove(&self.channel);
                        }
                        last
                    }
                }
                _ => false,
            }
        };
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if last => runtime,
            _ => return,
        };
        let wakeups = self.wakeups.clone();
        let channel = std::mem::take(&mut self.channel);
        let id = self.connection;
        runtime.spawn(async move {
            let mut wait = FAIR_LINGER;
            if linger {
                // Ends by `break` (idle long enough) or `return` (gone).
                loop {
                    tokio::time::sleep(wait).await;
                    let mut channels = wakeups.channels();
                    let Some(entry) = channels
                        .get(&channel)
                        .filter(|entry| entry.connection == id)
                    else {
                        return;
                    };
                    let idle = entry.idle_since.elapsed();
                    if entry.listeners > 0 || idle < FAIR_LINGER {
                        wait = FAIR_LINGER.saturating_sub(idle).max(FAIR_LINGER / 10);
                        continue;
                    }
                    channels.remove(&channel);
                    break;
                }
            }
            let mut connection = wakeups.connection.lock().await;
            // A listener may have come for the channel since: then it stays.
            if wakeups.channels().contains_key(&channel) {
                return;
            }
            if let Some(open) = connection.as_mut().filter(|open| open.id == id) {
                let unsubscribe = open.conn.unsubscribe(&channel);
                let _ = tokio::time::timeout(wakeups.timeout, unsubscribe).await;
            }
        });
    }
}

impl AsyncPushSender for Pushes {
    fn send(&self, push: PushInfo) -> Result<(), SendError> {
        let wakeups = self.wakeups.upgrade().ok_or(SendError)?;
        match push.kind {
            PushKind::Message => {
                let message = match push.data.get(1) {
                    Some(Value::BulkString(message)) => std::str::from_utf8(message).ok(),
                    _ => None,
                };
                let mine = match push.data.first() {
                    Some(Value::BulkString(channel)) => {
                        std::str::from_utf8(channel).ok().and_then(|channel| {
                            let channels = wakeups.channels();
                            hand_off(channels.get(channel)?, message.unwrap_or(""))
                        })
                    }
                    _ => None,
                };
                // Outside the channels' lock: the two maps are never locked
                // together.
                if let Some((token, named)) = mine
                    && let Some(grant) = wakeups.grants().get(&token)
                {
                    grant.handed.send_replace(Some(named));
                }
                // A hand-off to a fair waiter by an earlier version, for
                // its whole ttl: "<token>:<fence>".
                if let Some(Value::BulkString(message)) = push.data.get(1)
                    && let Ok(message) = std::str::from_utf8(message)
                    && let Some((token, fence)) = message.split_once(':')
                    && let Some(grant) = wakeups.grants().get(token)
                {
                    grant.granted.send_replace(Some(fence.parse().unwrap_or(0)));
                }
            }
            PushKind::Disconnection => {
                tracing::debug!(target: "lockmacro", "pub/sub connection closed");
                wakeups.forget(self.connection);
            }
            _ => {}
        }
        Ok(())
    }
}

/// What `message`, heard on the channel of `entry`, says to its listeners
/// (see `grant.lua`): "grant:<token>:<lease ms>[:<fence>:<attempt>]" hands
/// the key over for a lease to confirm, "confirm:<token>" confirms it;
/// anything else is a release. Returns the token a grant naming its fence
/// and attempt is for, with what it names, for that waiter's own slot.
fn hand_off(entry: &Channel, message: &str) -> Option<(String, Handed)> {
    if let Some(token) = message.strip_prefix("confirm:") {
        entry.hand_off.send_if_modified(|pending| {
            let confirmed = pending
                .as_ref()
                .is_some_and(|pending| pending.token == token);
            if confirmed {
                *pending = None;
            }
            confirmed
        });
        return None;
    }
    let mut mine = None;
    if let Some(grant) = message.strip_prefix("grant:")
        && let Some((token, rest)) = grant.split_once(':')
    {
        // "<lease>" from a version that did not name the fence and attempt.
        let mut fields = rest.split(':').map(str::parse::<u64>);
        let (lease, fence, attempt) = (fields.next(), fields.next(), fields.next());
        if let Some(Ok(lease)) = lease {
            let lease = Duration::from_millis(lease);
            let named = match (fence, attempt) {
                (Some(Ok(fence)), Some(Ok(attempt))) => {
                    u32::try_from(attempt).ok().map(|attempt| Handed {
                        lease,
                        fence,
                        attempt,
                    })
                }
                _ => None,
            };
            // Heard after the server set the lease: it ends before this,
            // give or take the two clocks' rates, which the margin covers.
            let until =
                tokio::time::Instant::now() + lease + lease / 100 + Duration::from_millis(2);
            entry.hand_off.send_replace(Some(HandOff {
                token: token.to_owned(),
                until,
                named,
            }));
            mine = named.map(|named| (token.to_owned(), named));
        }
    }
    entry.releases.send_modify(|releases| *releases += 1);
    mine
}
