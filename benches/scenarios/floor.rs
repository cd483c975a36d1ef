//! The floor (raw `SET key token NX PX ttl` + compare-and-delete on the same
//! connection, with the `redis` crate alone) and the server-side counters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::Script;
use redis::aio::MultiplexedConnection;

pub const TTL: Duration = Duration::from_secs(30);

/// The compare-and-delete every article on Redis locks shows.
pub const CAD: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                       return redis.call('DEL', KEYS[1]) else return 0 end";

/// A token unique in this run, 32 hex digits like the runtime's.
pub fn token() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{:016x}{:016x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The floor's acquire: one `SET key token NX PX ttl`.
pub async fn acquire(conn: &mut MultiplexedConnection, key: &str, token: &str) -> bool {
    let reply: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(TTL.as_millis() as u64)
        .query_async(conn)
        .await
        .unwrap();
    reply.is_some()
}

/// The floor's release: the compare-and-delete script (`EVALSHA`).
pub async fn release(conn: &mut MultiplexedConnection, script: &Script, key: &str, token: &str) {
    let _: i64 = script.key(key).arg(token).invoke_async(conn).await.unwrap();
}

/// A connection of the `redis` crate, as the floor uses.
pub async fn connect(url: &str) -> redis::RedisResult<MultiplexedConnection> {
    redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
}

/// A connection for `INFO` and `CONFIG`, with no response timeout: its
/// replies wait while this busy client thread works through a burst.
pub async fn admin(url: &str) -> redis::RedisResult<MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// Calls per command since the last `CONFIG RESETSTAT`, `INFO` excluded.
pub async fn command_calls(admin: &mut MultiplexedConnection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            (name != "info" && name != "config").then(|| (name.to_owned(), calls))
        })
        .collect()
}

pub async fn reset_stats(admin: &mut MultiplexedConnection) {
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(admin)
        .await
        .unwrap();
}

/// Commands that clients sent. `INFO commandstats` also counts the calls
/// scripts make (the `GET`, `SET`, `PTTL`, `DEL`, `PUBLISH` inside them), so
/// only the commands no script here makes are counted, plus `SET` when the
/// variant sends it itself (`raw_set`).
pub fn sent(calls: &HashMap<String, u64>, raw_set: bool) -> u64 {
    calls
        .iter()
        .filter(|(name, _)| {
            matches!(
                name.as_str(),
                "evalsha" | "eval" | "subscribe" | "unsubscribe"
            ) || name.starts_with("script")
                || (raw_set && name.as_str() == "set")
        })
        .map(|(_, calls)| calls)
        .sum()
}
