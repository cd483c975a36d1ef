#![deny(dead_code)]

use lockmacro_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "user:{id}", ttl = "30s")]
async fn never_called(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
