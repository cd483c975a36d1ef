//! Every argument of the attribute, literal and expression forms.
#![deny(warnings)]

use std::sync::Arc;
use std::time::Duration;

use lockmacro_runtime::{LockError, Locker, distributed_lock};

const LEASE: Duration = Duration::from_secs(30);
const PREFIX: &str = "jobs";

pub struct State {
    pub locker: Locker,
    pub shared: Arc<Locker>,
    pub lease: Duration,
}

impl State {
    fn key(&self) -> String {
        "state".to_owned()
    }

    #[distributed_lock(
        keys = ["account:{from}", "account:{to}"],
        ttl = "1m30s",
        on_busy = "error",
        wait = "10s",
        fair = false,
        refresh = "20s",
        on_lost = "abort",
        fence = "fence:{from}",
        guard = lock,
        locker = self.locker,
        hold_at_least = "5m",
        max_hold = "10m",
        lock_delay = "15s",
        crate = "::lockmacro_runtime",
    )]
    pub async fn every_literal(&self, from: u64, to: u64) -> Result<u64, LockError> {
        Ok(lock.fence_token().unwrap_or(from + to))
    }

    #[distributed_lock(
        key = self.key(),
        ttl = self.lease,
        wait = LEASE / 2,
        refresh = Duration::from_secs(5),
        hold_at_least = LEASE,
        max_hold = LEASE * 10,
        lock_delay = LEASE / 2,
        locker = self.shared,
        fence = format!("{PREFIX}:fence"),
        on_lost = "continue",
        on_busy = "skip",
        fair = false,
    )]
    pub async fn every_expression(&self) -> Result<(), LockError> {
        Ok(())
    }

    #[distributed_lock(key = "{PREFIX}:{{literal}}:<<also>>", ttl = LEASE, locker = self.shared.clone(), wait = "1s")]
    pub async fn constants(&self) {}
}

#[distributed_lock(key = "free", ttl = "500ms", locker = Locker::memory(), fence)]
pub async fn locker_by_value() -> Option<()> {
    Some(())
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let state = State {
        locker: Locker::memory(),
        shared: Arc::new(Locker::memory()),
        lease: LEASE,
    };
    assert_send(state.every_literal(1, 2));
    assert_send(state.every_expression());
    assert_send(state.constants());
    assert_send(locker_by_value());
}
