//! Scripting as Redis 7 does it: Lua 5.1, the `redis` library, `cjson`,
//! `KEYS`/`ARGV`, a cache of scripts by the SHA1 of their body, and the
//! conversion rules between replies and Lua values.
//!
//! A script runs to its end while the server's state is held: nothing else
//! happens on the server meanwhile, which is the atomicity the runtime's
//! scripts rely on.

mod cjson;
mod convert;
mod random;

use std::collections::BTreeMap;

use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value};

use crate::keyspace::Bytes;
use crate::reply::Reply;

pub use convert::{from_lua, to_lua};
use random::Rand48;

/// Runs one command for a script (`redis.call`, `redis.pcall`): the server
/// answers with the keyspace, in RESP2 shapes, refusing what a script may
/// not call.
pub type Exec<'a> = dyn FnMut(&[Bytes]) -> Reply + 'a;

/// The Lua side of `redis.call`/`redis.pcall`: `hidden.command(...)`, set
/// for each run to a function that reaches the keyspace, answers the reply
/// and whether it failed; `redis.call` raises a failure as Redis does (an
/// error whose value is the `{err=…}` table), `redis.pcall` returns it.
/// `hidden.run` runs a script under `pcall` so that any error value, table
/// or string, comes back to Rust intact.
const PRELUDE: &str = r#"
local hidden = {}
redis = {}
function redis.call(...)
  local reply, failed = hidden.command(...)
  if failed then error(reply) end
  return reply
end
function redis.pcall(...)
  local reply = hidden.command(...)
  return reply
end
function redis.error_reply(text)
  if type(text) ~= 'string' then error('wrong number or type of arguments') end
  if string.sub(text, 1, 1) == '-' then text = string.sub(text, 2) end
  return {err = text}
end
function redis.status_reply(text)
  if type(text) ~= 'string' then error('wrong number or type of arguments') end
  return {ok = text}
end
function redis.log(level, ...) end
function redis.setresp(version)
  if version ~= 2 then error('RESP version other than 2 is not supported here') end
end
function redis.set_repl(mode) end
function redis.replicate_commands() return true end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
function hidden.run(f)
  return pcall(f)
end
dofile, loadfile, print = nil, nil, nil
return hidden
"#;

/// Redis 7 forbids scripts to create globals (its globals table is
/// read-only) or read undefined ones: a script that would on Redis fails
/// here too, with Redis's message.
const PROTECT_GLOBALS: &str = r#"
setmetatable(_G, {
  __index = function(_, name)
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
  end,
  __newindex = function(_, name)
    error("Attempt to modify a readonly table", 2)
  end,
})
"#;

/// The interpreter and the script cache of one server.
pub struct Scripting {
    lua: Lua,
    hidden: Table,
    cache: BTreeMap<String, Function>,
}

