//! The unmodified runtime against the simulated server on a loopback port:
//! its scripts, its script-free engine and its wake-ups, as against Redis.
//!
//! No timing is measured: a waiter "woken by the release" is one that has
//! the key while its own retry is still a minute away, and the bounds below
//! only stop a hang.

use std::time::Duration;

use lockmacro_runtime::{
    BackendErrorKind, KeyKind, LockError, Locker, ObtainOptions, RedisBackend, RedisConfig,
    RetryStrategy, Scripts,
};
use lockmacro_sim::{ManualClock, Reply, Server, SystemClock};

const TTL: Duration = Duration::from_secs(30);
/// A bound for a hang, far below a waiter's own next retry (60 s) and the
/// holder's lease (30 s): a waiter done within it was woken.
const HANG: Duration = Duration::from_secs(10);

async fn serve(server: &Server) -> String {
    let addr = server.listen().await.expect("listen on loopback");
    format!("redis://{addr}/")
}

async fn locker(url: &str, scripts: Scripts) -> Locker {
    let config = RedisConfig::default().scripts(scripts);
    Locker::new(
        RedisBackend::connect_with(url, config)
            .await
            .expect("connect to the simulated server"),
    )
}

/// Waits for a release: its next retry is a minute away.
fn patient(options: ObtainOptions) -> ObtainOptions {
    options.retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(50)))
}

fn busy(result: Result<impl std::fmt::Debug, LockError>) {
    let err = result.expect_err("the key is held");
    assert!(err.is_not_obtained(), "{err:?}");
}

async fn woken<T>(waiter: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(HANG, waiter)
        .await
        .expect("the waiter was not woken by the release")
        .expect("the waiter's task")
}

/// Bounds a wait for a state, so that a state never reached fails the test
/// instead of hanging it.
async fn within<T>(wait: impl Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(10), wait)
        .await
        .expect("the server never reached the state waited for")
}

#[tokio::test]
async fn obtain_contend_release_refresh_inspect() {
    let server = Server::new(SystemClock);
    let url = serve(&server).await;
    let (a, b) = (
        locker(&url, Scripts::Auto).await,
        locker(&url, Scripts::Auto).await,
    );
    let lock = a
        .obtain("job", TTL, ObtainOptions::new())
        .await
        .expect("obtain");
    busy(b.obtain("job", TTL, ObtainOptions::new()).await);
    lock.refresh(Duration::from_secs(120))
        .await
        .expect("refresh");
    assert!(
        lock.remaining().await.expect("remaining") > TTL,
        "the refresh lengthened the lease"
    );
    let seen = b.inspect("job").await.expect("inspect");
    assert_eq!(seen.kind, Some(KeyKind::Lock));
    assert_eq!(seen.holders.len(), 1);
    lock.release().await.expect("release");
    assert_eq!(
        server.with_keyspace(|keys| keys.len()),
        0,
        "the release left keys behind"
    );
    let lock = b
        .obtain("job", TTL, ObtainOptions::new())
        .await
        .expect("obtain after release");
    assert!(b.force_release("job").await.expect("force release"));
    drop(lock);
}

