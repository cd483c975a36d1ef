//! The scripts' arguments and what their replies mean, for a single server
//! and a cluster alike.

use std::time::Duration;

use super::errors::Failure;
use super::scripts::{ACQUIRE_LUA, Command};
use crate::backend::keys::{derived_queue_key, derived_waiters_key, fence_key_refused};
use crate::backend::{AcquireRequest, Acquired, RefreshRequest, Share, TOKEN_LEN, unmarked};
use crate::error::{BackendError, BackendErrorKind};
use crate::{KeyKind, LockError};

/// The most leases one call of the refresh script carries. Redis runs a
/// script to its end before serving anyone else: this bounds that pause and
/// the size of one request.
pub(in crate::backend) const REFRESH_BATCH: usize = 500;

/// A call of `refresh_many.lua` for the requests. Built as one plain
/// command: its arguments share one buffer, where a `ScriptInvocation` would
/// allocate one per key and argument.
pub(in crate::backend) struct RefreshMany<'a, 'r>(
    pub(in crate::backend) &'a [&'a RefreshRequest<'r>],
);

impl Command for RefreshMany<'_, '_> {
    fn build(&self, verb: &str, script: &str) -> redis::Cmd {
        let requests = self.0;
        let mut cmd = redis::cmd(verb);
        let keys: usize = requests.iter().map(|req| req.keys.len()).sum();
        cmd.arg(script).arg(keys);
        for req in requests {
            cmd.arg(req.keys);
        }
        for req in requests {
            let ttl = u64::try_from(req.ttl.as_millis()).unwrap_or(u64::MAX);
            cmd.arg(req.token).arg(ttl).arg(req.keys.len());
        }
        cmd
    }
}

