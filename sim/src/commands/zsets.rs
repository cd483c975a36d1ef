//! Sorted set commands: the shared locks' holders, with `+inf` markers.

use super::{Ctx, arity, flat, int_arg, range, upper};
use crate::keyspace::{Bytes, Keyspace, Value};
use crate::reply::{Reply, format_double};
use crate::sorted::{Bound, SortedSet, parse_score};

pub(super) fn run(ctx: &mut Ctx, name: &str, args: &[Bytes]) -> Option<Reply> {
    Some(flat(match name {
        "ZADD" => zadd(ctx, args),
        "ZSCORE" => arity(name, args, 3).and_then(|()| {
            Ok(set_at(ctx.keys, &args[1])?
                .and_then(|set| set.score(&args[2]))
                .map_or(Reply::Nil, |score| double(ctx.resp3, score)))
        }),
        "ZCARD" => arity(name, args, 2).and_then(|()| {
            Ok(Reply::Int(
                set_at(ctx.keys, &args[1])?.map_or(0, |s| s.len()) as i64,
            ))
        }),
        "ZREM" => zrem(ctx, args),
        "ZRANGE" => zrange(ctx, args),
        "ZRANGEBYSCORE" => zrangebyscore(ctx, args),
        "ZCOUNT" => arity(name, args, 4).and_then(|()| {
            let (min, max) = bounds(&args[2], &args[3])?;
            Ok(Reply::Int(
                set_at(ctx.keys, &args[1])?.map_or(0, |s| s.range_by_score(min, max).len()) as i64,
            ))
        }),
        "ZREMRANGEBYSCORE" => zremrangebyscore(ctx, args),
        _ => return None,
    }))
}

fn set_at<'a>(keys: &'a Keyspace, key: &[u8]) -> Result<Option<&'a SortedSet>, Reply> {
    super::typed(keys, key, |v| match v {
        Value::ZSet(s) => Some(s),
        _ => None,
    })
}

/// A score in a reply: a RESP3 double, or RESP2's bulk string.
fn double(resp3: bool, score: f64) -> Reply {
    if resp3 {
        Reply::Double(score)
    } else {
        Reply::bulk(format_double(score))
    }
}

