use lockmacro_runtime::distributed_lock;

#[distributed_lock(key = "user:{id}", ttl = "30s", on_busy = "error")]
async fn bill(id: u64) -> Option<u64> {
    Some(id)
}

fn main() {}
