use lockmacro_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "report", ttl = "30s", hold_at_least = "5m", max_hold = "1m")]
async fn nightly_report() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
