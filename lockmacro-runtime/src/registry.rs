//! What a locker's shutdown ([`Locker::shutdown`](crate::Locker::shutdown))
//! gives back and waits for: the registry of the leases a locker and its
//! clones hold, and the tracker of the work they left running in the
//! background (releases of dropped locks, unfinished obtains giving back
//! what they claimed).
//!
//! A lease is in the registry from the moment its obtain returns it until it
//! ends (given back, lost or dropped): exactly while it counts on the
//! `lockmacro_leases_held` gauge. The registry knows a lease only as
//! [`Held`], so that the lease can point back to it without an import
//! circle.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use futures_util::future::BoxFuture;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

use crate::LockError;

/// A lease, as its locker's shutdown sees it.
pub(crate) trait Held: Send + Sync {
    /// Takes the lease from its holder, who sees it end.
    fn revoke(&self);
    /// Gives it back (unless its owner already is), counting the outcome.
    fn give_back(self: Arc<Self>) -> BoxFuture<'static, ()>;
    /// Takes it off the gauge and out of the registry; true the first time.
    fn end(&self) -> bool;
}

/// The leases one locker (and its clones) holds, and what it runs in the
/// background; shared by every lease it made.
#[derive(Default)]
pub(crate) struct Registry {
    state: Mutex<State>,
    next_id: AtomicU64,
    /// Woken when the last lease leaves the registry after it closed.
    emptied: Notify,
    /// Releases of dropped locks, unfinished obtains giving back what they
    /// claimed, and the obtains themselves while they run.
    tracker: TaskTracker,
    /// Cancelled by the shutdown: waiting obtains end.
    closing: CancellationToken,
    closed: AtomicBool,
    given_back: AtomicUsize,
    already_gone: AtomicUsize,
    left_to_expire: AtomicUsize,
}

#[derive(Default)]
struct State {
    leases: HashMap<u64, Weak<dyn Held>, foldhash::fast::RandomState>,
    closed: bool,
}

/// What happened to the leases a [`Locker`](crate::Locker) held when it was
/// shut down: see [`Locker::shutdown`](crate::Locker::shutdown).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let report = lockmacro_runtime::Locker::memory().shutdown().await;
/// assert_eq!((report.given_back, report.already_gone, report.left_to_expire), (0, 0, 0));
/// assert!(report.is_complete());
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Leases given back: their keys are free for the next owner.
    pub given_back: usize,
    /// Leases that were no longer held when given back: they had expired or
    /// been taken over.
    pub already_gone: usize,
    /// Leases that could not be given back (the backend failed, or did not
    /// answer within the limit): their keys stay held until their ttl runs
    /// out.
    pub left_to_expire: usize,
}

impl ShutdownReport {
    /// True when no key is left held until its ttl runs out.
    pub fn is_complete(&self) -> bool {
        self.left_to_expire == 0
    }
}

/// What a lease's give-back came to, for the report.
pub(crate) enum GivenBack {
    Released,
    NotHeld,
    Failed,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl Registry {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// An id for a lease about to be made.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Counts an obtain under way, so that a shutdown waits for what it
    /// gives back as it ends; [`LockError::ShutDown`] once shut down.
    pub(crate) fn obtaining(&self, key: &str) -> Result<TaskTrackerToken, LockError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(shut_down(key));
        }
        Ok(self.tracker.token())
    }

    /// Completes when the locker is shut down.
    pub(crate) async fn closing(&self) {
        self.closing.cancelled().await;
    }

    /// Enters the lease `id` just obtained; false once shut down, when the
    /// caller must give it back.
    pub(crate) fn admit(&self, id: u64, lease: Weak<dyn Held>) -> bool {
        let mut state = self.state();
        if state.closed {
            return false;
        }
        state.leases.insert(id, lease);
        true
    }

    /// Takes an ended lease out.
    pub(crate) fn forget(&self, id: u64) {
        let mut state = self.state();
        if state.leases.remove(&id).is_some() && state.closed && state.leases.is_empty() {
            self.emptied.notify_waiters();
        }
    }

    /// Counts a lease given back once the shutdown began.
    pub(crate) fn count(&self, outcome: GivenBack) {
        if !self.closed.load(Ordering::Acquire) {
            return;
        }
        let counter = match outcome {
            GivenBack::Released => &self.given_back,
            GivenBack::NotHeld => &self.already_gone,
            GivenBack::Failed => &self.left_to_expire,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Refuses new leases and obtains, ends the waiting ones, and returns
    /// the leases held.
    pub(crate) fn close(&self) -> Vec<Arc<dyn Held>> {
        let mut state = self.state();
        state.closed = true;
        self.closed.store(true, Ordering::Release);
        self.closing.cancel();
        self.tracker.close();
        state.leases.values().filter_map(Weak::upgrade).collect()
    }

    /// Completes once every lease has ended.
    pub(crate) async fn emptied(&self) {
        loop {
            let emptied = self.emptied.notified();
            tokio::pin!(emptied);
            emptied.as_mut().enable();
            if self.state().leases.is_empty() {
                return;
            }
            emptied.await;
        }
    }

    /// Ends the leases still held at the limit: they are left to expire.
    pub(crate) fn abandon(&self) {
        let leases: Vec<Arc<dyn Held>> = self
            .state()
            .leases
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for lease in leases {
            if lease.end() {
                self.left_to_expire.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn report(&self) -> ShutdownReport {
        ShutdownReport {
            given_back: self.given_back.load(Ordering::Relaxed),
            already_gone: self.already_gone.load(Ordering::Relaxed),
            left_to_expire: self.left_to_expire.load(Ordering::Relaxed),
        }
    }
}

/// The error of an obtain or a refresh once the locker is shut down.
pub(crate) fn shut_down(key: &str) -> LockError {
    LockError::ShutDown {
        key: key.to_owned(),
    }
}
