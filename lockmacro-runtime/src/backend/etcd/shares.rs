//! Shares of a key: permits (fair or not), reads and the write. Each share
//! is a key under `<key>/shares/` on its holder's lease. An attempt reads
//! the key, its shares and its queue, decides, and takes its share in one
//! transaction that fails if any share was added or changed since that read;
//! then it reads again.

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
};

use super::EtcdBackend;
use super::wire::{
    WRITING, fence, folder, lease_secs, metadata, queue_prefix, ranges, revision, share_key,
    share_of, shares_prefix,
};
use crate::backend::{AcquireRequest, Acquired, HeldAs, Share};
use crate::{KeyKind, LockError};

/// Rounds of read-then-take at most: each one lost to a concurrent change of
/// the shares means another holder made progress.
const ROUNDS: usize = 8;

/// What one read found of a key kept in shares.
struct Found {
    /// The lock key itself: a lock of the same name, which shares refuse.
    lock: Option<KeyValue>,
    /// Every share and waiting writer's mark.
    shares: Vec<KeyValue>,
    /// Fair waiters, oldest first.
    queue: Vec<KeyValue>,
    revision: i64,
}

/// What the share stored at `kv` says of the key's kind and of itself;
/// `None` for a key under the prefix the backend never writes.
fn stored(prefix: &str, kv: &KeyValue) -> Option<(KeyKind, Option<HeldAs>)> {
    share_of(folder(prefix, kv.key()))
}

/// The refusal of a lock on `key`, whose share `stored` says what it is.
pub(super) fn shares_refuse_a_lock(key: &str, stored: &[u8]) -> LockError {
    let prefix = shares_prefix(key);
    LockError::WrongKind {
        key: key.to_owned(),
        held: share_of(folder(&prefix, stored)).map_or(KeyKind::ReadWrite, |(kind, _)| kind),
        asked: KeyKind::Lock,
    }
}

impl EtcdBackend {
    pub(super) async fn acquire_shared(
        &self,
        req: &AcquireRequest<'_>,
        share: Share,
    ) -> Result<Acquired, LockError> {
        let key = req.keys[0].as_str();
        let what = format!("obtain a share of `{key}`");
        let prefix = shares_prefix(key);
        let mine = share_key(key, share, req.token());
        let entry = format!("{}{}", queue_prefix(key), req.token());
        let mark = format!("{prefix}{WRITING}{}", req.token());
        for _ in 0..ROUNDS {
            let found = self.read_shares(key, &what).await?;
            let held = match &found.lock {
                Some(_) => Some(KeyKind::Lock),
                None => found
                    .shares
                    .iter()
                    .filter_map(|kv| stored(&prefix, kv))
                    .map(|(kind, _)| kind)
                    .find(|kind| *kind != req.kind()),
            };
            if let Some(held) = held {
                self.done_waiting(req.token(), &what).await;
                return Err(LockError::WrongKind {
                    key: key.to_owned(),
                    held,
                    asked: req.kind(),
                });
            }
            if let Some(left) = found.shares.iter().find(|kv| kv.key() == mine.as_bytes()) {
                // Left by an earlier attempt of this obtain whose give-back
                // failed: its lease was granted before this attempt was sent
                // and cannot be trusted for its ttl, so it goes.
                self.forget_lease(left.lease(), &what).await;
                continue;
            }
            let place = found
                .queue
                .iter()
                .position(|kv| kv.key() == entry.as_bytes());
            let in_the_way = Self::in_the_way(&found, &prefix, share, place);
            if let Some(first) = in_the_way {
                let remaining = self.lease_left(first.lease(), &what).await?;
                if share == Share::Write && req.wait {
                    self.mark_writing(&found, &mark, remaining, &what).await?;
                }
                if let (Some(wait), None) = (req.queue_for, place)
                    && !wait.is_zero()
                    && self.join_queue(req, &entry, wait, &what).await?
                {
                    // Queued behind those already waiting: a permit may have
                    // come free meanwhile; look again.
                    continue;
                }
                return Ok(Acquired::Busy {
                    index: 0,
                    remaining,
                    // Waiters ahead and a waiting writer's mark hold nothing.
                    holder: stored(&prefix, first)
                        .and_then(|(_, held_as)| held_as)
                        .map(|_| metadata(first)),
                });
            }
            let secs = lease_secs(req.ttl);
            let lease = self.grant(secs, &what).await?;
            self.pending_lease(req, lease, secs);
            // Nothing added or changed among the shares since the read (a
            // share given back only leaves more room), and, for a permit not
            // yet in line, nobody queued since.
            let mut when = vec![
                Compare::create_revision(key, CompareOp::Equal, 0),
                Compare::mod_revision(prefix.as_str(), CompareOp::Less, found.revision + 1)
                    .with_prefix(),
            ];
            if matches!(share, Share::Permits(_)) && place.is_none() {
                when.push(
                    Compare::create_revision(
                        queue_prefix(key),
                        CompareOp::Less,
                        found.revision + 1,
                    )
                    .with_prefix(),
                );
            }
            let mut ops = vec![
                TxnOp::put(
                    mine.as_str(),
                    req.value,
                    Some(PutOptions::new().with_lease(lease)),
                ),
                TxnOp::delete(entry.as_str(), None),
                TxnOp::delete(mark.as_str(), None),
            ];
            if let Some(fence_key) = req.fence_key {
                ops.push(TxnOp::put(fence_key, req.token(), None));
            }
            let response = self
                .attach(
                    &what,
                    Txn::new().when(when).and_then(ops),
                    req.token(),
                    lease,
                )
                .await?;
            if response.succeeded() {
                self.taken(req, lease, secs, &what).await;
                if let Some(marked) = found.shares.iter().find(|kv| kv.key() == mark.as_bytes()) {
                    self.forget_lease(marked.lease(), &what).await;
                }
                return Ok(Acquired::Obtained {
                    fence: req.fence_key.map(|_| fence(revision(&response))),
                });
            }
            self.give_back(req.token(), lease, &what).await;
        }
        Ok(Acquired::Busy {
            index: 0,
            remaining: Some(std::time::Duration::ZERO),
            holder: None,
        })
    }

