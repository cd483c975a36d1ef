//! What a server lets the lock protocol do, found once at connect: whether
//! it runs the Lua scripts ([`Scripts`]), and which native compare
//! commands it has.

use std::sync::atomic::{AtomicBool, Ordering};

use redis::aio::ConnectionLike;
use redis::{RedisError, Value};

use crate::LockError;
use crate::error::BackendErrorKind;

/// Whether the Redis backends run their Lua scripts (`EVALSHA`), set with
/// [`RedisConfig::scripts`](crate::RedisConfig::scripts).
///
/// Managed Redis offerings and hardened ACLs often deny `EVAL`/`EVALSHA`
/// (an ACL without `@scripting` answers `NOPERM`). Without scripts, plain
/// locks (one key or several, all or none), fencing, refreshes, releases,
/// wake-ups, [`Locker::inspect`](crate::Locker::inspect) and
/// [`Locker::force_release`](crate::Locker::force_release) still work, by
/// native compare commands where the server has them (Valkey 8.1's
/// `SET … IFEQ`, Valkey 9's `DELIFEQ`, Redis 8.4's `DELEX … IFEQ`) and
/// else by `WATCH`/`MULTI`/`EXEC` transactions. What only a script can do
/// atomically (fair queues, semaphores, read-write locks, downgrades,
/// acquires that wait for replicas) is refused before anything is written,
/// with a [`BackendErrorKind::Unsupported`] error that says so.
///
/// ```
/// use lockmacro_runtime::{RedisConfig, Scripts};
///
/// // A user whose ACL has `-@scripting`: never try a script.
/// let config = RedisConfig::default().scripts(Scripts::Never);
/// # let _ = config;
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scripts {
    /// Scripts while the server runs them; without them, by itself, once
    /// the server refuses them: at connect (the scripts are loaded with
    /// `SCRIPT LOAD`), or on a later call answered `NOPERM`. The default.
    /// A cluster keeps to scripts, as with [`Required`](Self::Required).
    #[default]
    Auto,
    /// Scripts always: a server that refuses them fails each call with a
    /// [`BackendErrorKind::Permission`] error naming what to grant.
    Required,
    /// No script is ever sent. Not available on a cluster, whose connect
    /// refuses it.
    Never,
}

/// The native compare-and-delete a server has, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::backend) enum DeleteIfEqual {
    /// `DELIFEQ key value` (Valkey 9).
    DelIfEq,
    /// `DELEX key IFEQ value` (Redis 8.4).
    DelEx,
}

/// The native compare commands a server has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(in crate::backend) struct Native {
    /// `SET key value IFEQ old` (Valkey 8.1, Redis 8.4).
    pub(in crate::backend) set_if_equal: bool,
    pub(in crate::backend) delete_if_equal: Option<DeleteIfEqual>,
}

/// What one backend found its server to allow; shared by its clones.
#[derive(Debug)]
pub(in crate::backend) struct Features {
    mode: Scripts,
    /// True while calls go through the scripts.
    scripted: AtomicBool,
    native: tokio::sync::OnceCell<Native>,
}

impl Features {
    pub(in crate::backend) fn new(mode: Scripts) -> Self {
        Features {
            mode,
            scripted: AtomicBool::new(mode != Scripts::Never),
            native: tokio::sync::OnceCell::new(),
        }
    }

    /// A cluster's: scripts always, unless `Never` (which its connect
    /// refuses).
    pub(in crate::backend) fn scripts_only(mode: Scripts) -> Self {
        Features::new(match mode {
            Scripts::Auto => Scripts::Required,
            other => other,
        })
    }

    pub(in crate::backend) fn mode(&self) -> Scripts {
        self.mode
    }

    pub(in crate::backend) fn scripted(&self) -> bool {
        self.scripted.load(Ordering::Relaxed)
    }

    /// The native compare commands of the server behind `conn`, asked
    /// once, by the first call without scripts: a backend that runs scripts
    /// never sends the commands that ask, which a user granted only what
    /// the scripts need may not have.
    pub(in crate::backend) async fn native<C: ConnectionLike>(&self, conn: &mut C) -> Native {
        *self.native.get_or_init(|| native_commands(conn)).await
    }

    /// True when `err`, the answer to a script call, is the server denying
    /// scripts and this backend may go on without them: from then on, it
    /// does.
    pub(in crate::backend) fn gave_up_scripts(&self, err: &LockError) -> bool {
        let LockError::Backend(backend) = err else {
            return false;
        };
        if self.mode != Scripts::Auto
            || backend.kind() != BackendErrorKind::Permission
            || !denies_scripts(&backend.to_string())
        {
            return false;
        }
        if self.scripted.swap(false, Ordering::Relaxed) {
            tracing::warn!(target: "lockmacro", error = %err,
                "the server refuses scripts; going on without them");
        }
        true
    }

