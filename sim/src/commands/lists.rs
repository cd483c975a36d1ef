//! List commands: the fair queues' waiters, oldest first.

use std::collections::VecDeque;

use super::{Ctx, arity, flat, int_arg, range};
use crate::keyspace::{Bytes, Keyspace, Value};
use crate::reply::Reply;

pub(super) fn run(ctx: &mut Ctx, name: &str, args: &[Bytes]) -> Reply {
    flat(match name {
        "RPUSH" | "LPUSH" => push(ctx, name, args),
        "LPOP" | "RPOP" => pop(ctx, name, args),
        "LLEN" => arity(name, args, 2).and_then(|()| {
            Ok(Reply::Int(
                list_at(ctx.keys, &args[1])?.map_or(0, |l| l.len()) as i64,
            ))
        }),
        "LRANGE" => arity(name, args, 4).and_then(|()| {
            let (start, stop) = (int_arg(&args[2])?, int_arg(&args[3])?);
            let Some(list) = list_at(ctx.keys, &args[1])? else {
                return Ok(Reply::Array(Vec::new()));
            };
            Ok(Reply::Array(match range(start, stop, list.len()) {
                None => Vec::new(),
                Some((from, to)) => list.range(from..=to).cloned().map(Reply::Bulk).collect(),
            }))
        }),
        "LINDEX" => arity(name, args, 3).and_then(|()| {
            let index = int_arg(&args[2])?;
            let list = list_at(ctx.keys, &args[1])?;
            Ok(list
                .and_then(|l| position(index, l.len()).and_then(|i| l.get(i).cloned()))
                .map_or(Reply::Nil, Reply::Bulk))
        }),
        "LSET" => lset(ctx, args),
        "LREM" => lrem(ctx, args),
        _ => unreachable!("dispatched by name"),
    })
}

fn list_at<'a>(keys: &'a Keyspace, key: &[u8]) -> Result<Option<&'a VecDeque<Bytes>>, Reply> {
    super::typed(keys, key, |v| match v {
        Value::List(l) => Some(l),
        _ => None,
    })
}

fn position(index: i64, len: usize) -> Option<usize> {
    let index = if index < 0 { len as i64 + index } else { index };
    (0..len as i64).contains(&index).then_some(index as usize)
}

fn push(ctx: &mut Ctx, name: &str, args: &[Bytes]) -> Result<Reply, Reply> {
    arity(name, args, -3)?;
    let mut list = list_at(ctx.keys, &args[1])?.cloned().unwrap_or_default();
    for item in &args[2..] {
        if name == "RPUSH" {
            list.push_back(item.clone());
        } else {
            list.push_front(item.clone());
        }
    }
    let len = list.len();
    ctx.keys.set_keep_ttl(&args[1], Value::List(list));
    Ok(Reply::Int(len as i64))
}

/// `LPOP key [count]`: nil without the key; with a count, an array (or a
/// nil array without the key, as Redis 7 answers).
fn pop(ctx: &mut Ctx, name: &str, args: &[Bytes]) -> Result<Reply, Reply> {
    if args.len() != 2 && args.len() != 3 {
        return Err(Reply::arity(name));
    }
    let count = match args.get(2) {
        None => None,
        Some(arg) => {
            let n = int_arg(arg)?;
            if n < 0 {
                return Err(Reply::err("ERR value is out of range, must be positive"));
            }
            Some(n as usize)
        }
    };
    if list_at(ctx.keys, &args[1])?.is_none() {
        return Ok(if count.is_some() {
            Reply::NilArray
        } else {
            Reply::Nil
        });
    }
    if count == Some(0) {
        return Ok(Reply::Array(Vec::new()));
    }
    let Some(Value::List(list)) = ctx.keys.get_mut(&args[1]) else {
        unreachable!("a list, checked above")
    };
    let mut popped = Vec::new();
    for _ in 0..count.unwrap_or(1) {
        let item = if name == "LPOP" {
            list.pop_front()
        } else {
            list.pop_back()
        };
        match item {
            Some(item) => popped.push(Reply::Bulk(item)),
            None => break,
        }
    }
    ctx.keys.drop_if_empty(&args[1]);
    Ok(match count {
        None => popped.pop().unwrap_or(Reply::Nil),
        Some(_) => Reply::Array(popped),
    })
}

fn lset(ctx: &mut Ctx, args: &[Bytes]) -> Result<Reply, Reply> {
    arity("lset", args, 4)?;
    let index = int_arg(&args[2])?;
    let Some(list) = list_at(ctx.keys, &args[1])? else {
        return Err(Reply::err("ERR no such key"));
    };
    let at = position(index, list.len()).ok_or_else(|| Reply::err("ERR index out of range"))?;
    let Some(Value::List(list)) = ctx.keys.get_mut(&args[1]) else {
        unreachable!("a list, checked above")
    };
    list[at] = args[3].clone();
    Ok(Reply::ok())
}

/// `LREM key count element`: count > 0 from the head, < 0 from the tail,
/// 0 all.
fn lrem(ctx: &mut Ctx, args: &[Bytes]) -> Result<Reply, Reply> {
    arity("lrem", args, 4)?;
    let count = int_arg(&args[2])?;
    let element = &args[3];
    let Some(list) = list_at(ctx.keys, &args[1])? else {
        return Ok(Reply::Int(0));
    };
    let limit = if count == 0 {
        usize::MAX
    } else {
        count.unsigned_abs() as usize
    };
    let mut hits: Vec<usize> = list
        .iter()
        .enumerate()
        .filter(|(_, item)| *item == element)
        .map(|(i, _)| i)
        .collect();
    if count < 0 {
        hits.reverse();
    }
    hits.truncate(limit);
    if hits.is_empty() {
        return Ok(Reply::Int(0));
    }
    hits.sort_unstable();
    let Some(Value::List(list)) = ctx.keys.get_mut(&args[1]) else {
        unreachable!("a list, checked above")
    };
    for i in hits.iter().rev() {
        list.remove(*i);
    }
    ctx.keys.drop_if_empty(&args[1]);
    Ok(Reply::Int(hits.len() as i64))
}
