//! Redis (or Valkey) restarted without persistence while a lock is held: the
//! lease and the fence counter are gone. The holder learns it at its next
//! refresh, a new holder gets in at once, and fencing tokens still increase,
//! because a lost counter starts again from the server's clock.

use std::time::Duration;

use lockmacro_runtime::{FencedStore, LockError, Locker, MemoryBackend, ObtainOptions};
use tokio::time::Instant;

use lockmacro_testkit::RedisServer;
use lockmacro_testkit::program::Program;

const TTL: Duration = Duration::from_secs(3);
const REFRESH: Duration = Duration::from_secs(2);
/// How long the server stays down when its length matters.
const OUTAGE: Duration = Duration::from_secs(1);

on_each_program! {
    runtime: (flavor = "multi_thread", worker_threads = 2),
    cases: [
        restart_loses_the_lease_but_fence_tokens_keep_increasing,
        fenced_store_writes_again_once_a_restarted_server_is_back(),
    ],
}

async fn restart_loses_the_lease_but_fence_tokens_keep_increasing(program: Program) {
    let mut server = RedisServer::start_as(program, &[]);
    let resource = RedisServer::start_as(program, &[]);
    let store = resource.expect_ok(FencedStore::connect(&resource.url()).await, "connect");
    let holder = server.locker().await;
    let newcomer = server.locker().await;

    // Several acquisitions before the restart, so that the old counter is
    // past its seed.
    let mut old = 0;
    for _ in 0..3 {
        let lock = server.expect_ok(
            holder
                .obtain("job", TTL, ObtainOptions::new().fence())
                .await,
            "obtain",
        );
        old = lock.fence_token().unwrap();
        server.expect_ok(lock.release().await, "release");
    }
    // Refreshed rarely, so that the restart falls between two refreshes.
    let guard = server
        .expect_ok(
            holder
                .obtain("job", TTL, ObtainOptions::new().fence())
                .await,
            "obtain",
        )
        .keep_alive_every(REFRESH)
        .unwrap();
    let held = guard.fence_token().unwrap();
    assert!(held > old);
    assert!(resource.expect_ok(store.set("job", "before", held).await, "write"));

    server.restart();
    let counter: Option<u64> = server.cmd(&["GET", "{job}:fence"]);
    assert_eq!(counter, None, "the restart kept the counter");

    // The limit: the key is gone with the data, so a new holder gets in at
    // once, while the old one, which has not refreshed since, still has time
    // left on its local deadline. Only fencing protects the resource now.
    let lock = server.expect_ok(
        newcomer
            .obtain("job", TTL, ObtainOptions::new().fence())
            .await,
        "a new holder right after the restart",
    );
    let left = guard.deadline().saturating_duration_since(Instant::now());
    println!("the old holder still had {left:?} of its lease when the new one got in");
    assert!(
        !guard.is_lost(),
        "the old holder knew before its next refresh (the restart took over {REFRESH:?}?)"
    );
    let new = lock.fence_token().unwrap();
    println!("fence token before the restart {held}, after {new}");
    assert!(new > held, "token {new} after the restart, {held} before");
    assert!(resource.expect_ok(store.set("job", "after", new).await, "write"));
    assert!(
        !resource.expect_ok(store.set("job", "stale", held).await, "stale write"),
        "the resource accepted the old holder's write after the new holder's"
    );

    // The old holder learns it at its next refresh, which is refused.
    tokio::time::timeout(REFRESH + Duration::from_secs(5), guard.lost())
        .await
        .expect("the holder did not learn that its lease was gone");
    assert!(
        matches!(guard.ttl().await, Err(LockError::NotHeld { .. })),
        "the old holder's token still holds the key"
    );
}

#[tokio::test]
async fn memory_fence_tokens_increase_across_backends() {
    // A process that restarts gets a new, empty memory backend.
    let ttl = Duration::from_secs(5);
    let before = Locker::new(MemoryBackend::new());
    let mut old = 0;
    for _ in 0..100 {
        let lock = before
            .obtain("job", ttl, ObtainOptions::new().fence())
            .await
            .unwrap();
        old = lock.fence_token().unwrap();
        lock.release().await.unwrap();
    }
    // The new counter starts at the clock in microseconds: a millisecond
    // later, it is past the 100 tokens minted since the old one started.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let after = Locker::new(MemoryBackend::new());
    let lock = after
        .obtain("job", ttl, ObtainOptions::new().fence())
        .await
        .unwrap();
    assert!(lock.fence_token().unwrap() > old);
}

async fn fenced_store_writes_again_once_a_restarted_server_is_back(program: Program) {
    let mut resource = RedisServer::start_as(program, &[]);
    let store = resource.expect_ok(FencedStore::connect(&resource.url()).await, "connect");
    assert!(resource.expect_ok(store.set("report", "first", 1).await, "write"));

    resource.stop();
    let down = store.set("report", "while down", 2).await;
    assert!(
        matches!(&down, Err(err) if err.is_transient()),
        "a write while the server is down: {down:?}"
    );
    // The outage outlasts the reconnection the manager starts in the
    // background (an attempt, a pause of at most 200 ms, another), which
    // fails and is what the next call is handed. No signal tells when it
    // gave up: the outage has a length, as a real one does.
    tokio::time::sleep(OUTAGE).await;
    resource.restart();

    // The reconnection that failed while the server was down is not what
    // this write ends with: it is sent again, on a new connection.
    assert!(resource.expect_ok(store.set("report", "second", 2).await, "write once back"));
    let read = resource.expect_ok(store.get("report").await, "read");
    assert_eq!(read.map(|applied| applied.value).as_deref(), Some("second"));
}

#[tokio::test]
async fn fenced_store_keeps_its_keys_in_the_lockers_namespace() {
    let resource = RedisServer::start();
    let locker = Locker::new(MemoryBackend::new()).with_namespace("shop");
    let store = resource
        .expect_ok(FencedStore::connect(&resource.url()).await, "connect")
        .with_namespace(locker.namespace());
    assert_eq!(store.namespace(), "shop");
    assert!(resource.expect_ok(store.set("customer:42", "paid", 7).await, "write"));
    let stored: Option<String> = resource.cmd(&["HGET", "shop:customer:42", "value"]);
    assert_eq!(stored.as_deref(), Some("paid"));
    let bare: i64 = resource.cmd(&["EXISTS", "customer:42"]);
    assert_eq!(bare, 0, "written outside the namespace");
}