    /// The key, its shares and its queue, in one read.
    async fn read_shares(&self, key: &str, what: &str) -> Result<Found, LockError> {
        let oldest_first = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        let response = self
            .txn(
                what,
                Txn::new().and_then([
                    TxnOp::get(key, None),
                    TxnOp::get(shares_prefix(key), Some(GetOptions::new().with_prefix())),
                    TxnOp::get(queue_prefix(key), Some(oldest_first)),
                ]),
            )
            .await?;
        let mut found = ranges(&response).into_iter();
        let mut next = || found.next().unwrap_or_default();
        Ok(Found {
            lock: next().into_iter().next(),
            shares: next(),
            queue: next(),
            revision: revision(&response),
        })
    }

    /// The first share (or waiter) that keeps `share` out, if any: for a
    /// permit, the holders when all permits are taken, else the waiters
    /// ahead when there are no more free permits than them (an ordinary
    /// attempt, not in line, waits behind all of them); for a read, the
    /// writer or a writer waiting; for the write, any reader or writer.
    fn in_the_way<'f>(
        found: &'f Found,
        prefix: &str,
        share: Share,
        place: Option<usize>,
    ) -> Option<&'f KeyValue> {
        let among = |held_as: &[Option<HeldAs>]| {
            found
                .shares
                .iter()
                .find(|kv| stored(prefix, kv).is_some_and(|(_, of)| held_as.contains(&of)))
        };
        match share {
            Share::Permits(permits) => {
                let permits = usize::try_from(permits).unwrap_or(usize::MAX);
                let held = found
                    .shares
                    .iter()
                    .filter(|kv| stored(prefix, kv).is_some())
                    .count();
                let ahead = place.unwrap_or(found.queue.len());
                if held >= permits {
                    among(&[Some(HeldAs::Permit)])
                } else if held + ahead >= permits {
                    found.queue.first()
                } else {
                    None
                }
            }
            Share::Read => among(&[Some(HeldAs::Write), None]),
            Share::Write => among(&[Some(HeldAs::Read), Some(HeldAs::Write)]),
        }
    }

    /// Marks that readers coming after this waiting writer wait behind it,
    /// until about when its next attempt is due (`remaining`, what is left
    /// of the first share in its way, and a second): each attempt renews
    /// the mark, so a writer that gives up holds readers back no longer.
    async fn mark_writing(
        &self,
        found: &Found,
        mark: &str,
        remaining: Option<std::time::Duration>,
        what: &str,
    ) -> Result<(), LockError> {
        let secs = lease_secs(remaining.unwrap_or_default()) + 1;
        let lease = self.grant(secs, what).await?;
        let put = TxnOp::put(mark, "", Some(PutOptions::new().with_lease(lease)));
        if let Err(err) = self.txn(what, Txn::new().and_then([put])).await {
            self.forget_lease(lease, what).await;
            return Err(err);
        }
        if let Some(before) = found.shares.iter().find(|kv| kv.key() == mark.as_bytes()) {
            self.forget_lease(before.lease(), what).await;
        }
        Ok(())
    }
}
