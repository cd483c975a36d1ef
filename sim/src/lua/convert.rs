//! Redis's conversion rules between replies and Lua values, both ways.

use mlua::{Lua, Table, Value};

use crate::keyspace::Bytes;
use crate::reply::{Reply, format_double};

/// A reply as `redis.call` hands it to a script (always RESP2's shapes):
/// integer → number, bulk → string, nil → `false`, status → `{ok=…}`,
/// error → `{err=…}`, array → table (a nil inside → `false`), double →
/// its bulk string, map → a flat array.
pub fn to_lua(lua: &Lua, reply: &Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Int(i) => Value::Number(*i as f64),
        Reply::Bulk(bytes) => Value::String(lua.create_string(bytes)?),
        Reply::Nil | Reply::NilArray => Value::Boolean(false),
        Reply::Status(text) => {
            let table = lua.create_table()?;
            table.raw_set("ok", text.as_str())?;
            Value::Table(table)
        }
        Reply::Error(text) => {
            let table = lua.create_table()?;
            table.raw_set("err", text.as_str())?;
            Value::Table(table)
        }
        Reply::Double(d) => Value::String(lua.create_string(format_double(*d))?),
        Reply::Array(items) | Reply::Push(items) => {
            let table = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(table)
        }
        Reply::Map(pairs) => {
            let table = lua.create_table()?;
            for (i, (key, value)) in pairs.iter().enumerate() {
                table.raw_set(2 * i + 1, to_lua(lua, key)?)?;
                table.raw_set(2 * i + 2, to_lua(lua, value)?)?;
            }
            Value::Table(table)
        }
    })
}

/// A script's return value as the reply Redis sends: number → integer
/// (truncated), string → bulk, `true` → 1, `false`/nil → nil, `{ok=…}` →
/// status, `{err=…}` → error, another table → array up to its first nil.
pub fn from_lua(value: &Value) -> Reply {
    match value {
        Value::Nil | Value::Boolean(false) => Reply::Nil,
        Value::Boolean(true) => Reply::Int(1),
        Value::Integer(i) => Reply::Int(*i),
        Value::Number(n) => Reply::Int(*n as i64),
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Table(table) => from_table(table),
        _ => Reply::Nil,
    }
}

fn from_table(table: &Table) -> Reply {
    if let Ok(Value::String(err)) = table.raw_get::<Value>("err") {
        return Reply::Error(error_text(&err.as_bytes()));
    }
    if let Ok(Value::String(ok)) = table.raw_get::<Value>("ok") {
        return Reply::Status(String::from_utf8_lossy(&ok.as_bytes()).into_owned());
    }
    let mut items = Vec::new();
    for i in 1.. {
        match table.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(value) => items.push(from_lua(&value)),
        }
    }
    Reply::Array(items)
}

/// An error's text without the `-` Redis strips (`redis.error_reply('-X')`).
pub fn error_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.strip_prefix('-').unwrap_or(&text).to_owned()
}

/// An argument of `redis.call`: a string as is, a number as Redis 7 prints
/// it (integers without a fraction, else the shortest text that reads back
/// the same); anything else refused.
pub fn argument(value: &Value) -> Option<Bytes> {
    match value {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Integer(i) => Some(i.to_string().into_bytes()),
        Value::Number(n) => Some(format_double(*n).into_bytes()),
        _ => None,
    }
}
