//! Shares and queues: permits and read-write shares of a key, and fair
//! waiters served in order when a key or a share is given back.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::state::{Lease, Permit, State, Waiter};
use crate::backend::{AcquireRequest, Acquired, Share, TOKEN_LEN};
use crate::{KeyKind, LockError};

impl State {
    /// The live permits on `key`, if any.
    pub(super) fn live_permits(&mut self, key: &str, now: Instant) -> Option<&mut Vec<Permit>> {
        let permits = self.permits.get_mut(key)?;
        permits.retain(|permit| permit.expires > now);
        if permits.is_empty() {
            self.permits.remove(key);
            return None;
        }
        self.permits.get_mut(key)
    }

    /// As `acquire_shared.lua`: a share of the request's key.
    pub(super) fn acquire_shared(
        &mut self,
        req: &AcquireRequest<'_>,
        share: Share,
    ) -> Result<Acquired, LockError> {
        let now = Instant::now();
        self.sweep(now);
        self.sweep_fences(now);
        self.fence_error(req, now)?;
        let key = &req.keys[0];
        if self.counter(key, now).is_some() {
            return Err(LockError::InvalidKey {
                key: key.clone(),
                reason: "the key holds a fence counter; a semaphore or a read-write lock \
                         needs a key of its own, e.g. `<key>:shared`"
                    .into(),
            });
        }
        self.check_kind(key, share.kind(), now)?;
        let token = req.token();
        let expires = now + req.ttl;
        if self.writing.get(key).is_some_and(|until| *until <= now) {
            self.writing.remove(key);
        }
        let writing = self.writing.get(key).copied();
        let held = self.permits.entry(key.clone()).or_default();
        held.retain(|permit| permit.expires > now);
        if let Some(mine) = held.iter_mut().find(|permit| permit.token == token) {
            // A retry after a lost reply: the same share, extended.
            mine.expires = expires;
            let fence = req.fence_key.map(|fence_key| {
                self.counter(fence_key, now)
                    .map_or(0, |counter| counter.value)
            });
            return Ok(Acquired::Obtained { fence });
        }
        let first = held.iter().map(|permit| permit.expires).min();
        let busy = |until: Option<Instant>| Acquired::Busy {
            index: 0,
            remaining: until.map(|until| until.saturating_duration_since(now)),
            holder: None,
        };
        match share {
            Share::Permits(permits) if req.queue_for.is_some() => {
                let wait = req.queue_for.unwrap_or_default();
                if !self.serve_permits(key, token, permits, now) {
                    let queue = self.queues.entry(key.clone()).or_default();
                    if !wait.is_zero() && queue.iter().all(|waiter| waiter.token() != token) {
                        queue.push_back(Waiter {
                            value: req.value.to_owned(),
                            ttl: req.ttl,
                            expires: now + wait,
                            fence_key: req.fence_key.map(str::to_owned),
                            permits: Some(permits),
                        });
                    }
                    let first = self
                        .permits
                        .get(key)
                        .and_then(|held| held.iter().map(|permit| permit.expires).min());
                    return Ok(busy(first));
                }
            }
            Share::Permits(permits) => {
                if held.len() >= usize::try_from(permits).unwrap_or(usize::MAX) {
                    return Ok(busy(first));
                }
            }
            Share::Write => {
                if let Some(first) = first {
                    // Readers hold it: a writer that will wait holds back
                    // the ones that come after it until its next attempt is
                    // due.
                    let mark = first + Duration::from_secs(1);
                    if req.wait && writing.is_none_or(|until| until < mark) {
                        self.writing.insert(key.clone(), mark);
                    }
                    return Ok(busy(Some(first)));
                }
                self.writing.remove(key);
            }
            Share::Read => {
                if let [only] = held.as_slice()
                    && only.writer
                {
                    return Ok(busy(Some(only.expires)));
                }
                if writing.is_some() {
                    return Ok(busy(writing));
                }
            }
        }
        let held = self.permits.entry(key.clone()).or_default();
        held.push(Permit {
            token: token.to_owned(),
            expires,
            writer: share == Share::Write,
            metadata: req.value.get(TOKEN_LEN..).unwrap_or_default().to_owned(),
        });
        self.kinds.insert(key.clone(), share.kind());
        let fence = req
            .fence_key
            .map(|fence_key| self.next_fence(fence_key, now));
        Ok(Acquired::Obtained { fence })
    }

