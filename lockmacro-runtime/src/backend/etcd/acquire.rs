//! Taking keys: one transaction for all of a lock's keys, on a lease of
//! the ttl; what a busy key reports; the leases this process tracks.

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
};

use super::wire::{MAX_TXN_OPS, fence, gets, lease_secs, owned_by, queue_prefix, revision};
use super::{EtcdBackend, Held};
use crate::LockError;
use crate::backend::{AcquireRequest, Acquired, TOKEN_LEN};

impl EtcdBackend {
    /// The lease and value that `keys` hold for `token`: from what this
    /// process remembers, else read from the store. `None` when the keys do
    /// not all hold the token on one lease.
    pub(super) async fn lease_of(
        &self,
        keys: &[String],
        token: &str,
        what: &str,
    ) -> Result<Option<Held>, LockError> {
        if token.len() != TOKEN_LEN {
            return Ok(None);
        }
        if let Some(held) = self.held().get(token).filter(|held| held.lease != 0) {
            return Ok(Some(held.clone()));
        }
        let names: Vec<&str> = keys.iter().map(String::as_str).collect();
        let found = self.read(&names, what).await?;
        Ok(Self::common_lease(&found, token))
    }

    /// The lease and value shared by every key in `found`, if all hold `token`.
    pub(super) fn common_lease(found: &[Option<KeyValue>], token: &str) -> Option<Held> {
        let first = found.first()?.as_ref()?;
        let all = found.iter().all(|kv| {
            kv.as_ref().is_some_and(|kv| {
                owned_by(kv, token) && kv.lease() == first.lease() && kv.value() == first.value()
            })
        });
        (all && first.lease() != 0).then(|| Held {
            lease: first.lease(),
            value: String::from_utf8_lossy(first.value()).into_owned(),
            secs: 0,
            queue_lease: None,
        })
    }

    /// Compares that each key still holds `held`'s value on its lease.
    pub(super) fn still_held(keys: &[String], held: &Held) -> Vec<Compare> {
        keys.iter()
            .flat_map(|key| {
                [
                    Compare::value(key.as_str(), CompareOp::Equal, held.value.as_str()),
                    Compare::lease(key.as_str(), CompareOp::Equal, held.lease),
                ]
            })
            .collect()
    }

    /// Busy at the first key held by someone else (`found`), else at the
    /// first key with fair waiters queued (`heads`), with what is left of
    /// that holder's or waiter's lease.
    pub(super) async fn busy(
        &self,
        found: &[Option<KeyValue>],
        heads: &[Option<KeyValue>],
        value: &str,
        what: &str,
    ) -> Result<Acquired, LockError> {
        let other = |kvs: &[Option<KeyValue>]| {
            kvs.iter().enumerate().find_map(|(index, kv)| {
                kv.as_ref()
                    .filter(|kv| kv.value() != value.as_bytes())
                    .map(|kv| (index, kv.lease()))
            })
        };
        let Some((index, lease)) = other(found).or_else(|| other(heads)) else {
            // Changed between the comparison and the reads of another
            // attempt: try again at once.
            return Ok(Acquired::Busy {
                index: 0,
                remaining: Some(Duration::ZERO),
                holder: None,
            });
        };
        let remaining = self.lease_left(lease, what).await?;
        Ok(Acquired::Busy {
            index,
            remaining,
            holder: None,
        })
    }

    /// What is left of `lease`; `None` for a key without lease.
    pub(super) async fn lease_left(
        &self,
        lease: i64,
        what: &str,
    ) -> Result<Option<Duration>, LockError> {
        if lease == 0 {
            return Ok(None);
        }
        let ttl = self
            .call(what, |mut client| async move {
                client
                    .lease_time_to_live(lease, None)
                    .await
                    .map(|left| left.ttl())
            })
            .await?;
        // A lease about to go reports 0 or -1: it is gone within a second.
        Ok(Some(Duration::from_secs(
            u64::try_from(ttl).unwrap_or(0).max(1),
        )))
    }

