//! The generated code draws no warning, under every group of lints rustc
//! has.
#![deny(
    warnings,
    future_incompatible,
    nonstandard_style,
    rust_2018_idioms,
    rust_2024_compatibility,
    unused
)]
#![deny(
    missing_docs,
    unreachable_pub,
    unused_qualifications,
    unused_results,
    let_underscore_drop,
    single_use_lifetimes,
    trivial_casts,
    unused_lifetimes,
    variant_size_differences
)]
//! Crate docs, for `missing_docs`.

use lockmacro_runtime::{LockError, distributed_lock};

/// A user.
#[derive(Debug)]
pub struct User {
    /// Its id.
    pub id: u64,
}

/// Bills the user.
#[distributed_lock(key = "user:{u.id}", ttl = "30s")]
pub async fn bill(u: &User) -> Result<u64, LockError> {
    Ok(u.id)
}

/// Touches the user.
#[distributed_lock(key = "user:{u.id}", ttl = "30s", guard = lock, fence, on_busy = "skip")]
pub async fn touch(u: &User) -> Option<u64> {
    lock.fence_token().map(|token| token + u.id)
}

/// Does nothing, under a lock.
#[distributed_lock(key = "nothing", ttl = "30s", locker = lockmacro_runtime::Locker::memory())]
pub async fn nothing() {}

fn main() {
    let user = User { id: 1 };
    drop(bill(&user));
    drop(touch(&user));
    drop(nothing());
}
