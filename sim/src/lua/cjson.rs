//! `cjson.encode` and `cjson.decode` as Redis's lua-cjson behaves for the
//! values the runtime's queue entries hold.
//!
//! Quirks kept: no spaces (`{"v":"…","t":5}`: the scripts search the text
//! for `"v":"<token>`); `/` escaped as `\/`; an empty table encodes as `{}`;
//! a table whose keys are exactly 1..n is an array; numbers with no
//! fraction print as integers, others with up to 14 significant digits
//! (lua-cjson's `%.14g`); `null` decodes to `cjson.null`, a light userdata.
//! Object keys come out in Lua's own table order, as in Redis.

use mlua::{Lua, Table, Value};

pub fn install(lua: &Lua) -> mlua::Result<()> {
    let cjson = lua.create_table()?;
    cjson.set(
        "encode",
        lua.create_function(|lua, value: Value| {
            let mut out = Vec::new();
            encode(&value, &mut out, 0)?;
            lua.create_string(&out)
        })?,
    )?;
    cjson.set(
        "decode",
        lua.create_function(|lua, text: mlua::String| {
            let json: serde_json::Value =
                serde_json::from_slice(&text.as_bytes()).map_err(|err| {
                    mlua::Error::runtime(format!("Expected value but found invalid token ({err})"))
                })?;
            decode(lua, &json)
        })?,
    )?;
    cjson.set("null", Value::NULL)?;
    lua.globals().set("cjson", cjson)
}

fn number(value: f64, out: &mut Vec<u8>) -> mlua::Result<()> {
    if !value.is_finite() {
        return Err(mlua::Error::runtime(
            "Cannot serialise number: must not be NaN or Inf",
        ));
    }
    if value.fract() == 0.0 && value.abs() < 1e14 {
        out.extend_from_slice(format!("{}", value as i64).as_bytes());
    } else {
        // %.14g: 14 significant digits, trailing zeros dropped.
        let text = format!("{:.13e}", value);
        let parsed: f64 = text.parse().unwrap_or(value);
        out.extend_from_slice(format!("{parsed}").as_bytes());
    }
    Ok(())
}

fn string(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in bytes {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b if b < 0x20 || b == 0x7f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            b => out.push(b),
        }
    }
    out.push(b'"');
}

fn encode(value: &Value, out: &mut Vec<u8>, depth: usize) -> mlua::Result<()> {
    if depth > 1000 {
        return Err(mlua::Error::runtime(
            "Cannot serialise, excessive nesting (1001)",
        ));
    }
    match value {
        Value::Nil => out.extend_from_slice(b"null"),
        v if v.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(i) => number(*i as f64, out)?,
        Value::Number(n) => number(*n, out)?,
        Value::String(s) => string(&s.as_bytes(), out),
        Value::Table(table) => encode_table(table, out, depth)?,
        other => {
            return Err(mlua::Error::runtime(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            )));
        }
    }
    Ok(())
}

fn encode_table(table: &Table, out: &mut Vec<u8>, depth: usize) -> mlua::Result<()> {
    let pairs: Vec<(Value, Value)> = table.pairs::<Value, Value>().collect::<mlua::Result<_>>()?;
    let n = pairs.len();
    let is_array = n > 0
        && pairs.iter().all(|(k, _)| match k {
            Value::Integer(i) => *i >= 1 && (*i as usize) <= n,
            Value::Number(f) => f.fract() == 0.0 && *f >= 1.0 && (*f as usize) <= n,
            _ => false,
        });
    if is_array {
        out.push(b'[');
        for i in 1..=n {
            if i > 1 {
                out.push(b',');
            }
            encode(&table.raw_get::<Value>(i)?, out, depth + 1)?;
        }
        out.push(b']');
        return Ok(());
    }
    out.push(b'{');
    for (i, (key, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match key {
            Value::String(s) => string(&s.as_bytes(), out),
            Value::Integer(_) | Value::Number(_) => {
                let mut text = Vec::new();
                encode(key, &mut text, depth + 1)?;
                string(&text, out);
            }
            _ => {
                return Err(mlua::Error::runtime(
                    "Cannot serialise table: table key must be a number or string",
                ));
            }
        }
        out.push(b':');
        encode(value, out, depth + 1)?;
    }
    out.push(b'}');
    Ok(())
}

fn decode(lua: &Lua, json: &serde_json::Value) -> mlua::Result<Value> {
    use serde_json::Value as J;
    Ok(match json {
        J::Null => Value::NULL,
        J::Bool(b) => Value::Boolean(*b),
        J::Number(n) => Value::Number(n.as_f64().unwrap_or(0.0)),
        J::String(s) => Value::String(lua.create_string(s)?),
        J::Array(items) => {
            let table = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, decode(lua, item)?)?;
            }
            Value::Table(table)
        }
        J::Object(fields) => {
            let table = lua.create_table()?;
            for (key, item) in fields {
                table.raw_set(key.as_str(), decode(lua, item)?)?;
            }
            Value::Table(table)
        }
    })
}
