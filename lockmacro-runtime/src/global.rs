use std::sync::RwLock;

use crate::Locker;

static GLOBAL: RwLock<Option<Locker>> = RwLock::new(None);

/// Makes `locker` the one `#[distributed_lock]` uses when no `locker = …`
/// argument is given. Call it once at start-up; a later call replaces the
/// locker for calls that start afterwards, and returns the previous one.
///
/// ```
/// use lockmacro_runtime::{global, set_global, Locker};
///
/// set_global(Locker::memory().with_namespace("app"));
/// assert_eq!(global().unwrap().namespace(), "app");
/// ```
pub fn set_global(locker: Locker) -> Option<Locker> {
    GLOBAL
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .replace(locker)
}

/// The locker set by [`set_global`], if any.
pub fn global() -> Option<Locker> {
    GLOBAL
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}
