use lockmacro_runtime::{LockError, distributed_lock};

pub struct User {
    pub id: u64,
}

#[distributed_lock(key = "user:{user.id}", ttl = "30s")]
async fn bill(u: &User) -> Result<u64, LockError> {
    Ok(u.id)
}

fn main() {}
