use lockmacro_runtime::distributed_lock;

#[distributed_lock(key = "user:{id}", ttl = "30s", on_busy = "skip")]
async fn bill(id: u64) -> u64 {
    id
}

fn main() {}
