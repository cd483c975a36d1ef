//! The lease behind every lock: what the [`Lock`](crate::Lock) handle, the
//! watchdog and a fair waiter's confirmation share, and the limits on the
//! durations it is given.
//!
//! It knows nothing of who holds it: the handle, the watchdog and the wait
//! that takes it all import this file, and it imports none of them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::LockError;
use crate::backend::{Backend, Share, TOKEN_LEN};
use crate::metrics;
use crate::registry::{GivenBack, Held, Registry};

/// The longest ttl accepted: ten years.
pub const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Refuses a duration no backend can store: under a millisecond, or over
/// [`MAX_TTL`].
pub(crate) fn check_duration(
    key: &str,
    what: &'static str,
    value: Duration,
) -> Result<(), LockError> {
    if value < Duration::from_millis(1) || value > MAX_TTL {
        return Err(LockError::InvalidDuration {
            key: key.to_owned(),
            what,
            value,
            reason: format!("must be between 1ms and {MAX_TTL:?}"),
        });
    }
    Ok(())
}

/// The state of one lease, shared by its [`Lock`](crate::Lock) and the watchdog.
pub(crate) struct Lease {
    pub(crate) backend: Arc<dyn Backend>,
    /// The registry of the locker that obtained it, which it leaves as it
    /// ends, and its id there.
    pub(crate) registry: Arc<Registry>,
    pub(crate) id: u64,
    /// Keys as the caller named them, sorted.
    pub(crate) keys: Arc<[String]>,
    /// Keys on the wire, namespaced; `None` when they are `keys` (no
    /// namespace): the watchdog holds up to millions of leases, so each
    /// saves what it can.
    pub(crate) namespaced: Option<Arc<[String]>>,
    /// The token's 32 ASCII hex digits, inline for the same reason.
    pub(crate) token: [u8; TOKEN_LEN],
    /// Borrowed when the caller's was (the attribute's default, read once
    /// per process): no copy per lease.
    pub(crate) metadata: std::borrow::Cow<'static, str>,
    pub(crate) fence: Option<u64>,
    /// A share of the key (a permit, a read, the write), or `None`: the key.
    /// What it holds now is [`Lease::share`].
    pub(crate) share: Option<Share>,
    /// Added to every ttl sent for the lease, never to its deadline: the
    /// server keeps the key this much longer unless it is released.
    pub(crate) lock_delay: Duration,
    /// Set once the write was downgraded to a read; never cleared.
    pub(crate) downgraded: AtomicBool,
    pub(crate) acquired_at: Instant,
    /// `acquired_at + max_hold`: the deadline never moves past it, and the
    /// watchdog stops renewing once it reaches it.
    pub(crate) hold_until: Option<Instant>,
    pub(crate) timing: Mutex<Timing>,
    /// Set once the lease is known or presumed gone, and only after the
    /// loss was logged and counted; never cleared.
    pub(crate) lost: AtomicBool,
    /// Notified when the lease is lost or given back, and when a refresh
    /// moves its deadline in: what `lost()` and `at_risk()` wait on.
    pub(crate) lost_notify: Notify,
    /// Set once the owner released or dropped the lock: the watchdog forgets it.
    pub(crate) done: AtomicBool,
    /// Set once the lease stopped counting as held (given back, lost or
    /// dropped), so that it leaves the `leases_held` gauge exactly once.
    pub(crate) ended: AtomicBool,
    /// Set by the first to give the lease back (its owner, or the locker's
    /// shutdown), so that it is given back once.
    pub(crate) giving_back: AtomicBool,
    /// Set once the locker's shutdown took the lease from its owner.
    pub(crate) revoked: AtomicBool,
    /// Cancelled when the lease ends for its holder; made on first ask, as
    /// most leases are never asked for one.
    pub(crate) cancel: OnceLock<CancellationToken>,
}

