//! What a key is, and what an operator sees and clears of it: the kind
//! check of every acquire, `inspect`, `keys`, `force_release` and the
//! downgrade of a write to a read.

use tokio::time::Instant;

use super::state::State;
use crate::backend::{HeldAs, Holder, Inspection};
use crate::{KeyKind, LockError};

impl State {
    /// What `key` is held as, if anything holds it.
    pub(super) fn kind(&mut self, key: &str, now: Instant) -> Option<KeyKind> {
        if self.live(key, now).is_some() {
            return Some(KeyKind::Lock);
        }
        self.live_permits(key, now)?;
        // A share is only ever added with its kind.
        self.kinds.get(key).copied()
    }

    /// Refuses an acquire of `key` as `asked` while it is held as another
    /// kind, before anything is written.
    pub(super) fn check_kind(
        &mut self,
        key: &str,
        asked: KeyKind,
        now: Instant,
    ) -> Result<(), LockError> {
        match self.kind(key, now) {
            Some(held) if held != asked => Err(LockError::WrongKind {
                key: key.to_owned(),
                held,
                asked,
            }),
            _ => Ok(()),
        }
    }

    pub(super) fn inspect(&mut self, key: &str, fence_key: &str, now: Instant) -> Inspection {
        let mut seen = Inspection::free();
        seen.kind = self.kind(key, now);
        if let Some(lease) = self.live(key, now) {
            let left = lease.expires - now;
            seen.holders
                .push(Holder::new(HeldAs::Lock, lease.metadata(), Some(left)));
        } else if let Some(permits) = self.live_permits(key, now) {
            let reads = seen.kind == Some(KeyKind::ReadWrite);
            seen.holders = permits
                .iter()
                .map(|permit| {
                    let held_as = match (permit.writer, reads) {
                        (true, _) => HeldAs::Write,
                        (false, true) => HeldAs::Read,
                        (false, false) => HeldAs::Permit,
                    };
                    Holder::new(held_as, &permit.metadata, Some(permit.expires - now))
                })
                .collect();
        }
        seen.waiters = self.queues.get(key).map_or(0, |queue| {
            queue.iter().filter(|waiter| waiter.expires > now).count()
        });
        seen.fence = self.counter(fence_key, now).map(|counter| counter.value);
        seen
    }

    /// The keys under `prefix` held now, as a lock or by a share; sorted.
    pub(super) fn keys(&mut self, prefix: &str, now: Instant) -> Vec<String> {
        let candidates: Vec<String> = self
            .leases
            .keys()
            .chain(self.permits.keys())
            .filter(|key| key.starts_with(prefix))
            .cloned()
            .collect();
        let mut keys: Vec<String> = candidates
            .into_iter()
            .filter(|key| self.kind(key, now).is_some())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// Deletes every lease on `key`, then serves its fair waiters and wakes
    /// the others as a release would.
    pub(super) fn force_release(&mut self, key: &str, now: Instant) -> bool {
        let lock = self.live(key, now).is_some();
        let shares = self.live_permits(key, now).is_some();
        self.leases.remove(key);
        self.permits.remove(key);
        self.kinds.remove(key);
        self.writing.remove(key);
        // No waiter holds this token: every one stays in line.
        let nobody = "";
        let handed = lock && self.hand_over(key, nobody, true, now);
        if shares {
            self.hand_over_permits(key, now);
        }
        if !handed && (lock || shares) {
            self.released(key);
        }
        lock || shares
    }

    /// Turns `token`'s write of `key` into a read, with the same expiry,
    /// and wakes the readers waiting for it.
    pub(super) fn downgrade(&mut self, key: &str, token: &str, now: Instant) -> bool {
        let Some(write) = self.live_permits(key, now).and_then(|permits| {
            permits
                .iter_mut()
                .find(|permit| permit.writer && permit.token == token)
        }) else {
            return false;
        };
        write.writer = false;
        self.released(key);
        true
    }
}
