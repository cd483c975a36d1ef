//! Lock-delay: a holder whose process is killed (SIGKILL) leaves its key
//! unavailable for the delay after its lease, so that what it was doing can
//! drain before anyone else acts; a release frees the key at once. The
//! server keeps the key for the ttl plus the delay from every acquire and
//! refresh: right after the kill it has more than the ttl left, which no
//! lease without a delay ever has, and the next holder gets in no sooner
//! than the delay after the holder started.

use std::env;
use std::io::{BufRead, BufReader};
use std::time::Duration;

use lockmacro_runtime::{LockError, Locker, ObtainOptions, RetryStrategy};
use tokio::time::Instant;

use crate::process::rerun_as_child;

/// Set, to the backend's URL, for the child process that holds the key.
const HOLDER_ENV: &str = "LOCKMACRO_FAULTS_DELAYED_HOLDER";
const TTL: Duration = Duration::from_secs(1);
const DELAY: Duration = Duration::from_secs(5);
/// A bound for a hang, not a measurement.
const HANG: Duration = Duration::from_secs(30);

fn delayed() -> ObtainOptions {
    ObtainOptions::new().lock_delay(DELAY)
}

/// The child's part: holds `payments` under the watchdog, and says so once
/// a refresh was confirmed (its deadline moved), then waits to be killed.
async fn hold_until_killed(url: &str) {
    let locker = Locker::from_url(url).await.expect("connect");
    let guard = locker
        .obtain("payments", TTL, delayed())
        .await
        .expect("obtain")
        .keep_alive();
    let first = guard.deadline();
    while guard.deadline() <= first {
        tokio::time::sleep(TTL / 10).await;
    }
    println!("refreshed");
    std::future::pending::<()>().await;
}

/// Runs `test` again as the holder, kills it once a refresh went through,
/// and checks the delay with `left`, the lease left on the server.
async fn killed_holder_keeps_the_key_for_the_delay<F>(test: &str, url: &str, left: impl Fn() -> F)
where
    F: std::future::Future<Output = Option<Duration>>,
{
    let spawned = Instant::now();
    let mut holder = rerun_as_child(test, HOLDER_ENV, url);
    let stdout = holder.0.stdout.take().unwrap();
    let refreshed = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line == "refreshed")
    });
    let refreshed = tokio::time::timeout(HANG, refreshed).await;
    assert!(
        matches!(refreshed, Ok(Ok(true))),
        "the holder never refreshed"
    );
    drop(holder);
    let after_kill = left().await.expect("the key is gone at once");
    assert!(
        after_kill > TTL,
        "{after_kill:?} left after the kill: the refresh did not ask for the delay"
    );

    let next = Locker::from_url(url).await.expect("connect");
    let refused = next
        .obtain("payments", TTL, ObtainOptions::new())
        .await
        .expect_err("the key is kept for the delay");
    assert!(
        matches!(refused, LockError::NotObtained { .. }),
        "{refused}"
    );
    let patient = ObtainOptions::new()
        .retry(RetryStrategy::linear(Duration::from_millis(100)).deadline(HANG));
    let lock = next
        .obtain("payments", TTL, patient)
        .await
        .expect("the next holder");
    let waited = spawned.elapsed();
    assert!(
        waited >= DELAY,
        "the next holder got in {waited:?} after the first started, within the delay"
    );
    lock.release().await.unwrap();
}

/// A clean release frees the key at once, delay or not.
async fn released_key_is_free_at_once(url: &str) {
    let locker = Locker::from_url(url).await.expect("connect");
    let lock = locker.obtain("invoices", TTL, delayed()).await.unwrap();
    lock.release().await.unwrap();
    let next = locker
        .obtain("invoices", TTL, ObtainOptions::new())
        .await
        .expect("a released key is free at once");
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_killed_holder_keeps_the_key_for_the_delay() {
    if let Ok(url) = env::var(HOLDER_ENV) {
        return hold_until_killed(&url).await;
    }
    let server = lockmacro_testkit::RedisServer::start();
    let url = server.url();
    killed_holder_keeps_the_key_for_the_delay(
        "lock_delay::on_redis_a_killed_holder_keeps_the_key_for_the_delay",
        &url,
        || async {
            let ms: i64 = server.cmd(&["PTTL", "payments"]);
            u64::try_from(ms).ok().map(Duration::from_millis)
        },
    )
    .await;
    released_key_is_free_at_once(&url).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_killed_holder_keeps_the_key_for_the_delay() {
    if let Ok(url) = env::var(HOLDER_ENV) {
        return hold_until_killed(&url).await;
    }
    let fx = lockmacro_testkit::Fixture::own_postgres().await;
    let db = fx.postgres_db().unwrap();
    let url = db.url();
    killed_holder_keeps_the_key_for_the_delay(
        "lock_delay::on_postgres_a_killed_holder_keeps_the_key_for_the_delay",
        &url,
        || db.lease_left("payments"),
    )
    .await;
    released_key_is_free_at_once(&url).await;
}
