use lockmacro_runtime::{LockError, distributed_lock};

pub struct User {
    pub id: u64,
}

// The parameters are only read by the keys, which the mistake leaves
// unused: the error is all that is reported.
#[distributed_lock(key = "user:{u.id}", ttl = "30 parsecs")]
async fn bill(u: &User, (from, to): (u64, u64)) -> Result<(), LockError> {
    Ok(())
}

pub struct Ledger;

impl Ledger {
    #[distributed_lock(key = "ledger:{self}:{day}", ttl = "0s")]
    async fn close(self, day: u32) -> Result<(), LockError> {
        Ok(())
    }
}

fn main() {}
