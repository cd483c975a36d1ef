//! One obtain, from its first attempt to a lease or a refusal.
//!
//! The wait is a value of its own, as tokio's `Acquire` is for a semaphore:
//! it keeps what must outlive one attempt (the listener, the counts, the
//! claim on the server), and each step is a method. The locker only checks
//! the request and starts it.
//!
//! A round is: one attempt; when the keys are busy, the pause the retry
//! strategy, the holder's lease and the deadline allow; then either a wait
//! on the listener for the key found busy, which a release or a fair
//! hand-off can end early, or, with no listener yet, one made at once.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{
    AcquireRequest, Acquired, Backend, FairQueue, Handed, ReleaseListener, TOKEN_LEN,
};
use crate::claim::Claim;
use crate::error::{BackendError, BackendErrorKind};
use crate::lease::{Lease, Timing};
use crate::registry::Registry;
use crate::{LockError, ObtainOptions, metrics};

/// How many times one obtain listens again after its listener's connection
/// closed; after that it waits by backoff, so that a server that keeps
/// dropping connections cannot make it spin.
const MAX_RELISTENS: u32 = 3;

/// What one obtain asks for, checked: it does not change while it waits.
pub(crate) struct Request {
    backend: Arc<dyn Backend>,
    /// The locker's registry: the lease is entered there, and what the wait
    /// leaves running in the background is tracked by it.
    registry: Arc<Registry>,
    /// Keys as the caller named them, sorted; shared with the lease.
    keys: Arc<[String]>,
    /// Keys on the wire, namespaced; `None` when they are `keys` (no
    /// namespace). Shared with the lease.
    namespaced: Option<Arc<[String]>>,
    fence_key: Option<String>,
    /// The token's 32 ASCII hex digits.
    token: [u8; TOKEN_LEN],
    /// What the keys hold: the token, then the metadata.
    value: String,
    ttl: Duration,
    /// The backend's drift margin for `ttl`.
    drift: Duration,
    opts: ObtainOptions,
}

impl Request {
    /// A request under a fresh token.
    pub(crate) fn new(
        backend: Arc<dyn Backend>,
        registry: Arc<Registry>,
        keys: Arc<[String]>,
        namespaced: Option<Arc<[String]>>,
        fence_key: Option<String>,
        ttl: Duration,
        opts: ObtainOptions,
    ) -> Self {
        // A uuid v4 from the thread's generator (ChaCha, seeded by the OS),
        // rather than `Uuid::new_v4`, which asks the OS for every one: a
        // system call per obtain. Drawn as one `u128`: an array of bytes is
        // drawn byte by byte, a word of the generator each.
        let uuid = uuid::Builder::from_random_bytes(rand::random::<u128>().to_ne_bytes())
            .into_uuid()
            .simple();
        let mut token = [0u8; TOKEN_LEN];
        let hex = uuid.encode_lower(&mut token);
        // Copied, rather than formatted again through `Display`.
        let mut value = String::with_capacity(TOKEN_LEN + opts.metadata.len());
        value.push_str(hex);
        value.push_str(&opts.metadata);
        Request {
            value,
            drift: backend.drift(ttl),
            backend,
            registry,
            keys,
            namespaced,
            fence_key,
            token,
            ttl,
            opts,
        }
    }

    fn token(&self) -> &str {
        std::str::from_utf8(&self.token).expect("a simple uuid is ASCII hex")
    }

    /// The keys as sent, namespaced.
    fn wire_keys(&self) -> &[String] {
        self.namespaced.as_deref().unwrap_or(&self.keys)
    }

    /// The first key in sorted order, as the caller named it: the one errors
    /// name.
    pub(crate) fn key(&self) -> &str {
        &self.keys[0]
    }

    /// True while a lease confirmed by a request sent at `sent` can still be
    /// trusted: the ttl, less the drift margin, has not run out.
    fn trusted(&self, sent: Instant) -> bool {
        Instant::now() < sent + self.ttl.saturating_sub(self.drift)
    }
}

