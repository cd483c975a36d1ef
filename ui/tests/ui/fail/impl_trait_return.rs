use std::fmt::Display;

use lockmacro_runtime::distributed_lock;

#[distributed_lock(key = "user:{id}", ttl = "30s")]
async fn bill(id: u64) -> Option<impl Display> {
    Some(id)
}

fn main() {}
