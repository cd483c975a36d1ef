//! `crate = "…"` for a runtime re-exported under another path.
#![deny(warnings)]

mod locks {
    pub use lockmacro_runtime::*;
}

use crate::locks::{LockError, distributed_lock};

#[distributed_lock(key = "user:{id}", ttl = "30s", crate = "crate::locks")]
pub async fn reexported(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "user:{id}", ttl = "30s", crate = "::lockmacro_runtime")]
pub async fn absolute(id: u64) -> Option<u64> {
    Some(id)
}

fn main() {
    drop(reexported(1));
    drop(absolute(1));
}
