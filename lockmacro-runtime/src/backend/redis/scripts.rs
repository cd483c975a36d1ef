//! The Lua scripts and the one way they are called, on a single server and
//! on a cluster alike: by hash (`EVALSHA`), the server taught the script
//! when it does not know it.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind};

/// A script: its source, and the hash it is called by.
pub(in crate::backend) struct Lua {
    source: &'static str,
    hash: String,
}

impl Lua {
    pub(in crate::backend) fn new(source: &'static str) -> Self {
        Lua {
            source,
            hash: Script::new(source).get_hash().to_owned(),
        }
    }
}

/// How a server that does not know a script (`NOSCRIPT`: restarted, flushed,
/// a replica just promoted) is taught it.
#[derive(Debug, Clone, Copy)]
pub(in crate::backend) enum Load {
    /// `SCRIPT LOAD`, then the call again, as redis-rs's `Script` does.
    ScriptLoad,
    /// The call as `EVAL` with the source, which caches the script on the
    /// node that runs it. Through the cluster client, `SCRIPT LOAD` goes to
    /// every node and fails while any is down: exactly when a promoted
    /// replica needs the script.
    #[cfg(feature = "cluster")]
    Eval,
}

/// Calls `lua` on `conn`: `command(verb, body)` builds the call, sent as
/// `EVALSHA` with the hash first; on `NOSCRIPT`, the server is taught the
/// script as `load` says.
///
/// Not an `async fn`, whose future would hold its arguments twice; the
/// teaching is boxed. Every release and refresh holds this future, and
/// only the first call after a server forgot its scripts teaches it.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn's future holds its arguments twice"
)]
pub(in crate::backend) fn call<'a, T, C, B>(
    conn: &'a mut C,
    lua: &'a Lua,
    load: Load,
    command: B,
) -> impl Future<Output = RedisResult<T>> + 'a
where
    T: FromRedisValue + 'a,
    C: ConnectionLike,
    B: Command + 'a,
{
    async move {
        let evalsha = command.build("EVALSHA", &lua.hash);
        match evalsha.query_async(conn).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                Box::pin(teach(conn, lua, load, command)).await
            }
            other => other,
        }
    }
}

/// Teaches the server `lua` as `load` says, and calls it.
async fn teach<T, C, B>(conn: &mut C, lua: &Lua, load: Load, command: B) -> RedisResult<T>
where
    T: FromRedisValue,
    C: ConnectionLike,
    B: Command,
{
    match load {
        Load::ScriptLoad => {
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(lua.source)
                .query_async::<()>(conn)
                .await?;
            command.build("EVALSHA", &lua.hash).query_async(conn).await
        }
        #[cfg(feature = "cluster")]
        Load::Eval => command.build("EVAL", lua.source).query_async(conn).await,
    }
}

/// Builds a script call, given its verb (`EVALSHA`, `EVAL`) and what follows
/// it (the hash, the source).
pub(in crate::backend) trait Command {
    fn build(&self, verb: &str, body: &str) -> Cmd;
}

/// A call with keys and arguments, as most scripts take them.
pub(in crate::backend) struct Call<'a, K, A> {
    pub(in crate::backend) keys: &'a [K],
    pub(in crate::backend) args: &'a [A],
}

impl<K: redis::ToRedisArgs, A: redis::ToRedisArgs> Command for Call<'_, K, A> {
    /// `verb body <number of keys> keys… args…`, as one plain command, its
    /// arguments in one buffer, sized up front as redis-rs sizes a script
    /// invocation's: growing it argument by argument reallocates it several
    /// times per call.
    fn build(&self, verb: &str, body: &str) -> Cmd {
        /// Room for one key or argument: a namespaced key, a token.
        const PER_ARG: usize = 48;
        let count = self.keys.len() + self.args.len();
        let mut cmd = Cmd::with_capacity(count + 3, verb.len() + body.len() + 8 + PER_ARG * count);
        cmd.arg(verb)
            .arg(body)
            .arg(self.keys.len())
            .arg(self.keys)
            .arg(self.args);
        cmd
    }
}

pub(in crate::backend) const ACQUIRE_LUA: &str = concat!(
    include_str!("../scripts/mark.lua"),
    include_str!("../scripts/holders.lua"),
    include_str!("../scripts/kinds.lua"),
    include_str!("../scripts/fence.lua"),
    include_str!("../scripts/waiters.lua"),
    include_str!("../scripts/acquire.lua")
);

pub(in crate::backend) const ACQUIRE_FAIR_LUA: &str = concat!(
    include_str!("../scripts/mark.lua"),
    include_str!("../scripts/holders.lua"),
    include_str!("../scripts/kinds.lua"),
    include_str!("../scripts/fence.lua"),
    include_str!("../scripts/waiters.lua"),
    include_str!("../scripts/grant.lua"),
    include_str!("../scripts/acquire_fair.lua")
);