fn bounds(min: &[u8], max: &[u8]) -> Result<(Bound, Bound), Reply> {
    match (Bound::parse(min), Bound::parse(max)) {
        (Some(min), Some(max)) => Ok((min, max)),
        _ => Err(Reply::err("ERR min or max is not a float")),
    }
}

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member …`.
fn zadd(ctx: &mut Ctx, args: &[Bytes]) -> Result<Reply, Reply> {
    arity("zadd", args, -4)?;
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) =
        (false, false, false, false, false, false);
    let mut i = 2;
    while i < args.len() {
        match upper(&args[i]).as_str() {
            "NX" => nx = true,
            "XX" => xx = true,
            "GT" => gt = true,
            "LT" => lt = true,
            "CH" => ch = true,
            "INCR" => incr = true,
            _ => break,
        }
        i += 1;
    }
    let pairs = &args[i..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Err(Reply::syntax());
    }
    if nx && xx {
        return Err(Reply::err(
            "ERR XX and NX options at the same time are not compatible",
        ));
    }
    if ((gt || lt) && nx) || (gt && lt) {
        return Err(Reply::err(
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if incr && pairs.len() > 2 {
        return Err(Reply::err(
            "ERR INCR option supports a single increment-element pair",
        ));
    }
    let mut scores = Vec::new();
    for pair in pairs.chunks(2) {
        scores.push((
            parse_score(&pair[0]).ok_or_else(Reply::not_float)?,
            &pair[1],
        ));
    }
    let key = &args[1];
    let mut set = set_at(ctx.keys, key)?.cloned().unwrap_or_default();
    let (mut added, mut changed, mut last) = (0, 0, None);
    for (score, member) in scores {
        let old = set.score(member);
        if (nx && old.is_some()) || (xx && old.is_none()) {
            continue;
        }
        let new = match (incr, old) {
            (true, Some(old)) => old + score,
            _ => score,
        };
        if new.is_nan() {
            return Err(Reply::err("ERR resulting score is not a number (NaN)"));
        }
        if let Some(old) = old
            && ((gt && new <= old) || (lt && new >= old))
        {
            continue;
        }
        last = Some(new);
        if old != Some(new) {
            set.insert(member, new);
            if old.is_none() {
                added += 1;
            } else {
                changed += 1;
            }
        }
    }
    if added + changed > 0 {
        ctx.keys.set_keep_ttl(key, Value::ZSet(set));
    }
    Ok(if incr {
        last.map_or(Reply::Nil, |score| double(ctx.resp3, score))
    } else {
        Reply::Int(if ch { added + changed } else { added })
    })
}

fn zrem(ctx: &mut Ctx, args: &[Bytes]) -> Result<Reply, Reply> {
    arity("zrem", args, -3)?;
    // Only a removal is a write (for WATCH).
    if !set_at(ctx.keys, &args[1])?
        .is_some_and(|set| args[2..].iter().any(|m| set.score(m).is_some()))
    {
        return Ok(Reply::Int(0));
    }
    let Some(Value::ZSet(set)) = ctx.keys.get_mut(&args[1]) else {
        unreachable!("a sorted set, checked above")
    };
    let removed = args[2..].iter().filter(|m| set.remove(m)).count();
    ctx.keys.drop_if_empty(&args[1]);
    Ok(Reply::Int(removed as i64))
}

fn zremrangebyscore(ctx: &mut Ctx, args: &[Bytes]) -> Result<Reply, Reply> {
    arity("zremrangebyscore", args, 4)?;
    let (min, max) = bounds(&args[2], &args[3])?;
    let Some(set) = set_at(ctx.keys, &args[1])? else {
        return Ok(Reply::Int(0));
    };
    let doomed = set.range_by_score(min, max);
    if doomed.is_empty() {
        return Ok(Reply::Int(0));
    }
    let Some(Value::ZSet(set)) = ctx.keys.get_mut(&args[1]) else {
        unreachable!("a sorted set, checked above")
    };
    for (member, _) in &doomed {
        set.remove(member);
    }
    ctx.keys.drop_if_empty(&args[1]);
    Ok(Reply::Int(doomed.len() as i64))
}

/// Members, with their scores if asked: RESP2 flat, RESP3 as pairs.
fn members(resp3: bool, items: Vec<(Bytes, f64)>, with_scores: bool) -> Reply {
    let mut out = Vec::new();
    for (member, score) in items {
        if !with_scores {
            out.push(Reply::Bulk(member));
        } else if resp3 {
            out.push(Reply::Array(vec![
                Reply::Bulk(member),
                Reply::Double(score),
            ]));
        } else {
            out.push(Reply::Bulk(member));
            out.push(Reply::bulk(format_double(score)));
        }
    }
    Reply::Array(out)
}

fn limit(items: Vec<(Bytes, f64)>, limit: Option<(i64, i64)>) -> Vec<(Bytes, f64)> {
    match limit {
        None => items,
        Some((offset, _)) if offset < 0 => Vec::new(),
        Some((offset, count)) => {
            let taken = items.into_iter().skip(offset as usize);
            if count < 0 {
                taken.collect()
            } else {
                taken.take(count as usize).collect()
            }
        }
    }
}

/// `ZRANGE key start stop [BYSCORE] [REV] [LIMIT offset count] [WITHSCORES]`.
fn zrange(ctx: &mut Ctx, args: &[Bytes]) -> Result<Reply, Reply> {
    arity("zrange", args, -4)?;
    let (mut by_score, mut rev, mut with_scores, mut lim) = (false, false, false, None);
    let mut i = 4;
    while i < args.len() {
        match upper(&args[i]).as_str() {
            "BYSCORE" => by_score = true,
            "REV" => rev = true,
            "WITHSCORES" => with_scores = true,
            "LIMIT" if i + 2 < args.len() => {
                lim = Some((int_arg(&args[i + 1])?, int_arg(&args[i + 2])?));
                i += 2;
            }
            _ => return Err(Reply::syntax()),
        }
        i += 1;
    }
    if lim.is_some() && !by_score {
        return Err(Reply::err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    let Some(set) = set_at(ctx.keys, &args[1])? else {
        return Ok(Reply::Array(Vec::new()));
    };
    let items: Vec<(Bytes, f64)> = if by_score {
        let (min, max) = if rev {
            bounds(&args[3], &args[2])?
        } else {
            bounds(&args[2], &args[3])?
        };
        let mut items = set.range_by_score(min, max);
        if rev {
            items.reverse();
        }
        limit(items, lim)
    } else {
        let (start, stop) = (int_arg(&args[2])?, int_arg(&args[3])?);
        let mut all: Vec<(Bytes, f64)> = set.iter().map(|(m, s)| (m.clone(), s)).collect();
        if rev {
            all.reverse();
        }
        match range(start, stop, all.len()) {
            None => Vec::new(),
            Some((from, to)) => all[from..=to].to_vec(),
        }
    };
    Ok(members(ctx.resp3, items, with_scores))
}

/// `ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]`.
fn zrangebyscore(ctx: &mut Ctx, args: &[Bytes]) -> Result<Reply, Reply> {
    arity("zrangebyscore", args, -4)?;
    let (min, max) = bounds(&args[2], &args[3])?;
    let (mut with_scores, mut lim) = (false, None);
    let mut i = 4;
    while i < args.len() {
        match upper(&args[i]).as_str() {
            "WITHSCORES" => with_scores = true,
            "LIMIT" if i + 2 < args.len() => {
                lim = Some((int_arg(&args[i + 1])?, int_arg(&args[i + 2])?));
                i += 2;
            }
            _ => return Err(Reply::syntax()),
        }
        i += 1;
    }
    let items = set_at(ctx.keys, &args[1])?.map_or_else(Vec::new, |s| s.range_by_score(min, max));
    Ok(members(ctx.resp3, limit(items, lim), with_scores))
}
