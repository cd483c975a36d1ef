//! Waiters are woken by the holder's release, not by their backoff: every
//! waiter here has a 60 s backoff and a 30 s deadline, so it only obtains in
//! time if it hears the release. The 5 s bounds are generous limits for a
//! hang, not measurements.

use std::future::Future;
use std::time::Duration;

use lockmacro_runtime::{Lock, Locker, ObtainOptions, RetryStrategy};

use lockmacro_testkit::cluster::RedisCluster;
use lockmacro_testkit::{Fixture, RedisServer};

const TTL: Duration = Duration::from_secs(30);
const PROMPTLY: Duration = Duration::from_secs(5);

fn patient() -> ObtainOptions {
    ObtainOptions::new()
        .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(30)))
}

fn spawn_waiter(locker: &Locker, key: &str) -> tokio::task::JoinHandle<Lock> {
    let locker = locker.clone();
    let key = key.to_owned();
    tokio::spawn(async move {
        locker
            .obtain(&key, TTL, patient())
            .await
            .expect("the waiter obtains")
    })
}

async fn obtained_promptly(waiter: tokio::task::JoinHandle<Lock>, what: &str) -> Lock {
    tokio::time::timeout(PROMPTLY, waiter)
        .await
        .unwrap_or_else(|_| panic!("{what}: the waiter was not woken by the release"))
        .expect("the waiter task")
}

/// Subscribers of the channel on which releases of `key` are announced.
pub(crate) fn listeners(server: &RedisServer, key: &str) -> i64 {
    let reply: (String, i64) =
        server.cmd(&["PUBSUB", "NUMSUB", &format!("lockmacro:released:{key}")]);
    reply.1
}

/// Waits until `n` lockers listen for releases of `key`: they found it busy
/// and are waiting.
pub(crate) async fn until_listening(server: &RedisServer, key: &str, n: i64) {
    for _ in 0..500 {
        if listeners(server, key) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.fail(format_args!("nobody listens for releases of `{key}`"));
}

/// Calls per command since the last `CONFIG RESETSTAT`, the test's own
/// (`INFO`, `CONFIG`, `PUBSUB`) left out.
pub(crate) fn commands(server: &RedisServer) -> Vec<(String, u64)> {
    let info: String = server.cmd(&["INFO", "commandstats"]);
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            (!["info", "config", "pubsub"]
                .iter()
                .any(|own| name.starts_with(own)))
            .then(|| (name.to_owned(), calls))
        })
        .collect()
}

/// Calls of `command` since the last `CONFIG RESETSTAT`.
pub(crate) fn calls(server: &RedisServer, command: &str) -> u64 {
    commands(server)
        .into_iter()
        .find_map(|(name, calls)| (name == command).then_some(calls))
        .unwrap_or(0)
}

