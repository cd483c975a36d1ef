//! What the memory backend keeps: leases, permits, fence counters and
//! listeners, with the operations on one lock.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::clock_micros;
use crate::backend::{AcquireRequest, Acquired, TOKEN_LEN};
use crate::{KeyKind, LockError};

#[derive(Debug)]
pub(super) struct State {
    pub(super) leases: HashMap<String, Lease>,
    /// Shared keys: the permits, reads or write held on each, in no order.
    pub(super) permits: HashMap<String, Vec<Permit>>,
    /// What each shared key is, set by its first share: it holds while
    /// the key has a live share and is written over once it has none.
    pub(super) kinds: HashMap<String, KeyKind>,
    /// Read-write keys with a writer waiting for their readers: until when
    /// readers that come after it wait behind it.
    pub(super) writing: HashMap<String, Instant>,
    pub(super) fences: HashMap<String, Fence>,
    /// How long a counter is kept after its last use.
    pub(super) fence_expiry: Duration,
    /// The largest token of any counter that expired: a new counter starts
    /// above it. Redis relies on its clock for that (see `fence.lua`); here
    /// the expiry follows the tokio clock, which a test may move far ahead
    /// of the system clock that seeds counters.
    pub(super) fence_floor: u64,
    /// Counters at the last sweep of expired ones.
    pub(super) fences_swept_at: usize,
    /// Leases count at the last sweep of expired entries; sweeping when the
    /// map has doubled since keeps the cost amortised O(1) per acquisition.
    pub(super) swept_at: usize,
    /// Per key with listeners: bumped by each release of that key.
    pub(super) releases: HashMap<String, watch::Sender<u64>>,
    /// Size of `releases` at its last sweep of keys nobody listens to.
    pub(super) releases_swept_at: usize,
    /// Fair waiters per key, first come first.
    pub(super) queues: HashMap<String, VecDeque<Waiter>>,
    /// Fair waiters listening, by token: told `Some(fence)` when handed the key.
    pub(super) grants: HashMap<String, watch::Sender<Option<u64>>>,
    /// Size of `grants` at its last sweep of waiters gone.
    pub(super) grants_swept_at: usize,
}

impl Default for State {
    fn default() -> Self {
        State {
            leases: HashMap::new(),
            permits: HashMap::new(),
            kinds: HashMap::new(),
            writing: HashMap::new(),
            fences: HashMap::new(),
            fence_expiry: crate::backend::DEFAULT_FENCE_EXPIRY,
            fence_floor: 0,
            fences_swept_at: 0,
            swept_at: 0,
            releases: HashMap::new(),
            releases_swept_at: 0,
            queues: HashMap::new(),
            grants: HashMap::new(),
            grants_swept_at: 0,
        }
    }
}

#[derive(Debug)]
pub(super) struct Fence {
    pub(super) value: u64,
    pub(super) expires: Instant,
}

#[derive(Debug)]
pub(super) struct Waiter {
    pub(super) value: String,
    pub(super) ttl: Duration,
    /// When the waiter gives up: it is dropped from the queue then.
    pub(super) expires: Instant,
    pub(super) fence_key: Option<String>,
    /// A waiter for one of this many permits, not for the whole key.
    pub(super) permits: Option<u32>,
}

impl Waiter {
    pub(super) fn token(&self) -> &str {
        self.value.get(..TOKEN_LEN).unwrap_or(&self.value)
    }
}

#[derive(Debug)]
pub(super) struct Lease {
    pub(super) value: String,
    pub(super) expires: Instant,
}

/// One share of a key (a permit, a read, or the write): its holder's token
/// and when it expires.
#[derive(Debug)]
pub(super) struct Permit {
    pub(super) token: String,
    pub(super) expires: Instant,
    pub(super) writer: bool,
    /// What the holder recorded, shown by `inspect`.
    pub(super) metadata: String,
}

/// What a token holds on a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Held {
    Lock,
    Permit,
}

impl Lease {
    /// What the holder recorded after its token.
    pub(super) fn metadata(&self) -> &str {
        self.value.get(TOKEN_LEN..).unwrap_or_default()
    }

    pub(super) fn owned_by(&self, token: &str) -> bool {
        self.value.as_bytes().get(..TOKEN_LEN) == Some(token.as_bytes())
    }
}

impl State {
    pub(super) fn live(&mut self, key: &str, now: Instant) -> Option<&mut Lease> {
        if self
            .leases
            .get(key)
            .is_some_and(|lease| lease.expires <= now)
        {
            self.leases.remove(key);
        }
        self.leases.get_mut(key)
    }

    pub(super) fn sweep(&mut self, now: Instant) {
        if self.leases.len() + self.permits.len() >= 2 * self.swept_at.max(512) {
            self.leases.retain(|_, lease| lease.expires > now);
            self.permits.retain(|_, permits| {
                permits.retain(|permit| permit.expires > now);
                !permits.is_empty()
            });
            self.writing.retain(|_, until| *until > now);
            let permits = &self.permits;
            self.kinds.retain(|key, _| permits.contains_key(key));
            self.swept_at = self.leases.len() + self.permits.len();
        }
    }

    /// What `token` holds on `key`: the lock, one of its permits, or nothing.
    pub(super) fn held_by(&mut self, key: &str, token: &str, now: Instant) -> Option<Held> {
        if self
            .live(key, now)
            .is_some_and(|lease| lease.owned_by(token))
        {
            return Some(Held::Lock);
        }
        self.live_permits(key, now)
            .is_some_and(|permits| permits.iter().any(|permit| permit.token == token))
            .then_some(Held::Permit)
    }

