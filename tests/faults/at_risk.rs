//! A holder is warned before its lease is lost: with the server frozen,
//! every refresh goes unanswered, and `at_risk()` completes while the lease
//! still stands, before `lost()` does. Three rounds on each backend, for a
//! guard and for an election's term.

use std::time::Duration;

use lockmacro_runtime::{Locker, ObtainOptions};
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(1500);
const ROUNDS: usize = 3;
/// A hang limit: both signals come within the ttl once the server freezes.
const HANG: Duration = Duration::from_secs(30);

/// What a guard and a term both offer.
trait Held {
    fn is_lost(&self) -> bool;
    fn is_at_risk(&self) -> bool;
    async fn at_risk(&self);
    async fn lost(&self);
}

impl Held for lockmacro_runtime::LockGuard {
    fn is_lost(&self) -> bool {
        lockmacro_runtime::LockGuard::is_lost(self)
    }
    fn is_at_risk(&self) -> bool {
        lockmacro_runtime::LockGuard::is_at_risk(self)
    }
    async fn at_risk(&self) {
        lockmacro_runtime::LockGuard::at_risk(self).await;
    }
    async fn lost(&self) {
        lockmacro_runtime::LockGuard::lost(self).await;
    }
}

impl Held for lockmacro_runtime::Leadership {
    fn is_lost(&self) -> bool {
        lockmacro_runtime::Leadership::is_lost(self)
    }
    fn is_at_risk(&self) -> bool {
        lockmacro_runtime::Leadership::is_at_risk(self)
    }
    async fn at_risk(&self) {
        lockmacro_runtime::Leadership::at_risk(self).await;
    }
    async fn lost(&self) {
        lockmacro_runtime::Leadership::lost(self).await;
    }
}

/// Freezes the server under `held`, and checks the order of the signals.
async fn warned_before_lost(held: &impl Held, pause: impl Fn(), resume: impl Fn(), what: &str) {
    assert!(
        !held.is_at_risk(),
        "{what}: at risk as soon as it was taken"
    );
    pause();
    tokio::time::timeout(HANG, held.at_risk())
        .await
        .unwrap_or_else(|_| panic!("{what}: never at risk"));
    let warned = Instant::now();
    let standing = !held.is_lost();
    tokio::time::timeout(HANG, held.lost())
        .await
        .unwrap_or_else(|_| panic!("{what}: never lost"));
    let lost = Instant::now();
    resume();
    assert!(standing, "{what}: at risk only once the lease was lost");
    assert!(warned < lost, "{what}: warned at the loss, not before it");
}

async fn rounds(locker: &Locker, pause: impl Fn(), resume: impl Fn()) {
    for round in 0..ROUNDS {
        let guard = locker
            .obtain(&format!("job:{round}"), TTL, ObtainOptions::new())
            .await
            .unwrap()
            .keep_alive();
        warned_before_lost(&guard, &pause, &resume, &format!("guard, round {round}")).await;
        let leader = locker
            .election(&format!("leader:{round}"), TTL)
            .campaign()
            .await
            .unwrap();
        warned_before_lost(&leader, &pause, &resume, &format!("term, round {round}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_frozen_redis_a_holder_is_warned_before_the_loss() {
    let server = lockmacro_testkit::RedisServer::start();
    let locker = server.expect_ok(Locker::connect(&server.url()).await, "connect");
    rounds(&locker, || server.pause(), || server.resume()).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_frozen_postgres_a_holder_is_warned_before_the_loss() {
    let fx = lockmacro_testkit::Fixture::own_postgres().await;
    let locker = fx.locker().await;
    let server = fx.postgres_db().unwrap().server();
    rounds(&locker, || server.pause(), || server.resume()).await;
}