/// When a lease ends, by this process's clock, and what may still move it.
///
/// A server applies a refresh whatever becomes of its reply, and refreshes
/// sent on different connections may be applied in either order: the last
/// one applied sets the expiry, at least its send time plus its ttl. So the
/// deadline is never later than that bound for any refresh whose fate is
/// not known, whichever it is:
///
/// - a refresh that could end the lease sooner than the deadline moves the
///   deadline in as it is sent ([`Lease::sending`]), before any reply;
/// - a confirmation counts from its own send time, with the shortest ttl
///   among the refreshes that were in flight beside it and those that
///   failed (`doubt`), since any of them may be applied after it: a
///   refresh sent beside it and confirmed before it is one, as its reply
///   may be read first though the server ran it last;
/// - a failed refresh (an error, a lost reply, a dropped call) may be
///   applied at any later time, so its ttl bounds every confirmation after
///   it. With one ttl throughout, as the watchdog sends, that bound is the
///   ttl itself and changes nothing; it only binds after a shorter ttl
///   asked for by [`Lock::refresh`](crate::Lock::refresh) went unanswered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// The ttl asked for last: the watchdog's next refreshes ask for it.
    pub(crate) ttl: Duration,
    /// When the last confirmed acquire or refresh was sent.
    pub(crate) sent: Instant,
    /// When the lease ends if no refresh is confirmed: `sent` plus the ttl,
    /// less the backend's drift margin, never past `Lease::hold_until`, and
    /// never past what a refresh in flight or failed may leave.
    pub(crate) deadline: Instant,
    /// Refreshes sent and not yet answered.
    in_flight: u32,
    /// The shortest ttl among the refreshes sent since `in_flight` was last
    /// zero: every refresh in flight beside one still unanswered.
    in_flight_ttl: Duration,
    /// The shortest ttl of a refresh that failed: it may still be applied.
    doubt: Option<Duration>,
}

impl Timing {
    /// The timing of a lease of `ttl` confirmed by a request sent at `sent`.
    pub(crate) fn new(
        ttl: Duration,
        sent: Instant,
        drift: Duration,
        hold_until: Option<Instant>,
    ) -> Self {
        let deadline = sent + ttl.saturating_sub(drift);
        Timing {
            ttl,
            sent,
            deadline: hold_until.map_or(deadline, |limit| deadline.min(limit)),
            in_flight: 0,
            in_flight_ttl: ttl,
            doubt: None,
        }
    }

