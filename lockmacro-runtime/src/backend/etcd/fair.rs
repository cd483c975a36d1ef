//! Fair waiters: a queue of entries under `<key>/queue/`, the oldest first
//! in line.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp};

use super::shares::shares_refuse_a_lock;
use super::wire::{fence, gets, lease_secs, queue_prefix, revision, share_key, shares_prefix};
use super::{EtcdBackend, Held};
use crate::LockError;
use crate::backend::{AcquireRequest, Acquired};

impl EtcdBackend {
    /// A fair attempt: take the key if it is free and nobody is queued ahead,
    /// else join its queue (once) for `wait`.
    pub(super) async fn acquire_fair(
        &self,
        req: &AcquireRequest<'_>,
        wait: Duration,
    ) -> Result<Acquired, LockError> {
        let key = req.keys[0].as_str();
        let what = format!("obtain `{key}` (fair)");
        let queue = queue_prefix(key);
        let shares = shares_prefix(key);
        let mine = format!("{queue}{}", req.token());
        // A few rounds at most: each one lost to a concurrent change of the
        // queue front means another waiter made progress.
        for _ in 0..8 {
            let head_options = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_limit(1);
            let response = self
                .txn(
                    &what,
                    Txn::new().and_then([
                        TxnOp::get(key, None),
                        TxnOp::get(queue.as_str(), Some(head_options)),
                        TxnOp::get(mine.as_str(), None),
                        TxnOp::get(
                            shares.as_str(),
                            Some(GetOptions::new().with_prefix().with_limit(1)),
                        ),
                    ]),
                )
                .await?;
            let found = gets(&response);
            let (holder, head, queued) = (&found[0], &found[1], &found[2]);
            if let Some(share) = &found[3] {
                self.done_waiting(req.token(), &what).await;
                return Err(shares_refuse_a_lock(key, share.key()));
            }
            if let Some(holder) = holder
                && holder.value() == req.value.as_bytes()
            {
                // Taken by an earlier attempt whose reply was lost.
                let fence = req.fence_key.map(|_| fence(holder.create_revision()));
                self.done_waiting(req.token(), &what).await;
                return Ok(Acquired::Obtained { fence });
            }
            let first = head
                .as_ref()
                .is_none_or(|head| head.key() == mine.as_bytes());
            if holder.is_none() && first {
                // Nobody holds it and nobody is ahead: take it, unless the
                // queue's front changed since it was read.
                let front = match head {
                    Some(head) => Compare::create_revision(
                        queue.as_str(),
                        CompareOp::Greater,
                        head.create_revision() - 1,
                    )
                    .with_prefix(),
                    None => {
                        Compare::create_revision(queue.as_str(), CompareOp::Equal, 0).with_prefix()
                    }
                };
                let secs = lease_secs(req.ttl);
                let lease = self.grant(secs, &what).await?;
                self.pending_lease(req, lease, secs);
                let mut ops = vec![
                    TxnOp::put(key, req.value, Some(PutOptions::new().with_lease(lease))),
                    TxnOp::delete(mine.as_str(), None),
                ];
                if let Some(fence_key) = req.fence_key {
                    ops.push(TxnOp::put(fence_key, req.token(), None));
                }
                let txn = Txn::new()
                    .when([
                        Compare::create_revision(key, CompareOp::Equal, 0),
                        front,
                        Compare::create_revision(shares.as_str(), CompareOp::Equal, 0)
                            .with_prefix(),
                    ])
                    .and_then(ops);
                let response = self.attach(&what, txn, req.token(), lease).await?;
                if response.succeeded() {
                    self.taken(req, lease, secs, &what).await;
                    return Ok(Acquired::Obtained {
                        fence: req.fence_key.map(|_| fence(revision(&response))),
                    });
                }
                self.give_back(req.token(), lease, &what).await;
                continue;
            }
            if !wait.is_zero()
                && queued.is_none()
                && self.join_queue(req, &mine, wait, &what).await?
            {
                // Joined behind whoever was first: the key may have been
                // freed meanwhile, with this waiter first; look again.
                continue;
            }
            let remaining = match (holder, head) {
                (Some(holder), _) => self.lease_left(holder.lease(), &what).await?,
                (None, Some(head)) => self.lease_left(head.lease(), &what).await?,
                (None, None) => Some(Duration::ZERO),
            };
            return Ok(Acquired::Busy {
                index: 0,
                remaining,
                holder: None,
            });
        }
        Ok(Acquired::Busy {
            index: 0,
            remaining: Some(Duration::ZERO),
            holder: None,
        })
    }

    /// Puts `entry`, `req`'s place in a queue, for `wait`, unless it is
    /// there already; whether it did.
    pub(super) async fn join_queue(
        &self,
        req: &AcquireRequest<'_>,
        entry: &str,
        wait: Duration,
        what: &str,
    ) -> Result<bool, LockError> {
        let queue_lease = self.grant(lease_secs(wait), what).await?;
        // Recorded first, as `pending_lease` does for a lock's lease: a
        // give-back while the join is on its way revokes it.
        self.held().insert(
            req.token().to_owned(),
            Held {
                queue_lease: Some(queue_lease),
                ..Held::default()
            },
        );
        let joined = self
            .txn(
                what,
                Txn::new()
                    .when([Compare::create_revision(entry, CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(
                        entry,
                        req.value,
                        Some(PutOptions::new().with_lease(queue_lease)),
                    )]),
            )
            .await;
        if joined
            .as_ref()
            .is_ok_and(etcd_client::TxnResponse::succeeded)
        {
            return Ok(true);
        }
        self.held().remove(req.token());
        self.forget_lease(queue_lease, what).await;
        joined.map(|_| false)
    }

    /// Records `req`'s keys (or share) taken on `lease`, and lets its place
    /// in a queue go.
    pub(super) async fn taken(&self, req: &AcquireRequest<'_>, lease: i64, secs: i64, what: &str) {
        let queue_lease = self.held().remove(req.token()).and_then(|h| h.queue_lease);
        if let Some(queue_lease) = queue_lease {
            self.forget_lease(queue_lease, what).await;
        }
        self.held().insert(
            req.token().to_owned(),
            Held {
                lease,
                value: req.value.to_owned(),
                secs,
                queue_lease: None,
                share_key: req
                    .share
                    .map(|share| share_key(&req.keys[0], share, req.token())),
            },
        );
    }

    /// Drops `token`'s place in a queue, if it has one.
    pub(super) async fn done_waiting(&self, token: &str, what: &str) {
        let queue_lease = {
            let mut held = self.held();
            match held.get_mut(token) {
                Some(entry) => entry.queue_lease.take(),
                None => None,
            }
        };
        if let Some(queue_lease) = queue_lease {
            self.forget_lease(queue_lease, what).await;
        }
    }
}
