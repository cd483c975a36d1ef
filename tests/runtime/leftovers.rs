//! A failed acquire leaves nothing behind, and fence counters do not pile up:
//! keys that collide with a fence counter are refused before anything is
//! written, on every backend, and counters expire some time after their last
//! use without tokens ever going backwards.
//!
//! Keys share the hash tag `{t}`, so that the cluster sends each call to one
//! node instead of refusing it for spanning slots.

use std::time::Duration;

use lockmacro_runtime::{LockError, Locker, MemoryBackend, ObtainOptions, RetryStrategy};

use lockmacro_testkit::Fixture;

const LONG: Duration = Duration::from_secs(30);

fn once() -> ObtainOptions {
    ObtainOptions::default()
}

/// Asserts that `result` is `InvalidKey` naming `key`, and returns its reason.
fn refused<T: std::fmt::Debug>(result: Result<T, LockError>, key: &str) -> String {
    match result {
        Err(LockError::InvalidKey { key: named, reason }) => {
            assert_eq!(named, key, "the refusal names another key: {reason}");
            reason
        }
        other => panic!("expected InvalidKey for `{key}`, got {other:?}"),
    }
}

/// A fence key that is the lock key itself: refused before anything is
/// written, with a message that says what to use instead; the key is free.
pub async fn fence_key_equal_to_the_lock_key_leaves_nothing(fx: &Fixture) {
    let locker = fx.locker().await;
    let reason = refused(
        locker
            .obtain("{t}job", LONG, once().fence_key("{t}job"))
            .await,
        "{t}job",
    );
    assert!(reason.contains("ObtainOptions::fence"), "{reason}");
    assert!(
        !fx.is_held("{t}job").await,
        "the refused lock was left held"
    );
    fx.check(locker.obtain("{t}job", LONG, once().fence()).await, "then");
}

/// A fence key that another owner holds as a lock: the counter is checked
/// before the acquire writes, so the call fails without taking the key and
/// without touching the other lock.
pub async fn fence_key_held_as_a_lock_leaves_nothing(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let other = fx.check(a.obtain("{t}other", LONG, once()).await, "obtain other");
    let reason = refused(
        b.obtain("{t}job", LONG, once().fence_key("{t}other")).await,
        "{t}other",
    );
    assert!(reason.contains("not a counter"), "{reason}");
    println!("refused: {reason}");
    assert!(
        !fx.is_held("{t}job").await,
        "the refused lock was left held"
    );
    fx.check(other.refresh(LONG).await, "the other lock is intact");
    fx.check(other.release().await, "release other");
}

/// `obtain_many` whose second key is the first key's fence counter: refused
/// before anything is written; neither key is left held.
pub async fn obtain_many_colliding_with_its_fence_key_leaves_nothing(fx: &Fixture) {
    let locker = fx.locker().await;
    let keys = ["{t}a", "{t}a:fence"];
    refused(
        locker.obtain_many(keys, LONG, once().fence()).await,
        "{t}a:fence",
    );
    // (`{t}a:fence` cannot be probed with a lock on the memory store: the
    // name is refused. Left behind, it would hold the same value as `{t}a`.)
    assert!(!fx.is_held("{t}a").await, "`{{t}}a` was left held");
    fx.check(locker.obtain("{t}a", LONG, once().fence()).await, "then");
}

/// A lock named after another key's fence counter is refused, naming that
/// key, and never written: the counter and its tokens are unharmed.
pub async fn lock_named_after_a_fence_counter_is_refused(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    // Redlock's masters count one by one only from equal counters.
    fx.set_fence_counter("{t}a:fence", 1_000).await;
    let first = fx.check(a.obtain("{t}a", LONG, once().fence()).await, "obtain");
    let token = first.fence_token().expect("fenced");
    fx.check(first.release().await, "release");
    let reason = refused(b.obtain("{t}a:fence", LONG, once()).await, "{t}a:fence");
    assert!(reason.contains("`{t}a`"), "{reason}");
    let next = fx.check(a.obtain("{t}a", LONG, once().fence()).await, "again");
    assert_eq!(
        next.fence_token(),
        Some(token + 1),
        "the counter was touched"
    );
}

/// A fair obtain whose fence key is another owner's lock: refused before it
/// takes the key or joins the queue.
pub async fn fair_obtain_with_a_bad_fence_key_leaves_nothing(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let other = fx.check(a.obtain("{t}other", LONG, once()).await, "obtain other");
    let fair = ObtainOptions::new()
        .fair()
        .fence_key("{t}other")
        .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(5)));
    refused(b.obtain("{t}job", LONG, fair).await, "{t}other");
    assert!(
        !fx.is_held("{t}job").await,
        "the refused lock was left held"
    );
    fx.check(other.release().await, "release other");
}

