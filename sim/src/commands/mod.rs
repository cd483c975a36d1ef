//! The data commands: what one command does to the keyspace, with Redis 7's
//! replies and error texts. Connection state (transactions, pub/sub, the
//! protocol) and scripting are the server's; these see only the keyspace and
//! the time the server read from its clock for the command.

mod hashes;
mod keys;
mod lists;
mod strings;
mod zsets;

use crate::keyspace::{Bytes, Keyspace, Value};
use crate::reply::{Reply, parse_int};

pub use keys::glob_match;

/// What a data command runs against.
pub struct Ctx<'a> {
    pub keys: &'a mut Keyspace,
    /// The server's clock for this command, a script or a transaction:
    /// Redis too reads the time once for a script's whole run.
    pub now_us: u64,
    /// RESP3 shapes for the replies that have one (`WITHSCORES` pairs,
    /// doubles, maps); a script always sees RESP2's.
    pub resp3: bool,
}

impl Ctx<'_> {
    pub fn now_ms(&self) -> u64 {
        self.now_us / 1000
    }
}

/// The data commands this server knows, upper case.
pub const DATA_COMMANDS: &[&str] = &[
    "GET",
    "SET",
    "GETDEL",
    "MGET",
    "INCR",
    "INCRBY",
    "DECR",
    "DECRBY",
    "DEL",
    "UNLINK",
    "EXISTS",
    "TYPE",
    "PTTL",
    "TTL",
    "PEXPIRE",
    "EXPIRE",
    "PEXPIREAT",
    "PERSIST",
    "TIME",
    "SCAN",
    "KEYS",
    "DBSIZE",
    "FLUSHALL",
    "FLUSHDB",
    "ZADD",
    "ZSCORE",
    "ZREM",
    "ZCARD",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZREMRANGEBYSCORE",
    "ZCOUNT",
    "HSET",
    "HGET",
    "HMGET",
    "HDEL",
    "HGETALL",
    "HLEN",
    "HEXISTS",
    "RPUSH",
    "LPUSH",
    "LPOP",
    "RPOP",
    "LLEN",
    "LRANGE",
    "LINDEX",
    "LSET",
    "LREM",
];

/// Runs `args` (the command's name first) if it is a data command; `None`
/// for any other, which the server answers.
pub fn run(ctx: &mut Ctx, args: &[Bytes]) -> Option<Reply> {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
    let reply = match name.as_str() {
        "GET" | "SET" | "GETDEL" | "MGET" | "INCR" | "INCRBY" | "DECR" | "DECRBY" => {
            strings::run(ctx, &name, args)
        }
        "DEL" | "UNLINK" | "EXISTS" | "TYPE" | "PTTL" | "TTL" | "PEXPIRE" | "EXPIRE"
        | "PEXPIREAT" | "PERSIST" | "TIME" | "SCAN" | "KEYS" | "DBSIZE" | "FLUSHALL"
        | "FLUSHDB" => keys::run(ctx, &name, args),
        name if name.starts_with('Z') => zsets::run(ctx, name, args)?,
        name if name.starts_with('H') => hashes::run(ctx, name, args)?,
        "RPUSH" | "LPUSH" | "LPOP" | "RPOP" | "LLEN" | "LRANGE" | "LINDEX" | "LSET" | "LREM" => {
            lists::run(ctx, &name, args)
        }
        _ => return None,
    };
    Some(reply)
}

/// Checks a command's argument count: `exact` (positive) or at least
/// `-exact`, counting the name, as Redis's command table does.
fn arity(name: &str, args: &[Bytes], arity: i32) -> Result<(), Reply> {
    let n = args.len() as i32;
    let ok = if arity >= 0 { n == arity } else { n >= -arity };
    if ok { Ok(()) } else { Err(Reply::arity(name)) }
}

fn int_arg(arg: &[u8]) -> Result<i64, Reply> {
    parse_int(arg).ok_or_else(Reply::not_integer)
}

fn upper(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).to_ascii_uppercase()
}

/// The value at `key` if it is of the type `pick` accepts; `Ok(None)` when
/// there is no key, WRONGTYPE for another type.
fn typed<'a, T>(
    keys: &'a Keyspace,
    key: &[u8],
    pick: impl FnOnce(&'a Value) -> Option<&'a T>,
) -> Result<Option<&'a T>, Reply> {
    match keys.get(key) {
        None => Ok(None),
        Some(value) => pick(value).map(Some).ok_or_else(Reply::wrong_type),
    }
}

/// Turns a `Result<Reply, Reply>` into the reply, error or not.
fn flat(result: Result<Reply, Reply>) -> Reply {
    result.unwrap_or_else(|err| err)
}

/// Redis's list and range indexes: negative from the end, clamped.
fn range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    if start > stop || start >= len {
        None
    } else {
        Some((start as usize, stop as usize))
    }
}
