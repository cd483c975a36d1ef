//! One task per [`Locker`](crate::Locker) keeps every watched lease alive.
//!
//! The task runs only while some lease is watched, and [`LINGER`] after:
//! at its first wake-up after the last one is released or dropped (at the
//! latest when that lease was to be looked at next) it waits that long for
//! another, then exits, and is started again by the next registration. A
//! release does not wake it, and a registration wakes it only when its lease
//! comes before the task's timer: a locker that takes and releases one lock
//! after another neither starts a task nor wakes one for each.
//!
//! Leases wait in one queue ordered by when the task must look at them next:
//! their next refresh, or their local deadline if that comes first.
//! A wake-up takes only what is due, so its cost grows with the number of due
//! leases (each O(log n)), not with the number watched. The refreshes due
//! together go to the backend together ([`Backend::refresh_many`]).
//!
//! Refreshes are timed from when the previous one was *sent*, not from its
//! reply, and a refresh still in flight does not hold back the next: a lease
//! whose ttl is `t`, refreshed every `t / 3`, survives round trips of up to
//! about `2t / 3` (each confirmed refresh moves the deadline to its send time
//! plus the ttl, and the next one is sent a period later).
//!
//! [`Backend::refresh_many`]: crate::backend::Backend::refresh_many

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::backend::RefreshRequest;
use crate::error::{BackendError, BackendErrorKind};
use crate::lease::Lease;

/// Most leases one refresh task sends; the backend splits further as it
/// needs (the Redis backends send at most 500 per script call).
const BATCH: usize = 2000;

/// A refresh due within this long is sent with the batch being made now
/// (at most an eighth of its period early), so that leases due a moment apart
/// share a batch instead of each waking the task.
const COALESCE: Duration = Duration::from_millis(10);

/// How long to sleep when nothing is queued (the task exits first, unless a
/// refresh is in flight).
const IDLE: Duration = Duration::from_secs(3600);

/// How long the task waits for a lease once it has none, before it exits:
/// locks held one after another, each for less than this, share one task
/// rather than each starting one.
const LINGER: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    state: Mutex<State>,
    wake: Notify,
}

/// A moment as nanoseconds since `State::epoch`: half the size of an
/// `Instant`, which matters at 100,000 leases.
type Tick = u64;

/// A moment that never comes: `Watched::due` once the lease is no longer
/// renewed (its `max_hold` is reached).
const NEVER: Tick = Tick::MAX;

#[derive(Debug)]
struct State {
    epoch: Instant,
    leases: HashMap<u64, Watched, foldhash::fast::RandomState>,
    /// Every watched lease once, by when to look at it next (`Watched::queued`).
    queue: BTreeSet<(Tick, u64)>,
    next_id: u64,
    running: bool,
    /// When the task's timer wakes it next: a lease queued before then must
    /// wake it sooner.
    wakes_at: Tick,
    /// Set by the locker's shutdown: nothing is watched any more.
    stopped: bool,
}

#[derive(Debug)]
struct Watched {
    lease: Arc<Lease>,
    /// Nanoseconds between refreshes.
    period: Tick,
    /// When the next refresh is due, or [`NEVER`].
    due: Tick,
    /// Its key in `State::queue`.
    queued: Tick,
}

impl Default for State {
    fn default() -> Self {
        State {
            epoch: Instant::now(),
            leases: HashMap::default(),
            queue: BTreeSet::new(),
            next_id: 0,
            running: false,
            wakes_at: NEVER,
            stopped: false,
        }
    }
}

/// `duration` in nanoseconds; saturates below [`NEVER`].
fn nanos(duration: Duration) -> Tick {
    Tick::try_from(duration.as_nanos()).map_or(NEVER - 1, |n| n.min(NEVER - 1))
}

/// What became of one lease's refresh.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Refreshed,
    /// The backend said the lease is no longer ours: it is lost.
    Refused,
    /// The backend could not be asked: try again while the deadline allows.
    Failed,
}

impl State {
    fn tick(&self, at: Instant) -> Tick {
        nanos(at.saturating_duration_since(self.epoch))
    }

