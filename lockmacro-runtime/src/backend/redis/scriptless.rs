//! The lock protocol without scripts (see [`Scripts`]): taking keys, with
//! their fence, as `WATCH`/`MULTI`/`EXEC` transactions on a connection of
//! their own, and what a script-free backend refuses. Refresh and release
//! are in `scriptless_lease.rs`, inspect and force-release in
//! `scriptless_operate.rs`.
//!
//! Each transaction reads what it watches, decides as the matching script
//! does, and writes in one `MULTI`; a watched key changed meanwhile makes
//! `EXEC` answer nothing, and the round is read again. Everything the
//! script checks before its first write is checked here before the `MULTI`,
//! so a refusal writes nothing.

use redis::aio::MultiplexedConnection;
use redis::{RedisResult, Value};

use super::capabilities::Scripts;
use super::errors::Failure;
use super::locks::Protocol;
use super::protocol::{kind_of, millis, pttl};
use super::transport::Transport;
use super::watched::Exclusive;
use crate::LockError;
use crate::backend::keys::fence_key_refused;
use crate::backend::{AcquireRequest, Acquired, WAITED_MARK, unmarked};
use crate::error::{BackendError, BackendErrorKind};

/// How long a waiters flag outlives the holder's lease, as `waiters.lua`'s
/// `WAIT_MARGIN`.
const WAIT_MARGIN: i64 = 1000;

/// What `GET` found at a key.
pub(in crate::backend) enum Found {
    Free,
    Text(String),
    /// Another type: a set of shares, or another client's data.
    NotText,
}

impl Found {
    pub(in crate::backend) fn of(value: &Value) -> Self {
        match value {
            Value::Nil => Found::Free,
            Value::ServerError(_) => Found::NotText,
            value => {
                redis::from_redis_value_ref::<String>(value).map_or(Found::NotText, Found::Text)
            }
        }
    }

    pub(in crate::backend) fn held_by(&self, token: &str) -> bool {
        matches!(self, Found::Text(value) if value.starts_with(token))
    }
}

/// What a key that is not a string holds, as `kinds.lua`'s `key_kind`
/// reads it.
pub(in crate::backend) enum Shares {
    /// No live share: the key is free for any kind.
    None,
    /// Live shares, of the kind with this code (`kind_code`).
    Live(i64),
    /// Another client's data.
    Other,
}

/// The shares at `key` (a sorted set), by the server's clock.
///
/// Two plain commands, never a `MULTI`: the transactions call this between
/// their `WATCH` and their own `MULTI`, and an `EXEC` here would end the
/// `WATCH`, leaving their writes unguarded. Read under `WATCH`, what the two
/// commands see is checked by the transaction's `EXEC`; read alone (by
/// `inspect`), a change between them only makes the answer as old as any
/// other read.
pub(in crate::backend) async fn shares_at(
    conn: &mut impl redis::aio::ConnectionLike,
    key: &str,
) -> RedisResult<(Shares, Vec<(String, i64)>, i64)> {
    let (time, members): (Value, Value) = redis::pipe()
        .ignore_errors()
        .cmd("TIME")
        .cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(conn)
        .await?;
    let (seconds, micros): (i64, i64) = redis::from_redis_value(time)?;
    let now = seconds * 1000 + micros / 1000;
    let Ok(members) = redis::from_redis_value::<Vec<(String, f64)>>(members) else {
        return Ok((Shares::Other, Vec::new(), now));
    };
    let mut live = Vec::new();
    let mut marked = None;
    for (member, score) in members {
        if let Some(kind) = member.strip_prefix("kind:") {
            marked = Some(if kind == "rw" {
                0
            } else {
                kind.parse().unwrap_or(-2)
            });
        } else if member != "writing" && score > now as f64 {
            #[allow(clippy::cast_possible_truncation)]
            live.push((member, score as i64));
        }
    }
    let shares = if live.is_empty() {
        Shares::None
    } else {
        Shares::Live(marked.unwrap_or(-2))
    };
    Ok((shares, live, now))
}

