use lockmacro_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "payout:{id}", ttl = "30s", replicas = -1)]
async fn pay_out(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "refund:{id}", ttl = "30s", replicas = "one")]
async fn refund(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