    fn instant(&self, tick: Tick) -> Instant {
        self.epoch + Duration::from_nanos(tick)
    }

    fn requeue(&mut self, id: u64, at: Tick) {
        if let Some(watched) = self.leases.get_mut(&id) {
            self.queue.remove(&(watched.queued, id));
            watched.queued = at;
            self.queue.insert((at, id));
        }
    }

    fn forget(&mut self, id: u64) -> bool {
        match self.leases.remove(&id) {
            Some(watched) => {
                self.queue.remove(&(watched.queued, id));
                true
            }
            None => false,
        }
    }
}

impl Watchdog {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts refreshing `lease` every `period`; returns the id to
    /// [`unwatch`](Self::unwatch) it with.
    pub(crate) fn watch(self: &Arc<Self>, lease: Arc<Lease>, period: Duration) -> u64 {
        let timing = lease.timing();
        let mut state = self.state();
        let period = nanos(period);
        // Counted from when the acquire was sent: a slow acquire reply has
        // used part of the first period already.
        let due = state
            .tick(timing.sent)
            .saturating_add(period)
            .min(NEVER - 1);
        let queued = due.min(state.tick(timing.deadline));
        let id = state.next_id;
        state.next_id += 1;
        if state.stopped {
            // The shutdown gave the lease back already: nothing to renew.
            return id;
        }
        // The task only needs waking when this lease comes before its timer.
        let sooner = queued < state.wakes_at;
        state.leases.insert(
            id,
            Watched {
                lease,
                period,
                due,
                queued,
            },
        );
        state.queue.insert((queued, id));
        if !state.running {
            state.running = true;
            tokio::spawn(self.clone().run());
        } else if sooner {
            self.wake.notify_one();
        }
        id
    }

    /// Stops refreshing the lease `id`.
    pub(crate) fn unwatch(&self, id: u64) {
        self.state().forget(id);
    }

    /// Forgets every lease, for good: the locker is shutting down. The task
    /// exits, dropping the refreshes in flight.
    pub(crate) fn stop(&self) {
        let mut state = self.state();
        state.stopped = true;
        state.leases.clear();
        state.queue.clear();
        self.wake.notify_one();
    }

    async fn run(self: Arc<Self>) {
        let mut in_flight = JoinSet::new();
        let mut lingered = false;
        loop {
            let next = {
                let mut state = self.state();
                // Looked at after `start_due`, which may have declared the
                // last leases lost: nobody would wake the task after that.
                let mut next = start_due(&mut state, &mut in_flight);
                if state.leases.is_empty() {
                    if lingered || state.stopped {
                        // Refreshes still in flight belong to leases that are
                        // gone: dropping the set aborts them.
                        state.running = false;
                        return;
                    }
                    lingered = true;
                    next = Instant::now() + LINGER;
                } else {
                    lingered = false;
                }
                state.wakes_at = state.tick(next);
                next
            };
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                () = self.wake.notified() => {}
                Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                    let mut state = self.state();
                    if let Ok(done) = done {
                        finish(&mut state, done);
                    }
                    while let Some(done) = in_flight.try_join_next() {
                        if let Ok(done) = done {
                            finish(&mut state, done);
                        }
                    }
                }
            }
        }
    }
}

