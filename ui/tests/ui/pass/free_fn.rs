//! The design card: a free `async fn` returning a `Result` whose error
//! converts from `LockError`.
#![deny(warnings)]

use lockmacro_runtime::{LockError, distributed_lock};

pub struct User {
    pub id: u64,
}

pub struct Receipt;

#[derive(Debug)]
pub enum BillingError {
    Lock(LockError),
    Declined,
}

impl From<LockError> for BillingError {
    fn from(err: LockError) -> Self {
        BillingError::Lock(err)
    }
}

async fn charge(_: &User) -> Result<Receipt, BillingError> {
    Ok(Receipt)
}

/// Charges the user once, whichever instance runs it.
#[distributed_lock(key = "user:{u.id}", ttl = "30s")]
pub async fn bill(u: &User) -> Result<Receipt, BillingError> {
    let receipt = charge(u).await?;
    if u.id == 0 {
        return Err(BillingError::Declined);
    }
    Ok(receipt)
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    assert_send(bill(&User { id: 1 }));
}