pub(in crate::backend) const ACQUIRE_SHARED_LUA: &str = concat!(
    include_str!("../scripts/mark.lua"),
    include_str!("../scripts/holders.lua"),
    include_str!("../scripts/kinds.lua"),
    include_str!("../scripts/fence.lua"),
    include_str!("../scripts/waiters.lua"),
    include_str!("../scripts/grant.lua"),
    include_str!("../scripts/acquire_shared.lua")
);

pub(in crate::backend) const REFRESH_LUA: &str = concat!(
    include_str!("../scripts/holders.lua"),
    include_str!("../scripts/leases.lua"),
    include_str!("../scripts/refresh.lua")
);

// The release's work for waiters is a function of its own, so that a
// release nobody waits for does not define what only they need (see
// `release.lua`); a release of one lock nobody waits for ends before any
// function is defined (`release_plain.lua`).
pub(in crate::backend) const RELEASE_LUA: &str = concat!(
    include_str!("../scripts/mark.lua"),
    include_str!("../scripts/release_plain.lua"),
    include_str!("../scripts/holders.lua"),
    include_str!("../scripts/kinds.lua"),
    include_str!("../scripts/leases.lua"),
    "local function announce(token, awaited)\n",
    include_str!("../scripts/fence.lua"),
    include_str!("../scripts/grant.lua"),
    include_str!("../scripts/release_announce.lua"),
    "end\n",
    include_str!("../scripts/release.lua")
);

pub(in crate::backend) const CONFIRM_LUA: &str = concat!(
    include_str!("../scripts/holders.lua"),
    include_str!("../scripts/leases.lua"),
    include_str!("../scripts/confirm.lua")
);

pub(in crate::backend) const REMAINING_LUA: &str = concat!(
    include_str!("../scripts/holders.lua"),
    include_str!("../scripts/leases.lua"),
    include_str!("../scripts/remaining.lua")
);

pub(in crate::backend) const REFRESH_MANY_LUA: &str = concat!(
    include_str!("../scripts/holders.lua"),
    include_str!("../scripts/leases.lua"),
    include_str!("../scripts/refresh_many.lua")
);

pub(in crate::backend) const INSPECT_LUA: &str = concat!(
    include_str!("../scripts/mark.lua"),
    include_str!("../scripts/holders.lua"),
    include_str!("../scripts/kinds.lua"),
    include_str!("../scripts/inspect.lua")
);

// As the release, but for every lease on the key: `announce` hands it to
// the queue's head and wakes the other waiters.
pub(in crate::backend) const FORCE_RELEASE_LUA: &str = concat!(
    include_str!("../scripts/mark.lua"),
    include_str!("../scripts/holders.lua"),
    include_str!("../scripts/kinds.lua"),
    include_str!("../scripts/leases.lua"),
    "local function announce(token, awaited)\n",
    include_str!("../scripts/fence.lua"),
    include_str!("../scripts/grant.lua"),
    include_str!("../scripts/release_announce.lua"),
    "end\n",
    include_str!("../scripts/force_release.lua")
);

pub(in crate::backend) const DOWNGRADE_LUA: &str = concat!(
    include_str!("../scripts/holders.lua"),
    include_str!("../scripts/kinds.lua"),
    include_str!("../scripts/downgrade.lua")
);

pub(in crate::backend) static INSPECT: LazyLock<Lua> = LazyLock::new(|| Lua::new(INSPECT_LUA));

pub(in crate::backend) static FORCE_RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(FORCE_RELEASE_LUA));

pub(in crate::backend) static DOWNGRADE: LazyLock<Lua> = LazyLock::new(|| Lua::new(DOWNGRADE_LUA));

pub(in crate::backend) static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| Lua::new(ACQUIRE_LUA));

pub(in crate::backend) static ACQUIRE_FAIR: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(ACQUIRE_FAIR_LUA));

pub(in crate::backend) static ACQUIRE_SHARED: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(ACQUIRE_SHARED_LUA));

pub(in crate::backend) static REFRESH: LazyLock<Lua> = LazyLock::new(|| Lua::new(REFRESH_LUA));

pub(in crate::backend) static RELEASE: LazyLock<Lua> = LazyLock::new(|| Lua::new(RELEASE_LUA));

pub(in crate::backend) static CONFIRM: LazyLock<Lua> = LazyLock::new(|| Lua::new(CONFIRM_LUA));

pub(in crate::backend) static REMAINING: LazyLock<Lua> = LazyLock::new(|| Lua::new(REMAINING_LUA));

pub(in crate::backend) static REFRESH_MANY: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(REFRESH_MANY_LUA));