/// What one round of a script-free acquire came to.
type Round = Option<Result<Acquired, LockError>>;

impl<T: Transport> Protocol<T> {
    /// The connections of the transactions, or the error of a transport
    /// that has none.
    pub(in crate::backend) fn exclusive(
        &self,
        what: &str,
        key: &str,
    ) -> Result<&Exclusive, LockError> {
        self.transport.exclusive().ok_or_else(|| {
            BackendError::new(
                BackendErrorKind::Unsupported,
                format!("{}: {what} `{key}`", self.transport.name()),
                "locking without scripts is not available on a Redis Cluster",
            )
            .into()
        })
    }

    /// The refusal of what needs a script (`feature`, e.g. "a fair
    /// queue"), sent before anything is written.
    pub(in crate::backend) fn needs_scripts(
        &self,
        what: &str,
        key: &str,
        feature: &str,
    ) -> LockError {
        let why = if self.features.mode() == Scripts::Never {
            "this backend is set not to use them (`Scripts::Never`)"
        } else {
            "the server refuses them (`NOPERM`: the user is denied `@scripting`)"
        };
        BackendError::new(
            BackendErrorKind::Unsupported,
            format!("{}: {what} `{key}`", self.transport.name()),
            format!(
                "{feature} needs the server's Lua scripts, and {why}; nothing was written. \
                 Grant the user `+evalsha +script|load` and use `Scripts::Auto`, or use a plain \
                 lock (one key or several, fenced or not), which works without scripts"
            ),
        )
        .into()
    }

    /// An acquire without scripts: the plain attempt as it is (one `SET`);
    /// anything more as a transaction.
    pub(in crate::backend) async fn acquire_scriptless(
        &self,
        req: AcquireRequest<'_>,
    ) -> Result<Acquired, LockError> {
        let key = &req.keys[0];
        let refused = if req.share.is_some() {
            Some("a semaphore or a read-write lock")
        } else if req.queue_for.is_some() {
            Some("a fair queue")
        } else if req.replicas > 0 {
            Some("an acquire that waits for replicas")
        } else {
            None
        };
        if let Some(feature) = refused {
            return Err(self.needs_scripts("obtain", key, feature));
        }
        if let Some(fence_key) = req.fence_key
            && req.keys.iter().any(|key| key == fence_key)
        {
            return Err(fence_key_refused(
                fence_key,
                "the fence counter is also a key being locked",
            ));
        }
        let what = || format!("obtain `{}`", req.keys.join("`, `"));
        if req.is_plain()
            && let Some(done) = self.plain_attempt(&req).await?
        {
            return Ok(done);
        }
        let exclusive = self.exclusive("obtain", key)?;
        exclusive
            .run(|conn| self.acquire_round(conn, &req))
            .await
            .map_err(|err| Failure::Redis(err).into_error(self.name(), &what()))?
    }

