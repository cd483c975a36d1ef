//! What all connections share, and the commands that need no connection
//! state: data commands, scripts, `PUBLISH`, and the server's answers about
//! itself (`ROLE`, `WAIT`, `COMMAND`, `INFO`).

use crate::commands::{self, Ctx, DATA_COMMANDS};
use crate::keyspace::{Bytes, Keyspace};
use crate::lua::Scripting;
use crate::pubsub::PubSub;
use crate::reply::{Reply, parse_int};

/// The Redis version this server answers as: 7.2, which has neither
/// `SET … IFEQ` nor `DELIFEQ`/`DELEX`, so the runtime's script-free engine
/// uses its `WATCH`/`MULTI`/`EXEC` transactions here.
pub const VERSION: &str = "7.2.4";

/// Commands the connection handles itself (transactions, pub/sub, the
/// handshake), besides those [`State::run`] answers.
pub const CONNECTION_COMMANDS: &[&str] = &[
    "MULTI",
    "EXEC",
    "DISCARD",
    "WATCH",
    "UNWATCH",
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "PSUBSCRIBE",
    "PUNSUBSCRIBE",
    "HELLO",
    "AUTH",
    "CLIENT",
    "SELECT",
    "QUIT",
    "RESET",
];

/// Commands [`State::run`] answers besides the data commands.
pub const SERVER_COMMANDS: &[&str] = &[
    "PING", "ECHO", "PUBLISH", "PUBSUB", "EVAL", "EVALSHA", "SCRIPT", "ROLE", "WAIT", "COMMAND",
    "INFO",
];

/// What a script may not call (Redis flags them `noscript`).
const NOT_IN_SCRIPTS: &[&str] = &[
    "EVAL",
    "EVALSHA",
    "SCRIPT",
    "MULTI",
    "EXEC",
    "DISCARD",
    "WATCH",
    "UNWATCH",
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "PSUBSCRIBE",
    "PUNSUBSCRIBE",
    "HELLO",
    "AUTH",
    "CLIENT",
    "SELECT",
    "QUIT",
    "RESET",
    "WAIT",
];

pub fn known(name: &str) -> bool {
    DATA_COMMANDS.contains(&name)
        || SERVER_COMMANDS.contains(&name)
        || CONNECTION_COMMANDS.contains(&name)
}

/// Redis 7's answer to a command it does not have.
pub fn unknown(args: &[Bytes]) -> Reply {
    let mut text = format!(
        "ERR unknown command '{}', with args beginning with: ",
        String::from_utf8_lossy(&args[0])
    );
    for arg in args.iter().skip(1).take(16) {
        text.push_str(&format!("'{}' ", String::from_utf8_lossy(arg)));
    }
    Reply::Error(text)
}

/// Redis 7's refusal of a command an ACL denies (`-@scripting`).
pub fn no_permission(user: &str, command: &str) -> Reply {
    Reply::err(format!(
        "NOPERM User {user} has no permissions to run the '{command}' command"
    ))
}

/// The name an ACL refusal gives a scripting command, or None if it is not
/// one: `evalsha`, `script|load`.
pub fn scripting_command(args: &[Bytes]) -> Option<String> {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    match name.as_str() {
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "function" => Some(name),
        "script" => Some(match args.get(1) {
            Some(sub) => format!(
                "script|{}",
                String::from_utf8_lossy(sub).to_ascii_lowercase()
            ),
            None => name,
        }),
        _ => None,
    }
}

/// The server's shared state.
#[derive(Debug, Default)]
pub struct State {
    pub keys: Keyspace,
    pub scripting: Scripting,
    pub pubsub: PubSub,
    /// Refuse scripting as an ACL without `@scripting` does.
    pub scripts_refused: bool,
}

