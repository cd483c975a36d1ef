//! Taking keys: one transaction for all of a lock's keys, on a lease of
//! the ttl; what a busy key reports; the leases this process tracks.

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnResponse,
};

use super::shares::shares_refuse_a_lock;
use super::wire::{
    MAX_TXN_OPS, fence, gets, lease_secs, metadata, owned_by, queue_prefix, revision, share_key,
    shares_prefix,
};

/// Most keys in one lock: etcd's limit on comparisons, three per key (the
/// key, its queue, its shares).
const MAX_KEYS: usize = MAX_TXN_OPS / 3;
use super::{EtcdBackend, Held};
use crate::LockError;
use crate::backend::{AcquireRequest, Acquired, TOKEN_LEN};

impl EtcdBackend {
    /// An attempt at `req`: a share, a fair one, or a plain one.
    pub(super) async fn obtain(&self, req: AcquireRequest<'_>) -> Result<Acquired, LockError> {
        match (req.share, req.queue_for) {
            (Some(share), _) => self.acquire_shared(&req, share).await,
            (None, Some(wait)) => self.acquire_fair(&req, wait).await,
            (None, None) => self.acquire_plain(&req).await,
        }
    }

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
            ..Held::default()
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
                    .map(|kv| (index, kv.lease(), Some(metadata(kv))))
            })
        };
        // A waiter queued ahead holds nothing: no holder to name.
        let waiter = |kvs| other(kvs).map(|(index, lease, _)| (index, lease, None));
        let Some((index, lease, holder)) = other(found).or_else(|| waiter(heads)) else {
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
            holder,
        })
    }

    /// What is left of `lease`; `None` for a key without lease.
    pub(super) async fn lease_left(
        &self,
        lease: i64,
        what: &str,
    ) -> Result<Option<Duration>, LockError> {
        let ttl = self.lease_ttl(lease, what).await?;
        // A lease about to go reports 0 or -1: it is gone within a second.
        Ok(ttl.map(|secs| Duration::from_secs(u64::try_from(secs).unwrap_or(0).max(1))))
    }

    /// What etcd says is left of `lease`, in whole seconds (0 or -1 for a
    /// lease about to go or gone); `None` for a key without lease.
    pub(super) async fn lease_ttl(&self, lease: i64, what: &str) -> Result<Option<i64>, LockError> {
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
        Ok(Some(ttl))
    }

    pub(super) async fn acquire_plain(
        &self,
        req: &AcquireRequest<'_>,
    ) -> Result<Acquired, LockError> {
        if req.keys.len() > MAX_KEYS {
            return Err(LockError::InvalidKey {
                key: req.keys.join(", "),
                reason: format!(
                    "etcd takes at most {MAX_KEYS} keys in one lock (three comparisons each, \
                     and etcd refuses a transaction of more than {MAX_TXN_OPS}); lock fewer keys"
                ),
            });
        }
        let what = format!("obtain `{}`", req.keys.join("`, `"));
        let secs = lease_secs(req.ttl);
        let lease = self.grant(secs, &what).await?;
        self.pending_lease(req, lease, secs);
        // Free: no holder, no fair waiter queued (an ordinary obtain does
        // not overtake them), and no share (a key is a lock or shares, not
        // both). An empty range compares as a missing key.
        let free: Vec<Compare> = req
            .keys
            .iter()
            .flat_map(|key| {
                [
                    Compare::create_revision(key.as_str(), CompareOp::Equal, 0),
                    Compare::create_revision(queue_prefix(key), CompareOp::Equal, 0).with_prefix(),
                    Compare::create_revision(shares_prefix(key), CompareOp::Equal, 0).with_prefix(),
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
            .chain(req.keys.iter().map(|key| {
                TxnOp::get(
                    shares_prefix(key),
                    Some(GetOptions::new().with_prefix().with_limit(1)),
                )
            }))
            .collect();
        let txn = Txn::new().when(free).and_then(puts).or_else(reads);
        let response = self.attach(&what, txn, req.token(), lease).await?;
        if response.succeeded() {
            self.taken(req, lease, secs, &what).await;
            return Ok(Acquired::Obtained {
                fence: req.fence_key.map(|_| fence(revision(&response))),
            });
        }
        let mut found = gets(&response);
        let mut heads = found.split_off(req.keys.len());
        let shares = heads.split_off(req.keys.len());
        if let Some((key, share)) = req
            .keys
            .iter()
            .zip(&shares)
            .find_map(|(key, share)| share.as_ref().map(|share| (key, share)))
        {
            self.give_back(req.token(), lease, &what).await;
            return Err(shares_refuse_a_lock(key, share.key()));
        }
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
        self.give_back(req.token(), lease, &what).await;
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
        let entry = held.entry(req.token().to_owned()).or_default();
        entry.lease = lease;
        entry.value = req.value.to_owned();
        entry.secs = secs;
        entry.share_key = req
            .share
            .map(|share| share_key(&req.keys[0], share, req.token()));
    }

    /// Sends `txn`, which attaches keys to `lease`, granted for an attempt
    /// of `token`; when it fails, the lease is given back.
    pub(super) async fn attach(
        &self,
        what: &str,
        txn: Txn,
        token: &str,
        lease: i64,
    ) -> Result<TxnResponse, LockError> {
        let response = self.txn(what, txn).await;
        if response.is_err() {
            self.give_back(token, lease, what).await;
        }
        response
    }

    /// Gives back `lease`, granted for an attempt of `token` that did not
    /// attach it: undoes [`pending_lease`](Self::pending_lease) and revokes it.
    pub(super) async fn give_back(&self, token: &str, lease: i64, what: &str) {
        self.unpend_lease(token, lease);
        self.forget_lease(lease, what).await;
    }

    fn unpend_lease(&self, token: &str, lease: i64) {
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