#[tokio::test]
async fn fence_tokens_increase() {
    let server = Server::new(SystemClock);
    let url = serve(&server).await;
    let a = locker(&url, Scripts::Auto).await;
    let mut last = 0;
    for _ in 0..3 {
        let lock = a
            .obtain("job", TTL, ObtainOptions::new().fence())
            .await
            .expect("obtain");
        let token = lock.fence_token().expect("a fenced lock has a token");
        assert!(token > last, "{token} after {last}");
        last = token;
        lock.release().await.expect("release");
    }
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_release() {
    let server = Server::new(SystemClock);
    let url = serve(&server).await;
    let (a, b) = (
        locker(&url, Scripts::Auto).await,
        locker(&url, Scripts::Auto).await,
    );
    let held = a
        .obtain("job", TTL, ObtainOptions::new())
        .await
        .expect("obtain");
    assert_eq!(
        server.call(&["PUBSUB", "CHANNELS"]),
        Reply::Array(vec![]),
        "nobody listens yet"
    );
    let waiter =
        tokio::spawn(async move { b.obtain("job", TTL, patient(ObtainOptions::new())).await });
    // It tried, was refused (flagging itself a waiter), and listens: what
    // ends its wait is the release, not a retry.
    within(server.until(|keys| keys.exists(b"{job}:waiters"))).await;
    within(server.until_subscriptions(1)).await;
    held.release().await.expect("release");
    woken(waiter)
        .await
        .expect("the waiter obtains")
        .release()
        .await
        .expect("release");
}

/// The length of every list on the server: the fair queues' waiters.
fn queued(keys: &lockmacro_sim::Keyspace) -> usize {
    keys.keys()
        .filter_map(|k| match keys.get(k) {
            Some(lockmacro_sim::Value::List(list)) => Some(list.len()),
            _ => None,
        })
        .sum()
}

#[tokio::test]
async fn a_fair_lock_is_handed_over_in_order() {
    let server = Server::new(SystemClock);
    let url = serve(&server).await;
    let a = locker(&url, Scripts::Auto).await;
    let fair = || patient(ObtainOptions::new().fair());
    let held = a
        .obtain("job", TTL, ObtainOptions::new().fair())
        .await
        .expect("obtain");
    let (first, second) = (
        locker(&url, Scripts::Auto).await,
        locker(&url, Scripts::Auto).await,
    );
    let first = tokio::spawn(async move { first.obtain("job", TTL, fair()).await });
    within(server.until(|keys| queued(keys) == 1)).await;
    within(server.until_subscriptions(1)).await;
    let second = tokio::spawn(async move { second.obtain("job", TTL, fair()).await });
    within(server.until(|keys| queued(keys) == 2)).await;
    within(server.until_subscriptions(2)).await;
    held.release().await.expect("release");
    let lock = woken(first)
        .await
        .expect("the first waiter is handed the lock");
    assert!(!second.is_finished(), "the second waits for the first");
    lock.release().await.expect("release");
    let lock = woken(second).await.expect("then the second");
    lock.release().await.expect("release");
}

#[tokio::test]
async fn permits_n_at_a_time() {
    let server = Server::new(SystemClock);
    let url = serve(&server).await;
    let lockers = [
        locker(&url, Scripts::Auto).await,
        locker(&url, Scripts::Auto).await,
        locker(&url, Scripts::Auto).await,
    ];
    let two = || ObtainOptions::new().permits(2);
    let one = lockers[0]
        .obtain("api", TTL, two())
        .await
        .expect("first permit");
    let _second = lockers[1]
        .obtain("api", TTL, two())
        .await
        .expect("second permit");
    busy(lockers[2].obtain("api", TTL, two()).await);
    let seen = lockers[2].inspect("api").await.expect("inspect");
    assert_eq!(seen.kind, Some(KeyKind::Semaphore { permits: 2 }));
    assert_eq!(seen.holders.len(), 2);
    let third = lockers[2].clone();
    let waiter = tokio::spawn(async move { third.obtain("api", TTL, patient(two())).await });
    within(server.until_subscriptions(1)).await;
    one.release().await.expect("release");
    woken(waiter)
        .await
        .expect("the third obtains once one is released");
}

#[tokio::test]
async fn readers_share_and_a_writer_waits() {
    let server = Server::new(SystemClock);
    let url = serve(&server).await;
    let (a, b, c) = (
        locker(&url, Scripts::Auto).await,
        locker(&url, Scripts::Auto).await,
        locker(&url, Scripts::Auto).await,
    );
    let r1 = a
        .obtain("doc", TTL, ObtainOptions::new().read())
        .await
        .expect("reader");
    let r2 = b
        .obtain("doc", TTL, ObtainOptions::new().read())
        .await
        .expect("a second reader");
    busy(c.obtain("doc", TTL, ObtainOptions::new().write()).await);
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    let w = c
        .obtain("doc", TTL, ObtainOptions::new().write())
        .await
        .expect("writer");
    busy(a.obtain("doc", TTL, ObtainOptions::new().read()).await);
    assert_eq!(
        a.inspect("doc").await.expect("inspect").kind,
        Some(KeyKind::ReadWrite)
    );
    w.release().await.expect("release");
}

#[tokio::test]
async fn a_lease_expires_on_the_servers_clock() {
    let clock = ManualClock::new(1_700_000_000_000);
    let server = Server::new(clock.clone());
    let url = serve(&server).await;
    let (a, b) = (
        locker(&url, Scripts::Auto).await,
        locker(&url, Scripts::Auto).await,
    );
    let _held = a
        .obtain("job", TTL, ObtainOptions::new())
        .await
        .expect("obtain");
    clock.advance_ms(TTL.as_millis() as u64 - 1);
    busy(b.obtain("job", TTL, ObtainOptions::new()).await);
    clock.advance_ms(2);
    b.obtain("job", TTL, ObtainOptions::new())
        .await
        .expect("obtain once the lease is past");
}

#[tokio::test]
async fn a_restart_that_forgets_the_scripts_is_ridden_out() {
    let server = Server::new(SystemClock);
    let url = serve(&server).await;
    let a = locker(&url, Scripts::Auto).await;
    a.obtain("job", TTL, ObtainOptions::new())
        .await
        .expect("obtain")
        .release()
        .await
        .expect("release");
    server.restart();
    let lock = a
        .obtain("job", TTL, ObtainOptions::new())
        .await
        .expect("obtain after a restart");
    lock.release().await.expect("release");
}

/// The runtime's script-free engine: the server refuses scripts as a Redis
/// 7 user with `-@scripting` is refused.
#[tokio::test]
async fn without_scripts_locks_fences_and_wakeups_still_work() {
    let server = Server::new(SystemClock);
    server.refuse_scripts(true);
    let url = serve(&server).await;
    let (a, b) = (
        locker(&url, Scripts::Auto).await,
        locker(&url, Scripts::Auto).await,
    );
    let lock = a
        .obtain_many(["job", "other"], TTL, ObtainOptions::new().fence())
        .await
        .expect("a fenced obtain of two keys");
    let first = lock.fence_token().expect("a token");
    busy(b.obtain("other", TTL, ObtainOptions::new()).await);
    lock.refresh(Duration::from_secs(120))
        .await
        .expect("refresh");
    assert!(lock.remaining().await.expect("remaining") > TTL);
    let seen = b.inspect("job").await.expect("inspect");
    assert_eq!(seen.holders.len(), 1);
    let waiter = tokio::spawn(async move {
        b.obtain("job", TTL, patient(ObtainOptions::new().fence()))
            .await
    });
    within(server.until(|keys| keys.exists(b"{job}:waiters"))).await;
    within(server.until_subscriptions(1)).await;
    lock.release().await.expect("release");
    let next = woken(waiter).await.expect("the waiter obtains");
    assert!(next.fence_token().expect("a token") > first);
    next.release().await.expect("release");
    let refused = a
        .obtain("api", TTL, ObtainOptions::new().permits(2))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, LockError::Backend(e) if e.kind() == BackendErrorKind::Unsupported),
        "a semaphore needs scripts: {refused:?}"
    );
    // Only the fence counter and the waiters' flag (which expires) remain.
    let left: Vec<String> = server.with_keyspace(|keys| {
        keys.keys()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect()
    });
    assert_eq!(left, ["{job}:fence", "{job}:waiters"]);
    assert!(server.with_keyspace(|keys| keys.expires_at(b"{job}:waiters").is_some()));
}

