use lockmacro_runtime::{LockError, distributed_lock};

#[distributed_lock(ttl = "30s")]
async fn bill(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
