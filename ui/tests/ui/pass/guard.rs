//! `guard = name` binds the lock's guard in the body.
#![deny(warnings)]

use lockmacro_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job:{id}", ttl = "30s", guard = lock)]
pub async fn with_guard(id: u64) -> Result<String, LockError> {
    if lock.is_lost() {
        return Ok(String::new());
    }
    let _: Option<u64> = lock.fence_token();
    Ok(format!("{}:{id}", lock.key()))
}

#[distributed_lock(key = "job:{id}", ttl = "30s", guard = g, fence)]
pub async fn fenced(id: u64) -> Option<u64> {
    let token = g.fence_token()?;
    Some(token + id)
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    assert_send(with_guard(1));
    assert_send(fenced(1));
}