    /// One round of `acquire.lua` as a transaction: `WATCH` the keys, their
    /// flags and the fence; read them; `MULTI`, the writes, `EXEC`.
    async fn acquire_round(
        &self,
        mut conn: MultiplexedConnection,
        req: &AcquireRequest<'_>,
    ) -> RedisResult<Round> {
        let flags: Vec<String> = if req.wait {
            req.keys.iter().map(|key| T::COMPANIONS.flag(key)).collect()
        } else {
            Vec::new()
        };
        let mut watch = redis::cmd("WATCH");
        watch.arg(req.keys).arg(req.fence_key).arg(&flags);
        let mut read = redis::pipe();
        read.ignore_errors().add_command(watch).ignore();
        for key in req.keys {
            read.cmd("GET").arg(key).cmd("PTTL").arg(key);
        }
        for flag in &flags {
            read.cmd("PTTL").arg(flag);
        }
        if let Some(fence_key) = req.fence_key {
            read.cmd("GET").arg(fence_key).cmd("TIME");
        }
        let read: Vec<Value> = read.query_async(&mut conn).await?;
        let n = req.keys.len();
        let mut stale = Vec::new();
        let mut retried = true;
        for (i, key) in req.keys.iter().enumerate() {
            match Found::of(&read[2 * i]) {
                Found::Text(value) if unmarked(&value) == req.value => {}
                Found::Text(value) => {
                    let left: i64 = redis::from_redis_value_ref(&read[2 * i + 1]).unwrap_or(-1);
                    let held = Held {
                        key,
                        value: &value,
                        left,
                    };
                    return self.busy(&mut conn, &flags, &read[2 * n..], i, held).await;
                }
                Found::Free => retried = false,
                Found::NotText => {
                    retried = false;
                    match shares_at(&mut conn, key).await?.0 {
                        Shares::None => stale.push(key),
                        // A refusal read across two replies: another
                        // client may have written between them (taken the
                        // lapsed set as a lock), so it stands only if the
                        // keys are still as watched.
                        held if unchanged(&mut conn).await? => {
                            return Ok(Some(Err(wrong_kind(req, i, held))));
                        }
                        _ => return Ok(None),
                    }
                }
            }
        }
        let fence = match req.fence_key {
            Some(fence_key) => {
                let at = 2 * n + flags.len();
                match fence_state(&read[at], &read[at + 1]) {
                    Ok(state) => Some((fence_key, state)),
                    Err(detail) => {
                        unwatch(&mut conn).await?;
                        return Ok(Some(Err(fence_key_refused(fence_key, detail))));
                    }
                }
            }
            None => None,
        };
        let ttl = millis(req.ttl);
        let mut write = redis::pipe();
        write.atomic();
        for key in &stale {
            write.cmd("DEL").arg(key).ignore();
        }
        for key in req.keys {
            if retried {
                write.cmd("PEXPIRE").arg(key).arg(&ttl).ignore();
            } else {
                write
                    .cmd("SET")
                    .arg(key)
                    .arg(req.value)
                    .arg("PX")
                    .arg(&ttl)
                    .ignore();
            }
        }
        // A retry whose first reply was lost mints a fence too: the one its
        // first attempt minted was never seen, and the counter as it stands
        // may be another holder's, when several locks share it.
        let minted = match fence {
            Some((fence_key, counter)) => {
                if let Counter::Missing(seed) = counter {
                    write.cmd("SET").arg(fence_key).arg(seed).ignore();
                }
                write
                    .cmd("INCR")
                    .arg(fence_key)
                    .cmd("PEXPIRE")
                    .arg(fence_key)
                    .arg(&self.fence_expiry)
                    .ignore();
                true
            }
            None => false,
        };
        let done: Option<Vec<Value>> = write.query_async(&mut conn).await?;
        let Some(done) = done else {
            return Ok(None);
        };
        let fence = if minted {
            // `INCR`'s reply, the only one not ignored. Written and not
            // readable is no fence: never reported as one.
            let fence = done
                .first()
                .and_then(|value| redis::from_redis_value_ref::<u64>(value).ok())
                .filter(|fence| *fence > 0);
            let Some(fence) = fence else {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "the fence could not be read",
                    format!("EXEC answered {done:?} for the fence counter's INCR"),
                )));
            };
            Some(fence)
        } else {
            None
        };
        Ok(Some(Ok(Acquired::Obtained { fence })))
    }

    /// `req.keys[index]` is held (`held`): when the caller waits, its flag
    /// is made to last the holder's lease and a second more, and the
    /// holder's value is marked (`WAITED_MARK`, once), in a transaction
    /// that fails if the key changed since it was read, as the script does
    /// both in the call that finds the key busy: a release in between is
    /// then seen by the next round.
    async fn busy(
        &self,
        conn: &mut MultiplexedConnection,
        flags: &[String],
        flag_ttls: &[Value],
        index: usize,
        held: Held<'_>,
    ) -> RedisResult<Round> {
        let outcome = Acquired::Busy {
            index,
            remaining: pttl(held.left),
            holder: None,
        };
        let wanted = held.left.max(0) + WAIT_MARGIN;
        let flag_left = flag_ttls
            .get(index)
            .and_then(|value| redis::from_redis_value_ref::<i64>(value).ok())
            .unwrap_or(-2);
        let marked = held.value.ends_with(WAITED_MARK);
        let Some(flag) = flags
            .get(index)
            .filter(|flag| !flag.is_empty() && (flag_left < wanted || !marked))
        else {
            unwatch(conn).await?;
            return Ok(Some(Ok(outcome)));
        };
        let mut write = redis::pipe();
        write.atomic();
        if flag_left < wanted {
            write
                .cmd("SET")
                .arg(flag)
                .arg("")
                .arg("PX")
                .arg(wanted)
                .ignore();
        }
        if !marked {
            // The value read under WATCH, marked; KEEPTTL keeps the
            // holder's expiry.
            write
                .cmd("SET")
                .arg(held.key)
                .arg(format!("{}{WAITED_MARK}", held.value))
                .arg("KEEPTTL")
                .ignore();
        }
        let done: Option<Value> = write.query_async(&mut *conn).await?;
        Ok(done.map(|_| Ok(outcome)))
    }
}