/// Reads the reply of `refresh_many.lua` for `requests`: one result each, the
/// error of the call for every one of them when it failed.
pub(in crate::backend) fn refreshed(
    reply: Result<Vec<i64>, Failure>,
    requests: &[&RefreshRequest<'_>],
    server: &str,
) -> Vec<Result<bool, LockError>> {
    let what = |req: &RefreshRequest<'_>| format!("refresh `{}`", req.keys.join("`, `"));
    match reply {
        Ok(flags) if flags.len() == requests.len() => {
            flags.iter().map(|&flag| Ok(flag == 1)).collect()
        }
        Ok(flags) => requests
            .iter()
            .map(|req| {
                Err(BackendError::new(
                    BackendErrorKind::Other,
                    format!("{server}: {}", what(req)),
                    format!(
                        "the refresh script answered {} results for {} leases",
                        flags.len(),
                        requests.len()
                    ),
                )
                .into())
            })
            .collect(),
        Err(failure) => requests
            .iter()
            .map(|req| Err(failure.clone().into_error(server, &what(req)).into()))
            .collect(),
    }
}

/// Where the scripts keep the fair queue and the waiters flag of a lock key
/// (see `acquire_fair.lua` and `waiters.lua`).
#[derive(Debug, Clone, Copy)]
pub(in crate::backend) enum Companions {
    /// At the derived names: one server takes any name.
    Derived,
    /// At the derived names when they share the key's cluster slot, else
    /// nowhere (an empty name): a key with a `}` but no hash tag is hashed
    /// whole, and no derived name hashes the same.
    #[cfg(feature = "cluster")]
    SameSlot,
}

impl Companions {
    fn name(self, key: &str, derive: fn(&str) -> String) -> String {
        let name = derive(key);
        match self {
            #[cfg(feature = "cluster")]
            Companions::SameSlot
                if crate::backend::slot::slot(&name) != crate::backend::slot::slot(key) =>
            {
                String::new()
            }
            _ => name,
        }
    }

    /// The queue of `key`'s fair waiters, or an empty name.
    pub(in crate::backend) fn queue(self, key: &str) -> String {
        self.name(key, derived_queue_key)
    }

    /// The waiters flag of `key`, or an empty name.
    pub(in crate::backend) fn flag(self, key: &str) -> String {
        self.name(key, derived_waiters_key)
    }

    /// True when the release script derives a key's waiters flag itself
    /// as [`flag`](Self::flag) names it, so that the release of one key can
    /// leave it out: an argument costs every release. Not on a cluster,
    /// where the derived name may be in another slot.
    pub(in crate::backend) fn derivable(self) -> bool {
        matches!(self, Companions::Derived)
    }
}

/// The arguments of the acquire script (`acquire.lua`) for `req`, whose
/// keys are its `KEYS` with the fence key after them.
pub(in crate::backend) fn acquire_args(
    req: &AcquireRequest<'_>,
    fence_expiry: &str,
    companions: Companions,
) -> Vec<String> {
    let mut args = vec![
        req.value.to_owned(),
        millis(req.ttl),
        req.keys.len().to_string(),
        fence_expiry.to_owned(),
    ];
    if req.wait {
        args.push("1".to_owned());
        args.extend(req.keys.iter().map(|key| companions.flag(key)));
    }
    args
}

/// The arguments of the shares script (`acquire_shared.lua`) for `req`,
/// taking `share`, whose keys are its one key with the fence key after it;
/// a fair request ([`AcquireRequest::queue_for`]) also names the key's queue
/// and gives `grant_lease`.
pub(in crate::backend) fn acquire_shared_args(
    req: &AcquireRequest<'_>,
    share: Share,
    fence_expiry: &str,
    grant_lease: &str,
    companions: Companions,
) -> Vec<String> {
    let kind = match share {
        Share::Permits(permits) => permits.to_string(),
        Share::Read => "read".to_owned(),
        Share::Write => "write".to_owned(),
    };
    let mut args = vec![
        req.value.to_owned(),
        millis(req.ttl),
        kind,
        fence_expiry.to_owned(),
    ];
    if let Some(wait) = req.queue_for {
        // A queued waiter flags itself whether or not it listens yet: the
        // flag is what tells a release to serve the queue.
        args.push(if req.wait { "1" } else { "0" }.to_owned());
        args.push(companions.flag(&req.keys[0]));
        args.push(companions.queue(&req.keys[0]));
        args.push(millis(wait));
        args.push(grant_lease.to_owned());
        args.push(req.attempt.to_string());
    } else if req.wait {
        args.push("1".to_owned());
        args.push(companions.flag(&req.keys[0]));
    }
    args
}

/// The arguments of the fair acquire script (`acquire_fair.lua`) for
/// `req`, queued at `queue` for at most `wait`.
pub(in crate::backend) fn acquire_fair_args(
    req: &AcquireRequest<'_>,
    wait: Duration,
    queue: String,
    fence_expiry: &str,
    grant_lease: &str,
    companions: Companions,
) -> Vec<String> {
    vec![
        req.value.to_owned(),
        millis(req.ttl),
        millis(wait),
        queue,
        fence_expiry.to_owned(),
        grant_lease.to_owned(),
        companions.flag(&req.keys[0]),
        req.attempt.to_string(),
    ]
}

/// The arguments of the release script: the token, then the lock keys'
/// waiters flags (the script names their queues after them).
pub(in crate::backend) fn release_args(
    keys: &[String],
    token: &str,
    companions: Companions,
) -> Vec<String> {
    let flags = keys.iter().map(|key| companions.flag(key));
    std::iter::once(token.to_owned()).chain(flags).collect()
}

/// One argument written from two pieces, `0` then `1`, as the command is
/// built: a lease's value from its token and metadata, without joining them
/// into a string of its own first.
pub(in crate::backend) struct Joined<'a>(
    pub(in crate::backend) &'a str,
    pub(in crate::backend) &'a str,
);

impl redis::ToRedisArgs for Joined<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        use std::io::Write;
        let mut arg = out.writer_for_next_arg();
        // Into the command's own buffer, which cannot fail.
        let _ = arg.write_all(self.0.as_bytes());
        let _ = arg.write_all(self.1.as_bytes());
    }
}