/// The fence counter of a key is set to expire after its use, within the
/// default day: on one server, on the cluster node of its slot, and on a
/// majority of the Redlock masters.
pub async fn fence_counter_expires_after_its_last_use(fx: &Fixture) {
    let locker = fx.locker().await;
    for round in 0..2 {
        let lock = fx.check(locker.obtain("{t}a", LONG, once().fence()).await, "obtain");
        let left = fx.lease_left("{t}a:fence").await;
        assert!(
            left.is_some_and(|left| left <= Duration::from_secs(24 * 3600)
                && left > Duration::from_secs(23 * 3600)),
            "round {round}: the counter is kept for {left:?}, not about a day"
        );
        fx.check(lock.release().await, "release");
    }
}

// Each case on servers of its own: these refusals name the key as the
// backend stores it, so a namespace (which shared servers would need) would
// change the names they are checked against. Where fence tokens are counters
// kept as keys: not on etcd, whose tokens are revisions.
lockmacro_testkit::for_each_backend! {
    runtime: (flavor = "multi_thread", worker_threads = 2),
    cases: [crate::leftovers],
    { needs: [ShortLeases], only: [Redis, Valkey, Cluster, Redlock, Memory], servers: own } => [
        fence_key_equal_to_the_lock_key_leaves_nothing,
        fence_key_held_as_a_lock_leaves_nothing,
        obtain_many_colliding_with_its_fence_key_leaves_nothing,
        lock_named_after_a_fence_counter_is_refused,
    ],
    // Redlock keeps no queue: fair obtains are refused there by design.
    { needs: [FairQueue], only: [Redis, Valkey, Cluster, Redlock, Memory], servers: own } => [
        fair_obtain_with_a_bad_fence_key_leaves_nothing,
    ],
    // The memory store cannot be read behind its back: its counters'
    // expiry is shown below on the tokio clock.
    { needs: [Servers], only: [Redis, Valkey, Cluster, Redlock, Memory], servers: own } => [
        fence_counter_expires_after_its_last_use,
    ],
}

/// In memory, an explicit fence counter is a key like any other, as on Redis:
/// a lock of that name is busy while the counter lives and free once it has
/// expired; a counter made again afterwards still gives larger tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_fence_counter_expires_after_its_last_use() {
    let expiry = Duration::from_millis(200);
    let locker = Locker::new(MemoryBackend::new().fence_expiry(expiry));
    let mut last = 0;
    for _ in 0..100 {
        let lock = locker
            .obtain("job", LONG, once().fence_key("counter"))
            .await
            .expect("obtain");
        last = lock.fence_token().unwrap();
        lock.release().await.expect("release");
    }
    let busy = locker.obtain("counter", LONG, once()).await;
    assert!(
        busy.as_ref().is_err_and(LockError::is_not_obtained),
        "a lock on a live counter's name: {busy:?}"
    );
    // The counter's expiry passes (a passage of time, not a synchronisation).
    tokio::time::sleep(expiry * 2).await;
    let free = locker
        .obtain("counter", LONG, once())
        .await
        .expect("expired");
    free.release().await.expect("release");
    let lock = locker
        .obtain("job", LONG, once().fence_key("counter"))
        .await
        .expect("obtain");
    assert!(
        lock.fence_token().unwrap() > last,
        "token {:?} after {last}",
        lock.fence_token()
    );
}

/// On Redis the expiry is configured on the backend: a counter made with a
/// short one goes by itself, and the counter made again gives larger tokens
/// (it starts at the server's clock, past every token of the old one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fence_expiry_is_configurable_and_tokens_still_increase() {
    use lockmacro_runtime::{RedisBackend, RedisConfig};

    let server = lockmacro_testkit::RedisServer::start();
    let config = RedisConfig::default().fence_expiry(Duration::from_millis(300));
    let backend = server.expect_ok(
        RedisBackend::connect_with(&server.url(), config).await,
        "connect",
    );
    let locker = Locker::new(backend);
    let mut last = 0;
    for _ in 0..100 {
        let lock = server.expect_ok(locker.obtain("job", LONG, once().fence()).await, "obtain");
        last = lock.fence_token().unwrap();
        server.expect_ok(lock.release().await, "release");
    }
    let left: i64 = server.cmd(&["PTTL", "{job}:fence"]);
    assert!((1..=300).contains(&left), "the counter is kept {left} ms");
    for _ in 0..300 {
        if !server.cmd::<bool>(&["EXISTS", "{job}:fence"]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !server.cmd::<bool>(&["EXISTS", "{job}:fence"]),
        "never expired"
    );
    let lock = server.expect_ok(locker.obtain("job", LONG, once().fence()).await, "obtain");
    assert!(
        lock.fence_token().unwrap() > last,
        "token {:?} after {last}",
        lock.fence_token()
    );
}

/// A release whose key's queue name holds something else than a queue
/// (written by another program) still releases, and says so: the script
/// does not fail after its `DEL`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_release_with_a_foreign_value_at_the_queue_name_succeeds() {
    let server = lockmacro_testkit::RedisServer::start();
    let locker = server.locker().await;
    let () = server.cmd(&["SET", "{job}:queue", "not a queue"]);
    let lock = server.expect_ok(locker.obtain("job", LONG, once()).await, "obtain");
    server.expect_ok(lock.release().await, "release");
    assert!(
        !server.cmd::<bool>(&["EXISTS", "job"]),
        "the key is still held"
    );
}