    pub(super) fn acquire(&mut self, req: &AcquireRequest<'_>) -> Result<Acquired, LockError> {
        let now = Instant::now();
        self.sweep(now);
        self.sweep_fences(now);
        self.fence_error(req, now)?;
        for (index, key) in req.keys.iter().enumerate() {
            // A key holding a fence counter is taken, as on Redis, where it
            // is a key like any other.
            if let Some(fence) = self.counter(key, now) {
                return Ok(Acquired::Busy {
                    index,
                    remaining: Some(fence.expires - now),
                    holder: None,
                });
            }
            self.check_kind(key, KeyKind::Lock, now)?;
            if let Some(lease) = self.live(key, now)
                && lease.value != req.value
            {
                return Ok(Acquired::Busy {
                    index,
                    remaining: Some(lease.expires - now),
                    holder: Some(lease.metadata().to_owned()),
                });
            }
        }
        let expires = now + req.ttl;
        for key in req.keys {
            self.leases.insert(
                key.clone(),
                Lease {
                    value: req.value.to_owned(),
                    expires,
                },
            );
        }
        // A retry after a lost reply mints a token too, as `fence.lua` says
        // why: the counter may be shared with other locks.
        let fence = req
            .fence_key
            .map(|fence_key| self.next_fence(fence_key, now));
        Ok(Acquired::Obtained { fence })
    }

    /// The live counter at `key`.
    pub(super) fn counter(&mut self, key: &str, now: Instant) -> Option<&mut Fence> {
        if let Some(fence) = self.fences.get(key)
            && fence.expires <= now
        {
            self.fence_floor = self.fence_floor.max(fence.value);
            self.fences.remove(key);
        }
        self.fences.get_mut(key)
    }

    /// As `fence_error` in `fence.lua`: a fence key that is one of the keys
    /// or a lock's key is refused before anything changes.
    pub(super) fn fence_error(
        &mut self,
        req: &AcquireRequest<'_>,
        now: Instant,
    ) -> Result<(), LockError> {
        let Some(fence_key) = req.fence_key else {
            return Ok(());
        };
        if req.keys.iter().any(|key| key == fence_key) {
            return Err(crate::backend::keys::fence_key_refused(
                fence_key,
                "the fence counter is also a key being locked",
            ));
        }
        if self.live(fence_key, now).is_some() {
            return Err(crate::backend::keys::fence_key_refused(
                fence_key,
                "the fence counter holds a value that is not a counter (a lock key?)",
            ));
        }
        Ok(())
    }

    /// The next token of the counter at `fence_key`, which then expires
    /// `fence_expiry` from now.
    pub(super) fn next_fence(&mut self, fence_key: &str, now: Instant) -> u64 {
        let (expiry, floor) = (self.fence_expiry, self.fence_floor);
        if self.counter(fence_key, now).is_none() {
            // Seeded from the clock like the Redis script's, so that tokens
            // from a restarted process still exceed those of the one before.
            let seed = clock_micros().max(floor);
            self.fences.insert(
                fence_key.to_owned(),
                Fence {
                    value: seed,
                    expires: now,
                },
            );
        }
        let counter = self.fences.get_mut(fence_key).expect("inserted above");
        counter.value += 1;
        counter.expires = now + expiry;
        counter.value
    }

    pub(super) fn sweep_fences(&mut self, now: Instant) {
        if self.fences.len() >= 2 * self.fences_swept_at.max(512) {
            let mut floor = self.fence_floor;
            self.fences.retain(|_, fence| {
                let live = fence.expires > now;
                if !live {
                    floor = floor.max(fence.value);
                }
                live
            });
            self.fence_floor = floor;
            self.fences_swept_at = self.fences.len();
        }
    }

    pub(super) fn listen(&mut self, key: &str) -> watch::Receiver<u64> {
        if self.releases.len() >= 2 * self.releases_swept_at.max(512) {
            self.releases
                .retain(|_, sender| sender.receiver_count() > 0);
            self.releases_swept_at = self.releases.len();
        }
        match self.releases.get(key) {
            Some(sender) => sender.subscribe(),
            None => {
                let (sender, receiver) = watch::channel(0);
                self.releases.insert(key.to_owned(), sender);
                receiver
            }
        }
    }

    pub(super) fn released(&mut self, key: &str) {
        if let Some(sender) = self.releases.get(key) {
            if sender.receiver_count() == 0 {
                self.releases.remove(key);
            } else {
                sender.send_modify(|releases| *releases += 1);
            }
        }
    }

    pub(super) fn refresh(
        &mut self,
        keys: &[String],
        token: &str,
        ttl: Duration,
        now: Instant,
    ) -> bool {
        let owned = self.all_owned(keys, token, now);
        if owned {
            for key in keys {
                if let Some(lease) = self.leases.get_mut(key) {
                    lease.expires = now + ttl;
                } else if let Some(permit) = self
                    .permits
                    .get_mut(key)
                    .and_then(|permits| permits.iter_mut().find(|permit| permit.token == token))
                {
                    permit.expires = now + ttl;
                }
            }
        }
        owned
    }

    pub(super) fn all_owned(&mut self, keys: &[String], token: &str, now: Instant) -> bool {
        keys.iter()
            .all(|key| self.held_by(key, token, now).is_some())
    }

    /// When `token`'s lease on `key` (a lock or a permit) expires.
    pub(super) fn expiry(&self, key: &str, token: &str) -> Option<Instant> {
        if let Some(lease) = self.leases.get(key) {
            return Some(lease.expires);
        }
        self.permits
            .get(key)?
            .iter()
            .find(|permit| permit.token == token)
            .map(|permit| permit.expires)
    }
}