/// An obtain under way.
pub(crate) struct Wait<'a> {
    request: &'a Request,
    labels: metrics::Labels<'a>,
    /// When the obtain began: the wait metrics count from here.
    start: Instant,
    /// When the retry strategy gives up, if it has a deadline.
    deadline: Option<Instant>,
    /// While the backend can wake the waiter, wait for a wake-up rather
    /// than the backoff.
    wakeups_only: bool,
    /// The fair queue, for a fair obtain (the checks made sure there is one).
    queue: Option<&'a dyn FairQueue>,
    /// Attempts as the retry strategy counts them: the one sent only to catch
    /// a release made before listening is left out.
    attempts: u32,
    /// Every attempt sent, the first included: a hand-off names the attempt
    /// it followed.
    sent_attempts: u32,
    /// Listens for the release of the key last found busy (its index), so
    /// that a wait ends when the holder releases rather than at the end of
    /// the backoff. Declared before the claim, so that a waiter stops
    /// listening before it gives back what it claimed. Boxed: only a
    /// waiter listens, and inline the listener would widen every obtain's
    /// future.
    listening: Option<(usize, Box<ReleaseListener>)>,
    /// How often the listener was made again after its connection closed.
    relistened: u32,
    /// The holder's metadata as an earlier attempt found it: a later one
    /// may not carry it (a script's answer on Redis does not).
    holder: Option<String>,
    /// True once an attempt joined the key's queue. The entry is this
    /// call's until it is given back, even when a later attempt does not
    /// join (the one sent at the deadline) or fails: only its expiry would
    /// remove it, and a release reads the queue's entries in order.
    queued: bool,
    /// Gives back whatever this call may own on the server, however it ends
    /// without a lease (gave up, failed, or its future was dropped).
    claim: Claim<'a>,
}

/// What one attempt came to.
enum Answer {
    /// The keys are this call's, under this lease.
    Obtained(Arc<Lease>),
    /// The keys are held by someone else.
    Busy(Busy),
}

/// What the first attempt came to: the lease, or the keys busy.
pub(crate) struct First(pub(crate) Result<Arc<Lease>, Busy>);

/// What an attempt that found the keys held leaves for the rest of the round.
pub(crate) struct Busy {
    /// Which key was held.
    index: usize,
    /// How long its holder's lease has left, when the backend told.
    remaining: Option<Duration>,
    /// The holder's metadata, when the backend told.
    holder: Option<String>,
    /// When the attempt was sent: a key handed over after it is ours from then.
    sent: Instant,
}

impl<'a> Wait<'a> {
    /// Starts the clock of an obtain of `request` by a locker under `namespace`.
    pub(crate) fn new(request: &'a Request, namespace: &'a str) -> Self {
        let start = Instant::now();
        let opts = &request.opts;
        Wait {
            request,
            labels: metrics::Labels {
                backend: request.backend.name(),
                namespace,
            },
            start,
            deadline: opts.retry.get_deadline().map(|wait| start + wait),
            wakeups_only: opts.wakeups_only || opts.fair,
            queue: request
                .backend
                .capabilities()
                .fair_queue
                .filter(|_| opts.fair),
            attempts: 0,
            sent_attempts: 0,
            listening: None,
            relistened: 0,
            holder: None,
            queued: false,
            claim: Claim::new(
                &request.backend,
                request.registry.tracker(),
                request.wire_keys(),
                request.token(),
            ),
        }
    }

    /// The first attempt, and a fair waiter's listening before it: the
    /// lease, or what [`rest`](Self::rest) goes on from.
    pub(crate) async fn first(&mut self) -> Result<First, LockError> {
        self.listen_ahead().await;
        Ok(match self.attempt().await? {
            Answer::Obtained(lease) => First(Ok(lease)),
            Answer::Busy(busy) => First(Err(busy)),
        })
    }

    /// After a first attempt that found the keys `busy`: pauses, listens
    /// and attempts until the keys are this call's or the retry strategy
    /// gives up.
    pub(crate) async fn rest(&mut self, mut busy: Busy) -> Result<Arc<Lease>, LockError> {
        loop {
            let Some(pause) = self.pause(&busy) else {
                return Err(self.give_up(busy).await);
            };
            match self
                .listening
                .take_if(|(listened, _)| *listened == busy.index)
            {
                Some((_, listener)) => {
                    // Boxed: only a waiter listens, and inline its state
                    // would double every obtain's future, which is copied
                    // as the obtain starts.
                    if let Some(lease) = Box::pin(self.hear(listener, &busy, pause)).await? {
                        return Ok(lease);
                    }
                }
                None => self.listen(busy.index).await,
            }
            busy = match self.attempt().await? {
                Answer::Obtained(lease) => return Ok(lease),
                Answer::Busy(busy) => busy,
            };
        }
    }

