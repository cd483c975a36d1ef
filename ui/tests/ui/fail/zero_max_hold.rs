use lockmacro_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "migrations", ttl = "30s", max_hold = "0s")]
async fn migrate() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
