//! Refresh, release and the remaining lease without scripts: by the
//! server's native compare commands where it has them (`native.rs`), else
//! as `WATCH`/`MULTI`/`EXEC` transactions. A share is never held without
//! scripts, so these look at lock keys alone.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{RedisResult, Value};

use super::capabilities::Native;
use super::errors::Failure;
use super::locks::Protocol;
use super::native::{delete_if_equal, extend_if_equal};
use super::protocol::{millis, pttl};
use super::scriptless::{Found, unwatch};
use super::transport::Transport;
use super::wakeups::release_channel;
use crate::LockError;

impl<T: Transport> Protocol<T> {
    /// The native compare commands of the server.
    async fn native(&self) -> Native {
        self.features
            .native(&mut self.transport.conn().clone())
            .await
    }

    /// `keys` extended to `ttl` if every one is still held by `token`.
    pub(in crate::backend) async fn refresh_scriptless(
        &self,
        keys: &[String],
        token: &str,
        ttl: Duration,
    ) -> Result<bool, LockError> {
        let ttl = millis(ttl);
        let what = || format!("refresh `{}`", keys.join("`, `"));
        let fail = |err| LockError::from(Failure::Redis(err).into_error(self.name(), &what()));
        if !self.native().await.set_if_equal {
            let exclusive = self.exclusive("refresh", &keys[0])?;
            return exclusive
                .run(|conn| refresh_round(conn, keys, token, &ttl))
                .await
                .map_err(fail);
        }
        let mut tried: Option<Vec<String>> = None;
        loop {
            let values = self.values(keys, token).await;
            let values = values.map_err(|failure| failure.into_error(self.name(), &what()))?;
            // Ours, and not the values just tried: a waiter marked one in
            // between (once: a marked value is never marked again). The
            // value written back is the one compared, mark and all.
            let Some(values) = values.filter(|values| tried.as_ref() != Some(values)) else {
                return Ok(false);
            };
            let mut extend = redis::pipe();
            for (key, value) in keys.iter().zip(&values) {
                extend.add_command(extend_if_equal(key, value, &ttl));
            }
            let extend = &extend;
            let done: Vec<Option<String>> = self
                .send(self.transport.conn(), keys, |mut conn| async move {
                    extend.query_async(&mut conn).await
                })
                .await
                .map_err(|failure| failure.into_error(self.name(), &what()))?;
            if done.iter().all(Option::is_some) {
                return Ok(true);
            }
            tried = Some(values);
        }
    }

    /// The values of `keys` if every one is held by `token`, else `None`.
    async fn values(&self, keys: &[String], token: &str) -> Result<Option<Vec<String>>, Failure> {
        let mut read = redis::pipe();
        read.ignore_errors();
        for key in keys {
            read.cmd("GET").arg(key);
        }
        let read = &read;
        let found: Vec<Value> = self
            .send(self.transport.conn(), keys, |mut conn| async move {
                read.query_async(&mut conn).await
            })
            .await?;
        let mut values = Vec::with_capacity(keys.len());
        for value in &found {
            match Found::of(value) {
                Found::Text(value) if value.starts_with(token) => values.push(value),
                _ => return Ok(None),
            }
        }
        Ok(Some(values))
    }

    /// Deletes each of `keys` still held by `token`, announcing each
    /// deleted key someone waits for; true if all were.
    pub(in crate::backend) async fn release_scriptless(
        &self,
        keys: &[String],
        token: &str,
    ) -> Result<bool, LockError> {
        let what = || format!("release `{}`", keys.join("`, `"));
        let fail = |err| LockError::from(Failure::Redis(err).into_error(self.name(), &what()));
        let Some(command) = self.native().await.delete_if_equal else {
            let exclusive = self.exclusive("release", &keys[0])?;
            let flags: Vec<String> = keys.iter().map(|key| T::COMPANIONS.flag(key)).collect();
            return exclusive
                .run(|conn| release_round(conn, keys, &flags, token))
                .await
                .map_err(fail);
        };
        let mut all = true;
        for key in keys {
            let key = std::slice::from_ref(key);
            let flag = T::COMPANIONS.flag(&key[0]);
            let mut tried: Option<String> = None;
            let (deleted, waiting) = loop {
                let value = self.values(key, token).await;
                let value = value.map_err(|failure| failure.into_error(self.name(), &what()))?;
                // Ours, and not the value just tried: a waiter marked it in
                // between (once: a marked value is never marked again).
                let Some(value) = value
                    .and_then(|mut value| value.pop())
                    .filter(|value| tried.as_ref() != Some(value))
                else {
                    break (0, Value::Nil);
                };
                let mut delete = redis::pipe();
                delete
                    .ignore_errors()
                    .add_command(delete_if_equal(command, &key[0], &value))
                    .cmd("GET")
                    .arg(&flag);
                let delete = &delete;
                // The flag is read after the delete, on the same connection:
                // a waiter that found the key held set it before.
                let (deleted, waiting): (i64, Value) = self
                    .send(self.transport.conn(), key, |mut conn| async move {
                        delete.query_async(&mut conn).await
                    })
                    .await
                    .map_err(|failure| failure.into_error(self.name(), &what()))?;
                if deleted == 1 {
                    break (deleted, waiting);
                }
                tried = Some(value);
            };
            all &= deleted == 1;
            if deleted == 1 && (flag.is_empty() || waiting != Value::Nil) {
                self.announce(&key[0]).await;
            }
        }
        Ok(all)
    }

