use lockmacro_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "catalog", ttl = "30s", mode = "exclusive")]
async fn unknown() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "catalog", ttl = "30s", mode = read)]
async fn unquoted() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["a:{from}", "a:{to}"], ttl = "30s", mode = "write")]
async fn several(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

#[distributed_lock(key = "catalog", ttl = "30s", permits = 3, mode = "read")]
async fn with_permits() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "catalog", ttl = "30s", wait = "5s", fair, mode = "write")]
async fn fair() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
