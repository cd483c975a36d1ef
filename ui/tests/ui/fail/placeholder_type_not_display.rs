use lockmacro_runtime::{LockError, distributed_lock};

pub struct User {
    pub id: u64,
}

#[distributed_lock(key = "user:{u}", ttl = "30s")]
async fn bill(u: &User) -> Result<u64, LockError> {
    Ok(u.id)
}

fn main() {}
