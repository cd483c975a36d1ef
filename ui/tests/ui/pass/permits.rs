use lockmacro_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "api:{tenant}", ttl = "30s", permits = 5)]
async fn call(tenant: u64) -> Result<u64, LockError> {
    Ok(tenant)
}

#[distributed_lock(key = "api:{tenant}", ttl = "30s", permits = 2, wait = "5s", fair)]
async fn in_turn(tenant: u64) -> Result<u64, LockError> {
    Ok(tenant)
}

#[distributed_lock(key = "catalog:{id}", ttl = "30s", mode = "read", wait = "5s")]
async fn show(id: u64) -> Option<u64> {
    Some(id)
}

#[distributed_lock(key = "catalog:{id}", ttl = "30s", mode = "write", fence)]
async fn rebuild(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {
    let _ = (call(1), in_turn(1), show(1), rebuild(1));
}
