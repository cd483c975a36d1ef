use lockmacro_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "user:{user}", ttl = "0s", on_busy = "maybe", timeout = "5s")]
async fn bill(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
