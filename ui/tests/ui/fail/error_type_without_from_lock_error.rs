use lockmacro_runtime::distributed_lock;

#[derive(Debug)]
pub struct BillingError;

#[distributed_lock(key = "user:{id}", ttl = "30s")]
async fn bill(id: u64) -> Result<u64, BillingError> {
    Ok(id)
}

fn main() {}
