//! Hash commands: `FencedStore`'s fenced values.

use super::{Ctx, arity, flat};
use crate::hash::Hash;
use crate::keyspace::{Bytes, Keyspace, Value};
use crate::reply::Reply;

pub(super) fn run(ctx: &mut Ctx, name: &str, args: &[Bytes]) -> Option<Reply> {
    Some(flat(match name {
        "HSET" => hset(ctx, args),
        "HGET" => arity(name, args, 3).and_then(|()| {
            Ok(hash_at(ctx.keys, &args[1])?
                .and_then(|h| h.get(&args[2]).cloned())
                .map_or(Reply::Nil, Reply::Bulk))
        }),
        "HMGET" => arity(name, args, -3).and_then(|()| {
            let hash = hash_at(ctx.keys, &args[1])?;
            Ok(Reply::Array(
                args[2..]
                    .iter()
                    .map(|f| {
                        hash.and_then(|h| h.get(f).cloned())
                            .map_or(Reply::Nil, Reply::Bulk)
                    })
                    .collect(),
            ))
        }),
        "HEXISTS" => arity(name, args, 3).and_then(|()| {
            Ok(Reply::Int(
                hash_at(ctx.keys, &args[1])?.is_some_and(|h| h.contains_key(&args[2])) as i64,
            ))
        }),
        "HLEN" => arity(name, args, 2).and_then(|()| {
            Ok(Reply::Int(
                hash_at(ctx.keys, &args[1])?.map_or(0, |h| h.len()) as i64,
            ))
        }),
        "HGETALL" => arity(name, args, 2).and_then(|()| {
            let pairs = hash_at(ctx.keys, &args[1])?
                .map(|h| {
                    h.iter()
                        .map(|(f, v)| (Reply::Bulk(f.clone()), Reply::Bulk(v.clone())))
                        .collect()
                })
                .unwrap_or_default();
            Ok(Reply::Map(pairs))
        }),
        "HDEL" => hdel(ctx, args),
        _ => return None,
    }))
}

fn hash_at<'a>(keys: &'a Keyspace, key: &[u8]) -> Result<Option<&'a Hash>, Reply> {
    super::typed(keys, key, |v| match v {
        Value::Hash(h) => Some(h),
        _ => None,
    })
}

fn hset(ctx: &mut Ctx, args: &[Bytes]) -> Result<Reply, Reply> {
    if args.len() < 4 || !args.len().is_multiple_of(2) {
        return Err(Reply::arity("hset"));
    }
    let mut hash = hash_at(ctx.keys, &args[1])?.cloned().unwrap_or_default();
    let added = args[2..]
        .chunks(2)
        .filter(|pair| hash.insert(&pair[0], &pair[1]))
        .count();
    ctx.keys.set_keep_ttl(&args[1], Value::Hash(hash));
    Ok(Reply::Int(added as i64))
}

fn hdel(ctx: &mut Ctx, args: &[Bytes]) -> Result<Reply, Reply> {
    arity("hdel", args, -3)?;
    // Only a removal is a write (for WATCH).
    if !hash_at(ctx.keys, &args[1])?.is_some_and(|h| args[2..].iter().any(|f| h.contains_key(f))) {
        return Ok(Reply::Int(0));
    }
    let Some(Value::Hash(hash)) = ctx.keys.get_mut(&args[1]) else {
        unreachable!("a hash, checked above")
    };
    let removed = args[2..].iter().filter(|f| hash.remove(f)).count();
    ctx.keys.drop_if_empty(&args[1]);
    Ok(Reply::Int(removed as i64))
}