#[tokio::test]
async fn lists_fenced_values_many_keys_and_a_downgrade() {
    let server = Server::new(SystemClock);
    let url = serve(&server).await;
    let a = locker(&url, Scripts::Auto).await.with_namespace("billing");
    let b = locker(&url, Scripts::Auto).await.with_namespace("billing");
    let _one = a
        .obtain("user:1", TTL, ObtainOptions::new().metadata("worker-1"))
        .await
        .expect("obtain");
    let two = a
        .obtain("user:2", TTL, ObtainOptions::new().fence())
        .await
        .expect("obtain");
    let _report = a
        .obtain("report", TTL, ObtainOptions::new())
        .await
        .expect("obtain");
    let users = b.list("user:").await.expect("list (SCAN)");
    let keys: Vec<&str> = users.iter().map(|info| info.key.as_str()).collect();
    assert_eq!(keys, ["user:1", "user:2"]);
    assert_eq!(users[0].inspection.holders[0].metadata, "worker-1");

    let store = lockmacro_runtime::FencedStore::connect(&url)
        .await
        .expect("a fenced store");
    let token = two.fence_token().expect("a token");
    assert!(
        store
            .set("balance", "10", token)
            .await
            .expect("a fenced write")
    );
    assert!(
        !store
            .set("balance", "5", token - 1)
            .await
            .expect("a stale write"),
        "a stale token is refused"
    );
    let value = store.get("balance").await.expect("get").expect("a value");
    assert_eq!((value.token, value.value.as_str()), (token, "10"));

    let many = b
        .obtain_many(["x", "y"], TTL, ObtainOptions::new().fence())
        .await
        .expect("two keys at once");
    busy(a.obtain("y", TTL, ObtainOptions::new()).await);
    many.release().await.expect("release");

    let writer = a
        .obtain("doc", TTL, ObtainOptions::new().write())
        .await
        .expect("writer");
    let reader = writer.downgrade().await.expect("downgrade to a reader");
    b.obtain("doc", TTL, ObtainOptions::new().read())
        .await
        .expect("a second reader beside the downgraded one");
    reader.release().await.expect("release");
}

