//! Commands on keys whatever they hold: deletion, expiry, `TYPE`, `SCAN`,
//! and `TIME`.

use super::{Ctx, arity, flat, int_arg, upper};
use crate::keyspace::Bytes;
use crate::reply::Reply;

pub(super) fn run(ctx: &mut Ctx, name: &str, args: &[Bytes]) -> Reply {
    flat(match name {
        "DEL" | "UNLINK" => arity(name, args, -2).map(|()| {
            Reply::Int(
                args[1..]
                    .iter()
                    .filter(|k| ctx.keys.remove(k).is_some())
                    .count() as i64,
            )
        }),
        "EXISTS" => arity(name, args, -2)
            .map(|()| Reply::Int(args[1..].iter().filter(|k| ctx.keys.exists(k)).count() as i64)),
        "TYPE" => arity(name, args, 2).map(|()| {
            Reply::Status(
                ctx.keys
                    .get(&args[1])
                    .map_or("none", |v| v.type_name())
                    .into(),
            )
        }),
        "PTTL" | "TTL" => arity(name, args, 2).map(|()| ttl(ctx, &args[1], name == "PTTL")),
        "PEXPIRE" | "EXPIRE" | "PEXPIREAT" => expire(ctx, name, args),
        "PERSIST" => arity(name, args, 2).map(|()| {
            let had = ctx.keys.expires_at(&args[1]).is_some();
            if had {
                ctx.keys.set_expiry(&args[1], None);
            }
            Reply::Int(had as i64)
        }),
        "TIME" => arity(name, args, 1).map(|()| {
            Reply::Array(vec![
                Reply::bulk((ctx.now_us / 1_000_000).to_string()),
                Reply::bulk((ctx.now_us % 1_000_000).to_string()),
            ])
        }),
        "SCAN" => scan(ctx, args),
        "KEYS" => arity(name, args, 2).map(|()| {
            Reply::Array(
                ctx.keys
                    .keys()
                    .filter(|key| glob_match(&args[1], key))
                    .map(|key| Reply::Bulk(key.clone()))
                    .collect(),
            )
        }),
        "DBSIZE" => arity(name, args, 1).map(|()| Reply::Int(ctx.keys.len() as i64)),
        "FLUSHALL" | "FLUSHDB" => {
            ctx.keys.retain(|_, _| false);
            Ok(Reply::ok())
        }
        _ => unreachable!("dispatched by name"),
    })
}

/// `PTTL`: -2 without the key, -1 without an expiry, else what is left.
fn ttl(ctx: &Ctx, key: &[u8], millis: bool) -> Reply {
    if !ctx.keys.exists(key) {
        return Reply::Int(-2);
    }
    match ctx.keys.expires_at(key) {
        None => Reply::Int(-1),
        Some(at) => {
            let left = at.saturating_sub(ctx.now_ms()) as i64;
            Reply::Int(if millis { left } else { (left + 500) / 1000 })
        }
    }
}