    /// A fair waiter whose queue already listens on the key listens before
    /// its first attempt: it costs nothing now, and then that attempt is the
    /// only one, since a hand-off can only follow it.
    async fn listen_ahead(&mut self) {
        let request = self.request;
        if let Some(queue) = self.queue
            && !request.opts.retry.is_none()
            && queue.listening(&request.wire_keys()[0])
        {
            let listener = queue
                .listen_granted(&request.wire_keys()[0], request.token())
                .await;
            self.listening = Some((0, Box::new(listener)));
        }
    }

    /// Sends one attempt. A lease is only [`Answer::Obtained`] when its
    /// reply came in time to trust it.
    async fn attempt(&mut self) -> Result<Answer, LockError> {
        let request = self.request;
        let opts = &request.opts;
        self.attempts += 1;
        self.sent_attempts += 1;
        // The first attempt, unless a fair waiter listened first, is sent in
        // the poll that started the clock: its start is when it was sent,
        // or a little before, which only shortens the lease it trusts.
        let sent = if self.sent_attempts == 1 && self.listening.is_none() {
            self.start
        } else {
            Instant::now()
        };
        let queue_for = opts.fair.then(|| match self.deadline {
            Some(deadline) if !opts.retry.is_none() => deadline.saturating_duration_since(sent),
            _ => Duration::ZERO,
        });
        let acquire = AcquireRequest {
            keys: request.wire_keys(),
            value: &request.value,
            ttl: request.ttl + opts.lock_delay,
            fence_key: request.fence_key.as_deref(),
            queue_for,
            replicas: opts.replicas,
            replica_timeout: opts.replica_bound(request.ttl),
            // Once listening, a busy answer must say how long the holder
            // has left: it bounds the wait, which no message may end.
            wait: self.listening.is_some(),
            attempt: self.sent_attempts,
            share: opts.share,
        };
        // From here until its reply is read, the attempt may hold the keys:
        // a dropped or timed-out call must give them back.
        self.claim.armed = true;
        let acquired = match request.backend.acquire(acquire).await {
            Ok(acquired) => acquired,
            Err(err) => {
                // Refused before anything was written: nothing to give back
                // but an earlier attempt's place in the queue.
                if matches!(
                    err,
                    LockError::InvalidKey { .. }
                        | LockError::InvalidDuration { .. }
                        | LockError::WrongKind { .. }
                ) {
                    self.claim.armed = self.queued;
                }
                let err = err.named(&request.keys, request.wire_keys(), self.labels.namespace);
                metrics::failed(self.labels, metrics::Op::Obtain, &err);
                return Err(err);
            }
        };
        let attempts = self.attempts;
        let (index, remaining, holder) = match acquired {
            // A fenced lease without a token the backend minted would let
            // its writes through any fenced store: given back, never used.
            Acquired::Obtained { fence }
                if request.fence_key.is_some() && fence.is_none_or(|fence| fence == 0) =>
            {
                self.claim.give_back().await;
                let err = no_fence(request.backend.name(), fence);
                metrics::failed(self.labels, metrics::Op::Obtain, &err);
                return Err(err.named(&request.keys, request.wire_keys(), self.labels.namespace));
            }
            Acquired::Obtained { fence } if request.trusted(sent) => {
                tracing::debug!(target: "lockmacro", fence, attempts, "obtained");
                return Ok(Answer::Obtained(self.lease(fence, sent, sent, None)));
            }
            Acquired::Obtained { .. } => {
                // The reply came after the lease it granted could be
                // trusted: someone else may hold the key by now.
                tracing::warn!(target: "lockmacro", attempts, "obtained, but the reply came after the lease's deadline; giving it back");
                self.claim.give_back().await;
                (0, None, None)
            }
            Acquired::Busy {
                index,
                remaining,
                holder,
            } => (index, remaining, holder),
        };
        if holder.is_some() {
            self.holder.clone_from(&holder);
        }
        // A fair waiter that joined the queue owns its place in it.
        self.queued |= queue_for.is_some_and(|wait| !wait.is_zero());
        self.claim.armed = self.queued;
        Ok(Answer::Busy(Busy {
            index,
            remaining,
            holder,
            sent,
        }))
    }

