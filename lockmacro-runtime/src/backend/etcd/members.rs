//! Talking to the members: one at a time, moving on to the next while a
//! member is unreachable, slow or without a leader; what their errors mean.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::{Client, KeyValue, Txn, TxnOp, TxnResponse};

use super::wire::{MAX_TXN_OPS, gets};
use super::{EtcdBackend, Member};
use crate::LockError;
use crate::error::{BackendError, BackendErrorKind};

/// Whether another member may succeed where this one failed: the member is
/// unreachable, too slow, or has no leader.
pub(super) fn moves_on(err: &etcd_client::Error) -> bool {
    use etcd_client::Error;
    // The certificates are the same for every member: no other one will
    // do better, and the caller learns at once.
    #[cfg(feature = "tls-rustls")]
    if super::tls::tls_failure(err).is_some() {
        return false;
    }
    match err {
        Error::IoError(_) | Error::TransportError(_) | Error::WatchError(_) => true,
        Error::GRpcStatus(status) => matches!(
            status.code(),
            tonic::Code::Unavailable
                | tonic::Code::DeadlineExceeded
                | tonic::Code::Unknown
                | tonic::Code::Cancelled
                | tonic::Code::Internal
                | tonic::Code::Aborted
        ),
        _ => false,
    }
}

/// What an etcd refusal of the credentials or the token means, and what to
/// do; `None` for every other error. etcd refuses a wrong password and a
/// missing user with `InvalidArgument`, an expired token with
/// `Unauthenticated`.
fn authentication_refusal(err: &etcd_client::Error) -> Option<&'static str> {
    let etcd_client::Error::GRpcStatus(status) = err else {
        return None;
    };
    let message = status.message();
    if message.contains("authentication failed") || message.contains("invalid user") {
        Some("wrong user or password: check `EtcdConfig::user` or the member's URL")
    } else if message.contains("user name is empty") {
        Some(
            "the cluster has authentication enabled: give a user with `EtcdConfig::user` or \
             in the URL (`http://user:password@host:port`)",
        )
    } else if message.contains("authentication is not enabled") {
        Some("a user was given, but the cluster has authentication disabled")
    } else if status.code() == tonic::Code::Unauthenticated {
        Some("the member refused the token even after authenticating again")
    } else {
        None
    }
}

/// Whether the member no longer takes the token it was given (it expired,
/// or users or roles changed since), or got none (another call was taking
/// a new one): a new one may work.
pub(super) fn token_expired(err: &etcd_client::Error) -> bool {
    let etcd_client::Error::GRpcStatus(status) = err else {
        return false;
    };
    let message = status.message();
    message.contains("invalid auth token")
        || message.contains("revision of auth store is old")
        || message.contains("user name is empty")
}

/// Whether the connection was reset, as a member that serves TLS only does
/// to a plain connection.
fn reset(err: &etcd_client::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = match err {
        etcd_client::Error::GRpcStatus(status) => Some(status),
        etcd_client::Error::TransportError(transport) => Some(transport),
        other => Some(other),
    };
    while let Some(current) = cause {
        if current.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            )
        }) {
            return true;
        }
        cause = current.source();
    }
    false
}

/// Whether `err` is the refusal of a user without permission.
pub(super) fn refused_by_permissions(err: &BackendError) -> bool {
    err.kind() == BackendErrorKind::Permission
}

pub(super) fn error(member: &str, what: &str, err: &etcd_client::Error) -> BackendError {
    use etcd_client::Error;
    #[cfg(feature = "tls-rustls")]
    if let Some((failure, hint)) = super::tls::tls_failure(err) {
        return BackendError::new(
            BackendErrorKind::Tls,
            format!("etcd {member}: {what}"),
            format!("TLS handshake failed: {failure}; {hint}"),
        );
    }
    if let Some(hint) = authentication_refusal(err) {
        return BackendError::new(
            BackendErrorKind::Authentication,
            format!("etcd {member}: {what}"),
            format!("authentication failed: {err}; {hint}"),
        );
    }
    let kind = match err {
        Error::IoError(_) | Error::TransportError(_) => BackendErrorKind::Unreachable,
        Error::GRpcStatus(status) => match status.code() {
            tonic::Code::Unavailable => BackendErrorKind::Unreachable,
            tonic::Code::DeadlineExceeded => BackendErrorKind::Timeout,
            tonic::Code::PermissionDenied => BackendErrorKind::Permission,
            _ => BackendErrorKind::Other,
        },
        _ => BackendErrorKind::Other,
    };
    let message = match kind {
        _ if reset(err) => format!(
            "the member reset the connection: {err}; a member that serves TLS only does so to \
             plain connections: write `https://` and give its CA with \
             `EtcdConfig::tls_root_certificate`"
        ),
        BackendErrorKind::Unreachable => format!("server unreachable: {err}"),
        BackendErrorKind::Permission => format!(
            "permission denied: {err}; grant the user read and write on the lock keys and \
             everything under them (`<key>/queue/`, `<key>/shares/`), and on the fence keys: \
             under a namespace, `readwrite` on the prefixes `namespace:` and `{{namespace:`"
        ),
        _ => err.to_string(),
    };
    BackendError::new(kind, format!("etcd {member}: {what}"), message)
}

pub(super) fn lease_not_found(err: &etcd_client::Error) -> bool {
    match err {
        etcd_client::Error::GRpcStatus(status) => status.code() == tonic::Code::NotFound,
        etcd_client::Error::LeaseKeepAliveError(message) => message.contains("not found"),
        _ => false,
    }
}