/// Declares lost the leases whose deadline passed, sends the refreshes that
/// are due, and returns when to look again.
fn start_due(state: &mut State, in_flight: &mut JoinSet<Vec<(u64, Outcome)>>) -> Instant {
    let now = state.tick(Instant::now());
    let coalesce = nanos(COALESCE);
    let horizon = now + coalesce;
    let mut batch = Vec::new();
    let mut requeue = Vec::new();
    while let Some(&(at, id)) = state.queue.first() {
        if at > horizon {
            break;
        }
        state.queue.pop_first();
        let Some(watched) = state.leases.get_mut(&id) else {
            continue;
        };
        let deadline =
            nanos((watched.lease.timing().deadline).saturating_duration_since(state.epoch));
        if now >= deadline {
            watched.lease.mark_lost();
            state.leases.remove(&id);
            continue;
        }
        if watched.due <= now + (watched.period / 8).min(coalesce) {
            if watched.lease.renewable() {
                watched.due = now.saturating_add(watched.period).min(NEVER - 1);
                batch.push((id, watched.lease.clone()));
                if batch.len() == BATCH {
                    in_flight.spawn(refresh(std::mem::take(&mut batch)));
                }
            } else {
                // `max_hold` reached: the lease runs out at its deadline.
                watched.due = NEVER;
            }
        }
        // Looked at again by its next refresh, or by its deadline if that
        // comes first (a refresh in flight may move it later). Never before
        // `now`: the deadline has not passed, and a due refresh was just sent.
        watched.queued = watched.due.min(deadline);
        requeue.push((watched.queued, id));
    }
    state.queue.extend(requeue);
    if !batch.is_empty() {
        in_flight.spawn(refresh(batch));
    }
    match state.queue.first() {
        Some(&(at, _)) => state.instant(at),
        None => Instant::now() + IDLE,
    }
}

/// Sends one batch of refreshes and updates each lease with its outcome: a
/// new deadline, counted from when the batch was sent, or lost.
async fn refresh(leases: Vec<(u64, Arc<Lease>)>) -> Vec<(u64, Outcome)> {
    let Some((_, first)) = leases.first() else {
        return Vec::new();
    };
    let backend = &*first.backend;
    // Each recorded as sent before it is: its reply may never come.
    let flights: Vec<_> = leases
        .iter()
        .map(|(_, lease)| lease.sending(lease.timing().ttl, false))
        .collect();
    let requests: Vec<RefreshRequest<'_>> = leases
        .iter()
        .zip(&flights)
        .map(|((_, lease), flight)| {
            RefreshRequest::new(lease.wire_keys(), lease.token(), flight.wire_ttl())
        })
        .collect();
    let mut results = backend.refresh_many(&requests).await.into_iter();
    let mut failed = 0;
    let mut first_error = None;
    let mut outcomes = Vec::with_capacity(leases.len());
    for ((id, lease), flight) in leases.iter().zip(flights) {
        // A backend that answers fewer results than requests leaves the
        // rest failed: retried, and lost at their deadlines if it goes on.
        let result = results.next().unwrap_or_else(|| {
            Err(BackendError::new(
                BackendErrorKind::Other,
                "refresh_many",
                "the backend answered fewer results than leases",
            )
            .into())
        });
        let outcome = match result {
            Ok(true) => {
                flight.confirmed();
                Outcome::Refreshed
            }
            Ok(false) => {
                flight.refused();
                Outcome::Refused
            }
            Err(err) => {
                drop(flight);
                failed += 1;
                crate::metrics::refresh_failed(lease.labels(), &err);
                first_error.get_or_insert((lease.key(), err));
                Outcome::Failed
            }
        };
        outcomes.push((*id, outcome));
    }
    // One line per batch, not per lease: when the backend is down, every
    // lease of the batch fails the same way.
    if let Some((key, error)) = first_error {
        tracing::warn!(target: "lockmacro", key, %error, failed, leases = leases.len(), "refresh failed; retrying before the deadlines");
    }
    outcomes
}

/// Requeues each lease of a finished batch by its new deadline, and retries
/// a failed refresh sooner than its period.
fn finish(state: &mut State, done: Vec<(u64, Outcome)>) {
    let now = state.tick(Instant::now());
    let floor = nanos(Duration::from_millis(5));
    for (id, outcome) in done {
        let Some(watched) = state.leases.get(&id) else {
            continue;
        };
        if matches!(outcome, Outcome::Refused) || watched.lease.is_marked_lost() {
            state.forget(id);
            continue;
        }
        let deadline = state.tick(watched.lease.timing().deadline);
        let mut due = watched.due;
        if let Outcome::Failed = outcome {
            // Try again sooner, while the lease may still be saved.
            let left = deadline.saturating_sub(now);
            due = due.min(now + (left / 3).clamp(floor, watched.period.max(floor)));
        }
        if let Some(watched) = state.leases.get_mut(&id) {
            watched.due = due;
        }
        state.requeue(id, due.min(deadline));
    }
}
