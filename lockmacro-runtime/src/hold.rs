//! Running a future while holding keys: everything `#[distributed_lock]`
//! does, as a function ([`Locker::hold`]).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use crate::{LockError, LockGuard, Locker, ObtainOptions, RetryStrategy};

/// What to do when the lease is lost while the body runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnLost {
    /// Drop the body's future on the lease's local deadline and return
    /// [`LockError::Lost`] then, without waiting for the backend.
    #[default]
    Abort,
    /// Let the body run on; [`LockGuard::is_lost`] tells it, and a warning
    /// is logged when it ends.
    Continue,
}

/// How [`Locker::hold`] takes, keeps and gives back its keys: the
/// arguments of `#[distributed_lock]`, as a value.
///
/// ```
/// use std::time::Duration;
/// use lockmacro_runtime::{HoldOptions, OnLost};
///
/// // #[distributed_lock(key = …, ttl = "30s", wait = "10s", fence, on_lost = "continue")]
/// let options = HoldOptions::new(Duration::from_secs(30))
///     .wait(Duration::from_secs(10))
///     .fence()
///     .on_lost(OnLost::Continue);
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HoldOptions {
    ttl: Duration,
    refresh: Option<Duration>,
    obtain: ObtainOptions,
    on_lost: OnLost,
    hold_at_least: Option<Duration>,
}

impl HoldOptions {
    /// A lease of `ttl`, tried once, renewed every third of the ttl, the
    /// body aborted if the lease is lost.
    pub fn new(ttl: Duration) -> Self {
        HoldOptions {
            ttl,
            refresh: None,
            obtain: ObtainOptions::new(),
            on_lost: OnLost::Abort,
            hold_at_least: None,
        }
    }

    /// The watchdog's period (`refresh = …`); a third of the ttl by default.
    /// It must be shorter than the ttl less the backend's drift margin (see
    /// [`Lock::keep_alive_every`](crate::Lock::keep_alive_every)).
    pub fn refresh(mut self, period: Duration) -> Self {
        self.refresh = Some(period);
        self
    }

    /// Waits up to `wait` for the keys (`wait = …`): woken by the holder's
    /// release where the backend can tell, else when the holder's lease runs
    /// out, sending nothing in between; an exponential backoff paces waiters
    /// the backend cannot wake. How this differs from
    /// [`retry`](Self::retry): "`wait` or a retry strategy" in the crate
    /// documentation.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.obtain = self.obtain.retry(
            RetryStrategy::exponential(Duration::from_millis(2), Duration::from_millis(200))
                .deadline(wait),
        );
        self.obtain.wakeups_only = true;
        self
    }

    /// Waits as `retry` says instead: the waiter tries again at each of the
    /// strategy's pauses even where the backend could wake it, and gives up
    /// after its deadline or attempt cap. See "`wait` or a retry strategy"
    /// in the crate documentation.
    pub fn retry(mut self, retry: RetryStrategy) -> Self {
        self.obtain = self.obtain.retry(retry);
        self.obtain.wakeups_only = false;
        self
    }

    /// Waits in line (`fair = true`); see [`ObtainOptions::fair`].
    pub fn fair(mut self) -> Self {
        self.obtain = self.obtain.fair();
        self
    }

    /// Mints a fencing token from the derived counter (`fence`).
    pub fn fence(mut self) -> Self {
        self.obtain = self.obtain.fence();
        self
    }

    /// Mints a fencing token from the counter at `key` (`fence = "key"`).
    pub fn fence_key(mut self, key: impl Into<String>) -> Self {
        self.obtain = self.obtain.fence_key(key);
        self
    }

    /// `metadata()` as the metadata, unless some was given.
    pub(crate) fn metadata_or(mut self, metadata: impl FnOnce() -> &'static str) -> Self {
        if !self.has_metadata() {
            self.obtain.metadata = std::borrow::Cow::Borrowed(metadata());
        }
        self
    }

    /// Whether [`metadata`](Self::metadata) was given (and not empty).
    pub(crate) fn has_metadata(&self) -> bool {
        !self.obtain.metadata.is_empty()
    }

    /// Stores `metadata` with the lock; see [`ObtainOptions::metadata`].
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.obtain = self.obtain.metadata(metadata);
        self
    }

    /// What to do when the lease is lost while the body runs (`on_lost = …`).
    pub fn on_lost(mut self, on_lost: OnLost) -> Self {
        self.on_lost = on_lost;
        self
    }

    /// Keeps the key at least this long after taking it, even if the body
    /// ends sooner (`hold_at_least = …`): the release is then a refresh to
    /// the time left, and the key expires by itself.
    pub fn hold_at_least(mut self, hold: Duration) -> Self {
        self.hold_at_least = Some(hold);
        self
    }

    /// Waits until `n` replicas have the lock (`replicas = …`); see
    /// [`ObtainOptions::replicas`].
    pub fn replicas(mut self, n: usize) -> Self {
        self.obtain = self.obtain.replicas(n);
        self
    }

    /// Takes one of `permits` permits instead of the whole key
    /// (`permits = …`); see [`ObtainOptions::permits`].
    pub fn permits(mut self, permits: u32) -> Self {
        self.obtain = self.obtain.permits(permits);
        self
    }

    /// Takes a read of the key (`mode = "read"`); see
    /// [`ObtainOptions::read`].
    pub fn read(mut self) -> Self {
        self.obtain = self.obtain.read();
        self
    }

    /// Takes the write of the key (`mode = "write"`); see
    /// [`ObtainOptions::write`].
    pub fn write(mut self) -> Self {
        self.obtain = self.obtain.write();
        self
    }

    /// Keeps the key from anyone else for `delay` after the lease runs out
    /// without a release (`lock_delay = …`); see
    /// [`ObtainOptions::lock_delay`].
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.obtain = self.obtain.lock_delay(delay);
        self
    }

    /// Stops renewing after this long (`max_hold = …`); see
    /// [`ObtainOptions::max_hold`].
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.obtain = self.obtain.max_hold(max_hold);
        self
    }
}

