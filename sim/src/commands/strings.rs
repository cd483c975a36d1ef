//! String commands: `GET`, `SET` and its options, counters.

use super::{Ctx, arity, flat, int_arg, typed, upper};
use crate::keyspace::{Bytes, Value};
use crate::reply::{Reply, parse_int};

pub(super) fn run(ctx: &mut Ctx, name: &str, args: &[Bytes]) -> Reply {
    flat(match name {
        "GET" => get(ctx, args),
        "SET" => set(ctx, args),
        "GETDEL" => getdel(ctx, args),
        "MGET" => mget(ctx, args),
        "INCR" => arity(name, args, 2).and_then(|()| incr(ctx, &args[1], 1)),
        "DECR" => arity(name, args, 2).and_then(|()| incr(ctx, &args[1], -1)),
        "INCRBY" => arity(name, args, 3)
            .and_then(|()| int_arg(&args[2]))
            .and_then(|by| incr(ctx, &args[1], by)),
        "DECRBY" => arity(name, args, 3)
            .and_then(|()| int_arg(&args[2]))
            .and_then(|by| {
                incr(
                    ctx,
                    &args[1],
                    by.checked_neg().ok_or_else(Reply::not_integer)?,
                )
            }),
        _ => unreachable!("dispatched by name"),
    })
}

fn string_at(ctx: &Ctx, key: &[u8]) -> Result<Option<Bytes>, Reply> {
    Ok(typed(ctx.keys, key, |v| match v {
        Value::Str(s) => Some(s),
        _ => None,
    })?
    .cloned())
}

fn get(ctx: &mut Ctx, args: &[Bytes]) -> Result<Reply, Reply> {
    arity("get", args, 2)?;
    Ok(string_at(ctx, &args[1])?.map_or(Reply::Nil, Reply::Bulk))
}

fn getdel(ctx: &mut Ctx, args: &[Bytes]) -> Result<Reply, Reply> {
    arity("getdel", args, 2)?;
    let value = string_at(ctx, &args[1])?;
    if value.is_some() {
        ctx.keys.remove(&args[1]);
    }
    Ok(value.map_or(Reply::Nil, Reply::Bulk))
}

fn mget(ctx: &mut Ctx, args: &[Bytes]) -> Result<Reply, Reply> {
    arity("mget", args, -2)?;
    Ok(Reply::Array(
        args[1..]
            .iter()
            .map(|key| match ctx.keys.get(key) {
                Some(Value::Str(s)) => Reply::Bulk(s.clone()),
                _ => Reply::Nil,
            })
            .collect(),
    ))
}

#[derive(PartialEq)]
enum Expiry {
    Clear,
    Keep,
    At(u64),
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`, as
/// Redis 7.2 has it (no `IFEQ`: that is Redis 8.4, and the runtime asks the
/// server's version before it uses it).
fn set(ctx: &mut Ctx, args: &[Bytes]) -> Result<Reply, Reply> {
    arity("set", args, -3)?;
    let (key, value) = (&args[1], &args[2]);
    let (mut nx, mut xx, mut get, mut expiry) = (false, false, false, None);
    let mut i = 3;
    while i < args.len() {
        let option = upper(&args[i]);
        match option.as_str() {
            "NX" if !xx => nx = true,
            "XX" if !nx => xx = true,
            "GET" => get = true,
            "KEEPTTL" if expiry.is_none() => expiry = Some(Expiry::Keep),
            "EX" | "PX" | "EXAT" | "PXAT" if expiry.is_none() && i + 1 < args.len() => {
                i += 1;
                let amount = parse_int(&args[i]).ok_or_else(Reply::not_integer)?;
                let invalid = || Reply::err("ERR invalid expire time in 'set' command");
                if amount <= 0 {
                    return Err(invalid());
                }
                let ms = if option.starts_with('E') {
                    amount.checked_mul(1000).ok_or_else(invalid)?
                } else {
                    amount
                };
                let at = if option.ends_with("AT") {
                    ms
                } else {
                    (ctx.now_ms() as i64).checked_add(ms).ok_or_else(invalid)?
                };
                expiry = Some(Expiry::At(at as u64));
            }
            _ => return Err(Reply::syntax()),
        }
        i += 1;
    }
    let old = if get { string_at(ctx, key)? } else { None };
    let exists = ctx.keys.exists(key);
    let answer = |done: bool| {
        if get {
            old.clone().map_or(Reply::Nil, Reply::Bulk)
        } else if done {
            Reply::ok()
        } else {
            Reply::Nil
        }
    };
    if (nx && exists) || (xx && !exists) {
        return Ok(answer(false));
    }
    let value = Value::Str(value.clone());
    match expiry.unwrap_or(Expiry::Clear) {
        Expiry::Clear => ctx.keys.set(key, value, None),
        Expiry::Keep => ctx.keys.set_keep_ttl(key, value),
        // An absolute expiry already past (`EXAT`/`PXAT`): Redis deletes
        // the key at once rather than setting it.
        Expiry::At(at) if at <= ctx.now_ms() => {
            ctx.keys.remove(key);
        }
        Expiry::At(at) => ctx.keys.set(key, value, Some(at)),
    }
    Ok(answer(true))
}

fn incr(ctx: &mut Ctx, key: &[u8], by: i64) -> Result<Reply, Reply> {
    let current = match string_at(ctx, key)? {
        None => 0,
        Some(text) => parse_int(&text).ok_or_else(Reply::not_integer)?,
    };
    let next = current
        .checked_add(by)
        .ok_or_else(|| Reply::err("ERR increment or decrement would overflow"))?;
    ctx.keys
        .set_keep_ttl(key, Value::Str(next.to_string().into_bytes()));
    Ok(Reply::Int(next))
}