    /// Reads what the server behind `conn` allows: loads the scripts
    /// (`sources`) unless scripts are never used, and stops using them
    /// when the server denies `SCRIPT LOAD` in `Auto` mode; asks `HELLO` and
    /// `COMMAND INFO` for the native commands. Best effort: what cannot be
    /// told is taken as missing, and a script denied later is found then.
    pub(in crate::backend) async fn probe<C: ConnectionLike>(
        &self,
        conn: &mut C,
        sources: &[&str],
    ) {
        if self.mode != Scripts::Never {
            let mut pipe = redis::pipe();
            for source in sources {
                pipe.cmd("SCRIPT").arg("LOAD").arg(*source).ignore();
            }
            if let Err(err) = pipe.query_async::<()>(conn).await {
                if self.mode == Scripts::Auto && script_load_denied(&err) {
                    self.scripted.store(false, Ordering::Relaxed);
                    tracing::info!(target: "lockmacro", error = %err,
                        "the server refuses scripts; locking without them");
                } else {
                    tracing::debug!(target: "lockmacro", error = %err,
                        "scripts not preloaded; loaded on first use");
                }
            }
        }
    }
}

/// True for a refusal of `EVALSHA` or `SCRIPT LOAD`, by which every script
/// is called; not of a command a script calls, of a key, or of `EVAL`
/// alone (which only an acquire that waits for replicas sends: its
/// refusal names what to grant, as in `Scripts::Required`).
fn denies_scripts(message: &str) -> bool {
    ["'evalsha'", "'script|load'"]
        .iter()
        .any(|command| message.contains(command))
}

fn script_load_denied(err: &RedisError) -> bool {
    err.code() == Some("NOPERM") || denies_scripts(&err.to_string())
}

/// The native compare commands of the server behind `conn`: `SET … IFEQ`
/// by the server's name and version (`HELLO`, which every user may send),
/// which no command table tells; `DELIFEQ` and `DELEX` by `COMMAND INFO`.
/// What cannot be told (a user denied `HELLO` or `COMMAND`) is taken as
/// missing: the transactions do the same work.
async fn native_commands<C: ConnectionLike>(conn: &mut C) -> Native {
    let hello: Value = redis::cmd("HELLO")
        .query_async(conn)
        .await
        .unwrap_or(Value::Nil);
    let (server, version) = (field(&hello, "server"), field(&hello, "version"));
    let version = parse_version(version.as_deref().unwrap_or_default());
    let set_if_equal = match server.as_deref() {
        Some("valkey") => version >= (8, 1),
        Some("redis") => version >= (8, 4),
        _ => false,
    };
    let table: Vec<Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("DELIFEQ")
        .arg("DELEX")
        .query_async(conn)
        .await
        .unwrap_or_default();
    let known = |index: usize| table.get(index).is_some_and(|info| *info != Value::Nil);
    let delete_if_equal = if known(0) {
        Some(DeleteIfEqual::DelIfEq)
    } else if known(1) {
        Some(DeleteIfEqual::DelEx)
    } else {
        None
    };
    Native {
        set_if_equal,
        delete_if_equal,
    }
}

/// The text of `name` in `HELLO`'s reply: a map in RESP3, pairs in RESP2.
fn field(hello: &Value, name: &str) -> Option<String> {
    let text = |value: &Value| redis::from_redis_value_ref::<String>(value).ok();
    match hello {
        Value::Map(pairs) => pairs
            .iter()
            .find(|(key, _)| text(key).as_deref() == Some(name))
            .and_then(|(_, value)| text(value)),
        Value::Array(items) => items
            .chunks(2)
            .find(|pair| text(&pair[0]).as_deref() == Some(name))
            .and_then(|pair| pair.get(1).and_then(text)),
        _ => None,
    }
}

/// `8.1.8` as `(8, 1)`; `(0, 0)` when it cannot be read.
fn parse_version(version: &str) -> (u32, u32) {
    let mut parts = version.split('.').map(|part| part.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::{denies_scripts, parse_version};

    #[test]
    fn versions_compare_by_major_and_minor() {
        assert_eq!(parse_version("8.1.8"), (8, 1));
        assert!(parse_version("9.0.0") >= (8, 1));
        assert!(parse_version("7.0.15") < (8, 1));
        assert_eq!(parse_version("unknown"), (0, 0));
    }

    #[test]
    fn only_the_script_commands_count_as_scripts_denied() {
        assert!(denies_scripts(
            "NOPERM User locker has no permissions to run the 'evalsha' command"
        ));
        assert!(!denies_scripts(
            "NOPERM User locker has no permissions to access one of the keys"
        ));
        assert!(!denies_scripts(
            "NOPERM User locker has no permissions to run the 'eval' command"
        ));
    }
}
