//! What an operator sees and clears of a key: its kind and holders read
//! from the key and its shares prefix, with each lease's time to live; the
//! keys under a prefix; its leases deleted by force; a write turned into a
//! read.

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
};

use super::EtcdBackend;
use super::wire::{
    QUEUE, SHARES, fence, folder, metadata, owned_by, queue_prefix, ranges, share_key, share_of,
    shares_prefix,
};
use crate::backend::keys::is_companion;
use crate::backend::{HeldAs, Holder, Inspection, Share, TOKEN_LEN};
use crate::{KeyKind, LockError};

impl EtcdBackend {
    /// The key, its shares, its queue (counted) and its fence key, in one
    /// read; then the time to live of every holder's lease.
    pub(super) async fn inspect_key(
        &self,
        key: &str,
        fence_key: &str,
    ) -> Result<Inspection, LockError> {
        let what = format!("inspect `{key}`");
        let prefix = shares_prefix(key);
        let response = self
            .txn(
                &what,
                Txn::new().and_then([
                    TxnOp::get(key, None),
                    TxnOp::get(prefix.as_str(), Some(GetOptions::new().with_prefix())),
                    TxnOp::get(
                        queue_prefix(key),
                        Some(GetOptions::new().with_prefix().with_count_only()),
                    ),
                    TxnOp::get(fence_key, None),
                ]),
            )
            .await?;
        let waiters = match response.op_responses().get(2) {
            Some(TxnOpResponse::Get(counted)) => usize::try_from(counted.count()).unwrap_or(0),
            _ => 0,
        };
        let mut found = ranges(&response).into_iter();
        let mut next = || found.next().unwrap_or_default();
        let (lock, shares) = (next(), next());
        // The queue, counted above.
        next();
        let fence_kv = next();
        let mut held: Vec<(KeyKind, HeldAs, &KeyValue)> = lock
            .iter()
            .map(|kv| (KeyKind::Lock, HeldAs::Lock, kv))
            .collect();
        held.extend(shares.iter().filter_map(|kv| {
            let (kind, held_as) = share_of(folder(&prefix, kv.key()))?;
            Some((kind, held_as?, kv))
        }));
        let remaining = held
            .iter()
            .map(|(_, _, kv)| self.time_to_live(kv.lease(), &what));
        let remaining = futures_util::future::try_join_all(remaining).await?;
        let mut seen = Inspection::free();
        seen.kind = held.first().map(|(kind, _, _)| *kind);
        seen.holders = held
            .iter()
            .zip(remaining)
            .map(|((_, held_as, kv), left)| Holder::new(*held_as, metadata(kv), left))
            .collect();
        seen.waiters = waiters;
        // The fence key is written by the transaction that took the keys:
        // its last write's revision is the last token.
        seen.fence = fence_kv.first().map(|kv| fence(kv.mod_revision()));
        Ok(seen)
    }

    /// What is left of `lease`, in whole seconds as etcd tells it; `None`
    /// for a key without lease or a lease already gone.
    async fn time_to_live(&self, lease: i64, what: &str) -> Result<Option<Duration>, LockError> {
        let ttl = self.lease_ttl(lease, what).await?;
        Ok(ttl
            .and_then(|secs| u64::try_from(secs).ok())
            .map(Duration::from_secs))
    }

    /// The lock keys under `prefix`, in one range read of the names alone:
    /// a share names its key (`K/shares/…`), a fair waiter's entry, a fence
    /// counter and a waiters flag name none; sorted.
    pub(super) async fn list_keys(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let what = format!("list `{prefix}*`");
        let options = GetOptions::new().with_prefix().with_keys_only();
        let response = self
            .txn(
                &what,
                Txn::new().and_then([TxnOp::get(prefix, Some(options))]),
            )
            .await?;
        let mut keys: Vec<String> = ranges(&response)
            .into_iter()
            .flatten()
            .filter_map(|kv| {
                let name = kv.key_str().ok()?;
                if let Some(end) = name.rfind(SHARES) {
                    return Some(name[..end].to_owned());
                }
                (!name.contains(QUEUE) && !is_companion(name)).then(|| name.to_owned())
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        Ok(keys)
    }

    /// Deletes the key and everything under its shares prefix in one
    /// transaction. Each holder's next refresh finds its key gone and
    /// reports the lease lost; waiters hear the deletions.
    pub(super) async fn force_release_key(&self, key: &str) -> Result<bool, LockError> {
        let what = format!("force the release of `{key}`");
        let prefix = shares_prefix(key);
        let response = self
            .txn(
                &what,
                Txn::new().and_then([
                    TxnOp::delete(key, Some(DeleteOptions::new().with_prev_key())),
                    TxnOp::delete(
                        prefix.as_str(),
                        Some(DeleteOptions::new().with_prefix().with_prev_key()),
                    ),
                ]),
            )
            .await?;
        // A waiting writer's mark holds nothing.
        let held = response.op_responses().iter().any(|op| match op {
            TxnOpResponse::Delete(deleted) => deleted.prev_kvs().iter().any(|kv| {
                kv.key() == key.as_bytes()
                    || share_of(folder(&prefix, kv.key())).is_some_and(|(_, of)| of.is_some())
            }),
            _ => false,
        });
        Ok(held)
    }

    /// Moves `token`'s write of `key` to a read on the same lease, in one
    /// transaction that checks the write is still `token`'s.
    pub(super) async fn downgrade_write(&self, key: &str, token: &str) -> Result<bool, LockError> {
        if token.len() != TOKEN_LEN {
            return Ok(false);
        }
        let what = format!("downgrade `{key}`");
        let write = share_key(key, Share::Write, token);
        let read = share_key(key, Share::Read, token);
        let found = self.read(&[write.as_str()], &what).await?;
        let Some(kv) = found
            .into_iter()
            .flatten()
            .find(|kv| owned_by(kv, token) && kv.lease() != 0)
        else {
            return Ok(false);
        };
        let txn = Txn::new()
            .when([
                Compare::value(write.as_str(), CompareOp::Equal, kv.value()),
                Compare::lease(write.as_str(), CompareOp::Equal, kv.lease()),
            ])
            .and_then([
                TxnOp::delete(write.as_str(), None),
                TxnOp::put(
                    read.as_str(),
                    kv.value(),
                    Some(PutOptions::new().with_lease(kv.lease())),
                ),
            ]);
        if !self.txn(&what, txn).await?.succeeded() {
            return Ok(false);
        }
        if let Some(held) = self.held().get_mut(token) {
            held.share_key = Some(read);
        }
        Ok(true)
    }
}
