//! A refresh whose answer never comes may still be applied by the server: a
//! holder that asked for a shorter ttl must not go on believing in its old
//! deadline. Each case holds `job` for 30 s, asks for 200 ms and gets no
//! answer (the server frozen past the response timeout, or the reply lost
//! on the way back), lets the server run the refresh, and has a second
//! locker wait for the key. Whatever the first holder believes must have
//! ended before the second is told `Ok`: its deadline is read after the
//! second obtain returns, and compared with the moment it returned.

use std::time::Duration;

use lockmacro_runtime::{
    Lock, LockError, Locker, ObtainOptions, RedisBackend, RedisConfig, RetryStrategy,
};
use tokio::time::Instant;

use lockmacro_testkit::RedisServer;
use lockmacro_testkit::program::Program;
use lockmacro_testkit::proxy::Proxy;

const TTL: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_millis(200);
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(300);

async fn locker(server: &RedisServer, url: &str) -> Locker {
    let config = RedisConfig::default().response_timeout(RESPONSE_TIMEOUT);
    Locker::new(server.expect_ok(RedisBackend::connect_with(url, config).await, "connect"))
}

/// Has `next` wait for `job` (it frees up once the refresh to `SHORT` was
/// run), and asserts that `first`'s deadline had passed by the moment
/// `next` was told `Ok`.
async fn ended_before_the_next_holder(server: &RedisServer, next: &Locker, first: &Lock) {
    let wait = ObtainOptions::new()
        .retry(RetryStrategy::linear(Duration::from_millis(20)).deadline(Duration::from_secs(10)));
    let _held = server.expect_ok(next.obtain("job", TTL, wait).await, "the next holder");
    let obtained = Instant::now();
    assert!(
        first.deadline() <= obtained,
        "the first holder still trusts its lease {:?} after the next one obtained it",
        first.deadline() - obtained
    );
}

fn unanswered(result: Result<(), LockError>) {
    match result {
        Err(LockError::Backend(_)) => {}
        other => panic!("the refresh should have had no answer, got {other:?}"),
    }
}

on_each_program! {
    runtime: (flavor = "multi_thread", worker_threads = 2),
    cases: [
        a_shorter_refresh_unanswered_by_a_frozen_server_ends_the_old_deadline,
    ],
}

async fn a_shorter_refresh_unanswered_by_a_frozen_server_ends_the_old_deadline(program: Program) {
    let server = RedisServer::start_as(program, &[]);
    let (first, next) = (
        locker(&server, &server.url()).await,
        locker(&server, &server.url()).await,
    );
    let lock = server.expect_ok(
        first.obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    server.pause();
    let sent = Instant::now();
    let refreshed = lock.refresh(SHORT).await;
    server.resume();
    unanswered(refreshed);
    assert!(
        lock.deadline() <= sent + SHORT,
        "after a refresh to {SHORT:?} sent {:?} ago, the deadline is {:?} away",
        sent.elapsed(),
        lock.deadline().saturating_duration_since(Instant::now())
    );
    ended_before_the_next_holder(&server, &next, &lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_refresh_whose_reply_is_lost_ends_the_old_deadline() {
    let server = RedisServer::start();
    let proxy = Proxy::in_front_of(&server);
    let first = locker(&server, &proxy.url()).await;
    let next = locker(&server, &server.url()).await;
    let lock = server.expect_ok(
        first.obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    proxy.drop_replies();
    let sent = Instant::now();
    let refreshed = lock.refresh(SHORT).await;
    proxy.heal();
    proxy.drop_connections();
    unanswered(refreshed);
    let left: i64 = server.cmd(&["PTTL", "job"]);
    assert!(
        left <= i64::try_from(SHORT.as_millis()).unwrap(),
        "the server did not run the refresh whose reply was lost (pttl {left} ms)"
    );
    assert!(
        lock.deadline() <= sent + SHORT,
        "after a refresh to {SHORT:?} whose reply was lost, the deadline is {:?} away",
        lock.deadline().saturating_duration_since(Instant::now())
    );
    ended_before_the_next_holder(&server, &next, &lock).await;
}

/// A refresh to a longer ttl that goes unanswered leaves the lease as it
/// was: the watchdog's refreshes fail this way through any outage, and the
/// lease must survive one shorter than its ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_refresh_to_the_same_ttl_keeps_the_deadline() {
    let server = RedisServer::start();
    let first = locker(&server, &server.url()).await;
    let lock = server.expect_ok(
        first.obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    let before = lock.deadline();
    server.pause();
    let refreshed = lock.refresh(TTL).await;
    server.resume();
    unanswered(refreshed);
    assert_eq!(
        lock.deadline(),
        before,
        "an unanswered refresh to the same ttl moved the deadline"
    );
    server.expect_ok(lock.refresh(TTL).await, "a refresh once the server is back");
    assert!(
        lock.deadline() > before,
        "a confirmed refresh did not move the deadline on"
    );
    server.expect_ok(lock.release().await, "release");
}
