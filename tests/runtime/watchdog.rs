//! The watchdog with many leases on one locker: every lease kept, refreshes
//! sent in batches, a lost lease reported alone; and `Backend::refresh_many`
//! on each backend.

use std::collections::HashMap;
use std::time::Duration;

use lockmacro_runtime::backend::{AcquireRequest, Acquired, Backend, BoxFuture, RefreshRequest};
use lockmacro_runtime::{
    LockError, LockGuard, Locker, MemoryBackend, ObtainOptions, RedisBackend, RedisConfig,
    RedlockBackend,
};
use tokio::task::JoinSet;
use tokio::time::Instant;

use lockmacro_testkit::RedisServer;
use lockmacro_testkit::cluster::RedisCluster;

/// Leases kept alive together by one locker.
const LEASES: usize = 2000;
/// Short, so that the test spans several ttls in a few seconds.
const TTL: Duration = Duration::from_secs(1);
const LONG: Duration = Duration::from_secs(30);
/// Bound for something expected within a ttl or two.
const PATIENCE: Duration = Duration::from_secs(10);

/// Obtains `keys` on `locker`, many at a time, and hands each to the watchdog.
async fn keep_alive_all(locker: &Locker, keys: &[String], ttl: Duration) -> Vec<LockGuard> {
    let mut obtaining = JoinSet::new();
    for chunk in keys.chunks(keys.len().div_ceil(16)) {
        let (locker, chunk) = (locker.clone(), chunk.to_vec());
        obtaining.spawn(async move {
            let mut guards = Vec::new();
            for key in chunk {
                let lock = locker.obtain(&key, ttl, ObtainOptions::new()).await;
                guards.push(lock.map(|lock| lock.keep_alive()));
            }
            guards
        });
    }
    let mut guards = Vec::new();
    while let Some(chunk) = obtaining.join_next().await {
        for guard in chunk.expect("obtaining task") {
            guards.push(guard.expect("obtain"));
        }
    }
    guards
}