    /// The ttl a confirmation of a refresh to `ttl` counts, read while that
    /// refresh still counts as in flight: the shortest among its own, those
    /// of the refreshes in flight beside it, and those that failed.
    fn counted(&self, ttl: Duration) -> Duration {
        let beside = self.in_flight_ttl.min(ttl);
        self.doubt.map_or(beside, |doubt| doubt.min(beside))
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("keys", &self.keys)
            .field("fence", &self.fence)
            .field("timing", &self.timing())
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// True when the lease was taken through `backend` (the very instance,
    /// whatever locker or namespace it is reached through).
    pub(crate) fn is_on(&self, backend: &dyn Backend) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.backend), backend)
    }

    /// The share held now: a write downgraded is a read.
    pub(crate) fn share(&self) -> Option<Share> {
        if self.downgraded.load(Ordering::Acquire) {
            return Some(Share::Read);
        }
        self.share
    }

    pub(crate) fn key(&self) -> &str {
        &self.keys[0]
    }

    /// The keys as sent to the backend.
    pub(crate) fn wire_keys(&self) -> &[String] {
        self.namespaced.as_deref().unwrap_or(&self.keys)
    }

    pub(crate) fn token(&self) -> &str {
        std::str::from_utf8(&self.token).expect("a token is ASCII hex")
    }

    pub(crate) fn timing(&self) -> Timing {
        *self
            .timing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// True while the watchdog should keep renewing: the deadline has not
    /// reached the `max_hold` limit yet.
    pub(crate) fn renewable(&self) -> bool {
        self.hold_until
            .is_none_or(|limit| self.timing().deadline < limit)
    }

    /// When the lease is at risk: a third of its ttl before its deadline,
    /// which a healthy watchdog (refreshing every third of the ttl) keeps
    /// moving ahead of the clock, so that it is reached only after
    /// refreshes went unconfirmed for two thirds of the ttl.
    pub(crate) fn at_risk_from(&self) -> Instant {
        let timing = self.timing();
        timing
            .deadline
            .checked_sub(timing.ttl / 3)
            .unwrap_or(timing.deadline)
    }

    /// True once the lease is at risk (see [`at_risk_from`](Self::at_risk_from))
    /// or over.
    pub(crate) fn is_at_risk(&self) -> bool {
        self.is_lost() || Instant::now() >= self.at_risk_from()
    }

    /// Completes once the lease is at risk or over; `over` also ends it
    /// (a guard given back).
    pub(crate) async fn at_risk(&self, over: impl Fn() -> bool) {
        loop {
            let notified = self.lost_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if over() || self.is_at_risk() {
                return;
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(self.at_risk_from()) => {}
            }
        }
    }

    /// True once the lease was declared lost (not merely past its deadline).
    pub(crate) fn is_marked_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// True once the locker's shutdown took the lease from its holder.
    pub(crate) fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }

    /// True once the lease is lost, or given back by the locker's shutdown.
    /// A lease found past its deadline is declared lost here, so that
    /// whoever sees it lost also sees it logged and counted.
    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.load(Ordering::Acquire) || self.is_revoked() {
            return true;
        }
        if Instant::now() >= self.timing().deadline {
            self.mark_lost();
            return true;
        }
        false
    }

    /// The labels of this lease's metrics.
    pub(crate) fn labels(&self) -> metrics::Labels<'_> {
        metrics::Labels {
            backend: self.backend.name(),
            namespace: self.namespace(),
        }
    }

    /// The locker's namespace, empty without one.
    pub(crate) fn namespace(&self) -> &str {
        // The namespace is what the wire key adds in front of the key.
        self.namespaced.as_deref().map_or("", |wire| {
            let prefix = &wire[0][..wire[0].len() - self.keys[0].len()];
            prefix.strip_suffix(':').unwrap_or(prefix)
        })
    }

    /// `err`, from the backend, naming the keys as the caller gave them.
    fn named(&self, err: LockError) -> LockError {
        err.named(&self.keys, self.wire_keys(), self.namespace())
    }

    /// [`LockError::NotHeld`] for this lease.
    pub(crate) fn not_held(&self) -> LockError {
        LockError::NotHeld {
            key: self.key().to_owned(),
            namespace: self.namespace().to_owned(),
        }
    }

    /// [`LockError::Lost`] for this lease.
    pub(crate) fn lost_error(&self) -> LockError {
        LockError::Lost {
            key: self.key().to_owned(),
            namespace: self.namespace().to_owned(),
        }
    }

    /// Declares the lease lost: logs and counts it once, then sets the flag.
    ///
    /// Several threads may declare the same loss (the watchdog, and a
    /// `lost().await` that found the deadline passed). The declaration runs
    /// under the timing lock and the flag is set last, so a caller that
    /// returns from here, or sees the flag, also sees the loss counted.
    pub(crate) fn mark_lost(&self) {
        // A refresh refused after the shutdown gave the lease back is no loss.
        if !self.lost.load(Ordering::Acquire) && !self.is_revoked() {
            let _declaring = self
                .timing
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if !self.lost.load(Ordering::Acquire) {
                tracing::warn!(target: "lockmacro", key = %self.key(), "lease lost");
                metrics::lost(self.labels());
                self.end();
                self.lost.store(true, Ordering::Release);
            }
        }
        self.lost_notify.notify_waiters();
        self.cancel();
    }

    /// Takes the lease from its holder for the locker's shutdown, which
    /// gives it back next: the holder sees it end.
    pub(crate) fn revoke(&self) {
        self.revoked.store(true, Ordering::Release);
        self.done.store(true, Ordering::Release);
        self.lost_notify.notify_waiters();
        self.cancel();
    }

    /// A token cancelled when the lease ends for its holder: lost, given
    /// back, or taken by the locker's shutdown (at once if it already has).
    pub(crate) fn cancellation_token(&self) -> CancellationToken {
        let token = self.cancel.get_or_init(CancellationToken::new).clone();
        // Pairs with the fence in `cancel`: either the flags set before it
        // are seen here, or the token made here is seen there.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.giving_back.load(Ordering::Acquire) || self.is_lost() {
            token.cancel();
        }
        token
    }

    /// Cancels the token, if one was asked for; called after the flag that
    /// says why is set.
    fn cancel(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if let Some(token) = self.cancel.get() {
            token.cancel();
        }
    }

    /// Takes the lease off the `leases_held` gauge and out of its locker's
    /// registry, once, and records how long it was held: when it is given
    /// back, lost or dropped, whichever comes first. True the first time.
    pub(crate) fn end(&self) -> bool {
        if self.ended.swap(true, Ordering::AcqRel) {
            return false;
        }
        metrics::ended(self.labels(), self.acquired_at);
        self.registry.forget(self.id);
        true
    }

    /// Marks the lease as left to run out by itself (`hold_at_least`):
    /// neither its owner nor a shutdown gives it back, and its owner holds
    /// it no longer, even while a handle on it lives on.
    pub(crate) fn leave_to_expire(&self) {
        self.done.store(true, Ordering::Release);
        self.giving_back.store(true, Ordering::Release);
        self.end();
    }

    /// Refreshes the lease to `ttl`; on success moves the local deadline to
    /// `sent + ttl`, on refusal marks the lease lost. A confirmation that
    /// comes after the deadline is [`LockError::Lost`]: the lease was lost
    /// at the deadline and stays so. Whatever the outcome, the deadline is
    /// no later than `sent + ttl` less the drift margin once it is sent (see
    /// [`Timing`]), and later refreshes ask for `ttl`.
    pub(crate) async fn refresh(&self, ttl: Duration) -> Result<(), LockError> {
        self.refresh_for(ttl, self.lock_delay).await
    }

    /// Refreshes the lease so that the key expires `ttl` from now, without
    /// the lock delay: for a holder that is done with the key and leaves it
    /// to run out (`hold_at_least`), which is no vanished holder.
    pub(crate) async fn expire_in(&self, ttl: Duration) -> Result<(), LockError> {
        self.refresh_for(ttl, Duration::ZERO).await
    }

    async fn refresh_for(&self, ttl: Duration, delay: Duration) -> Result<(), LockError> {
        check_duration(self.key(), "ttl", ttl)?;
        if self.is_revoked() {
            return Err(crate::registry::shut_down(self.key()));
        }
        let flight = self.sending(ttl, true);
        let refreshed = self
            .backend
            .refresh(self.wire_keys(), self.token(), ttl + delay)
            .await
            .map_err(|err| self.named(err))
            .inspect_err(|err| metrics::failed(self.labels(), metrics::Op::Refresh, err))?;
        if refreshed {
            flight.confirmed();
            if self.lost.load(Ordering::Acquire) {
                return Err(self.lost_error());
            }
            Ok(())
        } else {
            flight.refused();
            Err(self.not_held())
        }
    }

    /// Records a refresh to `ttl` as it is sent, now: the deadline moves in
    /// to what it may leave, and, when `adopt`, the watchdog asks for `ttl`
    /// from now on. The answer goes to the [`InFlight`] returned; dropped
    /// unanswered, the refresh counts as failed.
    pub(crate) fn sending(&self, ttl: Duration, adopt: bool) -> InFlight<'_> {
        let drift = self.backend.drift(ttl);
        let sent = Instant::now();
        let mut timing = self
            .timing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        timing.in_flight_ttl = if timing.in_flight == 0 {
            ttl
        } else {
            timing.in_flight_ttl.min(ttl)
        };
        timing.in_flight += 1;
        let before = (timing.deadline, timing.ttl);
        timing.deadline = timing.deadline.min(sent + ttl.saturating_sub(drift));
        if adopt {
            timing.ttl = ttl;
        }
        let moved_in = (timing.deadline, timing.ttl) != before;
        drop(timing);
        if moved_in {
            // Whoever waits for the deadline, or a third of the ttl before
            // it, waits for a moment that moved.
            self.lost_notify.notify_waiters();
        }
        InFlight {
            lease: self,
            ttl,
            sent,
            answered: false,
        }
    }

    /// Records a refresh to `ttl`, sent at `sent`, that the backend confirmed.
    ///
    /// A confirmation that arrives once the deadline has passed cannot revive
    /// the lease: it was lost at the deadline, and the code it protected may
    /// already have been stopped or overtaken. One for an older request than
    /// the last confirmed (several can be in flight) changes nothing: the
    /// server's expiry follows the latest. The ttl counted is the shortest of
    /// its own and those of refreshes whose fate is unknown (see [`Timing`]).
    fn refreshed(&self, ttl: Duration, sent: Instant) {
        let mut timing = self
            .timing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Read before this refresh leaves the count: a shorter refresh sent
        // beside it and confirmed first may have been run after it.
        let counted = timing.counted(ttl);
        timing.in_flight = timing.in_flight.saturating_sub(1);
        if self.lost.load(Ordering::Acquire) || Instant::now() >= timing.deadline {
            drop(timing);
            self.mark_lost();
            return;
        }
        if sent >= timing.sent {
            tracing::trace!(target: "lockmacro", key = %self.key(), ?ttl, "refreshed");
            let drift = self.backend.drift(counted);
            let confirmed = Timing::new(counted, sent, drift, self.hold_until);
            timing.sent = sent;
            timing.deadline = confirmed.deadline;
        }
    }

    /// Records the end of a refresh to `ttl` that was refused (`failed`:
    /// that may yet be applied, its reply lost or never read).
    fn settled(&self, ttl: Duration, failed: bool) {
        let mut timing = self
            .timing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        timing.in_flight = timing.in_flight.saturating_sub(1);
        if failed {
            timing.doubt = Some(timing.doubt.map_or(ttl, |doubt| doubt.min(ttl)));
        }
    }

    /// Confirms a key handed over for a grant lease (see
    /// [`FairQueue::confirm`](crate::backend::FairQueue::confirm)), which
    /// the owner may already be using: extends it to the ttl and moves the
    /// deadline as a refresh would. Refused, the lease is lost, unless the
    /// owner released it first; failed, the deadline stays at the grant
    /// lease's end, which a watchdog's refresh may still move.
    pub(crate) async fn confirm_grant(self: Arc<Self>) {
        let Some(queue) = self.backend.capabilities().fair_queue else {
            return;
        };
        let ttl = self.timing().ttl;
        let flight = self.sending(ttl, false);
        match queue
            .confirm(&self.wire_keys()[0], self.token(), flight.wire_ttl())
            .await
        {
            Ok(true) => flight.confirmed(),
            Ok(false) if !self.done.load(Ordering::Acquire) => flight.refused(),
            Ok(false) => flight.answered(),
            Err(err) => {
                tracing::warn!(target: "lockmacro", key = %self.key(), error = %err, "could not confirm a lock handed over; it ends with its grant lease unless refreshed");
            }
        }
    }

    /// Gives the lease back. The owner and the locker's shutdown may both
    /// ask: the first gives it back, and the other returns `Ok` at once.
    pub(crate) async fn release(&self) -> Result<(), LockError> {
        self.done.store(true, Ordering::Release);
        if self.giving_back.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.cancel();
        let released = self
            .backend
            .release_value(self.wire_keys(), self.token(), &self.metadata)
            .await
            .map_err(|err| self.named(err));
        // Counted before the caller's `await` returns, whatever the answer:
        // the owner holds the lease no longer.
        let first = self.end();
        let count = |outcome| {
            if first {
                self.registry.count(outcome);
            }
        };
        match released {
            Ok(true) => {
                tracing::debug!(target: "lockmacro", key = %self.key(), "released");
                metrics::released(self.labels());
                count(GivenBack::Released);
                Ok(())
            }
            Ok(false) => {
                tracing::debug!(target: "lockmacro", key = %self.key(), "release found the lock no longer held");
                count(GivenBack::NotHeld);
                Err(self.not_held())
            }
            Err(err) => {
                metrics::failed(self.labels(), metrics::Op::Release, &err);
                count(GivenBack::Failed);
                Err(err)
            }
        }
    }

    pub(crate) async fn remaining(&self) -> Result<Duration, LockError> {
        self.backend
            .remaining(self.wire_keys(), self.token())
            .await
            .map_err(|err| self.named(err))?
            .ok_or_else(|| self.not_held())
    }
}