    /// How long to wait before the next attempt; `None` once the retry
    /// strategy or the deadline gives up.
    fn pause(&self, busy: &Busy) -> Option<Duration> {
        let attempts = self.attempts;
        let Some(mut pause) = self.request.opts.retry.delay_after(attempts) else {
            tracing::debug!(target: "lockmacro", attempts, "busy");
            return None;
        };
        // A waiter the backend can wake sends nothing until woken, the
        // holder's lease runs out, or the deadline.
        let hears = self
            .listening
            .as_ref()
            .is_some_and(|(listened, listener)| *listened == busy.index && listener.hears());
        if self.wakeups_only && hears && busy.remaining.is_some() {
            pause = Duration::MAX;
        }
        // The holder's lease bounds the wait: once it runs out the key is
        // free, whether or not its release is ever seen.
        if let Some(remaining) = busy.remaining {
            pause = pause.min(remaining + Duration::from_millis(1));
        }
        if let Some(deadline) = self.deadline {
            let now = Instant::now();
            if now >= deadline {
                tracing::debug!(target: "lockmacro", attempts, "busy until the deadline");
                return None;
            }
            pause = pause.min(deadline - now);
        }
        Some(pause)
    }

    /// Gives back what the call may own, and says who holds the keys, and
    /// for how long, as far as the last attempt found out.
    async fn give_up(&mut self, busy: Busy) -> LockError {
        self.claim.give_back().await;
        metrics::busy(self.labels, self.start);
        let keys = &self.request.keys;
        LockError::NotObtained {
            key: keys.get(busy.index).unwrap_or(&keys[0]).clone(),
            namespace: self.labels.namespace.to_owned(),
            remaining: busy.remaining,
            holder: busy.holder.or_else(|| self.holder.take()),
        }
    }

    /// Listens for the release of the key at `index`, then lets the next
    /// attempt go at once: a release before the listener was in place is
    /// seen by that attempt, any later one by the listener. The first such
    /// attempt does not count against the strategy.
    async fn listen(&mut self, index: usize) {
        if self.listening.is_none() {
            self.attempts -= 1;
        }
        let key = &self.request.wire_keys()[index];
        let listener = match self.queue {
            Some(queue) => queue.listen_granted(key, self.request.token()).await,
            None => self.request.backend.listen(key).await,
        };
        self.listening = Some((index, Box::new(listener)));
    }

    /// Waits on `listener` for at most `pause`: `Some(lease)` when the key
    /// was handed to this waiter meanwhile. The listener is kept for the
    /// next round unless the key must be listened for afresh.
    async fn hear(
        &mut self,
        mut listener: Box<ReleaseListener>,
        busy: &Busy,
        pause: Duration,
    ) -> Result<Option<Arc<Lease>>, LockError> {
        tracing::trace!(target: "lockmacro", delay = ?pause, attempts = self.attempts, "busy, retrying");
        let hearing = listener.hears();
        listener.wait(pause).await;
        if let Some(handed) = listener.handed()
            && handed.attempt == self.sent_attempts
            && let Some(lease) = self.take_handed(handed, busy.sent)
        {
            return Ok(Some(lease));
        }
        let Some(fence) = listener.granted() else {
            if hearing && !listener.hears() && self.relistened < MAX_RELISTENS {
                // Its connection closed mid-wait: try again at once (a
                // release or a hand-off may have gone unheard), then listen
                // on a new one.
                self.relistened += 1;
            } else {
                self.listening = Some((busy.index, listener));
            }
            return Ok(None);
        };
        // A key granted and not taken is listened for afresh: the waiter
        // stands in line again.
        self.take_granted(fence, busy.sent).await
    }