impl Locker {
    /// Runs `body` while holding every one of `keys`: what
    /// `#[distributed_lock]` does, as a function.
    ///
    /// Takes the keys (waiting as `options` say), hands the lock to the
    /// watchdog, and runs the future `body` returns with the [`LockGuard`].
    /// The lock is given back when the future completes, panics (the panic
    /// then resumes) or is dropped (in the background). A nested call in the
    /// same task on keys it already holds re-enters at once. If the lease is
    /// lost while the body runs, [`OnLost::Abort`] (the default) drops the
    /// body's future on the local deadline and returns [`LockError::Lost`]:
    /// the body is never polled once the deadline has passed, and a body that
    /// finishes after it returns `Lost`, not its value. What remains is the
    /// code between two awaits, and a write already handed to a connection:
    /// fencing tokens are what protect a resource from those. A
    /// [`shutdown`](Locker::shutdown) of the locker while the body runs
    /// ends it the same way, with [`LockError::ShutDown`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{HoldOptions, Locker};
    ///
    /// let locker = Locker::memory();
    /// let options = HoldOptions::new(Duration::from_secs(30)).fence();
    /// let receipt = locker
    ///     .hold(["user:42"], options, |guard| async move {
    ///         // Runs on at most one instance at a time for this user.
    ///         format!("billed with token {}", guard.fence_token().unwrap())
    ///     })
    ///     .await?;
    /// assert!(receipt.starts_with("billed"));
    /// # Ok(()) }
    /// ```
    ///
    /// The design card's line,
    ///
    /// ```text
    /// #[distributed_lock(key = "user:{u.id}", ttl = "30s")]
    /// async fn bill(u: &User) -> Result<Receipt, BillingError> { body }
    /// ```
    ///
    /// is this, with the global locker:
    ///
    /// ```text
    /// async fn bill(u: &User) -> Result<Receipt, BillingError> {
    ///     let keys = vec![format!("user:{}", u.id)];
    ///     let options = HoldOptions::new(Duration::from_millis(30000));
    ///     match lockmacro_runtime::global() {
    ///         Some(locker) => locker.hold(keys, options, move |_| async move { body }).await,
    ///         None => Err(LockError::NotConfigured),
    ///     }
    ///     .unwrap_or_else(|err| Err(err.into()))
    /// }
    /// ```
    pub async fn hold<I, K, F, Fut>(
        &self,
        keys: I,
        options: HoldOptions,
        body: F,
    ) -> Result<Fut::Output, LockError>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
        F: FnOnce(LockGuard) -> Fut,
        Fut: Future,
    {
        let keys: Vec<String> = keys
            .into_iter()
            .map(|key| key.as_ref().to_owned())
            .collect();
        self.hold_keys(keys, options, body).await
    }

