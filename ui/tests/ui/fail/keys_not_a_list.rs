use lockmacro_runtime::{LockError, distributed_lock};

#[distributed_lock(keys = "from:{from}", ttl = "30s")]
async fn transfer(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

fn main() {}
