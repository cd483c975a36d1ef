//! Distributed locks for async Rust, on Redis.
//!
//! (User's guide: see the sections below.)

mod backend;
mod error;
mod global;
mod guard;
mod lock;
mod locker;
mod options;
mod reentry;
mod retry;
mod watchdog;

#[doc(hidden)]
pub mod __private;

pub use crate::backend::{
    AcquireRequest, Acquired, Backend, BoxFuture, MemoryBackend, RedisBackend, RedisConfig,
    TOKEN_LEN,
};
pub use crate::error::{BackendError, BackendErrorKind, LockError};
pub use crate::global::{global, set_global};
pub use crate::guard::LockGuard;
pub use crate::lock::Lock;
pub use crate::locker::{Locker, MAX_TTL};
pub use crate::options::{Fencing, ObtainOptions};
pub use crate::retry::RetryStrategy;