/// A refresh of a lease on its way: its answer moves the lease's timing
/// (see [`Timing`]). Dropped unanswered, it counts as failed.
pub(crate) struct InFlight<'a> {
    lease: &'a Lease,
    ttl: Duration,
    sent: Instant,
    answered: bool,
}

impl InFlight<'_> {
    /// The ttl to send: the one it counts, and the lease's lock delay.
    pub(crate) fn wire_ttl(&self) -> Duration {
        self.ttl + self.lease.lock_delay
    }

    /// The backend confirmed it: the deadline moves to what it left.
    pub(crate) fn confirmed(mut self) {
        self.answered = true;
        self.lease.refreshed(self.ttl, self.sent);
    }

    /// The backend refused it: the key is no longer this lease's.
    pub(crate) fn refused(mut self) {
        self.answered = true;
        self.lease.settled(self.ttl, false);
        self.lease.mark_lost();
    }

    /// The backend answered without applying it, and the lease is not
    /// lost by that (its owner gave it back meanwhile).
    pub(crate) fn answered(mut self) {
        self.answered = true;
        self.lease.settled(self.ttl, false);
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.lease.settled(self.ttl, true);
        }
    }
}

impl Held for Lease {
    fn revoke(&self) {
        Lease::revoke(self);
    }

    fn give_back(self: Arc<Self>) -> futures_util::future::BoxFuture<'static, ()> {
        Box::pin(async move {
            if let Err(error) = self.release().await {
                tracing::debug!(target: "lockmacro", key = %self.key(), %error, "could not give back at shutdown");
            }
        })
    }

    fn end(&self) -> bool {
        Lease::end(self)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.end();
    }
}