    /// Wakes the waiters of `key`; a user denied the channel still
    /// releases, its waiters then wait by backoff.
    async fn announce(&self, key: &str) {
        let channel = &release_channel(key);
        let published: Result<i64, Failure> = self
            .send(
                self.transport.conn(),
                &[key.to_owned()],
                |mut conn| async move {
                    redis::cmd("PUBLISH")
                        .arg(channel)
                        .arg("")
                        .query_async(&mut conn)
                        .await
                },
            )
            .await;
        if let Err(Failure::Redis(err)) = published {
            tracing::debug!(target: "lockmacro", key, error = %err, "release not announced");
        }
    }

    /// The smallest remaining lease of `keys` if every one is held by
    /// `token`: `GET` and `PTTL` of each, in one `MULTI`.
    pub(in crate::backend) async fn remaining_scriptless(
        &self,
        keys: &[String],
        token: &str,
    ) -> Result<Option<Duration>, LockError> {
        let mut read = redis::pipe();
        read.atomic().ignore_errors();
        for key in keys {
            read.cmd("GET").arg(key).cmd("PTTL").arg(key);
        }
        let read = &read;
        let found: Vec<Value> = self
            .send(self.transport.conn(), keys, |mut conn| async move {
                read.query_async(&mut conn).await
            })
            .await
            .map_err(|failure| {
                let what = format!("ttl `{}`", keys.join("`, `"));
                failure.into_error(self.name(), &what)
            })?;
        let mut least = -1_i64;
        for pair in found.chunks(2) {
            if !Found::of(&pair[0]).held_by(token) {
                return Ok(None);
            }
            let left: i64 = redis::from_redis_value_ref(&pair[1]).unwrap_or(-1);
            if least < 0 || (left >= 0 && left < least) {
                least = left;
            }
        }
        Ok(pttl(least))
    }
}

/// One round of `refresh.lua` as a transaction.
async fn refresh_round(
    mut conn: MultiplexedConnection,
    keys: &[String],
    token: &str,
    ttl: &str,
) -> RedisResult<Option<bool>> {
    let mut read = redis::pipe();
    read.ignore_errors().cmd("WATCH").arg(keys).ignore();
    for key in keys {
        read.cmd("GET").arg(key);
    }
    let found: Vec<Value> = read.query_async(&mut conn).await?;
    if !found.iter().all(|value| Found::of(value).held_by(token)) {
        unwatch(&mut conn).await?;
        return Ok(Some(false));
    }
    let mut write = redis::pipe();
    write.atomic();
    for key in keys {
        write.cmd("PEXPIRE").arg(key).arg(ttl).ignore();
    }
    let done: Option<Value> = write.query_async(&mut conn).await?;
    Ok(done.map(|_| true))
}

/// One round of `release.lua` as a transaction. The flags are watched too:
/// a waiter that finds a key held and flags itself before the `EXEC` makes
/// the round read again, and be announced to; the announcements follow the
/// `EXEC`, on the same connection.
async fn release_round(
    mut conn: MultiplexedConnection,
    keys: &[String],
    flags: &[String],
    token: &str,
) -> RedisResult<Option<bool>> {
    let mut read = redis::pipe();
    let named: Vec<&String> = flags.iter().filter(|flag| !flag.is_empty()).collect();
    read.ignore_errors()
        .cmd("WATCH")
        .arg(keys)
        .arg(&named)
        .ignore();
    for (key, flag) in keys.iter().zip(flags) {
        read.cmd("GET").arg(key).cmd("GET").arg(flag);
    }
    let found: Vec<Value> = read.query_async(&mut conn).await?;
    let mut write = redis::pipe();
    write.atomic().ignore_errors();
    let mut all = true;
    let mut any = false;
    let mut awaited = Vec::new();
    for ((key, flag), pair) in keys.iter().zip(flags).zip(found.chunks(2)) {
        if !Found::of(&pair[0]).held_by(token) {
            all = false;
            continue;
        }
        any = true;
        write.cmd("DEL").arg(key).ignore();
        if flag.is_empty() || pair[1] != Value::Nil {
            awaited.push(release_channel(key));
        }
    }
    if !any {
        unwatch(&mut conn).await?;
        return Ok(Some(false));
    }
    let done: Option<Value> = write.query_async(&mut conn).await?;
    if done.is_none() {
        return Ok(None);
    }
    // After the `EXEC`, not in it: a `PUBLISH` the user's ACL refuses
    // would abort the whole transaction.
    for channel in awaited {
        let published = redis::cmd("PUBLISH")
            .arg(&channel)
            .arg("")
            .query_async::<Value>(&mut conn)
            .await;
        if let Err(err) = published {
            tracing::debug!(target: "lockmacro", channel, error = %err, "release not announced");
        }
    }
    Ok(Some(all))
}