/// The plain attempt ([`AcquireRequest::is_plain`]): `SET key value NX PX
/// ttl`, the floor's own command. Asking the value it found as well (`GET`)
/// cost the server most of a thousand instructions on every obtain, for
/// what only a refusal needs, which reads it then.
pub(in crate::backend) fn plain_set(req: &AcquireRequest<'_>) -> redis::Cmd {
    // Sized up front, the ttl written as a number: growing the buffer
    // argument by argument reallocated it, and the ttl was a string of its
    // own, on every obtain.
    let key = &req.keys[0];
    let mut set = redis::Cmd::with_capacity(6, key.len() + req.value.len() + 40);
    set.arg("SET")
        .arg(key)
        .arg(req.value)
        .arg("NX")
        .arg("PX")
        .arg(u64::try_from(req.ttl.as_millis()).unwrap_or(u64::MAX));
    set
}

/// What a refused plain attempt found at the key (`previous`, and its `PTTL`
/// when it was read): busy, with its holder and how long it has left;
/// `None` when the key holds this very value, a retry whose first reply was
/// lost (marked since by a waiter, or not): the script then extends it to
/// the ttl from now. A key gone since the refusal is still busy, holder
/// unknown: the attempt was refused.
pub(in crate::backend) fn plain_outcome(
    req: &AcquireRequest<'_>,
    previous: Option<String>,
    left: Option<i64>,
) -> Option<Acquired> {
    match previous {
        Some(previous) if unmarked(&previous) == req.value => None,
        previous => Some(Acquired::Busy {
            index: 0,
            remaining: left.and_then(pttl),
            holder: previous.map(|previous| metadata_of(&previous).to_owned()),
        }),
    }
}

/// The metadata in a lock's value: what follows the token, without the
/// waiters' mark.
pub(in crate::backend) fn metadata_of(value: &str) -> &str {
    unmarked(value).get(TOKEN_LEN..).unwrap_or_default()
}

pub(in crate::backend) fn millis(ttl: Duration) -> String {
    ttl.as_millis().to_string()
}

pub(in crate::backend) fn pttl(value: i64) -> Option<Duration> {
    u64::try_from(value).ok().map(Duration::from_millis)
}

/// The error of an acquire script that refused `fence_key` (`NOTAFENCE`,
/// from `fence.lua`), as [`LockError::InvalidKey`]; any other error as it is.
pub(in crate::backend) fn not_a_fence(err: LockError, fence_key: Option<&str>) -> LockError {
    match (&err, fence_key) {
        (LockError::Backend(backend), Some(fence_key))
            if backend.to_string().contains("NOTAFENCE") =>
        {
            let detail = backend
                .to_string()
                .split("NOTAFENCE")
                .nth(1)
                .map(|detail| {
                    let detail = detail.trim_start_matches(['"', ':', ' ']);
                    // Some servers add where the script stopped.
                    detail
                        .split(" script:")
                        .next()
                        .unwrap_or(detail)
                        .trim()
                        .to_owned()
                })
                .unwrap_or_default();
            fence_key_refused(fence_key, &detail)
        }
        _ => err,
    }
}

/// The error of the shares script for a key that holds another client's
/// data (`NOTSHARES`, from `acquire_shared.lua`), as
/// [`LockError::InvalidKey`]; any other error as it is.
pub(in crate::backend) fn not_shares(err: LockError, key: &str) -> LockError {
    match &err {
        LockError::Backend(backend) if backend.to_string().contains("NOTSHARES") => {
            LockError::InvalidKey {
                key: key.to_owned(),
                reason: "the key holds another client's data, neither a lock nor shares; a \
                         semaphore or a read-write lock needs a key of its own, e.g. \
                         `<key>:shared`"
                    .into(),
            }
        }
        _ => err,
    }
}

/// The kind a script names by its code (see `kinds.lua`): `None` for
/// anything but a lock, a semaphore or a read-write lock.
pub(in crate::backend) fn kind_of(code: i64) -> Option<KeyKind> {
    match code {
        -1 => Some(KeyKind::Lock),
        0 => Some(KeyKind::ReadWrite),
        permits => u32::try_from(permits)
            .ok()
            .map(|permits| KeyKind::Semaphore { permits }),
    }
}