    /// The memory twin of `acquire_fair.lua`.
    pub(super) fn acquire_fair(
        &mut self,
        req: &AcquireRequest<'_>,
        wait: Duration,
    ) -> Result<Acquired, LockError> {
        let now = Instant::now();
        self.fence_error(req, now)?;
        let key = &req.keys[0];
        self.check_kind(key, KeyKind::Lock, now)?;
        let token = req.token();
        let held = match self.live(key, now) {
            Some(lease) if lease.value == req.value => {
                lease.expires = now + req.ttl;
                let fence = req.fence_key.map(|fence_key| {
                    self.counter(fence_key, now)
                        .map_or(0, |counter| counter.value)
                });
                return Ok(Acquired::Obtained { fence });
            }
            Some(lease) => Some((lease.expires - now, lease.metadata().to_owned())),
            None => None,
        };
        let (held, holder) = held.unzip();
        let queue = self.queues.entry(key.clone()).or_default();
        queue.retain(|waiter| waiter.expires > now);
        let mine = queue.iter().position(|waiter| waiter.token() == token);
        let head = queue
            .front()
            .map(|waiter| (waiter.token() == token, waiter.expires));
        if held.is_none() && head.is_none_or(|(ours, _)| ours) {
            if let Some(mine) = mine {
                queue.remove(mine);
            }
            if queue.is_empty() {
                self.queues.remove(key);
            }
            return self.acquire(req);
        }
        if !wait.is_zero() && mine.is_none() {
            queue.push_back(Waiter {
                value: req.value.to_owned(),
                ttl: req.ttl,
                expires: now + wait,
                fence_key: req.fence_key.map(str::to_owned),
                permits: None,
            });
        }
        let remaining = held.or(head.map(|(_, expires)| expires - now));
        Ok(Acquired::Busy {
            index: 0,
            remaining,
            holder,
        })
    }

    /// Serves the fair waiters for permits of `key` in line before `token`,
    /// each handed a permit while one is free, as a release would. Returns
    /// whether a permit is left for `token` (its entry, if any, removed).
    pub(super) fn serve_permits(
        &mut self,
        key: &str,
        token: &str,
        permits: u32,
        now: Instant,
    ) -> bool {
        let limit = usize::try_from(permits).unwrap_or(usize::MAX);
        loop {
            let held = self.permits.get(key).map_or(0, Vec::len);
            let Some(queue) = self.queues.get_mut(key) else {
                return held < limit;
            };
            queue.retain(|waiter| waiter.expires > now);
            let Some(head) = queue.front() else {
                self.queues.remove(key);
                return held < limit;
            };
            if head.token() == token {
                if held < limit {
                    queue.pop_front();
                    if queue.is_empty() {
                        self.queues.remove(key);
                    }
                    return true;
                }
                return false;
            }
            if held >= limit {
                return false;
            }
            let next = queue.pop_front().expect("a head was found");
            self.grant_permit(key, next, now);
        }
    }

    /// Gives `next` a permit of `key` and tells it so.
    pub(super) fn grant_permit(&mut self, key: &str, next: Waiter, now: Instant) {
        let fence = next
            .fence_key
            .as_ref()
            .map_or(0, |fence_key| self.next_fence(fence_key, now));
        if let Some(granted) = self.grants.remove(next.token()) {
            granted.send_replace(Some(fence));
        }
        self.permits
            .entry(key.to_owned())
            .or_default()
            .push(Permit {
                token: next.token().to_owned(),
                expires: now + next.ttl,
                writer: false,
                metadata: next.value.get(TOKEN_LEN..).unwrap_or_default().to_owned(),
            });
        if let Some(permits) = next.permits {
            self.kinds
                .insert(key.to_owned(), KeyKind::Semaphore { permits });
        }
    }

    /// After a permit of `key` was given back: the first fair waiters get
    /// the permits free, while there are. Returns whether any did.
    pub(super) fn hand_over_permits(&mut self, key: &str, now: Instant) -> bool {
        let mut granted = false;
        loop {
            let held = self.permits.get(key).map_or(0, Vec::len);
            let Some(queue) = self.queues.get_mut(key) else {
                return granted;
            };
            queue.retain(|waiter| waiter.expires > now);
            let free = queue
                .front()
                .and_then(|head| head.permits)
                .is_some_and(|permits| held < usize::try_from(permits).unwrap_or(usize::MAX));
            if !free {
                if queue.is_empty() {
                    self.queues.remove(key);
                }
                return granted;
            }
            let next = queue.pop_front().expect("a head was found");
            self.grant_permit(key, next, now);
            granted = true;
        }
    }

    /// After a release of `key` by `token`: drops the waiters gone and
    /// `token`'s own entry, then, if the key was released, hands it to the
    /// first waiter left. Returns whether it did.
    pub(super) fn hand_over(
        &mut self,
        key: &str,
        token: &str,
        released: bool,
        now: Instant,
    ) -> bool {
        let Some(queue) = self.queues.get_mut(key) else {
            return false;
        };
        queue.retain(|waiter| waiter.expires > now && waiter.token() != token);
        let next = if released { queue.pop_front() } else { None };
        if queue.is_empty() {
            self.queues.remove(key);
        }
        let Some(next) = next else {
            return false;
        };
        let fence = next
            .fence_key
            .as_ref()
            .map_or(0, |fence_key| self.next_fence(fence_key, now));
        if let Some(granted) = self.grants.remove(next.token()) {
            granted.send_replace(Some(fence));
        }
        self.leases.insert(
            key.to_owned(),
            Lease {
                value: next.value,
                expires: now + next.ttl,
            },
        );
        true
    }

    pub(super) fn listen_granted(&mut self, token: &str) -> watch::Receiver<Option<u64>> {
        if self.grants.len() >= 2 * self.grants_swept_at.max(512) {
            self.grants.retain(|_, sender| sender.receiver_count() > 0);
            self.grants_swept_at = self.grants.len();
        }
        let (sender, receiver) = watch::channel(None);
        self.grants.insert(token.to_owned(), sender);
        receiver
    }
}