/// `PEXPIRE key ms [NX|XX|GT|LT]`, `EXPIRE key s …`, `PEXPIREAT key ms …`:
/// an expiry already past (`ms <= 0`) deletes the key at once, as Redis
/// does, and answers 1. For `GT` and `LT` a key without an expiry counts as
/// expiring never.
fn expire(ctx: &mut Ctx, name: &str, args: &[Bytes]) -> Result<Reply, Reply> {
    arity(name, args, -3)?;
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in &args[3..] {
        match upper(option).as_str() {
            "NX" => nx = true,
            "XX" => xx = true,
            "GT" => gt = true,
            "LT" => lt = true,
            other => return Err(Reply::err(format!("ERR Unsupported option {other}"))),
        }
    }
    if nx && (xx || gt || lt) {
        return Err(Reply::err(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(Reply::err(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    let amount = int_arg(&args[2])?;
    let invalid = || {
        Reply::err(format!(
            "ERR invalid expire time in '{}' command",
            name.to_ascii_lowercase()
        ))
    };
    let at = match name {
        "PEXPIRE" => (ctx.now_ms() as i64).checked_add(amount),
        "EXPIRE" => amount
            .checked_mul(1000)
            .and_then(|ms| (ctx.now_ms() as i64).checked_add(ms)),
        _ => Some(amount),
    }
    .ok_or_else(invalid)?;
    let key = &args[1];
    if !ctx.keys.exists(key) {
        return Ok(Reply::Int(0));
    }
    let current = ctx.keys.expires_at(key).map(|at| at as i64);
    let applies = match current {
        None => !xx && !gt,
        Some(current) => !nx && (!gt || at > current) && (!lt || at < current),
    };
    if !applies {
        return Ok(Reply::Int(0));
    }
    if at <= ctx.now_ms() as i64 {
        ctx.keys.remove(key);
    } else {
        ctx.keys.set_expiry(key, Some(at as u64));
    }
    Ok(Reply::Int(1))
}

/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]`: every matching key in
/// one answer, with cursor 0. `COUNT` is a hint in Redis too, which answers
/// a small keyspace in one step; a single step also keeps SCAN's guarantee
/// (a key present throughout is returned) trivially.
fn scan(ctx: &mut Ctx, args: &[Bytes]) -> Result<Reply, Reply> {
    arity("scan", args, -2)?;
    if crate::reply::parse_int(&args[1]).is_none_or(|cursor| cursor < 0) {
        return Err(Reply::err("ERR invalid cursor"));
    }
    let (mut pattern, mut kind) = (None, None);
    let mut i = 2;
    while i < args.len() {
        let value = args.get(i + 1).ok_or_else(Reply::syntax)?;
        match upper(&args[i]).as_str() {
            "MATCH" => pattern = Some(value.clone()),
            "COUNT" => {
                if int_arg(value)? < 1 {
                    return Err(Reply::syntax());
                }
            }
            "TYPE" => kind = Some(String::from_utf8_lossy(value).to_ascii_lowercase()),
            _ => return Err(Reply::syntax()),
        }
        i += 2;
    }
    let keys = ctx
        .keys
        .keys()
        .filter(|key| pattern.as_ref().is_none_or(|p| glob_match(p, key)))
        .filter(|key| {
            kind.as_ref()
                .is_none_or(|k| ctx.keys.get(key).is_some_and(|v| v.type_name() == k))
        })
        .map(|key| Reply::Bulk(key.clone()))
        .collect();
    Ok(Reply::Array(vec![Reply::bulk("0"), Reply::Array(keys)]))
}

/// Redis's glob (`stringmatchlen`): `*`, `?`, `[abc]`, `[^a-z]`, `\x`.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.first() {
        None => text.is_empty(),
        Some(b'*') => {
            let rest = &pattern[1..];
            (0..=text.len()).any(|skip| glob_match(rest, &text[skip..]))
        }
        Some(b'?') => !text.is_empty() && glob_match(&pattern[1..], &text[1..]),
        Some(b'[') => {
            let Some(&c) = text.first() else {
                return false;
            };
            let mut p = 1;
            let negate = pattern.get(p) == Some(&b'^');
            if negate {
                p += 1;
            }
            let mut matched = false;
            while p < pattern.len() && pattern[p] != b']' {
                if pattern[p] == b'\\' && p + 1 < pattern.len() {
                    p += 1;
                    matched |= pattern[p] == c;
                } else if p + 2 < pattern.len() && pattern[p + 1] == b'-' {
                    let (lo, hi) = (
                        pattern[p].min(pattern[p + 2]),
                        pattern[p].max(pattern[p + 2]),
                    );
                    matched |= (lo..=hi).contains(&c);
                    p += 2;
                } else {
                    matched |= pattern[p] == c;
                }
                p += 1;
            }
            let rest = if p < pattern.len() {
                &pattern[p + 1..]
            } else {
                &pattern[p..]
            };
            matched != negate && glob_match(rest, &text[1..])
        }
        Some(b'\\') if pattern.len() > 1 => {
            text.first() == Some(&pattern[1]) && glob_match(&pattern[2..], &text[1..])
        }
        Some(&c) => text.first() == Some(&c) && glob_match(&pattern[1..], &text[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs_as_redis_reads_them() {
        assert!(glob_match(b"lock:*", b"lock:a"));
        assert!(glob_match(b"*{a}*", b"x{a}y"));
        assert!(!glob_match(b"lock:?", b"lock:ab"));
        assert!(glob_match(b"[a-c]x", b"bx"));
        assert!(!glob_match(b"[^a-c]x", b"bx"));
        assert!(glob_match(b"a\\*", b"a*"));
        assert!(!glob_match(b"a\\*", b"ab"));
    }
}
