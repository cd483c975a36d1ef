//! A backend written outside the crate, against its public `backend` module
//! only: a map in a mutex. The behaviour suite runs on it as on the
//! backends that ship with the crate, which shows that the trait and its
//! requests are enough to write one.
//!
//! It keeps a fair queue the way the Redis backends do: a release hands the
//! key to the first waiter for a grant lease only, and the waiter confirms
//! it. A waiter that died in the queue so holds the key for a second at
//! most, and the waiters behind it, which watch the hand-off, try again
//! when its lease ends, which passes the key on down the line.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use lockmacro_runtime::LockError;
use lockmacro_runtime::backend::{
    AcquireRequest, Acquired, Backend, BoxFuture, Capabilities, DEFAULT_GRANT_LEASE, FairQueue,
    HandOff, Handed, ReleaseListener, TOKEN_LEN,
};
use tokio::sync::watch;
use tokio::time::Instant;

/// Lock keys with their value and expiry, fence counters, fair queues, and
/// the channels that wake waiters.
#[derive(Default)]
pub struct MapBackend {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    held: HashMap<String, (String, Instant)>,
    counters: HashMap<String, u64>,
    /// Per key: bumped by each release that hands the key to nobody.
    releases: HashMap<String, watch::Sender<u64>>,
    /// Per key: fair waiters, first come first.
    queues: HashMap<String, VecDeque<Waiter>>,
    /// Per key: the hand-off its fair waiters watch until it is confirmed.
    hand_offs: HashMap<String, watch::Sender<Option<HandOff>>>,
    /// Per fair waiter listening, by token: the hand-offs to it.
    handed: HashMap<String, watch::Sender<Option<Handed>>>,
}

/// A fair waiter: what its acquire asked for, kept to take the key for it.
struct Waiter {
    value: String,
    ttl: Duration,
    fence_key: Option<String>,
    /// Its deadline: an entry left by a waiter that gave up without
    /// releasing must not hold up the queue.
    gives_up: Instant,
    /// Its last attempt that found it in line: a hand-off names it, so that
    /// the waiter knows its grant lease runs from no earlier than that
    /// attempt.
    attempt: u32,
}

impl Waiter {
    fn token(&self) -> &str {
        self.value.get(..TOKEN_LEN).unwrap_or(&self.value)
    }
}

impl State {
    /// The value of `key`, if it has not expired.
    fn value(&mut self, key: &str) -> Option<&str> {
        let now = Instant::now();
        self.held.retain(|_, (_, expiry)| *expiry > now);
        self.held.get(key).map(|(value, _)| value.as_str())
    }

    fn holds(&mut self, key: &str, token: &str) -> bool {
        token.len() == TOKEN_LEN
            && self
                .value(key)
                .is_some_and(|value| value.starts_with(token))
    }

    fn owns(&mut self, keys: &[String], token: &str) -> bool {
        keys.iter().all(|key| self.holds(key, token))
    }

    fn remaining(&self, key: &str) -> Option<Duration> {
        let now = Instant::now();
        self.held.get(key).map(|(_, expiry)| *expiry - now)
    }

    fn next_fence(&mut self, counter: &str) -> u64 {
        let next = self.counters.entry(counter.to_owned()).or_default();
        *next += 1;
        *next
    }

    fn acquire(&mut self, req: &AcquireRequest<'_>) -> Acquired {
        for (index, key) in req.keys.iter().enumerate() {
            if let Some(value) = self.value(key)
                && value != req.value
            {
                let holder = value.get(TOKEN_LEN..).unwrap_or_default().to_owned();
                return Acquired::Busy {
                    index,
                    remaining: self.remaining(key),
                    holder: Some(holder),
                };
            }
        }
        let expiry = Instant::now() + req.ttl;
        for key in req.keys {
            self.held
                .insert(key.clone(), (req.value.to_owned(), expiry));
        }
        let fence = req.fence_key.map(|counter| self.next_fence(counter));
        Acquired::Obtained { fence }
    }

