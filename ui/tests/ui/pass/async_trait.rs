//! With `#[async_trait]` on the impl, which expands before the attribute:
//! the attribute wraps the boxed `async` block async-trait made.
#![deny(warnings)]

use async_trait::async_trait;
use lockmacro_runtime::{LockError, distributed_lock};

pub struct User {
    pub id: u64,
}

#[async_trait]
pub trait Billing {
    async fn bill(&self, u: &User) -> Result<u64, LockError>;
    async fn touch(&mut self, u: &User);
    async fn consume(self, id: u64) -> Option<u64>;

    #[distributed_lock(key = "default:{u.id}", ttl = "10s")]
    async fn with_default(&self, u: &User) -> Result<u64, LockError> {
        Ok(u.id)
    }
}

pub struct Service {
    pub tenant: String,
    pub count: u64,
}

#[async_trait]
impl Billing for Service {
    #[distributed_lock(key = "{self.tenant}:user:{u.id}", ttl = "30s")]
    async fn bill(&self, u: &User) -> Result<u64, LockError> {
        let id = checked(u.id)?;
        if id == 0 {
            return Ok(self.count);
        }
        Ok(id)
    }

    #[distributed_lock(key = "{self.tenant}:touch:{u.id}", ttl = "30s", guard = lock)]
    async fn touch(&mut self, u: &User) {
        assert!(!lock.is_lost());
        self.count += u.id;
    }

    #[distributed_lock(key = "{self.tenant}:consume:{id}", ttl = "30s", on_busy = "skip")]
    async fn consume(self, id: u64) -> Option<u64> {
        Some(self.count + id)
    }
}

fn checked(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let mut service = Service {
        tenant: "acme".to_owned(),
        count: 0,
    };
    let user = User { id: 1 };
    assert_send(service.bill(&user));
    assert_send(service.touch(&user));
    assert_send(service.with_default(&user));
    assert_send(service.consume(1));
}