impl State {
    /// Runs a command that needs only the shared state, at `now_us`, for a
    /// connection speaking RESP3 if `resp3`. Expired keys are deleted first.
    pub fn run(&mut self, now_us: u64, resp3: bool, user: &str, args: &[Bytes]) -> Reply {
        self.keys.expire_due(now_us / 1000);
        if self.scripts_refused
            && let Some(command) = scripting_command(args)
        {
            return no_permission(user, &command);
        }
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        match name.as_str() {
            "PING" => match args.len() {
                1 => Reply::Status("PONG".into()),
                2 => Reply::Bulk(args[1].clone()),
                _ => Reply::arity("ping"),
            },
            "ECHO" if args.len() == 2 => Reply::Bulk(args[1].clone()),
            "ECHO" => Reply::arity("echo"),
            "PUBLISH" if args.len() == 3 => Reply::Int(self.pubsub.publish(&args[1], &args[2])),
            "PUBLISH" => Reply::arity("publish"),
            "PUBSUB" => self.introspect(args),
            "EVAL" | "EVALSHA" => self.eval(now_us, &name, args),
            "SCRIPT" => self.script(args),
            "ROLE" => Reply::Array(vec![
                Reply::bulk("master"),
                Reply::Int(0),
                Reply::Array(vec![]),
            ]),
            // No replicas: none acknowledges (the connection blocks for the
            // timeout first: see `blocks_for`).
            "WAIT" if args.len() == 3 => match (parse_int(&args[1]), parse_int(&args[2])) {
                (Some(_), Some(timeout)) if timeout >= 0 => Reply::Int(0),
                (Some(_), Some(_)) => Reply::err("ERR timeout is negative"),
                _ => Reply::not_integer(),
            },
            "WAIT" => Reply::arity("wait"),
            "COMMAND" => command(args),
            "INFO" => Reply::bulk(format!(
                "# Server\r\nredis_version:{VERSION}\r\nredis_mode:standalone\r\n\r\n# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"
            )),
            _ => {
                let mut ctx = Ctx {
                    keys: &mut self.keys,
                    now_us,
                    resp3,
                };
                commands::run(&mut ctx, args).unwrap_or_else(|| unknown(args))
            }
        }
    }

    /// `EVAL body numkeys key… arg…`, `EVALSHA sha numkeys …`.
    fn eval(&mut self, now_us: u64, name: &str, args: &[Bytes]) -> Reply {
        if args.len() < 3 {
            return Reply::arity(name);
        }
        let Some(numkeys) = parse_int(&args[2]) else {
            return Reply::not_integer();
        };
        if numkeys < 0 {
            return Reply::err("ERR Number of keys can't be negative");
        }
        if numkeys as usize > args.len() - 3 {
            return Reply::err("ERR Number of keys can't be greater than number of args");
        }
        let keys = &args[3..3 + numkeys as usize];
        let argv = &args[3 + numkeys as usize..];
        let State {
            keys: keyspace,
            scripting,
            pubsub,
            ..
        } = self;
        let mut exec = |call: &[Bytes]| script_call(keyspace, pubsub, now_us, call);
        if name == "EVAL" {
            scripting.eval(&args[1], keys, argv, &mut exec)
        } else {
            scripting.evalsha(&String::from_utf8_lossy(&args[1]), keys, argv, &mut exec)
        }
    }

    /// `PUBSUB NUMSUB|CHANNELS|NUMPAT`.
    fn introspect(&self, args: &[Bytes]) -> Reply {
        let sub = args
            .get(1)
            .map(|s| String::from_utf8_lossy(s).to_ascii_uppercase());
        match sub.as_deref() {
            Some("NUMSUB") => Reply::Array(
                args[2..]
                    .iter()
                    .flat_map(|c| {
                        [
                            Reply::Bulk(c.clone()),
                            Reply::Int(self.pubsub.listeners(c) as i64),
                        ]
                    })
                    .collect(),
            ),
            Some("CHANNELS") => Reply::Array(
                self.pubsub
                    .channels(args.get(2).map(Vec::as_slice))
                    .into_iter()
                    .map(Reply::Bulk)
                    .collect(),
            ),
            Some("NUMPAT") => Reply::Int(self.pubsub.patterns() as i64),
            _ => Reply::err("ERR unknown subcommand. Try PUBSUB HELP."),
        }
    }

