//! The `#[distributed_lock]` attribute. Use it through `lockmacro-runtime`,
//! which re-exports it and holds everything that runs: this crate only reads
//! the attribute and rewrites the function, at compile time.
//!
//! The attribute, each of its arguments and what it expands to are
//! documented on [`distributed_lock`].

#![cfg_attr(docsrs, feature(doc_cfg))]

mod args;
mod duration;
mod errors;
mod expand;
mod item;
mod key;
mod plan;
mod policy;
mod rules;
#[cfg(test)]
mod snapshots;
mod valid;
mod values;

/// Runs an `async fn` only while it holds a distributed lock.
///
/// ```text
/// use lockmacro_runtime::{LockError, Locker, distributed_lock, set_global};
///
/// pub struct User {
///     pub id: u64,
/// }
///
/// #[distributed_lock(key = "user:{u.id}", ttl = "30s")]
/// async fn bill(u: &User) -> Result<u64, LockError> {
///     // Runs on at most one instance at a time for this user; the lease is
///     // refreshed while this runs and released when it ends.
///     Ok(u.id * 100)
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<(), LockError> {
///     set_global(Locker::memory()); // or Locker::connect("redis://…").await?
///     assert_eq!(bill(&User { id: 7 }).await?, 700);
///     Ok(())
/// }
/// ```
///
/// (The examples on this page are plain text because this crate cannot
/// depend on `lockmacro-runtime`, which depends on it. `lockmacro-runtime`
/// runs each of them as a test.)
///
/// The body never runs unless the lock is held. When it cannot be held (the
/// key is busy, the backend fails, no locker is configured), the function
/// returns instead of running: an error, or a "skipped" value, as
/// [`on_busy`](#on_busy--error--skip) says. When the body returns, panics, or
/// its future is dropped, the lock is released.
///
/// Every argument is checked at compile time: a mistake is a compile error
/// on the argument, saying what to write instead.
///
/// # Arguments
///
/// ## `key = "…"`
///
/// The key to lock: text with placeholders, each an expression over the
/// function's arguments rendered with `Display`: `"user:{u.id}"`,
/// `"tenant:{self.tenant}:order:{order.id()}"`. `<expr>` is the same as
/// `{expr}` (`"user:<u.id>"`); double a bracket for the bracket itself
/// (`{{`, `}}`, `<<`, `>>`). A placeholder must start from a parameter,
/// `self` or a constant. Any other expression than a string is taken as the
/// key itself, rendered with `Display`: `key = self.job_key()`.
///
/// ## `keys = ["…", "…"]`
///
/// Several keys, taken all or nothing, in sorted order so that two callers
/// never deadlock: `keys = ["account:{from}", "account:{to}"]`. Give `key` or
/// `keys`, not both.
///
/// ## `ttl = "30s"`
///
/// Required. How long the lease lasts without a refresh: `"500ms"`, `"30s"`,
/// `"1m30s"`, `"2h"`. Read at compile time, in whole milliseconds, between 1ms
/// and ten years. Any other expression is taken as a
/// `std::time::Duration`: `ttl = self.lease`, `ttl = Duration::from_secs(30)`.
/// Every duration argument below takes the same forms.
///
/// ## `on_busy = "error" | "skip"`
///
/// What the function returns when the lock cannot be held.
///
/// - `"error"`: `Err(LockError::….into())`. The return type must be
///   `Result<T, E>` with `E: From<LockError>`.
/// - `"skip"`: the skipped value: `()`, `None`, `Ok(())` or `Ok(None)`. The
///   return type must be `()`, `Option<T>`, `Result<(), E>` or
///   `Result<Option<T>, E>`. Failures other than a busy key are logged at
///   error level.
/// - Not given: `"error"` for a `Result` (type aliases such as
///   `anyhow::Result<T>` included), `"skip"` for `()` and `Option<T>`.
///
/// A return type the policy cannot produce is a compile error on the return
/// type.
///
/// ## `wait = "10s"`
///
/// Keep trying this long before giving up on a busy key. A waiter the
/// backend can wake (Redis pub/sub, on one server or a cluster, the memory
/// backend) sends nothing until the holder releases the key, its lease runs
/// out, or `wait` ends; where there are no wake-ups (Redlock, a user denied
/// pub/sub) it retries
/// with an exponential backoff with full jitter (2 ms to 200 ms). No pause is
/// longer than the holder's remaining lease, so an expired holder is noticed
/// at once. Without `wait`, the lock is tried once.
///
/// ## `fair = true`
///
/// Serve waiters in arrival order: a waiter that finds the key held joins the
/// key's queue, and each release hands the key straight to the first waiter
/// still in it, so the next holder needs no round trip of its own. Needs
/// `wait` (a waiter's place lapses when its wait ends) and a single `key`;
/// both are checked at compile time. `fair` alone means `fair = true`;
/// `fair = false`, the default, lets waiters race when the key is released.
/// Redlock has no queue: there, a fair function returns
/// `LockError::Backend` without running. See "Fair hand-off" in the
/// `lockmacro_runtime` documentation.
///
/// ## `refresh = "10s"`
///
/// How often the watchdog renews the lease while the body runs. Must be
/// shorter than `ttl`; a third of `ttl` when not given.
///
/// ## `on_lost = "abort" | "continue"`
///
/// What happens when the lease is lost while the body runs (the backend was
/// unreachable for longer than the lease). `"abort"`, the default: the body's
/// future is dropped at its next `.await`, and the function returns as for a
/// busy key, with `LockError::Lost`. `"continue"`: the body runs on, and
/// `guard.is_lost()` tells it. A `Locker::shutdown` ends the lease the same
/// way; under `"abort"` the function returns `LockError::ShutDown`.
///
/// ## `fence` / `fence = "key"`
///
/// Mint a fencing token with the lock: a number that strictly increases each
/// time the key is taken, read with `guard.fence_token()`. Pass it to the
/// resource the lock protects, which refuses a token older than the last it
/// accepted. The counter is stored next to the key, or under the key given
/// (a template, like `key`).
///
/// ## `guard = name`
///
/// Binds `name: &LockGuard` in the body: the key, the token, the fencing
/// token, the lease's deadline, `is_lost()`, and `cancellation_token()`, a
/// tokio-util `CancellationToken` cancelled when the lease ends (the body
/// returns, the lease is lost, or the locker is shut down): for the tasks
/// the body spawns, which outlive its future.
///
/// ```text
/// #[distributed_lock(key = "invoice:{id}", ttl = "30s", fence, guard = lock)]
/// async fn send_invoice(id: u64) -> Result<Option<u64>, LockError> {
///     let token = lock.cancellation_token();
///     tokio::spawn(async move { token.run_until_cancelled(upload(id)).await });
///     Ok(lock.fence_token())
/// }
/// ```
///
/// ## `locker = expr`
///
/// The `Locker` to use, as a `Locker`, a `&Locker` or an `Arc<Locker>`:
/// `locker = self.locker`, `locker = &state.locker`. The global one
/// (`lockmacro_runtime::set_global`) when not given.
///
/// ## `hold_at_least = "5m"`
///
/// Keep the key at least this long after taking it, even when the body ends
/// sooner: for a job scheduled on several nodes whose clocks differ, so that
/// a node that starts late does not run it a second time.
///
/// ## `max_hold = "10m"`
///
/// The longest the body may hold the lock: after that long the watchdog
/// stops renewing it and the lease is lost like any other (under
/// `on_lost = "abort"`, the body is dropped and the call returns
/// `LockError::Lost`). A body stuck on a call that never returns then frees
/// the key. No cap when not given; it cannot be shorter than `hold_at_least`.
///
/// ## `lock_delay = "15s"`
///
/// Keep the key from anyone else this long after the lease ran out without
/// a release: a process that crashed, hung or was cut off mid-body may
/// still have writes on their way, and they drain before the next holder
/// acts. A release (the body returned, failed, panicked or was cancelled)
/// frees the key at once. None when not given.
///
/// ## `permits = 5`
///
/// A semaphore: at most this many bodies run at once per key, across every
/// process; each holds one permit, a lease of its own that the watchdog
/// renews, that is lost on its local deadline like a lock, and that comes
/// back by itself `ttl` after its holder died. A waiter (`wait`) is woken by
/// a release. `fence` mints a token per permit, increasing per key. One
/// `key` only; `fair = true` hands permits to waiters in arrival order; not
/// with `replicas`; on one Redis server, a
/// cluster, Sentinel, etcd or memory (Redlock refuses the call). A key is
/// one kind of lock: do not also lock it without `permits`, or with another
/// count.
///
/// ```text
/// #[distributed_lock(key = "api:{tenant}", ttl = "30s", permits = 5, wait = "10s")]
/// async fn call_partner_api(tenant: &str) -> Result<(), LockError> {
///     // at most 5 of these per tenant at once, across the fleet
/// #   Ok(())
/// }
/// ```
///
/// ## `mode = "read"` / `mode = "write"`
///
/// A read-write lock: any number of `mode = "read"` bodies at once per key,
/// or one `mode = "write"` body alone. A writer waiting for readers holds
/// back the readers that come after it, so a stream of readers cannot starve
/// it (writer preference). Each read is a lease of its own, renewed, lost
/// and given back like a lock. A task that holds the write may call a
/// `mode = "read"` function on the same key (it re-enters); one that holds a
/// read and calls a `mode = "write"` function gets
/// `LockError::UpgradeRefused`, not a deadlock. One `key` only; not with `permits`, `fair = true` or
/// `replicas`; on one Redis server, a cluster, Sentinel or memory.
///
/// ```text
/// #[distributed_lock(key = "catalog:{id}", ttl = "30s", mode = "read", wait = "5s")]
/// async fn show(id: u64) -> Result<Catalog, LockError> { … }
///
/// #[distributed_lock(key = "catalog:{id}", ttl = "30s", mode = "write", wait = "30s")]
/// async fn rebuild(id: u64) -> Result<(), LockError> { … }
/// ```
///
/// ## `metadata = "billing-{u.id}"`
///
/// What the holder records with the lock, for whoever inspects the key
/// (`Locker::inspect`) or is refused it (`LockError::NotObtained` carries
/// it): a template with the same placeholders as `key`, or any `Display`
/// expression. Without it, the holder records its host name and process id
/// (`"web-3 pid 4242"`), read once per process.
///
/// ```text
/// #[distributed_lock(key = "invoice:{id}", ttl = "30s", metadata = "billing-{id}")]
/// async fn bill(id: u64) -> Result<(), LockError> { … }
/// ```
///
/// ## `replicas = 1`
///
/// Where the lock server has replicas (a Redis Cluster, or one server with
/// replicas): after taking the key, wait until this many replicas have it
/// (Redis `WAIT`), for at most 1 s or a tenth of `ttl`, whichever is
/// shorter. When fewer acknowledge it in time, the key is given back and the
/// call fails with `LockError::NotReplicated` (under `on_busy = "skip"`: the
/// skipped value, logged at error level). A backend that cannot wait for
/// replicas (Redlock, memory) refuses the call. It makes a failover less
/// likely to lose the lock, not impossible: see `ObtainOptions::replicas` in
/// the runtime for what it does and does not guarantee. Not with
/// `fair = true`. `0`, the default, waits for none.
///
/// ```text
/// #[distributed_lock(key = "payout:{id}", ttl = "30s", replicas = 1)]
/// async fn pay_out(id: u64) -> Result<(), LockError> {
///     Ok(())
/// }
/// ```
///
/// ## `crate = "path"`
///
/// Where the runtime crate is, for a crate that re-exports it:
/// `crate = "::my_app::locks"`. `::lockmacro_runtime` when not given.
///
/// # What it expands to
///
/// The signature is kept as written and only the body changes, so methods
/// (`&self`, `&mut self`, `self`), generics, lifetimes, `impl Trait`
/// arguments and `where` clauses work as they are. The keys are computed
/// before the body takes the arguments, then the body runs as a future while
/// the lock is held, through the runtime's public `Locker::hold` (a sketch;
/// the snapshots in `lockmacro/tests/expand` pin the real expansion, and
/// `Locker::hold`'s documentation shows the same without the macro):
///
/// ```text
/// async fn bill(u: &User) -> Result<Receipt, BillingError> {
///     let keys = vec![format!("user:{}", u.id)];
///     let locker = ::lockmacro_runtime::__private::global();
///     let plan = HoldOptions::new(Duration::from_millis(30000));
///     ::lockmacro_runtime::__private::run(
///         locker,
///         keys,
///         plan,
///         <Result<Receipt, BillingError> as AutoOutcome>::on_failure,
///         move |guard| async move { /* the body, as written */ },
///     )
///     .await
/// }
/// ```
///
/// (`__private` is the runtime's support for the generated code, not public
/// API.) The returned future is `Send` whenever the body's is.
///
/// The attribute also goes on methods of an `#[async_trait]` impl, and above
/// or below `#[tracing::instrument]`. It needs an `async fn` with a body and
/// a return type that can be named (not `impl Trait`), and goes on a function
/// once: for several keys, use `keys`.
///
/// # Mistakes are compile errors
///
/// ```text
/// #[distributed_lock(key = "user:{id}", ttl = "30 parsecs")]
/// async fn bill(id: u64) -> Result<u64, LockError> {
///     Ok(id)
/// }
/// ```
///
/// ```text
/// error: unknown unit `parsecs` in `ttl = "30 parsecs"`: use `ms`, `s`, `m`, `h` or `d`, as in `"30s"` or `"1m30s"`
/// ```
///
/// ```text
/// #[distributed_lock(key = "user:{user.id}", ttl = "30s")]
/// async fn bill(u: &User) {}
/// ```
///
/// ```text
/// error: `user` in key is not a parameter of `bill`: use `u`
/// ```
///
/// ```text
/// // `skip` has no value to return for `u64`.
/// #[distributed_lock(key = "user:{id}", ttl = "30s", on_busy = "skip")]
/// async fn bill(id: u64) -> u64 {
///     id
/// }
/// ```
///
/// ```text
/// error[E0277]: `#[distributed_lock(on_busy = "skip")]` cannot make a skipped value of type `u64`
/// ```
#[proc_macro_attribute]
pub fn distributed_lock(
    args: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}

/// Not public API: the table of arguments that do not combine, as
/// `[(argument, with), …]`, for the runtime's test that its own table of
/// options agrees.
#[doc(hidden)]
#[proc_macro]
pub fn __rules(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    if !input.is_empty() {
        return syn::Error::new(
            proc_macro2::Span::call_site(),
            "`__rules!()` takes no arguments",
        )
        .to_compile_error()
        .into();
    }
    rules::table().into()
}
