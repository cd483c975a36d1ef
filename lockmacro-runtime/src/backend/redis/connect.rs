//! Opening clients and connections, with the configured timeouts and TLS.

use redis::{ConnectionAddr, ErrorKind, IntoConnectionInfo, RedisError};

use super::config::RedisConfig;
use super::errors::{TLS_SILENCE, backend_error, not_redis};
use super::scripts::{
    ACQUIRE_FAIR_LUA, ACQUIRE_LUA, ACQUIRE_SHARED_LUA, CONFIRM_LUA, REFRESH_LUA, REFRESH_MANY_LUA,
    RELEASE_LUA, REMAINING_LUA,
};
use super::server_conn::{Reopening, ServerConn};
use crate::LockError;
use crate::backend::redact;
use crate::error::{BackendError, BackendErrorKind};

/// Makes TLS usable for `url` if it asks for it (`rediss://`): installs the
/// crypto provider, or, in a build without the `tls-rustls` feature, refuses
/// the URL with an error that names the feature. Called before the URL is
/// parsed, which fails without a TLS feature, with a vaguer message.
pub(in crate::backend) fn prepare_tls(url: &str) -> Result<(), LockError> {
    let tls = url
        .trim_start()
        .get(..9)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss://"));
    if tls { enable_tls(url) } else { Ok(()) }
}

/// Makes TLS usable for a connection to `url`, which needs it: installs the
/// crypto provider, or, in a build without the `tls-rustls` feature, refuses
/// with an error that names the feature.
pub(in crate::backend) fn enable_tls(url: &str) -> Result<(), LockError> {
    #[cfg(feature = "tls-rustls")]
    {
        let _ = url;
        crate::backend::pem::install_crypto_provider();
        Ok(())
    }
    #[cfg(not(feature = "tls-rustls"))]
    Err(LockError::InvalidUrl {
        url: redact(url),
        reason: "`rediss://` needs TLS, which this build leaves out: enable the `tls-rustls` \
                 feature of `lockmacro-runtime`"
            .into(),
    })
}

/// A client for `url` with `config`'s TLS settings; `Err` for a URL that
/// cannot be parsed or TLS settings that cannot be used with it.
pub(in crate::backend) fn open_client(
    url: &str,
    config: &RedisConfig,
) -> Result<redis::Client, LockError> {
    let invalid = |reason: String| LockError::InvalidUrl {
        url: redact(url),
        reason,
    };
    prepare_tls(url)?;
    let info = url
        .into_connection_info()
        .map_err(|err| invalid(err.to_string()))?;
    #[cfg(feature = "tls-rustls")]
    let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
    #[cfg(feature = "tls-rustls")]
    if tls && config.dial.is_some() {
        return Err(invalid(
            "`RedisConfig::dial` opens the connection itself, and TLS over it is the dial's \
             own: use `redis://`"
                .into(),
        ));
    }
    #[cfg(not(feature = "tls-rustls"))]
    {
        let _ = config;
        redis::Client::open(info).map_err(|err| invalid(err.to_string()))
    }
    #[cfg(feature = "tls-rustls")]
    match config.tls_certificates(&format!("redis {}", info.addr()))? {
        None => redis::Client::open(info).map_err(|err| invalid(err.to_string())),
        Some(_) if !tls => Err(invalid(
            "TLS certificates are configured but the URL does not use TLS; \
             use `rediss://`"
                .into(),
        )),
        Some(certificates) => redis::Client::build_with_tls(info, certificates)
            .map_err(|err| invalid(err.to_string())),
    }
}

/// A connection to the server at `url`, its client, and its name
/// for error messages (`redis 127.0.0.1:6379`); connecting is bounded by the
/// config's timeouts.
pub(crate) async fn open_connection(
    url: &str,
    config: &RedisConfig,
) -> Result<(redis::Client, ServerConn, String), LockError> {
    let client = open_client(url, config)?;
    let (conn, name) = connection_for(&client, config).await?;
    Ok((client, conn, name))
}

/// The name of `client`'s server in error messages: `redis 127.0.0.1:6379`.
pub(in crate::backend) fn server_name(client: &redis::Client) -> String {
    format!("redis {}", client.get_connection_info().addr())
}