#[tokio::test]
async fn scripts_never_or_required_on_a_server_that_refuses_them() {
    let server = Server::new(SystemClock);
    server.refuse_scripts(true);
    let url = serve(&server).await;
    let never = locker(&url, Scripts::Never).await;
    never
        .obtain("job", TTL, ObtainOptions::new())
        .await
        .expect("never tries a script")
        .release()
        .await
        .expect("release");
    let required = locker(&url, Scripts::Required).await;
    let err = required
        .obtain("job", TTL, ObtainOptions::new().fence())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Backend(e) if e.kind() == BackendErrorKind::Permission),
        "{err:?}"
    );
}

/// Scripts allowed at connect and refused before the first lock: the
/// refusal of the call itself switches `Auto` over.
#[tokio::test]
async fn scripts_refused_after_connect_switch_auto_over() {
    let server = Server::new(SystemClock);
    let url = serve(&server).await;
    let auto = locker(&url, Scripts::Auto).await;
    server.refuse_scripts(true);
    let lock = auto
        .obtain("job", TTL, ObtainOptions::new().fence())
        .await
        .expect("a fenced obtain");
    lock.release().await.expect("release");
}

/// An acquire that waits for a replica: the server has none, so `WAIT`
/// blocks for the whole replica timeout, answers 0, and the obtain fails.
#[tokio::test]
async fn an_acquire_waiting_for_replicas_is_refused_without_them() {
    let server = Server::new(SystemClock);
    let url = serve(&server).await;
    let a = locker(&url, Scripts::Auto).await;
    let options = ObtainOptions::new()
        .replicas(1)
        .replica_timeout(Duration::from_millis(20));
    let err = a.obtain("job", TTL, options).await.unwrap_err();
    assert!(matches!(err, LockError::NotReplicated { .. }), "{err:?}");
    a.obtain("job", TTL, ObtainOptions::new())
        .await
        .expect("the refused acquire let its key go");
}

/// The fault hooks on the real runtime: every connection dropped while a
/// waiter listens; it listens again, and the release still wakes it.
#[tokio::test]
async fn a_waiter_is_woken_after_the_server_dropped_its_connections() {
    let server = Server::new(SystemClock);
    let url = serve(&server).await;
    let (a, b) = (
        locker(&url, Scripts::Auto).await,
        locker(&url, Scripts::Auto).await,
    );
    let held = a
        .obtain("job", TTL, ObtainOptions::new())
        .await
        .expect("obtain");
    let waiter =
        tokio::spawn(async move { b.obtain("job", TTL, patient(ObtainOptions::new())).await });
    within(server.until(|keys| keys.exists(b"{job}:waiters"))).await;
    within(server.until_subscriptions(1)).await;
    server.drop_connections();
    within(server.until_subscriptions(1)).await;
    held.release().await.expect("release on a new connection");
    woken(waiter).await.expect("the waiter obtains");
}

/// The runtime's main connections in RESP3 (`?protocol=resp3`), with and
/// without scripts: RESP3's shapes (doubles, `WITHSCORES` pairs, maps) on
/// every call, not only on the wake-ups' connection.
#[tokio::test]
async fn resp3_connections_with_and_without_scripts() {
    for refuse in [false, true] {
        let server = Server::new(SystemClock);
        server.refuse_scripts(refuse);
        let addr = server.listen().await.expect("listen");
        let url = format!("redis://{addr}/?protocol=resp3");
        let (a, b) = (
            locker(&url, Scripts::Auto).await,
            locker(&url, Scripts::Auto).await,
        );
        let lock = a
            .obtain("job", TTL, ObtainOptions::new().fence())
            .await
            .expect("obtain");
        busy(b.obtain("job", TTL, ObtainOptions::new()).await);
        lock.refresh(Duration::from_secs(120))
            .await
            .expect("refresh");
        assert_eq!(b.inspect("job").await.expect("inspect").holders.len(), 1);
        let waiter =
            tokio::spawn(async move { b.obtain("job", TTL, patient(ObtainOptions::new())).await });
        within(server.until_subscriptions(1)).await;
        lock.release().await.expect("release");
        woken(waiter).await.expect("the waiter obtains");
        if !refuse {
            let r = a
                .obtain("doc", TTL, ObtainOptions::new().read())
                .await
                .expect("reader");
            let seen = a.inspect("doc").await.expect("inspect a read-write lock");
            assert_eq!(seen.kind, Some(KeyKind::ReadWrite));
            r.release().await.expect("release");
        }
    }
}
