//! The line of the design card, `<u.id>` placeholder included, compiles as
//! written on each return type the default policy accepts.
#![deny(warnings)]

use lockmacro_runtime::{LockError, distributed_lock};

pub struct User {
    pub id: u64,
}

#[distributed_lock(key = "user:<u.id>", ttl = "30s")]
pub async fn returns_result(u: &User) -> Result<u64, LockError> {
    Ok(u.id)
}

#[distributed_lock(key = "user:<u.id>", ttl = "30s")]
pub async fn returns_unit(u: &User) {
    let _ = u.id;
}

#[distributed_lock(key = "user:<u.id>", ttl = "30s")]
pub async fn returns_option(u: &User) -> Option<u64> {
    Some(u.id)
}

#[distributed_lock(key = "user:<u.id>", ttl = "30s")]
pub async fn returns_explicit_unit(u: &User) -> () {
    let _ = u.id;
}

fn main() {}