/// A key an attempt found held by another owner.
struct Held<'a> {
    key: &'a str,
    /// Its value, as read under `WATCH`.
    value: &'a str,
    /// The holder's remaining lease in ms, as `PTTL` answers it.
    left: i64,
}

/// The fence counter as the transaction found it.
enum Counter {
    /// A counter: `INCR` it.
    Holds,
    /// No counter: start it at the server's clock in microseconds (this
    /// seed), then `INCR` it, as `fence.lua`'s `next_fence`.
    Missing(String),
}

/// Reads `GET fence` and `TIME`, or says why the key cannot count, as
/// `fence.lua`'s `fence_error` does.
fn fence_state(current: &Value, time: &Value) -> Result<Counter, &'static str> {
    match Found::of(current) {
        Found::NotText => Err("the fence counter holds a value that is not a string"),
        Found::Free => {
            let (seconds, micros): (String, String) =
                redis::from_redis_value_ref(time).unwrap_or_default();
            let micros: u32 = micros.parse().unwrap_or(0);
            Ok(Counter::Missing(format!("{seconds}{micros:06}")))
        }
        Found::Text(value)
            if value == "0"
                || (!value.starts_with('0')
                    && value.parse::<i64>().is_ok_and(|n| n > 0 && n < i64::MAX)) =>
        {
            Ok(Counter::Holds)
        }
        Found::Text(_) => {
            Err("the fence counter holds a value that is not a counter (a lock key?)")
        }
    }
}

/// The refusal of `req.keys[index]`, held as shares of another kind or by
/// another client's data.
fn wrong_kind(req: &AcquireRequest<'_>, index: usize, held: Shares) -> LockError {
    let key = req.keys[index].clone();
    match held {
        Shares::Live(code) => match kind_of(code) {
            Some(held) => LockError::WrongKind {
                key,
                held,
                asked: req.kind(),
            },
            None => other_data(key),
        },
        _ => other_data(key),
    }
}

fn other_data(key: String) -> LockError {
    LockError::InvalidKey {
        key,
        reason: "the key holds another client's data, neither a lock nor shares; name the \
                 lock differently"
            .into(),
    }
}

/// Whether the watched keys are still as read: an empty transaction, whose
/// `EXEC` answers nothing when one changed, and which ends the `WATCH`.
async fn unchanged(conn: &mut MultiplexedConnection) -> RedisResult<bool> {
    let done: Option<Value> = redis::pipe()
        .atomic()
        .cmd("PING")
        .ignore()
        .query_async(conn)
        .await?;
    Ok(done.is_some())
}

/// Ends a transaction that writes nothing.
pub(in crate::backend) async fn unwatch(conn: &mut MultiplexedConnection) -> RedisResult<()> {
    redis::cmd("UNWATCH").query_async(conn).await
}
