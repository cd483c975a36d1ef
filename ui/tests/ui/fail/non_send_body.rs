use std::sync::Mutex;

use lockmacro_runtime::{LockError, distributed_lock};

static COUNTER: Mutex<u64> = Mutex::new(0);

async fn remote_call() {}

#[distributed_lock(key = "user:{id}", ttl = "30s")]
async fn bill(id: u64) -> Result<u64, LockError> {
    let mut counter = COUNTER.lock().unwrap();
    remote_call().await;
    *counter += id;
    Ok(*counter)
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    assert_send(bill(1));
}
