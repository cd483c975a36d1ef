use lockmacro_runtime::{LockError, distributed_lock};

trait Billing {
    #[distributed_lock(key = "user:{id}", ttl = "30s")]
    async fn bill(&self, id: u64) -> Result<u64, LockError>;
}

fn main() {}
