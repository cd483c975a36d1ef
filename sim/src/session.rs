//! One connection's state and the commands that use it: the protocol
//! (`HELLO`), transactions (`MULTI`/`EXEC`/`WATCH`) and subscriptions.

use std::collections::BTreeSet;

use crate::keyspace::Bytes;
use crate::pubsub::Mailbox;
use crate::reply::{Reply, parse_int};
use crate::state::{self, State, VERSION};

/// What RESP2 lets a subscribed connection send.
const SUBSCRIBED_ONLY: &[&str] = &[
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "PSUBSCRIBE",
    "PUNSUBSCRIBE",
    "PING",
    "QUIT",
    "RESET",
];

pub struct Session {
    pub id: u64,
    pub resp3: bool,
    user: String,
    /// The commands queued since `MULTI`; None outside a transaction.
    queued: Option<Vec<Vec<Bytes>>>,
    /// A command refused while queuing: `EXEC` then answers `EXECABORT`.
    queue_failed: bool,
    /// The keys watched, each with its stamp when watched.
    watched: Vec<(Bytes, u64)>,
    channels: BTreeSet<Bytes>,
    patterns: BTreeSet<Bytes>,
    mailbox: Mailbox,
    /// Set by `QUIT`: the connection closes after its reply.
    pub closing: bool,
}

impl Session {
    pub fn new(id: u64, mailbox: Mailbox) -> Self {
        Session {
            id,
            resp3: false,
            user: "default".into(),
            queued: None,
            queue_failed: false,
            watched: Vec::new(),
            channels: BTreeSet::new(),
            patterns: BTreeSet::new(),
            mailbox,
            closing: false,
        }
    }

    /// The number of commands queued, inside a transaction.
    pub fn queued_len(&self) -> Option<usize> {
        self.queued.as_ref().map(Vec::len)
    }

    fn subscriptions(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    /// Answers one request at `now_us`; a `SUBSCRIBE` of several channels
    /// answers once per channel.
    pub fn handle(&mut self, state: &mut State, now_us: u64, args: &[Bytes]) -> Vec<Reply> {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        if self.queued.is_some()
            && !matches!(
                name.as_str(),
                "EXEC" | "DISCARD" | "MULTI" | "WATCH" | "QUIT" | "RESET"
            )
        {
            return vec![self.queue(state, &name, args)];
        }
        if !self.resp3 && self.subscriptions() > 0 && !SUBSCRIBED_ONLY.contains(&name.as_str()) {
            return vec![Reply::err(format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                name.to_ascii_lowercase()
            ))];
        }
        let one = |reply| vec![reply];
        match name.as_str() {
            "MULTI" if self.queued.is_some() => {
                one(Reply::err("ERR MULTI calls can not be nested"))
            }
            "MULTI" => {
                self.queued = Some(Vec::new());
                self.queue_failed = false;
                one(Reply::ok())
            }
            "EXEC" => one(self.exec(state, now_us)),
            "DISCARD" => one(match self.queued.take() {
                None => Reply::err("ERR DISCARD without MULTI"),
                Some(_) => {
                    self.watched.clear();
                    Reply::ok()
                }
            }),
            "WATCH" if self.queued.is_some() => {
                one(Reply::err("ERR WATCH inside MULTI is not allowed"))
            }
            "WATCH" if args.len() < 2 => one(Reply::arity("watch")),
            "WATCH" => {
                state.keys.expire_due(now_us / 1000);
                for key in &args[1..] {
                    let stamp = state.keys.stamp(key);
                    self.watched.push((key.clone(), stamp));
                }
                one(Reply::ok())
            }
            "UNWATCH" => {
                self.watched.clear();
                one(Reply::ok())
            }
            "SUBSCRIBE" | "PSUBSCRIBE" if args.len() < 2 => one(Reply::arity(&name)),
            "SUBSCRIBE" | "PSUBSCRIBE" => self.subscribe(state, name == "PSUBSCRIBE", &args[1..]),
            "UNSUBSCRIBE" | "PUNSUBSCRIBE" => {
                self.unsubscribe(state, name == "PUNSUBSCRIBE", &args[1..])
            }
            "PING" if !self.resp3 && self.subscriptions() > 0 => one(Reply::Array(vec![
                Reply::bulk("pong"),
                Reply::Bulk(args.get(1).cloned().unwrap_or_default()),
            ])),
            "HELLO" => one(self.hello(args)),
            "AUTH" => {
                if args.len() == 3 {
                    self.user = String::from_utf8_lossy(&args[1]).into_owned();
                }
                one(Reply::ok())
            }
            // SETNAME, SETINFO and the rest: accepted, nothing to keep.
            "CLIENT" => one(
                match args
                    .get(1)
                    .map(|s| String::from_utf8_lossy(s).to_ascii_uppercase())
                {
                    Some(sub) if sub == "ID" => Reply::Int(self.id as i64),
                    Some(sub) if sub == "GETNAME" => Reply::Nil,
                    _ => Reply::ok(),
                },
            ),
            "SELECT" => one(match args.get(1).map(|a| parse_int(a)) {
                Some(Some(0)) => Reply::ok(),
                Some(Some(_)) => Reply::err("ERR DB index is out of range"),
                _ => Reply::not_integer(),
            }),
            "QUIT" => {
                self.closing = true;
                one(Reply::ok())
            }
            "RESET" => {
                self.leave(state);
                self.queued = None;
                self.watched.clear();
                self.resp3 = false;
                one(Reply::Status("RESET".into()))
            }
            _ => one(state.run(now_us, self.resp3, &self.user, args)),
        }
    }

