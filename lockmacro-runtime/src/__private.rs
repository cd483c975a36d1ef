//! Support for the code `#[distributed_lock]` generates. Not public API: it
//! changes without notice; use the items re-exported at the crate root.

use std::fmt::Display;
use std::future::Future;

use crate::{LockError, LockGuard, Locker};

pub use crate::hold::{HoldOptions, OnLost};
pub use ::core::time::Duration as __Duration;
pub use ::std::format;
pub use ::std::string::String;
pub use ::std::vec;

/// The global locker, or [`LockError::NotConfigured`].
pub fn global() -> Result<Locker, LockError> {
    crate::global().ok_or(LockError::NotConfigured)
}

/// `locker = expr`: accepts `Locker`, `Arc<Locker>`, and references to them.
pub fn locker<L: AsLocker + ?Sized>(locker: &L) -> Result<Locker, LockError> {
    Ok(locker.as_locker().clone())
}

/// What `locker = …` accepts.
#[diagnostic::on_unimplemented(
    message = "`locker = …` of `#[distributed_lock]` needs a `Locker`, found `{Self}`",
    label = "not a `Locker`",
    note = "pass a `lockmacro_runtime::Locker`, a reference to one, or an `Arc<Locker>`"
)]
pub trait AsLocker {
    /// The locker.
    fn as_locker(&self) -> &Locker;
}

impl AsLocker for Locker {
    fn as_locker(&self) -> &Locker {
        self
    }
}

impl AsLocker for std::sync::Arc<Locker> {
    fn as_locker(&self) -> &Locker {
        self
    }
}

impl<T: AsLocker + ?Sized> AsLocker for &T {
    fn as_locker(&self) -> &Locker {
        (**self).as_locker()
    }
}

/// `key = expr` with a non-literal expression.
pub fn key<D: Display + ?Sized>(key: &D) -> String {
    key.to_string()
}

/// Runs `body` while holding `keys` ([`Locker::hold`]); `on_failure` turns
/// a failure into the function's return value.
///
/// Not an `async fn`, whose future would hold its arguments twice: the
/// attributed function's future, which every call copies, is this one.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn's future holds its arguments twice"
)]
pub fn run<R, F, Fut>(
    locker: Result<Locker, LockError>,
    keys: Vec<String>,
    options: HoldOptions,
    on_failure: fn(LockError) -> R,
    body: F,
) -> impl Future<Output = R>
where
    F: FnOnce(LockGuard) -> Fut,
    Fut: Future<Output = R>,
{
    async move {
        let options = options.metadata_or(crate::hold::default_metadata);
        let held = match locker {
            Ok(locker) => locker.hold_keys(keys, options, body).await,
            Err(err) => Err(err),
        };
        held.unwrap_or_else(on_failure)
    }
}

fn skipped(err: &LockError) {
    match err {
        LockError::NotObtained { key, namespace, .. } => {
            tracing::debug!(target: "lockmacro", key = %key, namespace = %namespace, "skipped: held by someone else");
        }
        // The error says which lock and why; the message only what was done.
        err => {
            tracing::error!(target: "lockmacro", error = %err, "skipped: the lock could not be taken")
        }
    }
}

/// The return value when the lock is not held and `on_busy` is not given:
/// the error for `Result`, the skipped value for `()` and `Option`.
#[diagnostic::on_unimplemented(
    message = "`#[distributed_lock]` cannot choose a return value of type `{Self}` for when the lock is not obtained",
    label = "this return type has no error or skipped value",
    note = "return `Result<T, E>` where `E: From<lockmacro_runtime::LockError>`, or `()`, or `Option<T>`"
)]
pub trait AutoOutcome: Sized {
    /// The value to return instead of running the body.
    fn on_failure(err: LockError) -> Self;
}

impl AutoOutcome for () {
    fn on_failure(err: LockError) -> Self {
        skipped(&err);
    }
}

impl<T> AutoOutcome for Option<T> {
    fn on_failure(err: LockError) -> Self {
        skipped(&err);
        None
    }
}

impl<T, E: From<LockError>> AutoOutcome for Result<T, E> {
    fn on_failure(err: LockError) -> Self {
        Err(err.into())
    }
}

/// The return value under `on_busy = "error"`.
#[diagnostic::on_unimplemented(
    message = "`#[distributed_lock(on_busy = \"error\")]` needs a return type `Result<T, E>` where `E: From<LockError>`, found `{Self}`",
    label = "cannot return an error here",
    note = "return `Result<T, E>` with `E: From<lockmacro_runtime::LockError>`, or use `on_busy = \"skip\"`"
)]
pub trait ErrorOutcome: Sized {
    /// The value to return instead of running the body.
    fn on_failure(err: LockError) -> Self;
}

impl<T, E: From<LockError>> ErrorOutcome for Result<T, E> {
    fn on_failure(err: LockError) -> Self {
        Err(err.into())
    }
}

/// The return value under `on_busy = "skip"`.
#[diagnostic::on_unimplemented(
    message = "`#[distributed_lock(on_busy = \"skip\")]` cannot make a skipped value of type `{Self}`",
    label = "no skipped value for this type",
    note = "`skip` returns `()`, `None`, `Ok(())` or `Ok(None)`: return one of `()`, `Option<T>`, `Result<(), E>`, `Result<Option<T>, E>`, or use `on_busy = \"error\"`"
)]
pub trait SkipOutcome: Sized {
    /// The value to return instead of running the body.
    fn on_failure(err: LockError) -> Self;
}

impl SkipOutcome for () {
    fn on_failure(err: LockError) -> Self {
        skipped(&err);
    }
}

impl<T> SkipOutcome for Option<T> {
    fn on_failure(err: LockError) -> Self {
        skipped(&err);
        None
    }
}

impl<T: SkipOutcome, E> SkipOutcome for Result<T, E> {
    fn on_failure(err: LockError) -> Self {
        Ok(T::on_failure(err))
    }
}