    /// The key was handed over for a grant lease after the attempt sent at
    /// `sent` found this waiter in line, so it is ours until at least `sent`
    /// plus that lease: go on at once when that leaves time, and confirm
    /// meanwhile.
    fn take_handed(&mut self, handed: Handed, sent: Instant) -> Option<Arc<Lease>> {
        let arrived = Instant::now();
        let lease = handed.lease.min(self.request.ttl);
        let until = sent + lease.saturating_sub(self.request.backend.drift(lease));
        let fence = self.request.fence_key.is_some().then_some(handed.fence);
        // A hand-off that names no token for a fenced waiter (one from a
        // version that did not send it) is taken by the next attempt, which
        // finds the key its own and mints one.
        if until <= arrived + lease / 2 || fence == Some(0) {
            return None;
        }
        tracing::debug!(target: "lockmacro", fence, attempts = self.attempts, "handed over, confirming");
        let lease = self.lease(fence, arrived, sent, Some(until));
        self.request
            .registry
            .tracker()
            .spawn(lease.clone().confirm_grant());
        Some(lease)
    }

    /// The key was handed over by a release at some moment after the
    /// attempt sent at `sent` found it busy, so the lease runs at least until
    /// `sent + ttl`. `None` when it ran out before this waiter could use it.
    async fn take_granted(
        &mut self,
        fence: u64,
        sent: Instant,
    ) -> Result<Option<Arc<Lease>>, LockError> {
        let request = self.request;
        let (ttl, drift, attempts) = (request.ttl, request.drift, self.attempts);
        let arrived = Instant::now();
        let fence = request.fence_key.is_some().then_some(fence);
        // As in `take_handed`: no token, so the next attempt takes it.
        if fence == Some(0) {
            return Ok(None);
        }
        if sent + ttl.saturating_sub(drift) > arrived + ttl / 2 {
            tracing::debug!(target: "lockmacro", fence, attempts, "handed over");
            return Ok(Some(self.lease(fence, arrived, sent, None)));
        }
        // Waited long: confirm, and count the lease from now.
        let confirm = Instant::now();
        if request
            .backend
            .refresh(
                request.wire_keys(),
                request.token(),
                ttl + request.opts.lock_delay,
            )
            .await?
        {
            if request.trusted(confirm) {
                tracing::debug!(target: "lockmacro", fence, attempts, "handed over, confirmed");
                return Ok(Some(self.lease(fence, arrived, confirm, None)));
            }
            // Confirmed too late to be trusted: give it back.
            self.claim.give_back().await;
        }
        Ok(None)
    }

    /// The lease the keys are now held under, counted from `sent`, when the
    /// request that confirmed it was sent; `granted_until`, the end of a
    /// grant lease not confirmed yet, which the deadline does not pass until
    /// it is. Counted as obtained before the caller can see it.
    fn lease(
        &mut self,
        fence: Option<u64>,
        acquired_at: Instant,
        sent: Instant,
        granted_until: Option<Instant>,
    ) -> Arc<Lease> {
        let request = self.request;
        self.claim.armed = false;
        metrics::obtained(self.labels, self.start);
        let hold_until = request.opts.max_hold.map(|hold| acquired_at + hold);
        let mut timing = Timing::new(request.ttl, sent, request.drift, hold_until);
        if let Some(until) = granted_until {
            timing.deadline = timing.deadline.min(until);
        }
        Arc::new(Lease {
            backend: request.backend.clone(),
            registry: request.registry.clone(),
            id: request.registry.next_id(),
            keys: request.keys.clone(),
            namespaced: request.namespaced.clone(),
            token: request.token,
            metadata: request.opts.metadata.clone(),
            fence,
            share: request.opts.share,
            lock_delay: request.opts.lock_delay,
            downgraded: AtomicBool::new(false),
            acquired_at,
            hold_until,
            timing: Mutex::new(timing),
            lost: AtomicBool::new(false),
            lost_notify: Notify::new(),
            done: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            giving_back: AtomicBool::new(false),
            revoked: AtomicBool::new(false),
            cancel: OnceLock::new(),
        })
    }
}

/// The error of a backend that answered a fenced obtain without a token.
fn no_fence(backend: &str, fence: Option<u64>) -> LockError {
    let found = match fence {
        Some(_) => "a token of 0",
        None => "no token",
    };
    BackendError::new(
        BackendErrorKind::Protocol,
        format!("{backend}: obtain"),
        format!(
            "the backend answered a fenced obtain with {found}; what it took was given back. \
             A fencing token is never 0"
        ),
    )
    .into()
}
