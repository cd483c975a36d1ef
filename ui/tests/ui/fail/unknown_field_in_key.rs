use lockmacro_runtime::{LockError, distributed_lock};

pub struct User {
    pub id: u64,
}

// The error names the field and its type on the key, and suggests no
// rewrite of the attribute.
#[distributed_lock(key = "user:{u.idd}", ttl = "30s")]
async fn bill(u: &User) -> Result<u64, LockError> {
    Ok(u.id)
}

fn main() {}
