//! `ClusterBackend` against a real Redis Cluster of three masters with a
//! replica each, a fresh one per test.

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockmacro_runtime::{
    BackendErrorKind, ClusterBackend, LockError, Locker, ObtainOptions, RedisConfig,
};
use lockmacro_testkit::RedisServer;
use lockmacro_testkit::cluster::RedisCluster;
use tokio::time::Instant;

use lockmacro_testkit::witness::counter as witness;

const LONG: Duration = Duration::from_secs(30);

async fn start() -> RedisCluster {
    tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()))
}

/// Unwraps `result`, or panics with `what`, the error and every node's log.
#[track_caller]
fn ok<T>(cluster: &RedisCluster, result: Result<T, LockError>, what: &str) -> T {
    result.unwrap_or_else(|err| cluster.fail(format_args!("{what}: {err}")))
}

/// `(calls + rejected calls + failed calls)` of `EVAL` and `EVALSHA` on `node`:
/// whether a script was sent to it at all, accepted or not.
fn script_commands(node: &RedisServer) -> u64 {
    let stats: String = node.cmd(&["INFO", "commandstats"]);
    stats
        .lines()
        .filter(|line| line.starts_with("cmdstat_eval"))
        .flat_map(|line| line.split(':').nth(1).unwrap_or_default().split(','))
        .filter_map(|field| {
            let (name, value) = field.split_once('=')?;
            matches!(name, "calls" | "rejected_calls" | "failed_calls")
                .then(|| value.parse::<u64>().ok())?
        })
        .sum()
}

/// How often `node` answered with the error `kind` (`MOVED`, `ASK`).
fn errors_answered(node: &RedisServer, kind: &str) -> u64 {
    let stats: String = node.cmd(&["INFO", "errorstats"]);
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&format!("errorstat_{kind}:count=")))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0)
}

/// `GET key` on `node` with `ASKING` first, which a node importing the key's
/// slot needs to answer for it.
fn get_asking(node: &RedisServer, key: &str) -> Option<String> {
    let mut conn = node.connection();
    let () = node.expect_ok(redis::cmd("ASKING").query(&mut conn), "ASKING");
    node.expect_ok(redis::cmd("GET").arg(key).query(&mut conn), "GET")
}

/// `GET key` on `node` with `READONLY` first, so that a replica answers from
/// its own copy instead of redirecting to its master.
fn get_readonly(node: &RedisServer, key: &str) -> Option<String> {
    let mut conn = node.connection();
    let () = node.expect_ok(redis::cmd("READONLY").query(&mut conn), "READONLY");
    node.expect_ok(redis::cmd("GET").arg(key).query(&mut conn), "GET")
}