impl std::fmt::Debug for Scripting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripting")
            .field("scripts", &self.cache.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The SHA1 of `body`, in lower-case hex, as `SCRIPT LOAD` answers it.
pub fn sha1hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

impl Default for Scripting {
    fn default() -> Self {
        Self::new()
    }
}

impl Scripting {
    pub fn new() -> Self {
        Self::build().expect("the Lua prelude is valid")
    }

    fn build() -> mlua::Result<Self> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::default(),
        )?;
        let hidden: Table = lua.load(PRELUDE).set_name("=prelude").eval()?;
        let redis: Table = lua.globals().get("redis")?;
        redis.set(
            "sha1hex",
            lua.create_function(|_, text: mlua::String| Ok(sha1hex(&text.as_bytes())))?,
        )?;
        redis.set("REDIS_VERSION", crate::VERSION)?;
        redis.set("REDIS_VERSION_NUM", version_number(crate::VERSION))?;
        cjson::install(&lua)?;
        let rand = Rand48::new();
        let math: Table = lua.globals().get("math")?;
        let draw = rand.clone();
        math.set(
            "random",
            lua.create_function(move |_, args: MultiValue| {
                let r = draw.fraction();
                let int = |v: &Value| match v {
                    Value::Integer(i) => Ok(*i as f64),
                    Value::Number(n) => Ok(n.floor()),
                    _ => Err(mlua::Error::runtime(
                        "bad argument to 'random' (number expected)",
                    )),
                };
                match args.len() {
                    0 => Ok(r),
                    1 => {
                        let m = int(&args[0])?;
                        if m < 1.0 {
                            return Err(mlua::Error::runtime(
                                "bad argument #1 to 'random' (interval is empty)",
                            ));
                        }
                        Ok((r * m).floor() + 1.0)
                    }
                    2 => {
                        let (l, u) = (int(&args[0])?, int(&args[1])?);
                        if l > u {
                            return Err(mlua::Error::runtime(
                                "bad argument #2 to 'random' (interval is empty)",
                            ));
                        }
                        Ok((r * (u - l + 1.0)).floor() + l)
                    }
                    _ => Err(mlua::Error::runtime("wrong number of arguments")),
                }
            })?,
        )?;
        let seed = rand.clone();
        math.set(
            "randomseed",
            lua.create_function(move |_, value: f64| {
                seed.seed(value as i32);
                Ok(())
            })?,
        )?;
        lua.load(PROTECT_GLOBALS).set_name("=prelude").exec()?;
        Ok(Scripting {
            lua,
            hidden,
            cache: BTreeMap::new(),
        })
    }

    /// `SCRIPT LOAD`: compiles `body` and keeps it under its SHA1.
    pub fn load(&mut self, body: &[u8]) -> Result<String, Reply> {
        let sha = sha1hex(body);
        if !self.cache.contains_key(&sha) {
            let function = self
                .lua
                .load(body)
                .set_name("@user_script")
                .into_function()
                .map_err(|err| {
                    Reply::err(format!(
                        "ERR Error compiling script (new function): {}",
                        lua_message(&err)
                    ))
                })?;
            self.cache.insert(sha.clone(), function);
        }
        Ok(sha)
    }

    pub fn contains(&self, sha: &str) -> bool {
        self.cache.contains_key(&sha.to_ascii_lowercase())
    }

    /// `SCRIPT FLUSH`, and a restart: every script forgotten.
    pub fn flush(&mut self) {
        self.cache.clear();
    }

    /// `EVAL`: caches the script, then runs it.
    pub fn eval(&mut self, body: &[u8], keys: &[Bytes], argv: &[Bytes], exec: &mut Exec) -> Reply {
        match self.load(body) {
            Ok(sha) => self.evalsha(&sha, keys, argv, exec),
            Err(err) => err,
        }
    }

    /// `EVALSHA`: `NOSCRIPT` unless the script is cached.
    pub fn evalsha(&mut self, sha: &str, keys: &[Bytes], argv: &[Bytes], exec: &mut Exec) -> Reply {
        let sha = sha.to_ascii_lowercase();
        let Some(function) = self.cache.get(&sha).cloned() else {
            return Reply::err("NOSCRIPT No matching script. Please use EVAL.");
        };
        match self.run(&function, keys, argv, exec) {
            Ok(Ok(reply)) => reply,
            Ok(Err(message)) | Err(message) => Reply::Error(with_origin(&message, &sha)),
        }
    }

    /// Runs `function` with `KEYS` and `ARGV`; the outer error is one of
    /// the interpreter's own, the inner one the script's.
    fn run(
        &self,
        function: &Function,
        keys: &[Bytes],
        argv: &[Bytes],
        exec: &mut Exec,
    ) -> Result<Result<Reply, String>, String> {
        let lua = &self.lua;
        let outer = |err: mlua::Error| format!("ERR {}", lua_message(&err));
        let strings = |items: &[Bytes]| -> mlua::Result<Table> {
            let table = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, lua.create_string(item)?)?;
            }
            Ok(table)
        };
        let globals = lua.globals();
        globals
            .raw_set("KEYS", strings(keys).map_err(outer)?)
            .map_err(outer)?;
        globals
            .raw_set("ARGV", strings(argv).map_err(outer)?)
            .map_err(outer)?;
        let run: Function = self.hidden.get("run").map_err(outer)?;
        lua.scope(|scope| {
            let command = scope.create_function_mut(|lua, args: MultiValue| {
                let reply = command(&args, exec);
                let failed = reply.is_error();
                Ok((to_lua(lua, &reply)?, failed))
            })?;
            self.hidden.set("command", command)?;
            let (ok, value): (bool, Value) = run.call(function.clone())?;
            Ok(if ok {
                Ok(from_lua(&value))
            } else {
                Err(error_value(&value))
            })
        })
        .map_err(outer)
    }
}

/// `7.2.4` as Redis's `0x070204`.
fn version_number(version: &str) -> u32 {
    version
        .split('.')
        .map(|part| part.parse::<u32>().unwrap_or(0))
        .fold(0, |number, part| (number << 8) | part)
}

/// What `redis.call(...)` asks, checked as Redis checks it, then run.
fn command(args: &MultiValue, exec: &mut Exec) -> Reply {
    if args.is_empty() {
        return Reply::err("ERR Please specify at least one argument for this redis lib call");
    }
    let mut argv = Vec::with_capacity(args.len());
    for arg in args.iter() {
        match convert::argument(arg) {
            Some(bytes) => argv.push(bytes),
            None => {
                return Reply::err(
                    "ERR Lua redis lib command arguments must be strings or integers",
                );
            }
        }
    }
    exec(&argv)
}

/// The text of an error a script raised: `{err=…}`'s, a string's, or
/// whatever `tostring` makes of it.
fn error_value(value: &Value) -> String {
    match value {
        Value::Table(table) => match table.raw_get::<Value>("err") {
            Ok(Value::String(text)) => convert::error_text(&text.as_bytes()),
            _ => "ERR Error running script: the error is a table without err".into(),
        },
        Value::String(text) => format!("ERR {}", text.to_string_lossy()),
        Value::Error(err) => format!("ERR {}", lua_message(err)),
        other => format!("ERR {}", other.to_string().unwrap_or_default()),
    }
}

/// Redis 7 names the script, and the line when Lua gives it, after an
/// error raised in a script: `… script: <sha>, on @user_script:12.`
fn with_origin(message: &str, sha: &str) -> String {
    let line = message
        .split("user_script:")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .filter(|n| n.chars().all(|c| c.is_ascii_digit()) && !n.is_empty());
    match line {
        Some(line) => format!("{message} script: {sha}, on @user_script:{line}."),
        None => format!("{message} script: {sha}, on @user_script."),
    }
}

/// An interpreter error's message without mlua's traceback.
fn lua_message(err: &mlua::Error) -> String {
    match err {
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::RuntimeError(message) => message.clone(),
        mlua::Error::CallbackError { cause, .. } => lua_message(cause),
        other => other.to_string(),
    }
    .lines()
    .next()
    .unwrap_or_default()
    .to_owned()
}

#[cfg(test)]
mod tests;
