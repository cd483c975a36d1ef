use lockmacro_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "user:{id}", ttl = "30s", fair = true)]
async fn bill(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(keys = ["a:{from}", "a:{to}"], ttl = "30s", wait = "5s", fair)]
async fn transfer(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

fn main() {}