/// Another master than `master`.
fn other_master(cluster: &RedisCluster, master: usize) -> usize {
    (0..3)
        .map(|shift| cluster.master_of_slot([0, 8000, 16000][shift]))
        .find(|&index| index != master)
        .expect("three masters")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_starts_three_masters_with_a_replica_each() {
    let started = std::time::Instant::now();
    let cluster = start().await;
    let took = started.elapsed();
    assert_eq!(cluster.nodes().len(), 6);
    let masters: Vec<usize> = [0, 8000, 16000]
        .into_iter()
        .map(|slot| cluster.master_of_slot(slot))
        .collect();
    for &master in &masters {
        let replica = cluster.replica_of(master);
        assert!(!masters.contains(&replica), "{replica} is a master");
    }
    // Printed, not asserted: the time depends on the machine's load.
    println!("the cluster took {took:?} to start");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_exclusion_witness_loses_no_update() {
    let cluster = start().await;
    let counter = RedisServer::start();
    let mut lockers = Vec::new();
    for _ in 0..witness::TASKS {
        lockers.push(cluster.locker().await);
    }
    let total = witness::increments(lockers, &counter, Duration::from_secs(10)).await;
    assert_eq!(total, (witness::TASKS * witness::ROUNDS) as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_in_different_slots_are_refused_before_anything_is_sent() {
    let cluster = start().await;
    let locker = cluster.locker().await;
    assert_ne!(cluster.slot("account:1"), cluster.slot("account:2"));
    let sent_before: Vec<u64> = cluster.nodes().iter().map(script_commands).collect();

    let err = locker
        .obtain_many(["account:1", "account:2"], LONG, ObtainOptions::new())
        .await
        .unwrap_err();
    let LockError::InvalidKey { key, reason } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(key, "account:2");
    let message = err.to_string();
    for part in ["`account:1`", "`account:2`", "slot", "hash tag", "{tag}"] {
        assert!(message.contains(part), "{part:?} missing from: {message}");
    }
    assert!(reason.contains("keys locked together"), "{reason}");

    let err = locker
        .obtain(
            "report",
            LONG,
            ObtainOptions::new().fence_key("report-fence"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidKey { key, reason }
            if key == "report-fence" && reason.contains("a lock and its fence key")),
        "{err:?}"
    );

    let sent_after: Vec<u64> = cluster.nodes().iter().map(script_commands).collect();
    assert_eq!(sent_before, sent_after, "a refused call reached a node");
    // The refused keys were not taken.
    ok(
        &cluster,
        locker.obtain("account:1", LONG, ObtainOptions::new()).await,
        "account:1 is free",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_sharing_a_hash_tag_are_taken_together() {
    let cluster = start().await;
    let (a, b) = (cluster.locker().await, cluster.locker().await);

    // The suite's multi-key cases, with keys that share a slot.
    let held = ok(
        &cluster,
        a.obtain("{acct}:2", LONG, ObtainOptions::new()).await,
        "hold {acct}:2",
    );
    let err = b
        .obtain_many(
            ["{acct}:1", "{acct}:2", "{acct}:3"],
            LONG,
            ObtainOptions::new(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::NotObtained { key, .. } if key == "{acct}:2"),
        "{err:?}"
    );
    ok(&cluster, held.release().await, "release {acct}:2");
    let all = ok(
        &cluster,
        b.obtain_many(
            ["{acct}:1", "{acct}:2", "{acct}:3"],
            LONG,
            ObtainOptions::new().fence_key("{acct}:fence"),
        )
        .await,
        "all three",
    );
    let counter: u64 = cluster
        .node(cluster.master_for("{acct}:fence"))
        .cmd(&["GET", "{acct}:fence"]);
    assert_eq!(all.fence_token(), Some(counter));
    ok(&cluster, all.refresh(LONG).await, "refresh all");
    ok(&cluster, all.release().await, "release all");

    // A hash tag in the namespace puts every key of the locker in one slot.
    let billing = a.with_namespace("{billing}");
    let first = ok(
        &cluster,
        billing
            .obtain_many(["x", "y"], LONG, ObtainOptions::new().fence_key("shared"))
            .await,
        "x and y in {billing}",
    );
    let second = ok(
        &cluster,
        billing
            .obtain("z", LONG, ObtainOptions::new().fence_key("shared"))
            .await,
        "z in {billing}",
    );
    let first = first.fence_token().expect("fenced");
    assert_eq!(second.fence_token(), Some(first + 1), "one shared counter");
}

/// The shares of a key keep their holders' metadata in the key's slot
/// (`K:holders` for a key with a hash tag), through a refresh, and give it
/// back with the last share; those of a key with a `}` but no hash tag,
/// beside which no name shares its slot, keep none and work all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_keep_their_metadata_in_the_keys_slot_or_none() {
    let cluster = start().await;
    let locker = cluster.locker().await;
    let permit = |worker| ObtainOptions::new().permits(2).metadata(worker);
    let node = cluster.node(cluster.master_for("jobs:{acct}"));

    let tagged = ok(
        &cluster,
        locker.obtain("jobs:{acct}", LONG, permit("worker-1")).await,
        "a permit of jobs:{acct}",
    );
    ok(&cluster, tagged.refresh(LONG).await, "refresh");
    let seen = ok(&cluster, locker.inspect("jobs:{acct}").await, "inspect");
    assert_eq!(seen.holders.len(), 1, "{seen:?}");
    assert_eq!(seen.holders[0].metadata, "worker-1", "{seen:?}");
    let kept: Vec<String> = node.cmd(&["HVALS", "jobs:{acct}:holders"]);
    assert_eq!(kept, ["worker-1"]);
    ok(&cluster, tagged.release().await, "release");
    let left: i64 = node.cmd(&["EXISTS", "jobs:{acct}", "jobs:{acct}:holders"]);
    assert_eq!(left, 0, "the released permit left something behind");

    let braced = ok(
        &cluster,
        locker.obtain("a}b", LONG, permit("worker-2")).await,
        "a permit of a}b",
    );
    ok(&cluster, braced.refresh(LONG).await, "refresh");
    // (Not inspected: its fence counter, `{a}b}:fence`, is in another slot,
    // so a cluster refuses to inspect it.)
    let stored = || -> Vec<String> {
        (0..3)
            .map(|shift| cluster.node(cluster.master_of_slot([0, 8000, 16000][shift])))
            .flat_map(|node| node.cmd::<Vec<String>>(&["KEYS", "*a}b*"]))
            .collect()
    };
    assert_eq!(stored(), ["a}b"], "something was written beside `a}}b`");
    ok(&cluster, braced.release().await, "release");
    assert_eq!(stored(), Vec::<String>::new(), "left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moved_redirection_is_followed() {
    let cluster = start().await;
    // Connected before the slot moves: its slot map is stale afterwards.
    let locker = cluster.locker().await;
    let slot = cluster.slot("job").to_string();
    let source = cluster.master_for("job");
    let target = other_master(&cluster, source);
    let (source_id, target_id) = (cluster.node_id(source), cluster.node_id(target));
    // The slot is empty, so moving it needs no MIGRATE; the importing node
    // bumps its epoch when it takes the slot, and the others learn it by gossip.
    let (source_node, target_node) = (cluster.node(source), cluster.node(target));
    let () = target_node.cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id]);
    let () = source_node.cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id]);
    let () = target_node.cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
    let () = source_node.cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
    let moved_before = errors_answered(source_node, "MOVED");

    let lock = ok(
        &cluster,
        locker
            .obtain("job", LONG, ObtainOptions::new().fence())
            .await,
        "obtain after the slot moved",
    );
    assert!(
        errors_answered(source_node, "MOVED") > moved_before,
        "the old owner sent no MOVED"
    );
    let value: Option<String> = target_node.cmd(&["GET", "job"]);
    assert!(
        value.is_some_and(|value| value.starts_with(lock.token())),
        "the lock is not on the new owner"
    );
    let counter: u64 = target_node.cmd(&["GET", "{job}:fence"]);
    assert_eq!(
        lock.fence_token(),
        Some(counter),
        "counted on the new owner"
    );
    ok(&cluster, lock.refresh(LONG).await, "refresh");
    ok(&cluster, lock.release().await, "release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_redirection_is_followed_during_a_migration() {
    let cluster = start().await;
    let (a, b) = (cluster.locker().await, cluster.locker().await);
    let slot = cluster.slot("job").to_string();
    let source = cluster.master_for("job");
    let target = other_master(&cluster, source);
    let (source_id, target_id) = (cluster.node_id(source), cluster.node_id(target));
    let (source_node, target_node) = (cluster.node(source), cluster.node(target));
    // Half-way through a migration: keys the source no longer has are asked
    // for on the target.
    let () = target_node.cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id]);
    let () = source_node.cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id]);
    let asked_before = errors_answered(source_node, "ASK");

    let lock = ok(
        &cluster,
        a.obtain("job", LONG, ObtainOptions::new()).await,
        "obtain during the migration",
    );
    assert!(
        errors_answered(source_node, "ASK") > asked_before,
        "the source sent no ASK"
    );
    assert!(
        get_asking(target_node, "job").is_some_and(|value| value.starts_with(lock.token())),
        "the lock is not on the importing node"
    );
    let busy = b
        .obtain("job", LONG, ObtainOptions::new())
        .await
        .unwrap_err();
    assert!(busy.is_not_obtained(), "{busy:?}");
    ok(&cluster, lock.refresh(LONG).await, "refresh");
    ok(&cluster, lock.release().await, "release");
    assert_eq!(get_asking(target_node, "job"), None);

    // The migration ends; the slot map catches up through MOVED.
    let () = target_node.cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
    let () = source_node.cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
    let again = ok(
        &cluster,
        b.obtain("job", LONG, ObtainOptions::new()).await,
        "obtain after the migration",
    );
    ok(
        &cluster,
        again.release().await,
        "release after the migration",
    );
}

