//! Redis errors as [`BackendError`]s: what went wrong and what to do.

#[cfg(feature = "cluster")]
use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::error::{BackendError, BackendErrorKind};

/// Why a call failed.
#[derive(Debug, Clone)]
pub(in crate::backend) enum Failure {
    /// An answer that sending again would not change.
    Redis(RedisError),
    /// A cluster's budget ran out while the slot had no master that answered.
    #[cfg(feature = "cluster")]
    Spent {
        slot: Option<u16>,
        budget: Duration,
        last: Option<RedisError>,
    },
}

impl Failure {
    pub(in crate::backend) fn into_error(self, server: &str, what: &str) -> BackendError {
        match self {
            Failure::Redis(err) => backend_error(server, what, err),
            #[cfg(feature = "cluster")]
            Failure::Spent { slot, budget, last } => {
                let slot = slot.map_or_else(String::new, |slot| format!(" {slot}"));
                let message = match &last {
                    Some(last) => format!(
                        "no master of slot{slot} answered within the response timeout \
                         ({budget:?}): the cluster is failing over or has lost the slot; its \
                         last answer: {last}"
                    ),
                    // A node that took the command and never answered.
                    None => format!(
                        "no master of slot{slot} answered within the response timeout \
                         ({budget:?})"
                    ),
                };
                let error = BackendError::new(
                    BackendErrorKind::Timeout,
                    format!("{server}: {what}"),
                    message,
                );
                match last {
                    Some(last) => error.with_source(last),
                    None => error,
                }
            }
        }
    }
}

pub(crate) fn backend_error(server: &str, what: &str, err: RedisError) -> BackendError {
    #[cfg(feature = "tls-rustls")]
    if let Some((tls, hint)) = super::tls::tls_failure(&err) {
        let message = format!("TLS handshake failed: {tls} ({hint})");
        return BackendError::new(BackendErrorKind::Tls, format!("{server}: {what}"), message)
            .with_source(err);
    }
    let kind = match err.kind() {
        ErrorKind::AuthenticationFailed => BackendErrorKind::Authentication,
        // A server that wants a password and got none refuses each command.
        _ if matches!(err.code(), Some("NOAUTH" | "WRONGPASS")) => BackendErrorKind::Authentication,
        ErrorKind::Server(ServerErrorKind::NoPerm) => BackendErrorKind::Permission,
        // A command called by a script is refused with a plain error.
        ErrorKind::Server(ServerErrorKind::ResponseError)
            if SCRIPT_DENIED
                .iter()
                .any(|words| err.to_string().contains(words)) =>
        {
            BackendErrorKind::Permission
        }
        _ if err.is_timeout() => BackendErrorKind::Timeout,
        _ if err.is_connection_refusal() || err.is_connection_dropped() || err.is_io_error() => {
            BackendErrorKind::Unreachable
        }
        _ => BackendErrorKind::Other,
    };
    let message = match kind {
        BackendErrorKind::Authentication => format!("authentication failed: {err}"),
        BackendErrorKind::Permission => {
            format!(
                "permission denied: {err}; {}",
                permission_fix(&err.to_string())
            )
        }
        BackendErrorKind::Timeout => format!("no answer in time: {err}"),
        BackendErrorKind::Unreachable => format!("server unreachable: {err}"),
        BackendErrorKind::Tls
        | BackendErrorKind::Unsupported
        | BackendErrorKind::Protocol
        | BackendErrorKind::Configuration
        | BackendErrorKind::Other => err.to_string(),
    };
    BackendError::new(kind, format!("{server}: {what}"), message).with_source(err)
}

/// The error of a connect whose peer answered in a protocol that is not
/// Redis's (an HTTP server, another database), if `err` says so.
pub(in crate::backend) fn not_redis(server: &str, err: &RedisError) -> Option<BackendError> {
    (err.kind() == ErrorKind::Parse).then(|| {
        BackendError::new(
            BackendErrorKind::Protocol,
            format!("{server}: connect"),
            format!(
                "not a Redis server: its answer is not in Redis's protocol ({err}); check the \
                 host and port of the URL"
            ),
        )
    })
}

/// How Redis 7.0 (first) and later versions word the refusal of a command
/// called by a script.
const SCRIPT_DENIED: [&str; 2] = ["can't run this command", "ACL failure in script"];

/// What to grant, after the server's refusal `denied`.
fn permission_fix(denied: &str) -> String {
    let all = "the library needs `+evalsha +script|load` (and `+eval` on a cluster), the \
               commands its scripts call (`+get +set +pexpire +pttl +del +incr +time +lrange +lpop +lset +lrem +rpush +publish`), \
               `+subscribe +unsubscribe`, the lock keys and their fence keys \
               (`~<namespace>:* ~{<namespace>:*`) and the channels \
               `&lockmacro:released:<namespace>:*`; see \"Permissions a Redis user needs\" \
               in docs/security.md";
    let command = denied
        .split("run the '")
        .nth(1)
        .and_then(|rest| rest.split('\'').next());
    match command {
        Some(command) => {
            format!("allow the command with `ACL SETUSER <user> +{command}`; {all}")
        }
        None if SCRIPT_DENIED.iter().any(|words| denied.contains(words)) => {
            format!("a command called by the lock scripts was refused; {all}")
        }
        None if denied.contains("key") => format!(
            "allow the keys with `ACL SETUSER <user> ~<namespace>:* ~{{<namespace>:*`; {all}"
        ),
        None if denied.contains("channel") => {
            format!("allow the channels with `ACL SETUSER <user> &lockmacro:released:*`; {all}")
        }
        None => all.to_owned(),
    }
}

/// Why a `rediss://` connect may time out: a plain-text port reads the TLS
/// greeting as the start of a command and waits for the rest.
pub(in crate::backend) const TLS_SILENCE: &str = " (the TLS handshake got no reply: if the port is not the \
                           server's `tls-port`, use a `redis://` URL)";