    pub(super) async fn acquire_plain(
        &self,
        req: &AcquireRequest<'_>,
    ) -> Result<Acquired, LockError> {
        if req.keys.len() > MAX_TXN_OPS / 2 {
            return Err(LockError::InvalidKey {
                key: req.keys.join(", "),
                reason: format!(
                    "etcd takes at most {} keys in one lock (two comparisons each, and etcd \
                     refuses a transaction of more than {MAX_TXN_OPS}); lock fewer keys",
                    MAX_TXN_OPS / 2
                ),
            });
        }
        let what = format!("obtain `{}`", req.keys.join("`, `"));
        let secs = lease_secs(req.ttl);
        let lease = self.grant(secs, &what).await?;
        self.pending_lease(req, lease, secs);
        // Free: no holder, and no fair waiter queued (an ordinary obtain
        // does not overtake them). An empty range compares as a missing key.
        let free: Vec<Compare> = req
            .keys
            .iter()
            .flat_map(|key| {
                [
                    Compare::create_revision(key.as_str(), CompareOp::Equal, 0),
                    Compare::create_revision(queue_prefix(key), CompareOp::Equal, 0).with_prefix(),
                ]
            })
            .collect();
        let mut puts: Vec<TxnOp> = req
            .keys
            .iter()
            .map(|key| {
                TxnOp::put(
                    key.as_str(),
                    req.value,
                    Some(PutOptions::new().with_lease(lease)),
                )
            })
            .collect();
        if let Some(fence_key) = req.fence_key {
            puts.push(TxnOp::put(fence_key, req.token(), None));
        }
        let reads: Vec<TxnOp> = req
            .keys
            .iter()
            .map(|key| TxnOp::get(key.as_str(), None))
            .chain(req.keys.iter().map(|key| {
                let head = GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Ascend)
                    .with_limit(1);
                TxnOp::get(queue_prefix(key), Some(head))
            }))
            .collect();
        let txn = Txn::new().when(free).and_then(puts).or_else(reads);
        let response = match self.txn(&what, txn).await {
            Ok(response) => response,
            Err(err) => {
                self.unpend_lease(req.token(), lease);
                self.forget_lease(lease, &what).await;
                return Err(err);
            }
        };
        if response.succeeded() {
            self.held().insert(
                req.token().to_owned(),
                Held {
                    lease,
                    value: req.value.to_owned(),
                    secs,
                    queue_lease: None,
                },
            );
            return Ok(Acquired::Obtained {
                fence: req.fence_key.map(|_| fence(revision(&response))),
            });
        }
        let mut found = gets(&response);
        let heads = found.split_off(req.keys.len());
        // The keys hold our value: this transaction was sent again after one
        // that went through (its reply lost, or `call` moved to another
        // member), so they are on this attempt's lease, which must not be
        // revoked. On another lease, they are what an earlier attempt of
        // this obtain left when its give-back failed: that lease was granted
        // before this attempt was sent and cannot be trusted for its ttl, so
        // it goes, and the next attempt takes the keys afresh.
        if found.iter().all(|kv| {
            kv.as_ref()
                .is_some_and(|kv| kv.value() == req.value.as_bytes())
        }) && let Some(mut held) = Self::common_lease(&found, req.token())
        {
            if held.lease == lease {
                held.secs = secs;
                let fence = req
                    .fence_key
                    .map(|_| self::fence(found[0].as_ref().map_or(0, KeyValue::create_revision)));
                self.held().insert(req.token().to_owned(), held);
                return Ok(Acquired::Obtained { fence });
            }
            self.forget_lease(held.lease, &what).await;
        }
        self.unpend_lease(req.token(), lease);
        self.forget_lease(lease, &what).await;
        self.busy(&found, &heads, req.value, &what).await
    }

    /// Records `lease`, granted for an attempt of `req`'s token, before the
    /// request that attaches its keys to it is sent. A give-back that comes
    /// while that request is on its way (the obtain's future dropped, its
    /// claim released in the background) then finds the lease and revokes
    /// it: the keys go with it if the request landed first, and are never
    /// written if it lands later, as etcd refuses a put to a revoked lease.
    pub(super) fn pending_lease(&self, req: &AcquireRequest<'_>, lease: i64, secs: i64) {
        let mut held = self.held();
        let entry = held.entry(req.token().to_owned()).or_insert(Held {
            lease: 0,
            value: String::new(),
            secs: 0,
            queue_lease: None,
        });
        entry.lease = lease;
        entry.value = req.value.to_owned();
        entry.secs = secs;
    }

    /// Undoes [`pending_lease`](Self::pending_lease) for a request that did
    /// not attach the lease.
    pub(super) fn unpend_lease(&self, token: &str, lease: i64) {
        let mut held = self.held();
        if let Some(entry) = held.get_mut(token)
            && entry.lease == lease
        {
            if entry.queue_lease.is_none() {
                held.remove(token);
            } else {
                entry.lease = 0;
            }
        }
    }

    /// Revokes a lease that no key was attached to; failures only leave it
    /// to expire by itself.
    pub(super) async fn forget_lease(&self, lease: i64, what: &str) {
        if let Err(err) = self.revoke(lease, what).await {
            tracing::debug!(target: "lockmacro", %err, "etcd: unused lease left to expire");
        }
    }
}
