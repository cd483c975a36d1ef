use lockmacro_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "api:{tenant}", ttl = "30s", permits = 0)]
async fn none(tenant: u64) -> Result<u64, LockError> {
    Ok(tenant)
}

#[distributed_lock(key = "api:{tenant}", ttl = "30s", permits = "5")]
async fn quoted(tenant: u64) -> Result<u64, LockError> {
    Ok(tenant)
}

#[distributed_lock(key = "api:{tenant}", ttl = "30s", permits = -2)]
async fn negative(tenant: u64) -> Result<u64, LockError> {
    Ok(tenant)
}

#[distributed_lock(keys = ["a:{from}", "a:{to}"], ttl = "30s", permits = 2)]
async fn several(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

#[distributed_lock(key = "api:{tenant}", ttl = "30s", replicas = 1, permits = 2)]
async fn replicated(tenant: u64) -> Result<u64, LockError> {
    Ok(tenant)
}

fn main() {}
