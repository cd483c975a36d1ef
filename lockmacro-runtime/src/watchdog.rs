//! One task per [`Locker`](crate::Locker) keeps every watched lease alive.
//!
//! The task runs only while some lease is watched: it exits when the last one
//! is released or dropped and is started again by the next registration.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::LockError;
use crate::lock::Lease;

#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    state: Mutex<State>,
    wake: Notify,
}

#[derive(Debug, Default)]
struct State {
    leases: HashMap<u64, Watched>,
    next_id: u64,
    running: bool,
}

#[derive(Debug)]
struct Watched {
    lease: Arc<Lease>,
    period: Duration,
    due: Instant,
    in_flight: bool,
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
        let mut state = self.state();
        let id = state.next_id;
        state.next_id += 1;
        state.leases.insert(
            id,
            Watched {
                lease,
                period,
                due: Instant::now() + period,
                in_flight: false,
            },
        );
        if !state.running {
            state.running = true;
            tokio::spawn(self.clone().run());
        } else {
            self.wake.notify_one();
        }
        id
    }

    /// Stops refreshing the lease `id`.
    pub(crate) fn unwatch(&self, id: u64) {
        if self.state().leases.remove(&id).is_some() {
            self.wake.notify_one();
        }
    }

    async fn run(self: Arc<Self>) {
        let mut in_flight = JoinSet::new();
        loop {
            let next = {
                let mut state = self.state();
                if state.leases.is_empty() {
                    // Refreshes still in flight belong to leases that are gone:
                    // dropping the set aborts them.
                    state.running = false;
                    return;
                }
                self.start_due(&mut state, &mut in_flight)
            };
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                () = self.wake.notified() => {}
                Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                    if let Ok((id, result)) = done {
                        self.finish(id, result);
                    }
                    // Take every other refresh that is done too: the next
                    // scan of the leases then serves them all, instead of
                    // one scan per refresh (quadratic with many leases).
                    while let Some(done) = in_flight.try_join_next() {
                        if let Ok((id, result)) = done {
                            self.finish(id, result);
                        }
                    }
                }
            }
        }
    }

    /// Sends the refreshes that are due, declares lost the leases whose
    /// deadline passed, and returns when to look again.
    fn start_due(
        &self,
        state: &mut State,
        in_flight: &mut JoinSet<(u64, Result<(), LockError>)>,
    ) -> Instant {
        let now = Instant::now();
        let mut next = now + Duration::from_secs(3600);
        state.leases.retain(|&id, watched| {
            let timing = watched.lease.timing();
            if now >= timing.deadline {
                watched.lease.mark_lost();
                return false;
            }
            if !watched.in_flight && watched.due <= now {
                watched.in_flight = true;
                let lease = watched.lease.clone();
                in_flight.spawn(async move { (id, lease.refresh(timing.ttl).await) });
            }
            next = next.min(timing.deadline);
            if !watched.in_flight {
                next = next.min(watched.due);
            }
            true
        });
        next
    }

    fn finish(&self, id: u64, result: Result<(), LockError>) {
        let mut state = self.state();
        let Some(watched) = state.leases.get_mut(&id) else {
            return;
        };
        watched.in_flight = false;
        match result {
            Ok(()) => watched.due = Instant::now() + watched.period,
            Err(LockError::NotHeld { .. }) => {
                state.leases.remove(&id);
            }
            Err(err) => {
                // Try again sooner, while the lease may still be saved.
                let left = watched
                    .lease
                    .timing()
                    .deadline
                    .saturating_duration_since(Instant::now());
                let retry = (left / 3).clamp(Duration::from_millis(5), watched.period);
                tracing::warn!(target: "lockmacro", key = %watched.lease.key(), error = %err, ?retry, "refresh failed");
                watched.due = Instant::now() + retry;
            }
        }
    }
}
