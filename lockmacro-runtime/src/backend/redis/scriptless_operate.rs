//! What an operator does to a key without scripts: see what holds it, and
//! clear it, as `inspect.lua` and `force_release.lua` do.

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{RedisResult, Value};

use super::errors::Failure;
use super::locks::Protocol;
use super::protocol::{kind_of, metadata_of};
use super::scriptless::{Found, Shares, shares_at, unwatch};
use super::transport::Transport;
use super::wakeups::release_channel;
use crate::backend::keys::derived_holders_key;
use crate::backend::{HeldAs, Holder, Inspection};
use crate::{KeyKind, LockError};

impl<T: Transport> Protocol<T> {
    /// What holds `key`, and its fence counter's last token. Fair waiters
    /// are not counted: without scripts there are none.
    pub(in crate::backend) async fn inspect_scriptless(
        &self,
        key: &str,
        fence_key: &str,
    ) -> Result<Inspection, LockError> {
        let keys = [key.to_owned(), fence_key.to_owned()];
        let what = || format!("inspect `{key}`");
        let read = &mut redis::pipe();
        read.atomic()
            .ignore_errors()
            .cmd("GET")
            .arg(key)
            .cmd("PTTL")
            .arg(key)
            .cmd("GET")
            .arg(fence_key);
        let read = &*read;
        let (value, left, fence): (Value, i64, Value) = self
            .send(self.transport.conn(), &keys, |mut conn| async move {
                read.query_async(&mut conn).await
            })
            .await
            .map_err(|failure| failure.into_error(self.name(), &what()))?;
        let mut seen = Inspection::free();
        seen.fence = match Found::of(&fence) {
            Found::Text(fence) => fence.parse().ok(),
            _ => None,
        };
        match Found::of(&value) {
            Found::Free => {}
            Found::Text(value) => {
                seen.kind = Some(KeyKind::Lock);
                let metadata = metadata_of(&value);
                let remaining = u64::try_from(left).ok().map(Duration::from_millis);
                seen.holders
                    .push(Holder::new(HeldAs::Lock, metadata, remaining));
            }
            Found::NotText => {
                let key = &keys[0];
                let shares = self
                    .send(self.transport.conn(), &keys, |mut conn| async move {
                        shares_at(&mut conn, key).await
                    })
                    .await
                    .map_err(|failure| failure.into_error(self.name(), &what()))?;
                if let (Shares::Live(code), live, now) = shares {
                    seen.kind = kind_of(code);
                    let metadata = self.holders_metadata(key).await;
                    for (member, expires) in live {
                        let (held_as, token) = if let Some(token) = member.strip_prefix("w:") {
                            (HeldAs::Write, token)
                        } else if code == 0 {
                            (HeldAs::Read, member.as_str())
                        } else {
                            (HeldAs::Permit, member.as_str())
                        };
                        let metadata = metadata.get(token).map_or("", String::as_str);
                        let remaining = u64::try_from(expires - now).ok();
                        let remaining = remaining.map(Duration::from_millis);
                        seen.holders.push(Holder::new(held_as, metadata, remaining));
                    }
                }
            }
        }
        Ok(seen)
    }

    /// The metadata of the shares of `key`, by token, from the hash beside
    /// the set (see `holders.lua`): empty when there is none, or when it
    /// cannot be read (a user denied `HGETALL`, another client's data
    /// there), as the script shows it.
    async fn holders_metadata(&self, key: &str) -> HashMap<String, String> {
        let Some(holders) = derived_holders_key(key) else {
            return HashMap::new();
        };
        let keys = [key.to_owned()];
        let holders = &holders;
        let read: Result<Value, Failure> = self
            .send(self.transport.conn(), &keys, |mut conn| async move {
                redis::cmd("HGETALL")
                    .arg(holders)
                    .query_async(&mut conn)
                    .await
            })
            .await;
        read.ok()
            .and_then(|fields| redis::from_redis_value(fields).ok())
            .unwrap_or_default()
    }

    /// Deletes every lease on `key`, whoever holds it, and wakes its
    /// waiters; another client's data is left alone.
    pub(in crate::backend) async fn force_release_scriptless(
        &self,
        key: &str,
    ) -> Result<bool, LockError> {
        let exclusive = self.exclusive("force-release", key)?;
        exclusive
            .run(|conn| force_round(conn, key))
            .await
            .map_err(|err| {
                let what = format!("force-release `{key}`");
                Failure::Redis(err).into_error(self.name(), &what).into()
            })
    }
}

async fn force_round(mut conn: MultiplexedConnection, key: &str) -> RedisResult<Option<bool>> {
    let (_, value): ((), Value) = redis::pipe()
        .ignore_errors()
        .cmd("WATCH")
        .arg(key)
        .cmd("GET")
        .arg(key)
        .query_async(&mut conn)
        .await?;
    let (held, holders) = match Found::of(&value) {
        Found::Free => (false, None),
        Found::Text(_) => (true, None),
        Found::NotText => match shares_at(&mut conn, key).await?.0 {
            Shares::Live(_) => (true, watched_holders(&mut conn, key).await?),
            _ => (false, None),
        },
    };
    if !held {
        unwatch(&mut conn).await?;
        return Ok(Some(false));
    }
    let mut clear = redis::pipe();
    clear.atomic().cmd("DEL").arg(key).ignore();
    // Shares take their holders' metadata with them (see `holders.lua`).
    if let Some(holders) = holders {
        clear.cmd("DEL").arg(holders).ignore();
    }
    let done: Option<Value> = clear.query_async(&mut conn).await?;
    if done.is_none() {
        return Ok(None);
    }
    let published = redis::cmd("PUBLISH")
        .arg(release_channel(key))
        .arg("")
        .query_async::<Value>(&mut conn)
        .await;
    if let Err(err) = published {
        tracing::debug!(target: "lockmacro", key, error = %err, "forced release not announced");
    }
    Ok(Some(true))
}

/// The hash of the metadata of `key`'s shares (see `holders.lua`), watched
/// from now on, when it is there; `None` when it is not, or when this user
/// may not see it (a user granted the lock keys alone still force-releases
/// them, as the script does).
async fn watched_holders(
    conn: &mut MultiplexedConnection,
    key: &str,
) -> RedisResult<Option<String>> {
    let Some(holders) = derived_holders_key(key) else {
        return Ok(None);
    };
    let (watched, found): (Value, Value) = redis::pipe()
        .ignore_errors()
        .cmd("WATCH")
        .arg(&holders)
        .cmd("EXISTS")
        .arg(&holders)
        .query_async(conn)
        .await?;
    let there = watched == Value::Okay && found == Value::Int(1);
    Ok(there.then_some(holders))
}
