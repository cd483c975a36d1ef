//! Servers shared by the tests of one test binary: started by the first test
//! that asks, used by every test after it, and stopped when the binary exits.
//!
//! Only tests that leave a server as they found it may share it: they keep
//! to keys of their own (a namespace per test, see `fixture.rs`) and do not
//! stop, freeze, restart, fail over or reconfigure it, nor count its
//! commands or clients. Everything else starts a server of its own.
//!
//! A `static` is never dropped, so [`Shared`] registers an `atexit` handler
//! that drops each shared server when the binary exits: its processes are
//! killed and reaped, its temporary directory removed. Should the binary die
//! without exiting (a signal, an abort), the parent-death signal that every
//! server process is started with (`redis.rs`) still ends them.

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError};

/// One server (or cluster, or deployment) for the whole test binary.
pub struct Shared<T> {
    value: Mutex<Option<Arc<T>>>,
}

impl<T: Send + Sync + 'static> Default for Shared<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Send + Sync + 'static> Shared<T> {
    /// An empty slot, for a `static`.
    pub const fn new() -> Self {
        Shared {
            value: Mutex::new(None),
        }
    }

    /// The shared value, started by `start` on the first call; later calls
    /// wait for that start and return the same value. Blocks: call it from
    /// `spawn_blocking` in async code. A start that panics is tried again by
    /// the next call.
    pub fn get(&'static self, start: impl FnOnce() -> T) -> Arc<T> {
        let mut value = self.value.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(value) = &*value {
            return value.clone();
        }
        let started = Arc::new(start());
        *value = Some(started.clone());
        at_exit(Box::new(|| {
            let value = self
                .value
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            Box::new(value)
        }));
        started
    }
}

/// Takes a shared value out of its slot; dropping what it returns stops it.
type Stop = Box<dyn FnOnce() -> Box<dyn Any> + Send>;

static AT_EXIT: Mutex<Vec<Stop>> = Mutex::new(Vec::new());

fn at_exit(stop: Stop) {
    let mut stops = AT_EXIT.lock().unwrap_or_else(PoisonError::into_inner);
    if stops.is_empty() {
        // SAFETY: registers a function that takes no arguments and does not
        // unwind (see `stop_shared`).
        let registered = unsafe { libc::atexit(stop_shared) };
        assert_eq!(registered, 0, "cannot register the shared servers' cleanup");
    }
    stops.push(stop);
}

/// Runs when the test binary exits (after `main` returns or on
/// `process::exit`), once every test is done.
extern "C" fn stop_shared() {
    let stops = std::mem::take(&mut *AT_EXIT.lock().unwrap_or_else(PoisonError::into_inner));
    for stop in stops {
        // A panic must not unwind into the C runtime; a server that could
        // not be stopped here still dies with this process.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(stop())));
    }
}
