use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::time::Instant;

use super::{
    AcquireRequest, Acquired, Backend, BoxFuture, FairQueue, RefreshRequest, ReleaseListener,
    Share, TOKEN_LEN,
};
use crate::LockError;

/// Locks held in this process's memory, with the same semantics as Redis:
/// leases expire on the tokio clock, tokens guard refresh and release, fence
/// counters survive release and expire a day after their last use (and
/// start at the system clock in microseconds, above any expired counter),
/// several keys are taken all or none, fair waiters queue per key and a
/// release hands the key to the first of them. Unlike Redis, the hand-off
/// needs no confirmation: a waiter's future that is dropped leaves the queue
/// at once, and there is no other process that could die in it.
///
/// For programs that run as a single process, for examples, and for unit tests
/// of code that uses locks (it follows `tokio::time::pause`). It cannot
/// exclude other processes: use [`RedisBackend`](super::RedisBackend) for
/// that.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// use lockmacro_runtime::{Locker, ObtainOptions};
///
/// let locker = Locker::memory();
/// let lock = locker.obtain("job", Duration::from_secs(5), ObtainOptions::default()).await.unwrap();
/// assert!(locker.obtain("job", Duration::from_secs(5), ObtainOptions::default()).await.is_err());
/// lock.release().await.unwrap();
/// # }
/// ```
#[derive(Debug, Default)]
pub struct MemoryBackend {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    leases: HashMap<String, Lease>,
    /// Shared keys: the permits, reads or write held on each, in no order.
    permits: HashMap<String, Vec<Permit>>,
    /// Read-write keys with a writer waiting for their readers: until when
    /// readers that come after it wait behind it.
    writing: HashMap<String, Instant>,
    fences: HashMap<String, Fence>,
    /// How long a counter is kept after its last use.
    fence_expiry: Duration,
    /// The largest token of any counter that expired: a new counter starts
    /// above it. Redis relies on its clock for that (see `fence.lua`); here
    /// the expiry follows the tokio clock, which a test may move far ahead
    /// of the system clock that seeds counters.
    fence_floor: u64,
    /// Counters at the last sweep of expired ones.
    fences_swept_at: usize,
    /// Leases count at the last sweep of expired entries; sweeping when the
    /// map has doubled since keeps the cost amortised O(1) per acquisition.
    swept_at: usize,
    /// Per key with listeners: bumped by each release of that key.
    releases: HashMap<String, watch::Sender<u64>>,
    /// Size of `releases` at its last sweep of keys nobody listens to.
    releases_swept_at: usize,
    /// Fair waiters per key, first come first.
    queues: HashMap<String, VecDeque<Waiter>>,
    /// Fair waiters listening, by token: told `Some(fence)` when handed the key.
    grants: HashMap<String, watch::Sender<Option<u64>>>,
    /// Size of `grants` at its last sweep of waiters gone.
    grants_swept_at: usize,
}

