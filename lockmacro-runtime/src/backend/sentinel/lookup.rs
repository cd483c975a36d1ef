//! Finding the master: every sentinel asked at once, the server each one
//! names checked with `ROLE`.

use std::task::Poll;

use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo,
    RedisError, Value,
};

use crate::backend::BoxFuture;
use crate::backend::redact;
use crate::error::{BackendError, BackendErrorKind};
use crate::{LockError, RedisConfig};

/// How to find the master.
pub(super) struct Lookup {
    pub(super) master_name: String,
    /// `redis sentinel mymaster (127.0.0.1:26379,…)`: names it in errors.
    pub(super) name: String,
    pub(super) sentinels: Vec<redis::Client>,
    /// The master's user, password and database, and whether it is reached
    /// with TLS; its address comes from the sentinels.
    pub(super) master: ConnectionInfo,
    pub(super) tls: bool,
    pub(super) config: RedisConfig,
}

impl Lookup {
    /// The master's client and `ip:port`, from the first sentinel to name a
    /// server answering `ROLE` as a master. The sentinels are asked all at
    /// once, so that one that is down or frozen costs nothing while another
    /// answers.
    pub(super) async fn find_master(&self) -> Result<(redis::Client, String), LockError> {
        type Asking<'a> = BoxFuture<'a, Result<(redis::Client, String), Answer>>;
        let mut pending: Vec<Option<Asking<'_>>> = self
            .sentinels
            .iter()
            .map(|sentinel| Some(Box::pin(self.ask(sentinel)) as Asking<'_>))
            .collect();
        let mut failed: Vec<Option<Answer>> = self.sentinels.iter().map(|_| None).collect();
        let found = std::future::poll_fn(|cx| {
            let mut left = 0;
            for (slot, answer) in pending.iter_mut().zip(failed.iter_mut()) {
                let Some(asking) = slot else {
                    continue;
                };
                match asking.as_mut().poll(cx) {
                    Poll::Ready(Ok(found)) => return Poll::Ready(Some(found)),
                    Poll::Ready(Err(why)) => {
                        *answer = Some(why);
                        *slot = None;
                    }
                    Poll::Pending => left += 1,
                }
            }
            if left == 0 {
                Poll::Ready(None)
            } else {
                Poll::Pending
            }
        })
        .await;
        if let Some(found) = found {
            return Ok(found);
        }
        let mut answers = Vec::new();
        let (mut unknown, mut refused) = (0, 0);
        for (sentinel, answer) in self.sentinels.iter().zip(failed) {
            let addr = sentinel.get_connection_info().addr().to_string();
            match answer {
                Some(Answer::Unknown) => {
                    unknown += 1;
                    answers.push(format!(
                        "{addr} knows no master named `{}`",
                        self.master_name
                    ));
                }
                Some(Answer::Refused(why)) => {
                    refused += 1;
                    answers.push(format!("{addr}: {why}"));
                }
                Some(Answer::Failed(why)) => answers.push(format!("{addr}: {why}")),
                None => answers.push(format!("{addr}: no answer")),
            }
        }
        let kind = if refused > 0 {
            BackendErrorKind::Authentication
        } else if unknown == self.sentinels.len() {
            BackendErrorKind::Other
        } else {
            BackendErrorKind::Unreachable
        };
        Err(BackendError::new(
            kind,
            format!("{}: find the master", self.name),
            format!(
                "no sentinel named a master that answers as one: {}",
                answers.join("; ")
            ),
        )
        .into())
    }

    /// What `sentinel` says of the master, checked on the master itself.
    async fn ask(&self, sentinel: &redis::Client) -> Result<(redis::Client, String), Answer> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.config.connect_timeout))
            .set_response_timeout(Some(self.config.response_timeout));
        let failed = |err: RedisError| Answer::from_error(err, "");
        let mut conn = sentinel
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(failed)?;
        let named: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.master_name)
            .query_async(&mut conn)
            .await
            .map_err(failed)?;
        let (ip, port) = named.ok_or(Answer::Unknown)?;
        let addr = format!("{ip}:{port}");
        let client = self
            .master_client(ip, port)
            .map_err(|err| Answer::Failed(err.to_string()))?;
        let mut master = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|err| Answer::from_error(err, &format!("master {addr}: ")))?;
        let role: Value = redis::cmd("ROLE")
            .query_async(&mut master)
            .await
            .map_err(|err| Answer::from_error(err, &format!("master {addr}: ")))?;
        match role_name(&role) {
            Some("master") => Ok((client, addr)),
            other => Err(Answer::Failed(format!(
                "names {addr}, whose role is {}",
                other.unwrap_or("unknown")
            ))),
        }
    }

    /// A client for the master at `ip:port`, with the master's user,
    /// password, database and TLS.
    fn master_client(&self, ip: String, port: u16) -> Result<redis::Client, LockError> {
        let addr = if self.tls {
            ConnectionAddr::TcpTls {
                host: ip,
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(ip, port)
        };
        let info = self.master.clone().set_addr(addr);
        let invalid = |reason: String| LockError::InvalidUrl {
            url: info.addr().to_string(),
            reason,
        };
        #[cfg(feature = "tls-rustls")]
        if self.tls
            && let Some(certificates) = self.config.tls_certificates(&self.name)?
        {
            return redis::Client::build_with_tls(info.clone(), certificates)
                .map_err(|err| invalid(err.to_string()));
        }
        redis::Client::open(info.clone()).map_err(|err| invalid(err.to_string()))
    }
}

