use lockmacro_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "user:{id}", ttl = "30s")]
fn bill(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
