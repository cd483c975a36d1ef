//! PostgreSQL and pool errors as [`BackendError`]s: what went wrong and
//! what to do.

use std::fmt::Display;
use std::time::Duration;

use crate::error::{BackendError, BackendErrorKind};

/// Where the migration lives, for the errors that ask a user to run it.
pub(super) const RUN_THE_MIGRATION: &str = "run lockmacro's migration \
    (`lockmacro-runtime/migrations/postgres/0001_lockmacro.sql`, also \
    `lockmacro_runtime::POSTGRES_MIGRATION`) as a user who may create tables, \
    and grant this user SELECT, INSERT, UPDATE, DELETE on the `lockmacro_*` tables \
    and USAGE on the sequence `lockmacro_fence_seq`";

/// `err`, met while doing `what` on the server `server`.
pub(super) fn backend_error(
    server: &str,
    what: &(dyn Display + Sync),
    err: sqlx::Error,
) -> BackendError {
    let (kind, message) = match &err {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|code| code.into_owned()).unwrap_or_default();
            let startup_parameter = code == "08P01" && db.message().contains("startup parameter");
            let kind = match code.as_str() {
                // invalid_password, invalid_authorization_specification
                "28P01" | "28000" => BackendErrorKind::Authentication,
                // invalid_catalog_name: the URL's database does not exist.
                "3D000" => BackendErrorKind::Configuration,
                // PgBouncer refusing a startup parameter the client sends.
                "08P01" if startup_parameter => BackendErrorKind::Configuration,
                // connection_exception and its kinds, among them
                // PgBouncer's "server login has been failing" (08P01)
                // while PostgreSQL restarts.
                code if code.starts_with("08") => BackendErrorKind::Unreachable,
                // insufficient_privilege
                "42501" => BackendErrorKind::Permission,
                // admin_shutdown, crash_shutdown, cannot_connect_now,
                // too_many_connections
                "57P01" | "57P02" | "57P03" | "53300" => BackendErrorKind::Unreachable,
                // query_canceled (statement_timeout)
                "57014" => BackendErrorKind::Timeout,
                _ => BackendErrorKind::Other,
            };
            let mut message = format!("{} (SQLSTATE {code})", db.message());
            if kind == BackendErrorKind::Permission {
                message.push_str(": ");
                message.push_str(RUN_THE_MIGRATION);
            } else if code == "3D000" {
                message.push_str(": create the database, or name another in the URL");
            } else if startup_parameter {
                message.push_str(
                    ": a pooler (PgBouncer) refuses a parameter the connection sends; add \
                     `ignore_startup_parameters = extra_float_digits,options` to its \
                     configuration, or give the backend a URL or connect options that \
                     leave the parameter out",
                );
            } else if code == "42883" || code == "42P01" {
                // undefined_function, undefined_table: the schema is gone.
                message.push_str(": lockmacro's tables or functions are missing; ");
                message.push_str(RUN_THE_MIGRATION);
            }
            (kind, message)
        }
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => (
            BackendErrorKind::Unreachable,
            format!("connection refused ({io}): is PostgreSQL running, on this host and port?"),
        ),
        sqlx::Error::Io(io) => (BackendErrorKind::Unreachable, io.to_string()),
        sqlx::Error::Tls(tls) => (BackendErrorKind::Tls, tls.to_string()),
        sqlx::Error::PoolTimedOut => (
            BackendErrorKind::Timeout,
            "no connection within the connect timeout: every connection of the pool is in \
             use, or the server refuses or does not answer new ones"
                .to_owned(),
        ),
        sqlx::Error::PoolClosed => (
            BackendErrorKind::Unreachable,
            "the connection pool was closed".to_owned(),
        ),
        other => (BackendErrorKind::Other, other.to_string()),
    };
    BackendError::new(kind, format!("postgres {server}: {what}"), message).with_source(err)
}

/// A statement that did not answer within `limit`.
pub(super) fn timed_out(
    server: &str,
    what: &(dyn Display + Sync),
    limit: Duration,
) -> BackendError {
    BackendError::new(
        BackendErrorKind::Timeout,
        format!("postgres {server}: {what}"),
        format!("no answer within {limit:?}"),
    )
}

/// A reply whose shape the backend did not expect.
pub(super) fn unexpected(
    server: &str,
    what: &(dyn Display + Sync),
    reply: impl Display,
) -> BackendError {
    BackendError::new(
        BackendErrorKind::Other,
        format!("postgres {server}: {what}"),
        format!("unexpected reply: {reply}"),
    )
}

/// What an operation does to which keys, for its errors: written out only
/// when one is made, not on every call.
pub(super) struct Doing<'a>(pub &'static str, pub &'a [String]);

impl Display for Doing<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)?;
        for (i, key) in self.1.iter().enumerate() {
            f.write_str(if i == 0 { " `" } else { "`, `" })?;
            f.write_str(key)?;
        }
        if !self.1.is_empty() {
            f.write_str("`")?;
        }
        Ok(())
    }
}