/// A connection to the server of `client`, and the server's name;
/// connecting is bounded by the config's timeouts.
pub(in crate::backend) async fn connection_for(
    client: &redis::Client,
    config: &RedisConfig,
) -> Result<(ServerConn, String), LockError> {
    let name = server_name(client);
    let tls = matches!(
        client.get_connection_info().addr(),
        ConnectionAddr::TcpTls { .. }
    );
    let connect = async {
        // Opened again by the next command, not retried in the background
        // for long: a lock call must fail in bounded time.
        let conn = Reopening::open(
            config.endpoint(client.clone()),
            config.connect_timeout,
            config.response_timeout,
        )
        .await?;
        let mut conn = ServerConn::Own(conn);
        // A server that wants a password accepts a connection without one and
        // refuses each command, and a port of another service may answer in
        // its own protocol: one command tells both here, not at the first
        // lock. `TIME`, which the lock scripts call, is in the permissions
        // `docs/security.md` lists, so a user granted just those leaves no refusal
        // in the server's ACL log.
        match redis::cmd("TIME")
            .query_async::<redis::Value>(&mut conn)
            .await
        {
            Err(err) if !answered_past_credentials(&err) => Err(err),
            _ => Ok(conn),
        }
    };
    // The connection's own timeout covers each TCP attempt; this bounds the
    // whole of connecting (TLS, AUTH, HELLO, SELECT, the TIME) by the same
    // connect timeout, as its documentation promises.
    let conn = tokio::time::timeout(config.connect_timeout, connect)
        .await
        .map_err(|_| {
            let mut message = "no answer in time".to_owned();
            if tls {
                message.push_str(TLS_SILENCE);
            }
            BackendError::new(
                BackendErrorKind::Timeout,
                format!("{name}: connect"),
                message,
            )
        })?
        .map_err(|err| connect_error(&name, tls, err))?;
    Ok((conn, name))
}

/// Every script, loaded in one round trip at connect (see
/// `Features::probe`), so that the first burst of calls (a watchdog
/// refreshing thousands of leases at once) finds them cached instead of each
/// call being refused with `NOSCRIPT`, loading the script and sending again.
pub(in crate::backend) const SCRIPT_SOURCES: [&str; 8] = [
    ACQUIRE_LUA,
    ACQUIRE_FAIR_LUA,
    ACQUIRE_SHARED_LUA,
    CONFIRM_LUA,
    REFRESH_LUA,
    RELEASE_LUA,
    REMAINING_LUA,
    REFRESH_MANY_LUA,
];

/// True when `err`, the reply to the connect's check, still shows a Redis
/// server that took the credentials: a refusal of its own (a user not
/// allowed `TIME`, a server still loading) other than asking for them.
fn answered_past_credentials(err: &RedisError) -> bool {
    matches!(err.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
        && !matches!(err.code(), Some("NOAUTH" | "WRONGPASS"))
}

/// A failed connect of a [`RedisBackend`]: `tls` tells whether the URL asked
/// for TLS.
fn connect_error(server: &str, tls: bool, err: RedisError) -> BackendError {
    if let Some(error) = not_redis(server, &err) {
        return error.with_source(err);
    }
    let closed = !tls && err.is_connection_dropped() && !err.is_connection_refusal();
    let text = err.to_string();
    let error = backend_error(server, "connect", err);
    if tls && error.kind() == BackendErrorKind::Timeout {
        return BackendError::new(
            BackendErrorKind::Timeout,
            format!("{server}: connect"),
            format!("no answer in time: {text}{TLS_SILENCE}"),
        )
        .with_source(error);
    }
    if closed && error.kind() == BackendErrorKind::Unreachable {
        // A TLS-only port drops a plain-text client without a word.
        return BackendError::new(
            BackendErrorKind::Unreachable,
            format!("{server}: connect"),
            format!(
                "the server closed the connection before answering ({text}); if the port \
                 accepts only TLS, use a `rediss://` URL"
            ),
        )
        .with_source(error);
    }
    error
}

#[cfg(all(test, not(feature = "tls-rustls")))]
mod tests {
    use crate::{LockError, RedisBackend};

    #[tokio::test]
    async fn rediss_without_the_tls_feature_names_the_feature() {
        let err = RedisBackend::connect("rediss://127.0.0.1:6380/")
            .await
            .unwrap_err();
        assert!(
            matches!(&err, LockError::InvalidUrl { reason, .. } if reason.contains("`tls-rustls`")),
            "{err}"
        );
    }
}