/// Retries `op` on backend errors, which are expected while the cluster
/// reconfigures, until it gives another answer or `within` passes.
async fn settled<T, F, Fut>(within: Duration, mut op: F) -> Result<T, LockError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, LockError>>,
{
    let deadline = Instant::now() + within;
    loop {
        match op().await {
            Err(LockError::Backend(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_keeps_a_replicated_lock_and_lockers_carry_on() {
    let cluster = start().await;
    let (a, b) = (cluster.locker().await, cluster.locker().await);
    let lock = ok(
        &cluster,
        a.obtain("job", LONG, ObtainOptions::new().fence()).await,
        "obtain",
    );
    let master = cluster.master_for("job");
    let replica = cluster.replica_of(master);
    // Replication is asynchronous: only a lock the replica has received can
    // survive the master (see `ClusterBackend`'s docs). `WAIT` cannot show
    // that: it counts the acknowledgements of its own connection's writes, and
    // the harness's connection wrote nothing. Right after the cluster forms, a
    // master may hold back its stream until the replica's next acknowledgement
    // (up to a second later), so the replica is asked itself.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !get_readonly(cluster.node(replica), "job")
        .is_some_and(|value| value.starts_with(lock.token()))
    {
        if Instant::now() > deadline {
            cluster.fail(format_args!(
                "the replica did not receive the lock within 10 s:{}",
                cluster.describe("job")
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A workload with a key on each master runs through the failover.
    let mut keys: Vec<String> = Vec::new();
    for shard in [0, 8000, 16000].map(|slot| cluster.master_of_slot(slot)) {
        let key = (0..)
            .map(|i| format!("w:{i}"))
            .find(|key| cluster.master_for(key) == shard)
            .expect("some key lands on every master");
        keys.push(key);
    }
    // A release refused while the cluster is down leaves its lock until the
    // ttl ends: short, so that such a leftover does not pass for a stuck client.
    const WORKLOAD_TTL: Duration = Duration::from_secs(1);
    let stop = Arc::new(AtomicBool::new(false));
    type Log = Vec<(Instant, String, Result<(), String>)>;
    let log: Arc<Mutex<Log>> = Arc::default();
    let workload = {
        let (locker, keys, stop, log) = (
            cluster.locker().await,
            keys.clone(),
            stop.clone(),
            log.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                for key in &keys {
                    let result = match locker.obtain(key, WORKLOAD_TTL, ObtainOptions::new()).await
                    {
                        Ok(lock) => lock.release().await,
                        Err(err) => Err(err),
                    };
                    log.lock().unwrap().push((
                        Instant::now(),
                        key.clone(),
                        result.map_err(|err| format!("{err:?}")),
                    ));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;

    let before = format!(
        "master {master}, replica {replica}\n{}",
        cluster.describe("job")
    );
    let mut cluster = cluster;
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.fail_over(master);
        cluster
    })
    .await
    .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    let failed_over = Instant::now();

    // The replica had the lock: nobody else gets it, its owner keeps it.
    let busy = settled(Duration::from_secs(10), || {
        b.obtain("job", LONG, ObtainOptions::new())
    })
    .await;
    if !matches!(&busy, Err(err) if err.is_not_obtained()) {
        let after = cluster.describe("job");
        cluster.fail(format_args!(
            "after the failover: {busy:?}\n--- before ---{before}\n--- after ---{after}"
        ));
    }
    ok(
        &cluster,
        settled(Duration::from_secs(10), || lock.refresh(LONG)).await,
        "refresh after the failover",
    );
    let fence = lock.fence_token().expect("fenced");
    ok(&cluster, lock.release().await, "release after the failover");
    let next = ok(
        &cluster,
        b.obtain("job", LONG, ObtainOptions::new().fence()).await,
        "obtain after the release",
    );
    assert!(
        next.fence_token().expect("fenced") > fence,
        "the fence counter went back"
    );

    // The workload carried on, on every master's keys, once the new master
    // was known; on a loaded machine its client may take a while to learn it.
    let carried_on = |log: &Log| {
        keys.iter().all(|key| {
            log.iter()
                .any(|(at, done, result)| done == key && result.is_ok() && *at > failed_over)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !carried_on(&log.lock().unwrap()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::SeqCst);
    workload
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    let log = log.lock().unwrap();
    if !carried_on(&log) {
        let failures = log.iter().filter(|(_, _, result)| result.is_err()).count();
        let stuck = keys
            .iter()
            .find(|key| {
                !log.iter()
                    .any(|(at, done, result)| done == *key && result.is_ok() && *at > failed_over)
            })
            .expect("a key was not locked");
        let last_errors: Vec<_> = keys
            .iter()
            .filter_map(|key| {
                log.iter()
                    .rev()
                    .find_map(|(_, done, result)| (done == key).then_some(result.as_ref().err()?))
                    .map(|err| format!("{key}: {err}"))
            })
            .collect();
        cluster.fail(format_args!(
            "the workload did not lock every key after the failover ({failures} failures in {} \
             attempts; last errors: {last_errors:?}){}",
            log.len(),
            cluster.describe(stuck),
        ));
    }
}

#[tokio::test]
async fn unreachable_seed_fails_in_bounded_time() {
    let closed = lockmacro_testkit::redis::ClosedPort::bind();
    let port = closed.port();
    let start = Instant::now();
    let err = Locker::cluster([format!("redis://127.0.0.1:{port}/")])
        .await
        .unwrap_err();
    let LockError::Backend(backend) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(backend.kind(), BackendErrorKind::Unreachable, "{err}");
    assert!(err.to_string().contains(&port.to_string()), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn silent_seed_times_out_in_bounded_time() {
    // Accepts connections and never answers, like a black-holed host.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}/", listener.local_addr().unwrap());
    let config = RedisConfig::default()
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300));
    let start = Instant::now();
    let err = ClusterBackend::connect_with([url], config)
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Backend(_)), "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    drop(listener);
}

#[tokio::test]
async fn a_server_outside_any_cluster_is_refused_with_the_reason() {
    let server = RedisServer::start();
    let err = Locker::cluster([server.url()]).await.unwrap_err();
    assert!(matches!(err, LockError::Backend(_)), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("cluster support disabled"), "{message}");
    assert!(message.contains("Locker::connect"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_dead_seed_among_live_ones_is_skipped() {
    let cluster = start().await;
    let closed = lockmacro_testkit::redis::ClosedPort::bind();
    let port = closed.port();
    let mut seeds = vec![format!("redis://127.0.0.1:{port}/")];
    seeds.push(cluster.node(1).url());
    let locker = ok(&cluster, Locker::cluster(&seeds).await, "connect");
    ok(
        &cluster,
        locker.obtain("job", LONG, ObtainOptions::new()).await,
        "obtain",
    );
}
