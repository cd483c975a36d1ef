//! Annotated functions that `cargo clippy --all-targets` lints, under
//! `clippy::pedantic`: trybuild compiles the `pass` cases with rustc only,
//! and the generated code must not draw clippy's lints in users' crates
//! either. The test runs them, on the in-process backend.
#![deny(clippy::pedantic)]

use async_trait::async_trait;
use lockmacro_runtime::{LockError, Locker, distributed_lock};

struct User {
    id: u64,
}

#[distributed_lock(key = "user:{u.id}", ttl = "30s", locker = locker)]
async fn bill(locker: &Locker, u: &User) -> Result<u64, LockError> {
    Ok(u.id)
}

#[distributed_lock(key = "user:<u.id>", ttl = "30s", locker = locker, on_busy = "skip")]
async fn touch(locker: &Locker, u: &User) {
    assert!(u.id > 0);
}

struct Service {
    locker: Locker,
    tenant: String,
}

impl Service {
    #[distributed_lock(
        keys = ["{self.tenant}:{from}", "{self.tenant}:{to}"],
        ttl = "1m",
        wait = "1s",
        refresh = "10s",
        on_lost = "continue",
        fence,
        guard = lock,
        locker = self.locker,
        hold_at_least = "1ms",
    )]
    async fn transfer(&mut self, from: u64, to: u64) -> Option<u64> {
        self.tenant.push('!');
        Some(lock.fence_token()? + from + to)
    }
}

#[async_trait]
trait Jobs {
    async fn run(&self, id: u64) -> Result<u64, LockError>;
}

#[async_trait]
impl Jobs for Service {
    #[tracing::instrument(skip(self))]
    #[distributed_lock(key = "{self.tenant}:job:{id}", ttl = "5s", locker = &self.locker)]
    async fn run(&self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }
}

#[distributed_lock(key = "report", ttl = "5s", locker = locker)]
#[tracing::instrument(skip(locker))]
async fn report(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "api:{tenant}", ttl = "5s", permits = 3, wait = "1s", fair, locker = locker)]
async fn call_api(locker: &Locker, tenant: &str) -> Result<usize, LockError> {
    Ok(tenant.len())
}

#[distributed_lock(key = "catalog", ttl = "5s", mode = "read", locker = locker)]
async fn show(locker: &Locker) -> Option<u8> {
    Some(1)
}

#[distributed_lock(key = "catalog", ttl = "5s", mode = "write", fence, locker = locker)]
async fn rebuild(locker: &Locker) -> Result<u8, LockError> {
    show(locker).await.ok_or(LockError::NotObtained {
        key: "catalog".to_owned(),
        namespace: String::new(),
        remaining: None,
        holder: None,
    })
}

#[tokio::test]
async fn annotated_functions_run() {
    let locker = Locker::memory();
    let user = User { id: 1 };
    assert_eq!(bill(&locker, &user).await.ok(), Some(1));
    touch(&locker, &user).await;
    let mut service = Service {
        locker: locker.clone(),
        tenant: "acme".to_owned(),
    };
    assert!(service.transfer(1, 2).await.is_some());
    assert_eq!(service.run(3).await.ok(), Some(3));
    assert!(report(&locker).await.is_ok());
    assert_eq!(call_api(&locker, "acme").await.ok(), Some(4));
    assert_eq!(rebuild(&locker).await.ok(), Some(1));
}
