//! Re-entry of a lock the current task already holds, as with a reentrant
//! mutex: a nested `#[distributed_lock]` call on a held key runs at once
//! instead of waiting for itself.

use std::future::Future;

use crate::backend::Share;
use crate::{LockError, LockGuard, Locker};

tokio::task_local! {
    static HELD: Held;
}

/// The locks a task holds under the attribute, innermost last: most hold
/// one, kept without a list of its own (an allocation per call).
enum Held {
    One(LockGuard),
    Nested(Vec<LockGuard>),
}

impl Held {
    fn iter(&self) -> std::slice::Iter<'_, LockGuard> {
        match self {
            Held::One(guard) => std::slice::from_ref(guard).iter(),
            Held::Nested(guards) => guards.iter(),
        }
    }
}

/// A guard of this task's that holds every one of `keys` on `locker`'s
/// backend and is not lost.
pub(crate) fn held(locker: &Locker, keys: &[String]) -> Option<LockGuard> {
    HELD.try_with(|held| {
        held.iter()
            .find(|guard| {
                let lease = guard.lease();
                lease.is_on(locker.backend())
                    && !guard.is_done()
                    && !guard.is_lost()
                    && keys
                        .iter()
                        .all(|key| lease.wire_keys().contains(&locker.wire_key(key)))
            })
            .map(LockGuard::share)
    })
    .ok()
    .flatten()
}

/// Refuses to re-enter a read as the write: the task would write while other
/// readers read, and two readers upgrading would wait for each other for
/// ever. Any other re-entry is allowed: a writer may read, a holder of the
/// whole key or of a permit may take it again.
pub(crate) fn check_upgrade(held: &LockGuard, wanted: Option<Share>) -> Result<(), LockError> {
    if held.lease().share() == Some(Share::Read) && wanted == Some(Share::Write) {
        return Err(LockError::UpgradeRefused {
            key: held.key().to_owned(),
        });
    }
    Ok(())
}

/// Runs `body` with `guard` added to the task's held locks.
pub(crate) fn scope<F: Future>(guard: &LockGuard, body: F) -> impl Future<Output = F::Output> {
    let held = HELD
        .try_with(|held| {
            let mut guards: Vec<LockGuard> = held.iter().map(LockGuard::share).collect();
            guards.push(guard.share());
            Held::Nested(guards)
        })
        .unwrap_or_else(|_| Held::One(guard.share()));
    HELD.scope(held, body)
}
