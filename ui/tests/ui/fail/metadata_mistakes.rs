use lockmacro_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "invoice:{id}", ttl = "30s", metadata = 7)]
async fn not_text(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "invoice:{id}", ttl = "30s", metadata = "")]
async fn empty(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
