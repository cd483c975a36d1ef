//! `fair = true` (or `fair` alone) with `wait`: the waiter queues, and is
//! handed the key when the holder releases.
#![deny(warnings)]

use std::time::Duration;

use lockmacro_runtime::{LockError, Locker, ObtainOptions, distributed_lock};

#[distributed_lock(key = "printer:{id}", ttl = "30s", wait = "10s", fair = true, locker = locker, guard = lock)]
async fn print(locker: &Locker, id: u64) -> Result<String, LockError> {
    Ok(lock.key().to_owned())
}

#[distributed_lock(key = "printer:{id}", ttl = "30s", wait = "10s", fair, locker = locker)]
async fn print_again(locker: &Locker, id: u64) -> Option<u64> {
    Some(id)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let locker = Locker::memory();
        let held = locker
            .obtain("printer:1", Duration::from_secs(30), ObtainOptions::new())
            .await
            .expect("obtain");
        let waiter = tokio::spawn({
            let locker = locker.clone();
            async move { print(&locker, 1).await }
        });
        tokio::task::yield_now().await;
        held.release().await.expect("release");
        assert_eq!(waiter.await.expect("waiter task").expect("printed"), "printer:1");
        assert_eq!(print_again(&locker, 1).await, Some(1));
    });
}