    /// A fair attempt on the one key of `req`: it takes the key only when
    /// nobody is in line ahead, and otherwise stands in line.
    fn acquire_fair(&mut self, req: &AcquireRequest<'_>, wait: Duration) -> Acquired {
        let key = &req.keys[0];
        let token = req.token();
        if self.value(key) == Some(req.value) {
            // Handed to this waiter, which confirms it by trying again; or
            // a retry after a lost reply.
            self.confirm(key, token, req.ttl);
            let fence = req
                .fence_key
                .map(|counter| self.counters.get(counter).copied().unwrap_or(0));
            return Acquired::Obtained { fence };
        }
        let now = Instant::now();
        let free = self.value(key).is_none();
        let queue = self.queues.entry(key.clone()).or_default();
        queue.retain(|waiter| waiter.gives_up > now);
        let first = queue.front().is_none_or(|head| head.token() == token);
        if free && first {
            queue.retain(|waiter| waiter.token() != token);
            if queue.is_empty() {
                self.queues.remove(key);
            }
            return self.acquire(req);
        }
        match queue.iter_mut().find(|waiter| waiter.token() == token) {
            Some(mine) => mine.attempt = req.attempt,
            None if !wait.is_zero() => queue.push_back(Waiter {
                value: req.value.to_owned(),
                ttl: req.ttl,
                fence_key: req.fence_key.map(str::to_owned),
                gives_up: now + wait,
                attempt: req.attempt,
            }),
            None => {}
        }
        if free {
            // A hand-off lapsed unconfirmed: the key goes on to the next
            // in line.
            self.hand_over(key);
        }
        Acquired::Busy {
            index: 0,
            remaining: self.remaining(key),
            holder: None,
        }
    }

    /// Gives `key`, now free, to the first waiter still waiting, for a grant
    /// lease, and tells it and the others. Returns whether there was one.
    fn hand_over(&mut self, key: &str) -> bool {
        let now = Instant::now();
        let Some(queue) = self.queues.get_mut(key) else {
            return false;
        };
        queue.retain(|waiter| waiter.gives_up > now);
        let next = queue.pop_front();
        if queue.is_empty() {
            self.queues.remove(key);
        }
        let Some(next) = next else {
            return false;
        };
        let lease = DEFAULT_GRANT_LEASE.min(next.ttl);
        let fence = next
            .fence_key
            .as_deref()
            .map_or(0, |counter| self.next_fence(counter));
        let handed = Handed {
            lease,
            fence,
            attempt: next.attempt,
        };
        if let Some(to_waiter) = self.handed.get(next.token()) {
            to_waiter.send_replace(Some(handed));
        }
        if let Some(hand_offs) = self.hand_offs.get(key) {
            hand_offs.send_replace(Some(HandOff {
                token: next.token().to_owned(),
                until: now + lease,
                named: Some(handed),
            }));
        }
        self.held.insert(key.to_owned(), (next.value, now + lease));
        true
    }

    /// Extends `key` to `ttl` if `token` holds it, and, if it was handed to
    /// `token`, tells the other waiters that the hand-off was taken up.
    fn confirm(&mut self, key: &str, token: &str, ttl: Duration) -> bool {
        if !self.holds(key, token) {
            return false;
        }
        if let Some((_, expiry)) = self.held.get_mut(key) {
            *expiry = Instant::now() + ttl;
        }
        self.settle(key, token);
        true
    }

    /// The hand-off of `key` to `token`, if pending, is over: confirmed or
    /// given back.
    fn settle(&mut self, key: &str, token: &str) {
        if let Some(hand_offs) = self.hand_offs.get(key) {
            hand_offs.send_if_modified(|pending| {
                let to_token = pending
                    .as_ref()
                    .is_some_and(|pending| pending.token == token);
                if to_token {
                    *pending = None;
                }
                to_token
            });
        }
    }
}

impl MapBackend {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Backend for MapBackend {
    fn acquire<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        let mut state = self.state();
        let acquired = match req.queue_for {
            Some(wait) => state.acquire_fair(&req, wait),
            None => state.acquire(&req),
        };
        Box::pin(std::future::ready(Ok(acquired)))
    }

