//! The examples in the documentation of `lockmacro`'s `#[distributed_lock]`,
//! run here: `lockmacro` cannot depend on this crate (this crate depends on
//! it), so its documentation shows them as plain text. Keep the two copies
//! the same.

/// The first example.
///
/// ```
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
pub struct FirstExample;

/// `guard = name`.
///
/// ```
/// # use lockmacro_runtime::{LockError, distributed_lock};
/// #[distributed_lock(key = "invoice:{id}", ttl = "30s", fence, guard = lock)]
/// async fn send_invoice(id: u64) -> Result<Option<u64>, LockError> {
///     Ok(lock.fence_token())
/// }
/// ```
pub struct Guard;

/// "Mistakes are compile errors". `ui/tests/ui/fail` pins each message.
///
/// ```compile_fail
/// # use lockmacro_runtime::{LockError, distributed_lock};
/// #[distributed_lock(key = "user:{id}", ttl = "30 parsecs")]
/// async fn bill(id: u64) -> Result<u64, LockError> {
///     Ok(id)
/// }
/// ```
///
/// ```compile_fail
/// # use lockmacro_runtime::distributed_lock;
/// # struct User { id: u64 }
/// #[distributed_lock(key = "user:{user.id}", ttl = "30s")]
/// async fn bill(u: &User) {}
/// ```
///
/// ```compile_fail,E0277
/// # use lockmacro_runtime::distributed_lock;
/// // `skip` has no value to return for `u64`.
/// #[distributed_lock(key = "user:{id}", ttl = "30s", on_busy = "skip")]
/// async fn bill(id: u64) -> u64 {
///     id
/// }
/// ```
pub struct Mistakes;

/// The `replicas` example (it compiles; running it needs a server with
/// replicas).
///
/// ```
/// use lockmacro_runtime::{LockError, distributed_lock};
///
/// #[distributed_lock(key = "payout:{id}", ttl = "30s", replicas = 1)]
/// async fn pay_out(id: u64) -> Result<(), LockError> {
///     Ok(())
/// }
/// # let _ = pay_out(1);
/// ```
pub struct ReplicasExample;