/// `INFO commandstats` of `server`: calls per command, since the last reset.
fn command_calls(server: &RedisServer) -> HashMap<String, u64> {
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
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// Script calls (each a batch of refreshes) and `PEXPIRE`s run inside them
/// (one per lease refreshed), summed over `servers`.
fn scripts_and_refreshes(servers: &[&RedisServer]) -> (u64, u64) {
    servers.iter().fold((0, 0), |(scripts, refreshes), server| {
        let calls = command_calls(server);
        let count = |name: &str| calls.get(name).copied().unwrap_or(0);
        (
            scripts + count("evalsha") + count("eval"),
            refreshes + count("pexpire"),
        )
    })
}

#[track_caller]
fn assert_none_lost(guards: &[LockGuard]) {
    let lost: Vec<&str> = guards
        .iter()
        .filter(|guard| guard.is_lost())
        .map(LockGuard::key)
        .collect();
    assert!(lost.is_empty(), "{} leases lost: {lost:?}", lost.len());
}

/// What the server holds under each guard's key, read without the library.
fn values(server: &RedisServer, guards: &[LockGuard]) -> Vec<Option<String>> {
    let mut connection = server.connection();
    let mut mget = redis::cmd("MGET");
    for guard in guards {
        mget.arg(guard.key());
    }
    server.expect_ok(mget.query(&mut connection), "MGET")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_leases_are_kept_alive_by_batched_refreshes() {
    let server = RedisServer::start();
    let locker = server.locker().await;
    let keys: Vec<String> = (0..LEASES).map(|i| format!("batch:{i}")).collect();
    // 2000 leases refreshed in a debug build on a shared machine: a stall
    // of two thirds of a 1 s ttl lost them all once; 2 s leaves room.
    let ttl = TTL * 2;
    let guards = keep_alive_all(&locker, &keys, ttl).await;
    let () = server.cmd(&["CONFIG", "RESETSTAT"]);

    // Four ttls: each lease needs about twelve refreshes to live through it.
    tokio::time::sleep(ttl * 4).await;

    assert_none_lost(&guards);
    for (guard, value) in guards.iter().zip(values(&server, &guards)) {
        assert_eq!(
            value.as_deref(),
            Some(guard.token()),
            "key {} lost its token",
            guard.key()
        );
    }
    let (scripts, refreshes) = scripts_and_refreshes(&[&server]);
    assert!(
        refreshes >= 3 * LEASES as u64,
        "only {refreshes} refreshes for {LEASES} leases over four ttls"
    );
    assert!(
        scripts * 10 <= refreshes,
        "{scripts} script calls for {refreshes} refreshes: they were not batched"
    );
    for guard in guards {
        server.expect_ok(guard.release().await, "release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_deleted_behind_its_back_is_lost_and_the_others_are_kept() {
    let server = RedisServer::start();
    let locker = server.locker().await;
    let keys: Vec<String> = (0..200).map(|i| format!("batch:{i}")).collect();
    let mut guards = keep_alive_all(&locker, &keys, TTL).await;
    let victim = guards.swap_remove(7);
    let deleted: i64 = server.cmd(&["DEL", victim.key()]);
    assert_eq!(deleted, 1);

    tokio::time::timeout(PATIENCE, victim.lost())
        .await
        .unwrap_or_else(|_| server.fail("the deleted lease was never reported lost"));
    // Two more ttls: the others' refreshes go on in the batches the victim left.
    tokio::time::sleep(TTL * 2).await;

    let exists: i64 = server.cmd(&["EXISTS", victim.key()]);
    assert_eq!(exists, 0, "a refresh recreated the deleted key");
    assert_none_lost(&guards);
    for (guard, value) in guards.iter().zip(values(&server, &guards)) {
        assert_eq!(value.as_deref(), Some(guard.token()), "key {}", guard.key());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_lost_on_their_deadlines_while_redis_is_paused() {
    let server = RedisServer::start();
    let config = RedisConfig::default().response_timeout(Duration::from_millis(300));
    let backend = server.expect_ok(
        RedisBackend::connect_with(&server.url(), config).await,
        "connect",
    );
    let locker = Locker::new(backend);
    let keys: Vec<String> = (0..200).map(|i| format!("batch:{i}")).collect();
    let guards = keep_alive_all(&locker, &keys, TTL).await;
    server.pause();
    assert_none_lost(&guards);

    for guard in &guards {
        if tokio::time::timeout(PATIENCE, guard.lost()).await.is_err() {
            server.resume();
            server.fail(format_args!("{} was never reported lost", guard.key()));
        }
        // Refreshes failed all along: the deadline is the one of the last
        // refresh confirmed before the pause, and it has passed.
        assert!(
            Instant::now() >= guard.deadline(),
            "{} lost early",
            guard.key()
        );
    }
    server.resume();
    // A refresh still queued in the server's socket may run just before its
    // key expires there (the server counts a ttl from when it ran the
    // refresh, later than when it was sent) and extend it once, by a ttl.
    // Nothing else may keep the lost leases alive.
    tokio::time::sleep(TTL * 2).await;
    assert!(guards.iter().all(LockGuard::is_lost));
    assert!(values(&server, &guards).iter().all(Option::is_none));
}

/// One batch on `backend` holding leases on `a` and on `c` + `d` together
/// (taken by `locker`, on the same backend): the held leases are extended,
/// a wrong token, a missing key and a lease of which one key is gone are
/// refused, each on its own.
async fn refresh_many_decides_each_lease_alone(locker: &Locker, backend: &dyn Backend) {
    let a = locker
        .obtain("a", TTL, ObtainOptions::new())
        .await
        .expect("obtain a");
    let cd = locker
        .obtain_many(&["c", "d"], TTL, ObtainOptions::new())
        .await
        .expect("obtain c, d");
    let partly = locker
        .obtain_many(&["e", "f"], TTL, ObtainOptions::new())
        .await
        .expect("obtain e, f");
    let f_only = ["f".to_owned()];
    // Releasing `f` alone, by its owner's token, leaves `e` held.
    let released = backend
        .release(&f_only, partly.token())
        .await
        .expect("release f");
    assert!(released);

    let wrong = "f".repeat(32);
    let a_keys = ["a".to_owned()];
    let cd_keys = ["c".to_owned(), "d".to_owned()];
    let ef_keys = ["e".to_owned(), "f".to_owned()];
    let missing = ["b".to_owned()];
    let requests = [
        RefreshRequest::new(&a_keys, a.token(), LONG),
        RefreshRequest::new(&a_keys, &wrong, LONG),
        RefreshRequest::new(&missing, a.token(), LONG),
        RefreshRequest::new(&cd_keys, cd.token(), LONG),
        RefreshRequest::new(&ef_keys, partly.token(), LONG),
        RefreshRequest::new(&a_keys, "short", LONG),
    ];
    let refreshed: Vec<bool> = backend
        .refresh_many(&requests)
        .await
        .into_iter()
        .map(|result| result.expect("refresh_many"))
        .collect();
    assert_eq!(refreshed, [true, false, false, true, false, false]);
    // Extended to LONG; `e` was left at its ttl.
    assert!(a.ttl().await.expect("ttl of a") > TTL);
    assert!(cd.ttl().await.expect("ttl of c, d") > TTL);
    let e_only = ["e".to_owned()];
    let e_left = backend
        .remaining(&e_only, partly.token())
        .await
        .expect("ttl of e")
        .expect("e is still held");
    assert!(e_left <= TTL, "e was extended to {e_left:?}");
    assert!(backend.refresh_many(&[]).await.is_empty());
}

#[tokio::test]
async fn refresh_many_on_memory() {
    let backend = std::sync::Arc::new(MemoryBackend::new());
    let locker = Locker::new(backend.clone());
    refresh_many_decides_each_lease_alone(&locker, &backend).await;
}

/// A backend of one's own, written before `refresh_many` existed: it gets
/// the default, which runs the single refreshes.
struct Plain(MemoryBackend);

impl Backend for Plain {
    fn acquire<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        self.0.acquire(req)
    }

    fn refresh<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        self.0.refresh(keys, token, ttl)
    }

    fn release<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        self.0.release(keys, token)
    }

    fn remaining<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Duration>, LockError>> {
        self.0.remaining(keys, token)
    }
}

#[tokio::test]
async fn refresh_many_by_default_runs_the_single_refreshes() {
    let backend = std::sync::Arc::new(Plain(MemoryBackend::new()));
    let locker = Locker::new(backend.clone());
    refresh_many_decides_each_lease_alone(&locker, &backend).await;
    // And the watchdog keeps leases on it.
    let guard = locker
        .obtain("kept", TTL, ObtainOptions::new())
        .await
        .expect("obtain")
        .keep_alive();
    tokio::time::sleep(TTL * 2).await;
    assert!(!guard.is_lost());
    guard.release().await.expect("release");
}

#[tokio::test]
async fn refresh_many_on_redis() {
    let server = RedisServer::start();
    let backend = server.expect_ok(RedisBackend::connect(&server.url()).await, "connect");
    let locker = Locker::new(backend.clone());
    refresh_many_decides_each_lease_alone(&locker, &backend).await;
}

#[tokio::test]
async fn refresh_many_on_redlock() {
    let masters = RedisServer::start_many(3);
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let backend = RedlockBackend::connect(&urls).await.expect("connect");
    let locker = Locker::new(backend.clone());
    refresh_many_decides_each_lease_alone(&locker, &backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_leases_are_kept_alive_by_batched_refreshes_on_a_cluster() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .expect("starting the cluster");
    let locker = Locker::cluster(cluster.seeds())
        .await
        .unwrap_or_else(|err| cluster.fail(format_args!("connect: {err}")));
    // Eight hash tags: the leases of one tag share a slot, hence a batch.
    let keys: Vec<String> = (0..LEASES)
        .map(|i| format!("{{tag{}}}:{i}", i % 8))
        .collect();
    // Six servers on a shared machine: a longer ttl leaves more room for
    // scheduling delays, and four of them still need a dozen refreshes.
    let ttl = TTL * 2;
    let guards = keep_alive_all(&locker, &keys, ttl).await;
    // Replicas replay the scripts' writes: count the masters only.
    let mut masters: Vec<usize> = keys[..8]
        .iter()
        .map(|key| cluster.master_for(key))
        .collect();
    masters.sort_unstable();
    masters.dedup();
    let nodes: Vec<&RedisServer> = masters.iter().map(|&index| cluster.node(index)).collect();
    for node in &nodes {
        let () = node.cmd(&["CONFIG", "RESETSTAT"]);
    }

    tokio::time::sleep(ttl * 4).await;

    assert_none_lost(&guards);
    for guard in &guards {
        let node = cluster.node(cluster.master_for(guard.key()));
        let value: Option<String> = node.cmd(&["GET", guard.key()]);
        assert_eq!(value.as_deref(), Some(guard.token()), "key {}", guard.key());
    }
    let (scripts, refreshes) = scripts_and_refreshes(&nodes);
    assert!(
        refreshes >= 3 * LEASES as u64,
        "only {refreshes} refreshes for {LEASES} leases over four ttls"
    );
    assert!(
        scripts * 10 <= refreshes,
        "{scripts} script calls for {refreshes} refreshes: they were not batched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_leases_are_kept_alive_by_batched_refreshes_on_redlock() {
    let masters = RedisServer::start_many(3);
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let locker = Locker::redlock(&urls).await.expect("connect");
    let keys: Vec<String> = (0..LEASES).map(|i| format!("batch:{i}")).collect();
    // Three servers on a shared machine, and a per-master timeout of a tenth
    // of the ttl: a refresh fails when two masters answer it later than
    // that. With a 2 s ttl (200 ms), 28 of 2000 leases were lost on a
    // machine running two other builds; 5 s leaves room for such stalls.
    let ttl = TTL * 5;
    let guards = keep_alive_all(&locker, &keys, ttl).await;
    for master in &masters {
        let () = master.cmd(&["CONFIG", "RESETSTAT"]);
    }

    // Three ttls: each lease needs about nine refreshes to live through them.
    tokio::time::sleep(ttl * 3).await;

    assert_none_lost(&guards);
    // A lock is granted once a majority has it (the call does not wait for
    // the last master), so each lease must be on a majority of them.
    let held: Vec<Vec<Option<String>>> = masters
        .iter()
        .map(|master| values(master, &guards))
        .collect();
    for (index, guard) in guards.iter().enumerate() {
        let holders = held
            .iter()
            .filter(|values| values[index].as_deref() == Some(guard.token()))
            .count();
        assert!(
            holders >= 2,
            "key {} is held by {holders} of 3 masters",
            guard.key()
        );
    }
    for master in &masters {
        let (scripts, refreshes) = scripts_and_refreshes(&[master]);
        assert!(
            refreshes >= 3 * LEASES as u64,
            "only {refreshes} refreshes for {LEASES} leases on port {}",
            master.port()
        );
        assert!(
            scripts * 10 <= refreshes,
            "{scripts} script calls for {refreshes} refreshes on port {}: not batched",
            master.port()
        );
    }
}

/// The watchdog runs only while it has leases: one it declares lost on its
/// deadline is its last, and nothing else would wake it to exit.
#[tokio::test(flavor = "current_thread")]
async fn watchdog_ends_once_it_declared_its_last_lease_lost() {
    let metrics = tokio::runtime::Handle::current().metrics();
    let baseline = metrics.num_alive_tasks();
    let locker = Locker::memory();
    let lock = locker
        .obtain("job", Duration::from_millis(300), ObtainOptions::new())
        .await
        .unwrap();
    let guard = lock.keep_alive();
    // Blocks the only worker thread past the deadline: the watchdog cannot
    // refresh in time, and finds the lease lost when it next runs.
    std::thread::sleep(Duration::from_millis(400));
    guard.lost().await;
    let deadline = Instant::now() + PATIENCE;
    while metrics.num_alive_tasks() > baseline && Instant::now() < deadline {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        metrics.num_alive_tasks(),
        baseline,
        "the watchdog outlived its last lease"
    );
    drop(guard);
}