    fn refresh<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        let mut state = self.state();
        let owned = state.owns(keys, token);
        if owned {
            for key in keys {
                if let Some((_, expiry)) = state.held.get_mut(key) {
                    *expiry = Instant::now() + ttl;
                }
            }
        }
        Box::pin(std::future::ready(Ok(owned)))
    }

    fn release<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        let mut state = self.state();
        let mut all = true;
        for key in keys {
            // A fair waiter that gives up leaves the queue this way.
            if let Some(queue) = state.queues.get_mut(key) {
                queue.retain(|waiter| waiter.token() != token);
            }
            if !state.holds(key, token) {
                all = false;
                continue;
            }
            state.held.remove(key);
            // Given back before it was confirmed: the waiters behind need
            // not try again when its grant lease would have ended.
            state.settle(key, token);
            if !state.hand_over(key)
                && let Some(releases) = state.releases.get(key)
            {
                releases.send_modify(|releases| *releases += 1);
            }
        }
        Box::pin(std::future::ready(Ok(all)))
    }

    fn remaining<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Duration>, LockError>> {
        let mut state = self.state();
        let remaining = state.owns(keys, token).then(|| {
            keys.iter()
                .filter_map(|key| state.remaining(key))
                .min()
                .unwrap_or_default()
        });
        Box::pin(std::future::ready(Ok(remaining)))
    }

    fn listen<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ReleaseListener> {
        let mut state = self.state();
        state
            .releases
            .retain(|_, releases| releases.receiver_count() > 0);
        let releases = state
            .releases
            .entry(key.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        Box::pin(std::future::ready(ReleaseListener::new(releases, ())))
    }

    fn name(&self) -> &'static str {
        "map"
    }

    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities::none().with_fair_queue(self)
    }
}

impl FairQueue for MapBackend {
    fn listen_granted<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, ReleaseListener> {
        let mut state = self.state();
        // A listener dropped leaves its senders behind.
        state
            .handed
            .retain(|_, to_waiter| to_waiter.receiver_count() > 0);
        state
            .hand_offs
            .retain(|_, hand_offs| hand_offs.receiver_count() > 0);
        let (to_waiter, mine) = watch::channel(None);
        state.handed.insert(token.to_owned(), to_waiter);
        let hand_offs = state
            .hand_offs
            .entry(key.to_owned())
            .or_insert_with(|| watch::channel(None).0)
            .subscribe();
        // Nothing is handed over for good here, so nothing is ever sent on
        // `granted`; its sender lives as long as the listener, which would
        // take its end for the backend having stopped listening.
        let (granted, grant) = watch::channel(None);
        let listener =
            ReleaseListener::granting(grant, granted).hearing_hand_offs(hand_offs, token, mine);
        Box::pin(std::future::ready(listener))
    }

    /// Listening costs no round trip: a fair waiter listens before its
    /// first attempt.
    fn listening(&self, key: &str) -> bool {
        let _ = key;
        true
    }

    fn confirm<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        let confirmed = self.state().confirm(key, token, ttl);
        Box::pin(std::future::ready(Ok(confirmed)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use lockmacro_runtime::{Locker, ObtainOptions, RetryStrategy};

    use super::*;

    const TTL: Duration = Duration::from_secs(30);

    /// A waiter that died in the queue is handed the key for its grant
    /// lease only; the live waiter behind it, which sends nothing while it
    /// waits, takes the key once that lease ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hand_off_nobody_confirms_goes_down_the_line() {
        let backend = Arc::new(MapBackend::default());
        let locker = Locker::new(backend.clone());
        let held = locker
            .obtain("job", TTL, ObtainOptions::new())
            .await
            .expect("obtain");
        let keys = ["job".to_owned()];
        let dead = "0123456789abcdef0123456789abcdef";
        let queued = backend
            .acquire(
                AcquireRequest::new(&keys, dead, TTL)
                    .queue_for(TTL)
                    .attempt(1),
            )
            .await
            .expect("queue");
        assert!(matches!(queued, Acquired::Busy { .. }), "{queued:?}");
        let fair = ObtainOptions::new()
            .fair()
            .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(TTL));
        let waiter = tokio::spawn({
            let locker = locker.clone();
            async move { locker.obtain("job", TTL, fair).await }
        });
        while backend.state().queues.get("job").map_or(0, VecDeque::len) < 2 {
            tokio::task::yield_now().await;
        }
        let released = Instant::now();
        held.release().await.expect("release");
        assert_eq!(backend.state().value("job"), Some(dead));
        let lock = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the live waiter is handed the key in time")
            .expect("waiter task")
            .expect("the live waiter obtains");
        assert!(released.elapsed() >= DEFAULT_GRANT_LEASE);
        assert_eq!(
            backend.state().value("job"),
            Some(lock.token()),
            "the key is the live waiter's"
        );
        lock.release().await.expect("release");
    }
}