impl EtcdBackend {
    /// Runs `op` on the current member, then on each other one in turn while
    /// the failure is one another member may not have (unreachable, slow, no
    /// leader), for up to the response timeout: a cluster electing a leader
    /// answers "no leader" everywhere for about an election timeout, and an
    /// operation that waits that out (a release above all) spares the next
    /// holder a wait for the lease. Every operation sent here is safe to
    /// repeat: a retry of an acquire that went through finds its own value
    /// and reports it taken.
    pub(super) async fn call<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T, LockError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        /// Between two rounds over every member.
        const PAUSE: Duration = Duration::from_millis(50);
        let give_up = tokio::time::Instant::now() + self.config.response_timeout;
        let start = self.current.load(Ordering::Relaxed);
        let count = self.members.len();
        let mut failures = Vec::new();
        let mut last = None;
        for step in 0.. {
            if step > 0 && step % count == 0 {
                if tokio::time::Instant::now() + PAUSE >= give_up {
                    break;
                }
                tokio::time::sleep(PAUSE).await;
                // Only the last round's failures are reported.
                failures.clear();
            }
            let index = (start + step) % count;
            let member = &self.members[index];
            match tokio::time::timeout(self.config.response_timeout, member.run(&mut op)).await {
                Ok(Ok(value)) => {
                    if index != start {
                        self.current.store(index, Ordering::Relaxed);
                        tracing::debug!(target: "lockmacro", member = %member.name, "etcd: moved to another member");
                    }
                    return Ok(value);
                }
                Ok(Err(err)) if !moves_on(&err) => {
                    return Err(error(&member.name, what, &err).with_source(err).into());
                }
                Ok(Err(err)) => {
                    let err = error(&member.name, what, &err).with_source(err);
                    failures.push(err.to_string());
                    last = Some(err.kind());
                }
                Err(_) => {
                    failures.push(format!(
                        "etcd {}: {what}: no answer within {:?}",
                        member.name, self.config.response_timeout
                    ));
                    last = Some(BackendErrorKind::Timeout);
                }
            }
        }
        let names: Vec<&str> = self.members.iter().map(|m| m.name.as_str()).collect();
        Err(BackendError::new(
            last.unwrap_or(BackendErrorKind::Unreachable),
            format!("etcd {}: {what}", names.join(", ")),
            format!("no member answered ({})", failures.join("; ")),
        )
        .into())
    }

    pub(super) async fn grant(&self, secs: i64, what: &str) -> Result<i64, LockError> {
        self.call(what, |mut client| async move {
            client.lease_grant(secs, None).await.map(|lease| lease.id())
        })
        .await
    }

    /// Revokes `lease`, which deletes every key still attached to it; a lease
    /// already gone is no error.
    pub(super) async fn revoke(&self, lease: i64, what: &str) -> Result<(), LockError> {
        self.call(what, |mut client| async move {
            match client.lease_revoke(lease).await {
                Ok(_) => Ok(()),
                Err(err) if lease_not_found(&err) => Ok(()),
                Err(err) => Err(err),
            }
        })
        .await
    }

    /// Renews `lease`; whether it still existed.
    pub(super) async fn keep_alive(&self, lease: i64, what: &str) -> Result<bool, LockError> {
        self.call(what, |mut client| async move {
            match client.lease_keep_alive(lease).await {
                Ok(_) => Ok(true),
                Err(err) if lease_not_found(&err) => Ok(false),
                Err(err) => Err(err),
            }
        })
        .await
    }

    pub(super) async fn txn(&self, what: &str, txn: Txn) -> Result<TxnResponse, LockError> {
        self.call(what, |mut client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })
        .await
    }

    /// The current key-values of `keys`, in order, `MAX_TXN_OPS` per read.
    pub(super) async fn read(
        &self,
        keys: &[&str],
        what: &str,
    ) -> Result<Vec<Option<KeyValue>>, LockError> {
        let mut found = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(MAX_TXN_OPS) {
            let ops: Vec<TxnOp> = chunk.iter().map(|key| TxnOp::get(*key, None)).collect();
            found.extend(gets(&self.txn(what, Txn::new().and_then(ops)).await?));
        }
        Ok(found)
    }
}

impl Member {
    /// `op` on this member, authenticating first if it has never done so,
    /// and once more when the member says the token expired.
    async fn run<T, F, Fut>(&self, op: &mut F) -> Result<T, etcd_client::Error>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        if self.tokens.load(Ordering::Acquire) == 0 {
            self.authenticate(0).await?;
        }
        let seen = self.tokens.load(Ordering::Acquire);
        match op(self.client.clone()).await {
            Err(err) if self.user.is_some() && token_expired(&err) => {
                tracing::debug!(target: "lockmacro", member = %self.name, "etcd: token expired; authenticating again");
                self.authenticate(seen).await?;
                op(self.client.clone()).await
            }
            other => other,
        }
    }

    /// Takes a new token for the user, unless another call did since the
    /// caller's token was taken (`seen`); every clone of the client carries
    /// it from then on. The old token is dropped first: etcd refuses an
    /// authentication that carries an expired token. A call sent meanwhile
    /// without one is refused as anonymous, and comes here too.
    async fn authenticate(&self, seen: u64) -> Result<(), etcd_client::Error> {
        let _one_at_a_time = self.authenticating.lock().await;
        if self.tokens.load(Ordering::Acquire) != seen {
            return Ok(());
        }
        if let Some(credentials) = &self.user {
            let mut client = self.client.clone();
            client.remove_client_auth();
            client
                .set_client_auth(credentials.user.clone(), credentials.password.clone())
                .await?;
        }
        self.tokens.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}