/// Why a sentinel did not give a master.
enum Answer {
    /// It does not know the name.
    Unknown,
    /// The sentinel or the master refused the credentials.
    Refused(String),
    Failed(String),
}

impl Answer {
    /// `err`, met on the server that `whose` names (empty: the sentinel).
    pub(super) fn from_error(err: RedisError, whose: &str) -> Self {
        let refused = err.kind() == ErrorKind::AuthenticationFailed
            || matches!(err.code(), Some("NOAUTH" | "WRONGPASS"));
        if refused {
            let side = if whose.is_empty() {
                "the sentinel's URL"
            } else {
                "the master's URL (`redis://user:password@<master name>/`)"
            };
            return Answer::Refused(format!(
                "{whose}authentication failed: {err}; give the password in {side}"
            ));
        }
        Answer::Failed(format!("{whose}{err}"))
    }
}

/// `master`, `slave` or `sentinel`: the first element of a `ROLE` reply.
fn role_name(role: &Value) -> Option<&str> {
    let Value::Array(items) = role else {
        return None;
    };
    match items.first()? {
        Value::BulkString(name) => std::str::from_utf8(name).ok(),
        Value::SimpleString(name) => Some(name),
        _ => None,
    }
}

/// The master's name, connection settings and TLS, from `master`: a name, or
/// a URL whose host is the name.
pub(super) fn parse_master(
    master: &str,
    sentinels_tls: bool,
) -> Result<(String, ConnectionInfo, bool), LockError> {
    let invalid = |reason: String| LockError::InvalidUrl {
        url: redact(master),
        reason,
    };
    if !master.contains("://") {
        if master.is_empty() || master.contains(char::is_whitespace) {
            return Err(invalid(
                "the master's name is empty or has spaces; give the name the sentinels \
                 monitor it under (`sentinel monitor <name> …`)"
                    .into(),
            ));
        }
        // Parsed only for the default settings; the address is replaced.
        let info = "redis://127.0.0.1/"
            .into_connection_info()
            .map_err(|err| invalid(err.to_string()))?;
        return Ok((master.to_owned(), info, sentinels_tls));
    }
    let info = master
        .into_connection_info()
        .map_err(|err| invalid(err.to_string()))?;
    match info.addr() {
        ConnectionAddr::Tcp(name, _) => Ok((name.clone(), info.clone(), false)),
        ConnectionAddr::TcpTls { host, .. } => Ok((host.clone(), info.clone(), true)),
        _ => Err(invalid(
            "the master's URL names it by host: `redis://[user:password@]<master name>/[db]`"
                .into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_master;

    #[test]
    pub(super) fn master_is_a_name_or_a_url_naming_it_with_its_credentials() {
        let (name, info, tls) = parse_master("mymaster", false).unwrap();
        assert_eq!((name.as_str(), tls), ("mymaster", false));
        assert_eq!(info.redis_settings().password(), None);
        // Given by name alone, the master uses TLS when the sentinels do.
        assert!(parse_master("mymaster", true).unwrap().2);

        let (name, info, tls) = parse_master("redis://app:s3cret@mymaster/2", true).unwrap();
        assert_eq!((name.as_str(), tls), ("mymaster", false));
        let settings = info.redis_settings();
        assert_eq!(settings.username(), Some("app"));
        assert_eq!(settings.password(), Some("s3cret"));
        assert_eq!(settings.db(), 2);
        #[cfg(feature = "tls-rustls")]
        assert!(parse_master("rediss://mymaster", false).unwrap().2);
        #[cfg(not(feature = "tls-rustls"))]
        assert!(parse_master("rediss://mymaster", false).is_err());

        for bad in ["", "my master", "redis://:pw@/"] {
            assert!(parse_master(bad, false).is_err(), "{bad:?}");
        }
    }
}
