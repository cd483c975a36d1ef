//! The expansion runs: on the in-process backend, the body runs under the
//! lock, and a busy key yields the policy's value without running it.
#![deny(warnings)]

use std::time::Duration;

use lockmacro_runtime::{LockError, Locker, ObtainOptions, distributed_lock, set_global};

pub struct User {
    pub id: u64,
}

#[distributed_lock(key = "user:{u.id}", ttl = "30s", guard = lock, fence)]
async fn bill(u: &User) -> Result<(String, Option<u64>), LockError> {
    Ok((lock.key().to_owned(), lock.fence_token()))
}

#[distributed_lock(key = "user:<u.id>", ttl = "30s")]
async fn skipped(u: &User, ran: &mut bool) -> Option<u64> {
    *ran = true;
    Some(u.id)
}

#[distributed_lock(key = "user:{u.id}", ttl = "30s", on_busy = "skip")]
async fn skipped_ok(u: &User) -> Result<Option<u64>, LockError> {
    Ok(Some(u.id))
}

#[distributed_lock(keys = ["a:{from}", "a:{to}"], ttl = "30s", locker = locker)]
async fn transfer(locker: &Locker, from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let locker = Locker::memory();
        let _ = set_global(locker.clone());
        let user = User { id: 7 };

        let (key, fence) = bill(&user).await.expect("the lock is free");
        assert_eq!(key, "user:7");
        assert!(fence.is_some());

        let held = locker
            .obtain("user:7", Duration::from_secs(30), ObtainOptions::default())
            .await
            .expect("the lock is free");
        assert!(bill(&user).await.expect_err("held").is_not_obtained());
        let mut ran = false;
        assert_eq!(skipped(&user, &mut ran).await, None);
        assert!(!ran);
        assert_eq!(skipped_ok(&user).await.expect("skipped"), None);
        held.release().await.expect("released");

        assert_eq!(skipped(&user, &mut ran).await, Some(7));
        assert!(ran);
        assert_eq!(transfer(&locker, 1, 2).await.expect("free"), 3);
    });
}