impl Default for State {
    fn default() -> Self {
        State {
            leases: HashMap::new(),
            permits: HashMap::new(),
            writing: HashMap::new(),
            fences: HashMap::new(),
            fence_expiry: super::DEFAULT_FENCE_EXPIRY,
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
struct Fence {
    value: u64,
    expires: Instant,
}

#[derive(Debug)]
struct Waiter {
    value: String,
    ttl: Duration,
    /// When the waiter gives up: it is dropped from the queue then.
    expires: Instant,
    fence_key: Option<String>,
    /// A waiter for one of this many permits, not for the whole key.
    permits: Option<u32>,
}

impl Waiter {
    fn token(&self) -> &str {
        self.value.get(..TOKEN_LEN).unwrap_or(&self.value)
    }
}

#[derive(Debug)]
struct Lease {
    value: String,
    expires: Instant,
}

/// One share of a key (a permit, a read, or the write): its holder's token
/// and when it expires.
#[derive(Debug)]
struct Permit {
    token: String,
    expires: Instant,
    writer: bool,
}

/// What a token holds on a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Lock,
    Permit,
}

impl Lease {
    fn owned_by(&self, token: &str) -> bool {
        self.value.as_bytes().get(..TOKEN_LEN) == Some(token.as_bytes())
    }
}

impl MemoryBackend {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long a fence counter is kept after the last token minted from it,
    /// as [`RedisConfig::fence_expiry`](super::RedisConfig::fence_expiry)
    /// sets it for Redis. Default [`DEFAULT_FENCE_EXPIRY`](super::DEFAULT_FENCE_EXPIRY),
    /// a day; at least 1 ms. A counter created after one expired starts
    /// above every token minted before, so tokens never go backwards.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, MemoryBackend, ObtainOptions};
    ///
    /// let locker = Locker::new(MemoryBackend::new().fence_expiry(Duration::from_secs(3600)));
    /// let lock = locker.obtain("job", Duration::from_secs(5), ObtainOptions::new().fence()).await?;
    /// assert!(lock.fence_token().is_some());
    /// # Ok(()) }
    /// ```
    pub fn fence_expiry(self, expiry: Duration) -> Self {
        self.state().fence_expiry = expiry.clamp(Duration::from_millis(1), crate::MAX_TTL);
        self
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while the lock was held cannot leave a lease half-written
        // (every change is a single map operation), so the data is still sound.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    fn live(&mut self, key: &str, now: Instant) -> Option<&mut Lease> {
        if self
            .leases
            .get(key)
            .is_some_and(|lease| lease.expires <= now)
        {
            self.leases.remove(key);
        }
        self.leases.get_mut(key)
    }

    fn sweep(&mut self, now: Instant) {
        if self.leases.len() + self.permits.len() >= 2 * self.swept_at.max(512) {
            self.leases.retain(|_, lease| lease.expires > now);
            self.permits.retain(|_, permits| {
                permits.retain(|permit| permit.expires > now);
                !permits.is_empty()
            });
            self.writing.retain(|_, until| *until > now);
            self.swept_at = self.leases.len() + self.permits.len();
        }
    }

    /// The live permits on `key`, if any.
    fn live_permits(&mut self, key: &str, now: Instant) -> Option<&mut Vec<Permit>> {
        let permits = self.permits.get_mut(key)?;
        permits.retain(|permit| permit.expires > now);
        if permits.is_empty() {
            self.permits.remove(key);
            return None;
        }
        self.permits.get_mut(key)
    }

    /// What `token` holds on `key`: the lock, one of its permits, or nothing.
    fn held_by(&mut self, key: &str, token: &str, now: Instant) -> Option<Held> {
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

    /// As `acquire_shared.lua`: a share of the request's key.
    fn acquire_shared(
        &mut self,
        req: &AcquireRequest<'_>,
        share: Share,
    ) -> Result<Acquired, LockError> {
        let now = Instant::now();
        self.sweep(now);
        self.sweep_fences(now);
        self.fence_error(req, now)?;
        let key = &req.keys[0];
        if self.live(key, now).is_some() || self.counter(key, now).is_some() {
            return Err(LockError::InvalidKey {
                key: key.clone(),
                reason: "the key holds something other than permits or read-write shares (a \
                         lock taken without them, or a fence counter); a semaphore or a \
                         read-write lock needs a key of its own, e.g. `<key>:shared`"
                    .into(),
            });
        }
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
        });
        let fence = req
            .fence_key
            .map(|fence_key| self.next_fence(fence_key, now));
        Ok(Acquired::Obtained { fence })
    }

    /// The live counter at `key`.
    fn counter(&mut self, key: &str, now: Instant) -> Option<&mut Fence> {
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
    fn fence_error(&mut self, req: &AcquireRequest<'_>, now: Instant) -> Result<(), LockError> {
        let Some(fence_key) = req.fence_key else {
            return Ok(());
        };
        if req.keys.iter().any(|key| key == fence_key) {
            return Err(super::keys::fence_key_refused(
                fence_key,
                "the fence counter is also a key being locked",
            ));
        }
        if self.live(fence_key, now).is_some() {
            return Err(super::keys::fence_key_refused(
                fence_key,
                "the fence counter holds a value that is not a counter (a lock key?)",
            ));
        }
        Ok(())
    }

    /// The next token of the counter at `fence_key`, which then expires
    /// `fence_expiry` from now.
    fn next_fence(&mut self, fence_key: &str, now: Instant) -> u64 {
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

    fn sweep_fences(&mut self, now: Instant) {
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

    fn acquire(&mut self, req: &AcquireRequest<'_>) -> Result<Acquired, LockError> {
        let now = Instant::now();
        self.sweep(now);
        self.sweep_fences(now);
        self.fence_error(req, now)?;
        let mut ours = 0;
        for (index, key) in req.keys.iter().enumerate() {
            // A key holding a fence counter is taken, as on Redis, where it
            // is a key like any other.
            if let Some(fence) = self.counter(key, now) {
                return Ok(Acquired::Busy {
                    index,
                    remaining: Some(fence.expires - now),
                });
            }
            if self.live_permits(key, now).is_some() {
                return Err(LockError::InvalidKey {
                    key: key.clone(),
                    reason: "the key holds permits (it was obtained with `permits`): lock it \
                             with the same `permits`, or name the lock differently"
                        .into(),
                });
            }
            if let Some(lease) = self.live(key, now) {
                if lease.value != req.value {
                    return Ok(Acquired::Busy {
                        index,
                        remaining: Some(lease.expires - now),
                    });
                }
                ours += 1;
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
        let retried = ours == req.keys.len();
        let fence = req.fence_key.map(|fence_key| {
            // A retry after a lost reply gets the token minted the first time.
            match self.counter(fence_key, now) {
                Some(counter) if retried => counter.value,
                _ => self.next_fence(fence_key, now),
            }
        });
        Ok(Acquired::Obtained { fence })
    }

    /// The memory twin of `acquire_fair.lua`.
    fn acquire_fair(
        &mut self,
        req: &AcquireRequest<'_>,
        wait: Duration,
    ) -> Result<Acquired, LockError> {
        let now = Instant::now();
        self.fence_error(req, now)?;
        let key = &req.keys[0];
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
            Some(lease) => Some(lease.expires - now),
            None => None,
        };
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
        })
    }

    /// Serves the fair waiters for permits of `key` in line before `token`,
    /// each handed a permit while one is free, as a release would. Returns
    /// whether a permit is left for `token` (its entry, if any, removed).
    fn serve_permits(&mut self, key: &str, token: &str, permits: u32, now: Instant) -> bool {
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
    fn grant_permit(&mut self, key: &str, next: Waiter, now: Instant) {
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
            });
    }

    /// After a permit of `key` was given back: the first fair waiters get
    /// the permits free, while there are. Returns whether any did.
    fn hand_over_permits(&mut self, key: &str, now: Instant) -> bool {
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
    fn hand_over(&mut self, key: &str, token: &str, released: bool, now: Instant) -> bool {
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

    fn listen_granted(&mut self, token: &str) -> watch::Receiver<Option<u64>> {
        if self.grants.len() >= 2 * self.grants_swept_at.max(512) {
            self.grants.retain(|_, sender| sender.receiver_count() > 0);
            self.grants_swept_at = self.grants.len();
        }
        let (sender, receiver) = watch::channel(None);
        self.grants.insert(token.to_owned(), sender);
        receiver
    }

    fn listen(&mut self, key: &str) -> watch::Receiver<u64> {
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

    fn released(&mut self, key: &str) {
        if let Some(sender) = self.releases.get(key) {
            if sender.receiver_count() == 0 {
                self.releases.remove(key);
            } else {
                sender.send_modify(|releases| *releases += 1);
            }
        }
    }

    fn refresh(&mut self, keys: &[String], token: &str, ttl: Duration, now: Instant) -> bool {
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

    fn all_owned(&mut self, keys: &[String], token: &str, now: Instant) -> bool {
        keys.iter()
            .all(|key| self.held_by(key, token, now).is_some())
    }

    /// When `token`'s lease on `key` (a lock or a permit) expires.
    fn expiry(&self, key: &str, token: &str) -> Option<Instant> {
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

/// The system clock in microseconds since the Unix epoch: where a new fence
/// counter starts.
fn clock_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

fn ready<'a, T: Send + 'a>(value: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

impl Backend for MemoryBackend {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn acquire<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        let mut state = self.state();
        match (req.share, req.queue_for) {
            (Some(share), _) => ready(state.acquire_shared(&req, share)),
            (None, Some(wait)) => ready(state.acquire_fair(&req, wait)),
            (None, None) => ready(state.acquire(&req)),
        }
    }

    fn refresh<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        ready(Ok(self.state().refresh(keys, token, ttl, Instant::now())))
    }

    fn refresh_many<'a>(
        &'a self,
        requests: &'a [RefreshRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, LockError>>> {
        let now = Instant::now();
        let mut state = self.state();
        let refreshed = requests
            .iter()
            .map(|req| Ok(state.refresh(req.keys, req.token, req.ttl, now)))
            .collect();
        ready(refreshed)
    }

    fn release<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        let now = Instant::now();
        let mut state = self.state();
        let mut all = true;
        for key in keys {
            let held = state.held_by(key, token, now);
            match held {
                Some(Held::Lock) => {
                    state.leases.remove(key);
                }
                Some(Held::Permit) => {
                    if let Some(permits) = state.permits.get_mut(key) {
                        permits.retain(|permit| permit.token != token);
                        if permits.is_empty() {
                            state.permits.remove(key);
                        }
                    }
                }
                None => all = false,
            }
            let owned = held == Some(Held::Lock);
            let handed = state.hand_over(key, token, owned, now);
            if held == Some(Held::Permit) {
                state.hand_over_permits(key, now);
            }
            // Waiters that do not queue are woken whenever a share is given
            // back: one may be left.
            if (!handed || held == Some(Held::Permit)) && held.is_some() {
                state.released(key);
            }
        }
        ready(Ok(all))
    }

    fn remaining<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Duration>, LockError>> {
        let now = Instant::now();
        let mut state = self.state();
        let remaining = if state.all_owned(keys, token, now) {
            keys.iter()
                .filter_map(|key| state.expiry(key, token).map(|expires| expires - now))
                .min()
        } else {
            None
        };
        ready(Ok(remaining))
    }

    fn listen<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ReleaseListener> {
        ready(ReleaseListener::new(self.state().listen(key), ()))
    }

    fn fair_queue(&self) -> Option<&dyn FairQueue> {
        Some(self)
    }

    fn keeps_shares(&self) -> bool {
        true
    }
}

impl FairQueue for MemoryBackend {
    fn listen_granted<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, ReleaseListener> {
        let _ = key;
        ready(ReleaseListener::granting(
            self.state().listen_granted(token),
            (),
        ))
    }

    fn listening(&self, key: &str) -> bool {
        let _ = key;
        true
    }
}