/// Reads the reply of an acquire script for `req`; `server` names it in
/// errors.
pub(in crate::backend) fn acquired(
    reply: &[i64],
    req: &AcquireRequest<'_>,
    server: &str,
) -> Result<Acquired, LockError> {
    match reply {
        [1, fence] => Ok(Acquired::Obtained {
            fence: req
                .fence_key
                .is_some()
                .then(|| u64::try_from(*fence).unwrap_or(0)),
        }),
        [2, index, code] => {
            let key = usize::try_from(*index - 1)
                .ok()
                .and_then(|index| req.keys.get(index))
                .unwrap_or(&req.keys[0])
                .clone();
            Err(match kind_of(*code) {
                Some(held) => LockError::WrongKind {
                    key,
                    held,
                    asked: req.kind(),
                },
                None => LockError::InvalidKey {
                    key,
                    reason: "the key holds another client's data, neither a lock nor \
                             shares; name the lock differently"
                        .into(),
                },
            })
        }
        [0, index, remaining] => Ok(Acquired::Busy {
            index: usize::try_from(*index - 1).unwrap_or(0),
            remaining: pttl(*remaining),
            holder: None,
        }),
        other => Err(BackendError::new(
            BackendErrorKind::Other,
            format!("{server}: obtain"),
            format!("unexpected reply {other:?} from the acquire script"),
        )
        .into()),
    }
}

/// The acquire script (`EVAL`, keys, args) followed by `WAIT replicas
/// timeout` in one pipeline: `WAIT` counts the writes of its own connection,
/// so both must go on the same one, with nothing in between that could be a
/// reconnection. `EVAL` rather than `EVALSHA`: a `NOSCRIPT` in the middle of
/// a pipeline would need the pair sent again, and `EVAL` caches the script
/// all the same.
pub(in crate::backend) fn acknowledged_acquire_pipe(
    req: &AcquireRequest<'_>,
    fence_expiry: &str,
    companions: Companions,
) -> redis::Pipeline {
    let mut keys: Vec<&str> = req.keys.iter().map(String::as_str).collect();
    keys.extend(req.fence_key);
    let mut pipe = redis::pipe();
    pipe.cmd("EVAL")
        .arg(ACQUIRE_LUA)
        .arg(keys.len())
        .arg(&keys)
        .arg(acquire_args(req, fence_expiry, companions))
        .cmd("WAIT")
        .arg(req.replicas)
        // `WAIT` with 0 waits for ever: the locker never asks for less than
        // 1 ms.
        .arg(req.replica_timeout.as_millis().max(1));
    pipe
}

/// Refuses a replica wait that the response timeout would cut short: the
/// call would fail as a timeout with the lock taken and nobody to give it
/// back.
pub(in crate::backend) fn check_replica_timeout(
    req: &AcquireRequest<'_>,
    response_timeout: Duration,
    server: &str,
) -> Result<(), LockError> {
    if req.replica_timeout < response_timeout {
        return Ok(());
    }
    Err(BackendError::new(
        BackendErrorKind::Other,
        format!("{server}: obtain `{}`", req.keys.join("`, `")),
        format!(
            "the replica wait ({:?}) is not shorter than the response timeout ({response_timeout:?}), \
             which would end the call first; shorten `ObtainOptions::replica_timeout` or \
             lengthen `RedisConfig::response_timeout`",
            req.replica_timeout
        ),
    )
    .into())
}

/// What an acquire followed by `WAIT` came to: `Busy` as it is, `Obtained`
/// if enough replicas acknowledged, else `Err(acknowledged)`.
pub(in crate::backend) fn acknowledged_outcome(
    reply: &[i64],
    acknowledged: usize,
    req: &AcquireRequest<'_>,
    server: &str,
) -> Result<Result<Acquired, usize>, LockError> {
    match acquired(reply, req, server)? {
        Acquired::Obtained { .. } if acknowledged < req.replicas => Ok(Err(acknowledged)),
        outcome => Ok(Ok(outcome)),
    }
}