    /// Queues a command after `MULTI`; one the server does not know, or that
    /// the ACL denies, is refused now and fails the `EXEC`, as in Redis.
    fn queue(&mut self, state: &State, name: &str, args: &[Bytes]) -> Reply {
        if !state::known(name) {
            self.queue_failed = true;
            return state::unknown(args);
        }
        if state.scripts_refused
            && let Some(command) = state::scripting_command(args)
        {
            self.queue_failed = true;
            return state::no_permission(&self.user, &command);
        }
        self.queued
            .as_mut()
            .expect("in a transaction")
            .push(args.to_vec());
        Reply::Status("QUEUED".into())
    }

    /// `EXEC`: nil if a watched key changed (a write, a deletion, or an
    /// expiry, which Redis 7 counts for a key that existed when watched);
    /// else every queued command at once, nothing else in between.
    fn exec(&mut self, state: &mut State, now_us: u64) -> Reply {
        let Some(queued) = self.queued.take() else {
            return Reply::err("ERR EXEC without MULTI");
        };
        let watched = std::mem::take(&mut self.watched);
        if self.queue_failed {
            return Reply::err("EXECABORT Transaction discarded because of previous errors.");
        }
        state.keys.expire_due(now_us / 1000);
        if watched
            .iter()
            .any(|(key, stamp)| state.keys.stamp(key) != *stamp)
        {
            return Reply::NilArray;
        }
        Reply::Array(
            queued
                .iter()
                .map(|args| {
                    let mut replies = self.handle(state, now_us, args);
                    if replies.len() == 1 {
                        replies.pop().expect("one reply")
                    } else {
                        Reply::Array(replies)
                    }
                })
                .collect(),
        )
    }

    fn confirm(&self, kind: &str, name: Option<&[u8]>) -> Reply {
        let items = vec![
            Reply::bulk(kind),
            name.map_or(Reply::Nil, Reply::bulk),
            Reply::Int(self.subscriptions() as i64),
        ];
        if self.resp3 {
            Reply::Push(items)
        } else {
            Reply::Array(items)
        }
    }

    fn subscribe(&mut self, state: &mut State, pattern: bool, names: &[Bytes]) -> Vec<Reply> {
        names
            .iter()
            .map(|name| {
                state
                    .pubsub
                    .subscribe(pattern, name, self.id, &self.mailbox);
                let set = if pattern {
                    &mut self.patterns
                } else {
                    &mut self.channels
                };
                set.insert(name.clone());
                self.confirm(if pattern { "psubscribe" } else { "subscribe" }, Some(name))
            })
            .collect()
    }

    fn unsubscribe(&mut self, state: &mut State, pattern: bool, names: &[Bytes]) -> Vec<Reply> {
        let kind = if pattern {
            "punsubscribe"
        } else {
            "unsubscribe"
        };
        let names: Vec<Bytes> = if names.is_empty() {
            let set = if pattern {
                &self.patterns
            } else {
                &self.channels
            };
            set.iter().cloned().collect()
        } else {
            names.to_vec()
        };
        if names.is_empty() {
            return vec![self.confirm(kind, None)];
        }
        names
            .iter()
            .map(|name| {
                state.pubsub.unsubscribe(pattern, name, self.id);
                let set = if pattern {
                    &mut self.patterns
                } else {
                    &mut self.channels
                };
                set.remove(name);
                self.confirm(kind, Some(name))
            })
            .collect()
    }

    /// Drops every subscription: the connection closed or was reset.
    pub fn leave(&mut self, state: &mut State) {
        state.pubsub.forget(self.id);
        self.channels.clear();
        self.patterns.clear();
    }

    /// `HELLO [2|3 [AUTH user pass] [SETNAME name]]`: switches the protocol
    /// and answers in the new one.
    fn hello(&mut self, args: &[Bytes]) -> Reply {
        if let Some(version) = args.get(1) {
            match parse_int(version) {
                Some(2) => self.resp3 = false,
                Some(3) => self.resp3 = true,
                Some(_) => return Reply::err("NOPROTO unsupported protocol version"),
                None => {
                    return Reply::err("ERR Protocol version is not an integer or out of range");
                }
            }
            let mut i = 2;
            while i < args.len() {
                match String::from_utf8_lossy(&args[i])
                    .to_ascii_uppercase()
                    .as_str()
                {
                    "AUTH" if i + 2 < args.len() => {
                        self.user = String::from_utf8_lossy(&args[i + 1]).into_owned();
                        i += 3;
                    }
                    "SETNAME" if i + 1 < args.len() => i += 2,
                    _ => return Reply::syntax(),
                }
            }
        }
        let field = |name: &str, value: Reply| (Reply::bulk(name), value);
        Reply::Map(vec![
            field("server", Reply::bulk("redis")),
            field("version", Reply::bulk(VERSION)),
            field("proto", Reply::Int(if self.resp3 { 3 } else { 2 })),
            field("id", Reply::Int(self.id as i64)),
            field("mode", Reply::bulk("standalone")),
            field("role", Reply::bulk("master")),
            field("modules", Reply::Array(vec![])),
        ])
    }
}