    /// `SCRIPT LOAD|EXISTS|FLUSH`.
    fn script(&mut self, args: &[Bytes]) -> Reply {
        let sub = args
            .get(1)
            .map(|s| String::from_utf8_lossy(s).to_ascii_uppercase())
            .unwrap_or_default();
        match (sub.as_str(), args.len()) {
            ("LOAD", 3) => match self.scripting.load(&args[2]) {
                Ok(sha) => Reply::bulk(sha),
                Err(err) => err,
            },
            ("EXISTS", n) if n > 2 => Reply::Array(
                args[2..]
                    .iter()
                    .map(|sha| {
                        Reply::Int(self.scripting.contains(&String::from_utf8_lossy(sha)) as i64)
                    })
                    .collect(),
            ),
            ("FLUSH", 2 | 3) => {
                self.scripting.flush();
                Reply::ok()
            }
            _ => Reply::err(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try SCRIPT HELP.",
                sub.to_ascii_lowercase()
            )),
        }
    }
}

/// How long a request blocks its connection before its reply: `WAIT n
/// timeout` with `n > 0`, which on a server without replicas waits the
/// whole timeout (0: for ever, as Redis does), then answers 0.
pub fn blocks_for(args: &[Bytes]) -> Option<Option<std::time::Duration>> {
    if !args[0].eq_ignore_ascii_case(b"WAIT") || args.len() != 3 {
        return None;
    }
    let (wanted, timeout) = (parse_int(&args[1])?, parse_int(&args[2])?);
    if wanted <= 0 || timeout < 0 {
        return None;
    }
    Some((timeout > 0).then(|| std::time::Duration::from_millis(timeout as u64)))
}

/// One `redis.call` from a script: RESP2 replies, and Redis's refusals of
/// what a script may not call.
fn script_call(keys: &mut Keyspace, pubsub: &PubSub, now_us: u64, args: &[Bytes]) -> Reply {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
    match name.as_str() {
        "PUBLISH" if args.len() == 3 => Reply::Int(pubsub.publish(&args[1], &args[2])),
        "PING" if args.len() == 1 => Reply::Status("PONG".into()),
        name if NOT_IN_SCRIPTS.contains(&name) => {
            Reply::err("ERR This Redis command is not allowed from script")
        }
        _ => {
            let mut ctx = Ctx {
                keys,
                now_us,
                resp3: false,
            };
            commands::run(&mut ctx, args)
                .unwrap_or_else(|| Reply::err("ERR Unknown Redis command called from script"))
        }
    }
}

/// `COMMAND INFO name…` (nil for a command this server lacks, as Redis 7
/// answers `DELIFEQ` and `DELEX`, so the runtime uses neither), `COMMAND
/// COUNT`, `COMMAND` (all), `COMMAND DOCS` (none).
fn command(args: &[Bytes]) -> Reply {
    let info = |name: &str| {
        Reply::Array(vec![
            Reply::bulk(name.to_ascii_lowercase()),
            Reply::Int(-1),
            Reply::Array(vec![]),
            Reply::Int(0),
            Reply::Int(0),
            Reply::Int(0),
        ])
    };
    let all = || {
        DATA_COMMANDS
            .iter()
            .chain(SERVER_COMMANDS)
            .chain(CONNECTION_COMMANDS)
    };
    let sub = args
        .get(1)
        .map(|s| String::from_utf8_lossy(s).to_ascii_uppercase());
    match sub.as_deref() {
        None => Reply::Array(all().map(|name| info(name)).collect()),
        Some("COUNT") => Reply::Int(all().count() as i64),
        Some("DOCS") => Reply::Map(vec![]),
        Some("INFO") => Reply::Array(
            args[2..]
                .iter()
                .map(|name| {
                    let name = String::from_utf8_lossy(name).to_ascii_uppercase();
                    if known(&name) {
                        info(&name)
                    } else {
                        Reply::Nil
                    }
                })
                .collect(),
        ),
        Some(other) => Reply::err(format!(
            "ERR unknown subcommand '{}'. Try COMMAND HELP.",
            other.to_ascii_lowercase()
        )),
    }
}
