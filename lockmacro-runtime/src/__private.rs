//! Support for the code `#[distributed_lock]` generates. Not public API: it
//! changes without notice; use the items re-exported at the crate root.

use std::fmt::Display;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use crate::{LockError, LockGuard, Locker, ObtainOptions, RetryStrategy};

pub use ::core::time::Duration as __Duration;
pub use ::std::format;
pub use ::std::string::String;
pub use ::std::vec;

/// What the attribute's arguments asked for, with no spans left.
#[derive(Debug, Clone)]
pub struct Plan {
    ttl: Duration,
    refresh: Option<Duration>,
    wait: Option<Duration>,
    fair: bool,
    fence: Fence,
    abort_on_lost: bool,
    hold_at_least: Option<Duration>,
    replicas: usize,
}

#[derive(Debug, Clone)]
enum Fence {
    Off,
    Derived,
    Key(String),
}

impl Plan {
    /// `ttl = …`
    pub fn new(ttl: Duration) -> Self {
        Plan {
            ttl,
            refresh: None,
            wait: None,
            fair: false,
            fence: Fence::Off,
            abort_on_lost: true,
            hold_at_least: None,
            replicas: 0,
        }
    }

    /// `refresh = …`
    pub fn refresh(mut self, period: Duration) -> Self {
        self.refresh = Some(period);
        self
    }

    /// `wait = …`
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// `fair = true`
    pub fn fair(mut self) -> Self {
        self.fair = true;
        self
    }

    /// `fence`
    pub fn fence(mut self) -> Self {
        self.fence = Fence::Derived;
        self
    }

    /// `fence = "key"`
    pub fn fence_key(mut self, key: impl Display) -> Self {
        self.fence = Fence::Key(key.to_string());
        self
    }

    /// `on_lost = "continue"`
    pub fn on_lost_continue(mut self) -> Self {
        self.abort_on_lost = false;
        self
    }

    /// `hold_at_least = …`
    pub fn hold_at_least(mut self, hold: Duration) -> Self {
        self.hold_at_least = Some(hold);
        self
    }

    /// `replicas = …`
    pub fn replicas(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    fn options(&self) -> ObtainOptions {
        let mut opts = ObtainOptions::new();
        if let Some(wait) = self.wait {
            // The backoff only paces waiters the backend cannot wake (no
            // pub/sub, or a cluster); the others wait for the release.
            opts = opts.retry(
                RetryStrategy::exponential(Duration::from_millis(2), Duration::from_millis(200))
                    .deadline(wait),
            );
            opts.wakeups_only = true;
        }
        if self.fair {
            opts = opts.fair();
        }
        if self.replicas > 0 {
            opts = opts.replicas(self.replicas);
        }
        match &self.fence {
            Fence::Off => opts,
            Fence::Derived => opts.fence(),
            Fence::Key(key) => opts.fence_key(key.clone()),
        }
    }
}

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

/// Runs `body` while holding `keys`, as the attribute's arguments say;
/// `on_failure` turns a failure into the function's return value.
pub async fn run<R, F, Fut>(
    locker: Result<Locker, LockError>,
    keys: Vec<String>,
    plan: Plan,
    on_failure: fn(LockError) -> R,
    body: F,
) -> R
where
    F: FnOnce(LockGuard) -> Fut,
    Fut: Future<Output = R>,
{
    let locker = match locker {
        Ok(locker) => locker,
        Err(err) => return on_failure(err),
    };
    if let Some(guard) = crate::reentry::held(&locker, &keys) {
        tracing::trace!(target: "lockmacro", key = %guard.key(), "re-entered");
        return body(guard).await;
    }
    let lock = match locker.obtain_many(&keys, plan.ttl, plan.options()).await {
        Ok(lock) => lock,
        Err(err) => return on_failure(err),
    };
    let refresh = plan.refresh.unwrap_or(plan.ttl / 3);
    let guard = lock.keep_alive_every(refresh);
    let key = guard.key().to_owned();
    let body = crate::reentry::scope(&guard, body(guard.share()));
    let outcome = {
        let mut body = std::pin::pin!(CatchUnwind(body));
        if plan.abort_on_lost {
            tokio::select! {
                biased;
                outcome = &mut body => Some(outcome),
                () = guard.lost() => None,
            }
        } else {
            Some(body.await)
        }
    };
    if !plan.abort_on_lost && guard.is_lost() {
        tracing::warn!(target: "lockmacro", key = %key, "lease was lost while the body ran on (on_lost = \"continue\")");
    }
    finish(guard, plan.hold_at_least).await;
    match outcome {
        Some(Ok(value)) => value,
        Some(Err(panic)) => std::panic::resume_unwind(panic),
        None => on_failure(LockError::Lost { key }),
    }
}

/// Gives the lock back, or, with `hold_at_least`, lets it expire once that
/// much time has passed since it was taken.
async fn finish(guard: LockGuard, hold_at_least: Option<Duration>) {
    let lease = guard.lease();
    let until = hold_at_least.map(|hold| lease.acquired_at + hold);
    let result = match until {
        Some(until) if until > Instant::now() && !guard.is_lost() => {
            let result = lease.refresh(until - Instant::now()).await;
            lease.done.store(true, std::sync::atomic::Ordering::Release);
            result
        }
        _ => guard.release().await,
    };
    if let Err(err) = result {
        tracing::debug!(target: "lockmacro", error = %err, "release after the body");
    }
}

/// Catches a panic of the body, so that the lock is released before the
/// panic goes on.
struct CatchUnwind<F>(F);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = std::thread::Result<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: the inner future is structurally pinned: it is never moved
        // out of `self`, and `CatchUnwind` has no `Drop` or `Unpin` impl.
        let inner = unsafe { self.map_unchecked_mut(|this| &mut this.0) };
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

fn skipped(err: &LockError) {
    match err {
        LockError::NotObtained { key } => {
            tracing::debug!(target: "lockmacro", key = %key, "skipped: held by someone else");
        }
        err => tracing::error!(target: "lockmacro", error = %err, "skipped: {err}"),
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
