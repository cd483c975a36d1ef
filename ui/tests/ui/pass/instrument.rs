//! With `#[tracing::instrument]` above and below the attribute, on a free
//! function and inside an `#[async_trait]` impl.
#![deny(warnings)]

use async_trait::async_trait;
use lockmacro_runtime::{LockError, distributed_lock};

#[tracing::instrument]
#[distributed_lock(key = "above:{id}", ttl = "5s")]
pub async fn instrument_above(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "below:{id}", ttl = "5s")]
#[tracing::instrument(err)]
pub async fn instrument_below(id: u64) -> Result<u64, LockError> {
    let id = Ok::<u64, LockError>(id)?;
    Ok(id)
}

#[tracing::instrument(skip(name))]
#[distributed_lock(key = "unit:{name}", ttl = "5s")]
pub async fn unit(name: &str) {
    tracing::info!(name, "locked");
}

#[async_trait]
pub trait Jobs {
    async fn above(&self, id: u64) -> Result<u64, LockError>;
    async fn below(&self, id: u64) -> Option<u64>;
}

#[derive(Debug)]
pub struct Worker;

#[async_trait]
impl Jobs for Worker {
    #[tracing::instrument]
    #[distributed_lock(key = "job:{id}", ttl = "5s")]
    async fn above(&self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }

    #[distributed_lock(key = "job:{id}", ttl = "5s")]
    #[tracing::instrument]
    async fn below(&self, id: u64) -> Option<u64> {
        Some(id)
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    assert_send(instrument_above(1));
    assert_send(instrument_below(1));
    assert_send(unit("x"));
    assert_send(Worker.above(1));
    assert_send(Worker.below(1));
}
