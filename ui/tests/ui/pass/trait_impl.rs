//! A native `async fn` in a trait impl, and in a trait's default body.
#![deny(warnings)]

use lockmacro_runtime::{LockError, distributed_lock};

// Private: `async fn` in a public trait draws `async_fn_in_trait`.
trait Billing {
    fn tenant(&self) -> &str;

    fn bill(&self, user: u64) -> impl Future<Output = Result<u64, LockError>> + Send;

    #[distributed_lock(key = "tenant:{self.tenant()}:refund:{user}", ttl = "10s")]
    async fn refund(&self, user: u64) -> Option<u64> {
        Some(user)
    }
}

pub struct Service {
    tenant: String,
}

impl Billing for Service {
    fn tenant(&self) -> &str {
        &self.tenant
    }

    #[distributed_lock(key = "tenant:{self.tenant}:user:{user}", ttl = "10s")]
    async fn bill(&self, user: u64) -> Result<u64, LockError> {
        Ok(user)
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let service = Service {
        tenant: "acme".to_owned(),
    };
    assert_send(service.bill(1));
    drop(service.refund(1));
}