    /// [`hold`](Locker::hold) of keys already owned: the attribute's, which
    /// it builds as strings, are not copied again.
    ///
    /// Not an `async fn`, whose future would hold the keys and options
    /// twice: the attribute's future, which every call copies, holds this
    /// one.
    #[allow(
        clippy::manual_async_fn,
        reason = "an async fn's future holds its arguments twice"
    )]
    pub(crate) fn hold_keys<F, Fut>(
        &self,
        keys: Vec<String>,
        options: HoldOptions,
        body: F,
    ) -> impl Future<Output = Result<Fut::Output, LockError>>
    where
        F: FnOnce(LockGuard) -> Fut,
        Fut: Future,
    {
        async move {
            if let Some(guard) = crate::reentry::held(self, &keys) {
                crate::reentry::check_upgrade(&guard, options.obtain.share)?;
                tracing::trace!(target: "lockmacro", key = %guard.key(), "re-entered");
                return Ok(body(guard).await);
            }
            let lock = self.obtain_keys(keys, options.ttl, options.obtain).await?;
            let guard = lock.keep_alive_every(options.refresh.unwrap_or(options.ttl / 3))?;
            let body = crate::reentry::scope(&guard, body(guard.share()));
            let outcome = match options.on_lost {
                OnLost::Abort => supervise(&guard, body).await,
                OnLost::Continue => {
                    let outcome = catch_unwind(body).await;
                    if guard.is_lost() {
                        tracing::warn!(target: "lockmacro", key = %guard.key(), "lease was lost while the body ran on (on_lost = \"continue\")");
                    }
                    Some(outcome)
                }
            };
            let Some(outcome) = outcome else {
                // Reported on the local deadline, whatever the server does:
                // dropping the guard releases in the background.
                let failure = if guard.lease().is_revoked() {
                    crate::registry::shut_down(guard.key())
                } else {
                    guard.lease().lost_error()
                };
                drop(guard);
                return Err(failure);
            };
            finish(guard, options.hold_at_least).await;
            match outcome {
                Ok(value) => Ok(value),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    }
}

/// Polls `body` while the lease holds; `None` once it is lost.
///
/// The clock is read before every poll of the body and once more when it
/// finishes: after the process was paused (or the runtime stalled), the
/// body's timers and the deadline's fire together, and the body must not be
/// polled first, nor its value handed back as if the lease had held.
pub(crate) async fn supervise<F: Future>(
    guard: &LockGuard,
    body: F,
) -> Option<std::thread::Result<F::Output>> {
    let lease = guard.lease();
    let mut body = std::pin::pin!(body);
    let mut lost = std::pin::pin!(guard.lost());
    std::future::poll_fn(|cx| {
        if lease.is_lost() {
            return Poll::Ready(None);
        }
        if let Poll::Ready(outcome) = poll_catching(body.as_mut(), cx) {
            if outcome.is_ok() && lease.is_lost() {
                return Poll::Ready(None);
            }
            return Poll::Ready(Some(outcome));
        }
        match lost.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// Runs `body`, catching a panic so that the lock is released before the
/// panic goes on.
async fn catch_unwind<F: Future>(body: F) -> std::thread::Result<F::Output> {
    let mut body = std::pin::pin!(body);
    std::future::poll_fn(|cx| poll_catching(body.as_mut(), cx)).await
}

fn poll_catching<F: Future>(
    body: Pin<&mut F>,
    cx: &mut Context<'_>,
) -> Poll<std::thread::Result<F::Output>> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| body.poll(cx))) {
        Ok(Poll::Pending) => Poll::Pending,
        Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
        Err(panic) => Poll::Ready(Err(panic)),
    }
}

/// Gives the lock back, or, with `hold_at_least`, lets it expire once that
/// much time has passed since it was taken.
async fn finish(guard: LockGuard, hold_at_least: Option<Duration>) {
    let lease = guard.lease();
    let until = hold_at_least.map(|hold| lease.acquired_at + hold);
    let result = match until {
        Some(until) if until > Instant::now() && !guard.is_lost() => {
            let result = lease.expire_in(until - Instant::now()).await;
            lease.leave_to_expire();
            result
        }
        _ => guard.release().await,
    };
    if let Err(err) = result {
        tracing::debug!(target: "lockmacro", error = %err, "release after the body");
    }
}

/// What a holder records when given no metadata: this host's name and this
/// process's id (`"web-3 pid 4242"`), read once per process, so that an
/// operator inspecting a key sees who holds it.
pub(crate) fn default_metadata() -> &'static str {
    static DEFAULT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DEFAULT.get_or_init(|| {
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
            .or_else(|| std::env::var("COMPUTERNAME").ok())
            .map(|host| host.trim().to_owned())
            .filter(|host| !host.is_empty())
            .unwrap_or_else(|| "unknown-host".to_owned());
        format!("{host} pid {}", std::process::id())
    })
}
