//! A command's answer, before it is written in RESP2 or RESP3 (or handed to
//! a script, which sees it as RESP2).

/// One reply, with the RESP3 types the commands here give; RESP2 writes
/// each in its RESP2 form (a double as a bulk string, a map as a flat array).
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    /// A missing value (`$-1` in RESP2, `_` in RESP3).
    Nil,
    Array(Vec<Reply>),
    /// A missing array (`*-1` in RESP2, `_` in RESP3): an aborted `EXEC`.
    NilArray,
    Double(f64),
    Map(Vec<(Reply, Reply)>),
    /// A RESP3 push (pub/sub messages and confirmations).
    Push(Vec<Reply>),
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Status("OK".into())
    }

    pub fn err(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    pub fn bulk(text: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(text.as_ref().to_vec())
    }

    pub fn wrong_type() -> Reply {
        Reply::err("WRONGTYPE Operation against a key holding the wrong kind of value")
    }

    pub fn syntax() -> Reply {
        Reply::err("ERR syntax error")
    }

    pub fn not_integer() -> Reply {
        Reply::err("ERR value is not an integer or out of range")
    }

    pub fn not_float() -> Reply {
        Reply::err("ERR value is not a valid float")
    }

    pub fn arity(command: &str) -> Reply {
        Reply::err(format!(
            "ERR wrong number of arguments for '{}' command",
            command.to_ascii_lowercase()
        ))
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }
}

/// A double as Redis 7 writes one in a bulk string (`ZSCORE` in RESP2):
/// `inf`, `-inf`, integers without a fraction, else the shortest text that
/// reads back the same.
pub fn format_double(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.into();
    }
    if value.fract() == 0.0 && value.abs() < 1e17 {
        return format!("{}", value as i64);
    }
    format!("{value}")
}

/// An integer argument as Redis reads one (`string2ll`: no spaces, no `+`,
/// no leading zeros).
pub fn parse_int(text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text).ok()?;
    if text.starts_with('+') || (text.len() > 1 && text.starts_with('0')) || text.starts_with("-0")
    {
        return None;
    }
    text.parse().ok()
}
