use lockmacro_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "from:{from}", ttl = "30s")]
#[distributed_lock(key = "to:{to}", ttl = "30s")]
async fn transfer(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

fn main() {}