/// `job` held through one locker on `server`, and a waiter for it on
/// another (as another process would have), once that waiter listens.
async fn held_and_awaited(server: &RedisServer) -> (Lock, tokio::task::JoinHandle<Lock>) {
    let holder_locker = server.locker().await;
    let waiter_locker = server.locker().await;
    let held = server.expect_ok(
        holder_locker.obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    let waiter = spawn_waiter(&waiter_locker, "job");
    until_listening(server, "job", 1).await;
    (held, waiter)
}

// The scenarios that show a waiter woken on Redis, where the test sees it
// listen for releases, and in memory, where it is given time to wait.
lockmacro_testkit::for_each_backend! {
    needs: [],
    only: [Redis, Valkey, Memory],
    servers: own,
    runtime: (flavor = "multi_thread", worker_threads = 2),
    cases: crate::wakeup::[
        waiter_obtains_as_soon_as_the_holder_releases,
        waiters_on_one_locker_are_woken_in_turn,
    ],
}

/// Waits until `n` waiters for `key` on `fx` wait: on Redis, until they
/// listen for releases; the memory backend gives no sign that a waiter
/// waits, so they are given time to.
async fn until_waiting(fx: &Fixture, key: &str, n: i64) {
    match fx.master() {
        Some(server) => until_listening(server, key, n).await,
        None => settle().await,
    }
}

async fn waiter_obtains_as_soon_as_the_holder_releases(fx: &Fixture) {
    let (holder_locker, waiter_locker) = (fx.locker().await, fx.locker().await);
    let held = fx.check(
        holder_locker.obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    let waiter = spawn_waiter(&waiter_locker, "job");
    until_waiting(fx, "job", 1).await;

    fx.check(held.release().await, "release");
    let lock = obtained_promptly(waiter, &format!("{:?}", fx.kind())).await;
    fx.check(lock.release().await, "release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_waiter_sends_no_commands_while_it_waits() {
    let server = RedisServer::start();
    let holder_locker = server.locker().await;
    let waiter_locker = server.locker().await;
    let held = server.expect_ok(
        holder_locker.obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    let () = server.cmd(&["CONFIG", "RESETSTAT"]);
    let waiter = spawn_waiter(&waiter_locker, "job");
    // A waiter finds the key busy (a plain `SET NX`), subscribes, then tries
    // once more (the script, which also says how long the holder has left)
    // so that a release before its subscription is not missed: it waits
    // only after that second attempt, which a loaded machine can delay well
    // past the subscription.
    for _ in 0..500 {
        if calls(&server, "evalsha") >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // `commandstats` also counts the commands the script runs inside: its
    // `SET NX`, the `SET` of the flag that tells releases someone waits,
    // and the `SET … KEEPTTL` that marks the holder's value.
    assert_eq!(
        (calls(&server, "set"), calls(&server, "evalsha")),
        (4, 1),
        "the waiter did not make its two attempts: {:?}",
        commands(&server)
    );
    assert_eq!(listeners(&server, "job"), 1, "the waiter does not listen");

    let () = server.cmd(&["CONFIG", "RESETSTAT"]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sent = commands(&server);
    assert!(sent.is_empty(), "a waiting locker sent commands: {sent:?}");

    server.expect_ok(held.release().await, "release");
    obtained_promptly(waiter, "after a quiet wait").await;
}

/// Obtains `key`, then releases it at once.
fn spawn_relay(locker: &Locker, key: &str) -> tokio::task::JoinHandle<()> {
    let waiter = spawn_waiter(locker, key);
    tokio::spawn(async move {
        let lock = waiter.await.expect("the waiter task");
        lock.release().await.expect("release");
    })
}

/// Four waiters on `waiter_locker` obtain the key one after the other once
/// `held` is released: each hand-off depends on a release being heard.
async fn relay(held: Lock, waiter_locker: &Locker, wait_until_waiting: impl Future<Output = ()>) {
    let relays: Vec<_> = (0..4)
        .map(|_| spawn_relay(waiter_locker, held.key()))
        .collect();
    wait_until_waiting.await;
    held.release().await.expect("release");
    tokio::time::timeout(PROMPTLY * 4, futures::future::join_all(relays))
        .await
        .expect("every waiter obtained in turn")
        .into_iter()
        .for_each(|relay| relay.expect("relay task"));
}

async fn waiters_on_one_locker_are_woken_in_turn(fx: &Fixture) {
    let holder_locker = fx.locker().await;
    // The waiters share this locker's pub/sub connection and channel.
    let waiter_locker = fx.locker().await;
    let held = fx.check(
        holder_locker.obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    relay(held, &waiter_locker, until_waiting(fx, "job", 1)).await;
    if let Some(server) = fx.master() {
        assert_eq!(listeners(server, "job"), 0, "the last waiter unsubscribed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_release_racing_the_first_attempts_is_not_missed() {
    let server = RedisServer::start();
    let holder_locker = server.locker().await;
    let waiter_locker = server.locker().await;
    // The release lands anywhere around the waiter's first attempt, its
    // subscription and its second attempt.
    for round in 0..30u64 {
        let held = server.expect_ok(
            holder_locker.obtain("job", TTL, ObtainOptions::new()).await,
            "obtain",
        );
        let waiter = spawn_waiter(&waiter_locker, "job");
        tokio::time::sleep(Duration::from_micros(round * 100)).await;
        server.expect_ok(held.release().await, "release");
        let lock = obtained_promptly(waiter, &format!("round {round}")).await;
        server.expect_ok(lock.release().await, "release");
    }
}

/// A waiter whose pub/sub connection is closed under it (here by `CLIENT
/// KILL`, as a proxy or a server restart would) listens again on a new one,
/// and still hears the release instead of sleeping out its backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_waiter_listens_again_when_its_connection_is_closed() {
    let server = RedisServer::start();
    let (held, waiter) = held_and_awaited(&server).await;

    let killed: i64 = server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert_eq!(killed, 1, "the waiter's pub/sub connection");
    until_listening(&server, "job", 1).await;
    server.expect_ok(held.release().await, "release");
    let lock = obtained_promptly(waiter, "after its connection was closed").await;
    server.expect_ok(lock.release().await, "release");
}

/// `key` held through one locker on the cluster and awaited through another,
/// both connected through `seeds`, once the waiter listens on node `node`.
async fn cluster_held_and_awaited(
    cluster: &RedisCluster,
    seeds: &[String],
    key: &str,
    node: usize,
) -> (Lock, tokio::task::JoinHandle<Lock>) {
    let mut lockers = Vec::new();
    for _ in 0..2 {
        match Locker::cluster(seeds).await {
            Ok(locker) => lockers.push(locker),
            Err(err) => cluster.fail(format_args!("connect: {err:?}")),
        }
    }
    let held = match lockers[0].obtain(key, TTL, ObtainOptions::new()).await {
        Ok(lock) => lock,
        Err(err) => cluster.fail(format_args!("obtain: {err:?}")),
    };
    let waiter = spawn_waiter(&lockers[1], key);
    until_listening(cluster.node(node), key, 1).await;
    (held, waiter)
}

/// Releases `held`; the waiter must obtain promptly.
async fn cluster_hand_over(
    cluster: &RedisCluster,
    held: Lock,
    waiter: tokio::task::JoinHandle<Lock>,
    what: &str,
) {
    if let Err(err) = held.release().await {
        cluster.fail(format_args!("release: {err:?}"));
    }
    let lock = obtained_promptly(waiter, what).await;
    if let Err(err) = lock.release().await {
        cluster.fail(format_args!("release: {err:?}"));
    }
}

/// Subscribers of `key`'s release channel on each node; `None` for a killed one.
fn cluster_listeners(cluster: &RedisCluster, key: &str, killed: &[usize]) -> Vec<Option<i64>> {
    (0..cluster.nodes().len())
        .map(|index| (!killed.contains(&index)).then(|| listeners(cluster.node(index), key)))
        .collect()
}

/// The waiter's locker subscribes on its first seed, and the release runs on
/// the key's master, another node: the message reaches the waiter over the
/// cluster bus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_waiter_hears_a_release_made_on_another_node() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .expect("starting the cluster");
    let seeds = cluster.seeds();
    let key = (0..)
        .map(|n| format!("job{n}"))
        .find(|key| cluster.master_for(key) != 0)
        .expect("a key served by another node than the first seed");
    let (held, waiter) = cluster_held_and_awaited(&cluster, &seeds, &key, 0).await;
    let master = cluster.master_for(&key);
    assert_eq!(
        listeners(cluster.node(master), &key),
        0,
        "subscribed on the key's master"
    );

    cluster_hand_over(&cluster, held, waiter, "cluster").await;
}

/// The node a waiter listens on fails mid-wait (`fail`): the waiter listens
/// again on the next seed and still hears the release, made on another node.
async fn cluster_waiter_moves_on_when_its_node_fails(fail: impl FnOnce(&mut RedisCluster, usize)) {
    let mut cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .expect("starting the cluster");
    // A replica first, so that its failure costs no failover; the key is
    // served by another master than the replica's.
    let replica = cluster.replica_of(cluster.master_for("{a}"));
    let key = (0..)
        .map(|n| format!("job{n}"))
        .find(|key| cluster.replica_of(cluster.master_for(key)) != replica)
        .expect("a key on another master");
    let mut seeds = cluster.seeds();
    let first = seeds.remove(replica);
    seeds.insert(0, first);
    let (held, waiter) = cluster_held_and_awaited(&cluster, &seeds, &key, replica).await;

    fail(&mut cluster, replica);
    let mut listening = Vec::new();
    for _ in 0..500 {
        listening = cluster_listeners(&cluster, &key, &[replica]);
        if listening.iter().flatten().sum::<i64>() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if listening.iter().flatten().sum::<i64>() != 1 {
        cluster.fail(format_args!(
            "the waiter does not listen again after its node failed: {listening:?}"
        ));
    }
    cluster_hand_over(&cluster, held, waiter, "after its node failed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_waiter_moves_to_the_next_seed_when_its_node_dies() {
    cluster_waiter_moves_on_when_its_node_fails(|cluster, node| cluster.kill(node)).await;
}

/// A frozen node keeps the connection open and forwards nothing: the
/// locker's check of the connection notices it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_waiter_moves_to_the_next_seed_when_its_node_freezes() {
    cluster_waiter_moves_on_when_its_node_fails(|cluster, node| cluster.node(node).pause()).await;
}

/// The memory backend gives no sign that a waiter waits: give it time to.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_user_denied_the_release_channels_still_releases_and_waits_by_backoff() {
    let server = RedisServer::start();
    // Every command and key, but no pub/sub channel (Redis 7's default for new
    // users): the release script's PUBLISH and the waiter's SUBSCRIBE are
    // refused.
    let () = server.cmd(&[
        "ACL",
        "SETUSER",
        "locks",
        "on",
        ">secret",
        "~*",
        "+@all",
        "resetchannels",
    ]);
    let url = format!("redis://locks:secret@127.0.0.1:{}/", server.port());
    let holder_locker = server.expect_ok(Locker::connect(&url).await, "connect");
    let waiter_locker = server.expect_ok(Locker::connect(&url).await, "connect");
    let held = server.expect_ok(
        holder_locker.obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    let retry = RetryStrategy::linear(Duration::from_millis(20)).deadline(Duration::from_secs(30));
    let waiter = tokio::spawn(async move {
        waiter_locker
            .obtain("job", TTL, ObtainOptions::new().retry(retry))
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.expect_ok(held.release().await, "release without PUBLISH rights");
    let lock = tokio::time::timeout(PROMPTLY, waiter)
        .await
        .expect("the waiter obtains by backoff")
        .expect("the waiter task");
    server.expect_ok(lock, "obtain by backoff");
}

/// A release that nobody waits for is a compare-and-delete: no queue is
/// read, nothing is published. Once a waiter has found the key busy, the
/// release announces itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_release_nobody_waits_for_does_no_queue_or_pub_sub_work() {
    let server = RedisServer::start();
    let locker = server.locker().await;
    let () = server.cmd(&["CONFIG", "RESETSTAT"]);
    let held = server.expect_ok(locker.obtain("job", TTL, patient()).await, "obtain");
    server.expect_ok(held.release().await, "release");
    // `commandstats` counts the commands the release script runs: the GET
    // and DEL of the key; its waiters flag is not read, as no waiter marked
    // the value.
    let mut sent = commands(&server);
    sent.sort();
    let expected: Vec<(String, u64)> = [("del", 1), ("evalsha", 1), ("get", 1), ("set", 1)]
        .into_iter()
        .map(|(name, calls)| (name.to_owned(), calls))
        .collect();
    assert_eq!(sent, expected, "an unawaited obtain and release");

    let (held, waiter) = held_and_awaited(&server).await;
    let () = server.cmd(&["CONFIG", "RESETSTAT"]);
    server.expect_ok(held.release().await, "release");
    let lock = obtained_promptly(waiter, "redis").await;
    assert_eq!(
        calls(&server, "publish"),
        1,
        "the release was not announced"
    );
    server.expect_ok(lock.release().await, "release");
}

/// The flag that tells a release someone waits outlives the holder's lease
/// by a second only; a waiter that is still waiting when the lease is
/// renewed sets it again with its next attempt, so a release long after
/// the waiter's first attempt is still announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_release_is_announced_to_a_waiter_that_outwaited_the_first_lease() {
    let server = RedisServer::start();
    let holder_locker = server.locker().await;
    let waiter_locker = server.locker().await;
    let ttl = Duration::from_secs(2);
    let held = server.expect_ok(
        holder_locker.obtain("job", ttl, ObtainOptions::new()).await,
        "obtain",
    );
    let held = held.keep_alive();
    let waiter = spawn_waiter(&waiter_locker, "job");
    until_listening(&server, "job", 1).await;
    // Past the first attempt's flag (the lease then left, plus a second):
    // the scenario is the time that passes, not a wait for a signal.
    tokio::time::sleep(ttl * 2).await;
    let () = server.cmd(&["CONFIG", "RESETSTAT"]);
    server.expect_ok(held.release().await, "release");
    assert_eq!(
        calls(&server, "publish"),
        1,
        "the release after the renewed lease was not announced: {:?}",
        commands(&server)
    );
    let lock = obtained_promptly(waiter, "redis").await;
    server.expect_ok(lock.release().await, "release");
}
