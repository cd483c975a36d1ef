//! Refreshing leases: a keep-alive, or a move to a new lease when the ttl
//! changed, after one read that checks every key still holds its token.

use etcd_client::{PutOptions, Txn, TxnOp};

use super::wire::lease_secs;
use super::{EtcdBackend, Held};
use crate::LockError;
use crate::backend::{BoxFuture, RefreshRequest};
use crate::error::{BackendError, BackendErrorKind};

impl EtcdBackend {
    pub(super) async fn refresh_all(
        &self,
        requests: &[RefreshRequest<'_>],
    ) -> Vec<Result<bool, LockError>> {
        let what = "refresh";
        // One read for every key of every request: which ones still hold
        // their token, and on which lease. A share is read at its own key.
        let names: Vec<Vec<String>> = {
            let held = self.held();
            requests
                .iter()
                .map(|req| match held.get(req.token) {
                    Some(entry) => entry.names(req.keys),
                    None => req.keys.to_vec(),
                })
                .collect()
        };
        let flat: Vec<&str> = names.iter().flatten().map(String::as_str).collect();
        let found = match self.read(&flat, what).await {
            Ok(found) => found,
            Err(err) => {
                let kind = match &err {
                    LockError::Backend(err) => err.kind(),
                    _ => BackendErrorKind::Other,
                };
                let message = err.to_string();
                // The one failure, reported for each lease it left unconfirmed.
                return requests
                    .iter()
                    .map(|_| Err(BackendError::new(kind, "etcd", &message).into()))
                    .collect();
            }
        };
        let mut at = 0;
        let mut renewals = Vec::with_capacity(requests.len());
        for request_names in &names {
            let kvs = &found[at..at + request_names.len()];
            at += request_names.len();
            renewals.push(Self::common_lease(kvs, requests[renewals.len()].token));
        }
        let futures: Vec<BoxFuture<'_, Result<bool, LockError>>> = requests
            .iter()
            .zip(renewals)
            .zip(names)
            .map(
                |((req, current), names)| -> BoxFuture<'_, Result<bool, LockError>> {
                    Box::pin(async move {
                        let Some(current) = current else {
                            return Ok(false);
                        };
                        let secs = lease_secs(req.ttl);
                        let asked = self
                            .held()
                            .get(req.token)
                            .filter(|held| held.lease == current.lease)
                            .map_or(secs, |held| held.secs);
                        if asked == secs {
                            return self.keep_alive(current.lease, what).await;
                        }
                        self.move_to_new_lease(req, &names, current, secs).await
                    })
                },
            )
            .collect();
        futures_util::future::join_all(futures).await
    }

    /// A refresh to another ttl: etcd cannot change a lease's length, so the
    /// keys move to a new lease in one transaction, and the old one goes.
    pub(super) async fn move_to_new_lease(
        &self,
        req: &RefreshRequest<'_>,
        names: &[String],
        current: Held,
        secs: i64,
    ) -> Result<bool, LockError> {
        let what = "refresh to a new ttl";
        let lease = self.grant(secs, what).await?;
        let moves: Vec<TxnOp> = names
            .iter()
            .map(|key| {
                TxnOp::put(
                    key.as_str(),
                    "",
                    Some(PutOptions::new().with_lease(lease).with_ignore_value()),
                )
            })
            .collect();
        let txn = Txn::new()
            .when(Self::still_held(names, &current))
            .and_then(moves);
        let moved = match self.txn(what, txn).await {
            Ok(response) => response.succeeded(),
            Err(err) => {
                self.forget_lease(lease, what).await;
                return Err(err);
            }
        };
        if !moved {
            self.forget_lease(lease, what).await;
            return Ok(false);
        }
        self.held().insert(
            req.token.to_owned(),
            Held {
                lease,
                value: current.value.clone(),
                secs,
                share_key: (names != req.keys).then(|| names[0].clone()),
                ..Held::default()
            },
        );
        self.forget_lease(current.lease, what).await;
        Ok(true)
    }
}
