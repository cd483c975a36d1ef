//! Fair hand-off (`ObtainOptions::fair`): waiters get the key in the order
//! they queued, each handed the key by the release before it. Orders and
//! counts are recorded by witnesses outside the lock. The 5 s bounds are
//! limits for a hang, not measurements.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockmacro_runtime::{Lock, LockError, Locker, ObtainOptions, RetryStrategy, distributed_lock};
use lockmacro_testkit::{Fixture, Kind, RedisServer};

const TTL: Duration = Duration::from_secs(30);
const PROMPTLY: Duration = Duration::from_secs(5);

/// Fair, with a backoff far longer than any test: a waiter that obtains in
/// time was handed the key (or woken), it did not poll.
fn fair() -> ObtainOptions {
    fair_until(Duration::from_secs(30))
}

/// As [`fair`], giving up after `deadline`.
fn fair_until(deadline: Duration) -> ObtainOptions {
    ObtainOptions::new()
        .fair()
        .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(deadline))
}

/// Awaits `waiter`, which must give up with `NotObtained` (the 30 s are a
/// hang limit, past any deadline the tests give).
async fn gives_up(waiter: tokio::task::JoinHandle<Result<Lock, LockError>>) {
    let outcome = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the impatient waiter gives up at its deadline")
        .expect("waiter task");
    assert!(
        outcome.as_ref().is_err_and(LockError::is_not_obtained),
        "{outcome:?}"
    );
}

/// Starts a fair obtain of `key` on `locker`, one of `fx`'s, and returns
/// once it stands in the queue as its `place`-th waiter (1 = first).
async fn join(
    fx: &Fixture,
    locker: &Locker,
    key: &str,
    opts: ObtainOptions,
    place: i64,
) -> tokio::task::JoinHandle<Result<Lock, LockError>> {
    let (locker, owned_key) = (locker.clone(), key.to_owned());
    let mut obtain = Box::pin(async move { locker.obtain(&owned_key, TTL, opts).await });
    match fx.kind() {
        Kind::Redis | Kind::Valkey | Kind::Cluster | Kind::Sentinel => {
            let server = queue_node(fx, key);
            // Queued after its first attempt; quiet after the second,
            // sent once it listens for the hand-off (a locker that has
            // not listened to the key before needs both).
            let before = script_calls(server);
            let waiter = tokio::spawn(obtain);
            until_queued(server, key, place).await;
            for _ in 0..500 {
                if script_calls(server) >= before + 2 {
                    return waiter;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            server.fail("the waiter did not try again once listening");
        }
        #[cfg(feature = "etcd")]
        Kind::Etcd => {
            // Queued once its entry is in etcd; a release after that
            // reaches it whether or not its watch is in place yet: it
            // tries again once watching.
            let waiter = tokio::spawn(obtain);
            until_stored(fx, key, place).await;
            waiter
        }
        #[cfg(feature = "postgres")]
        Kind::Postgres => {
            // Queued once its row is in the queue table; as on etcd, a
            // release after that reaches it whether or not it listens yet.
            let waiter = tokio::spawn(obtain);
            until_stored(fx, key, place).await;
            waiter
        }
        Kind::Memory | Kind::Outside => {
            // These backends answer at once: one poll takes the
            // waiter through its attempts to its first wait, queued.
            tokio::select! {
                biased;
                outcome = &mut obtain => panic!("the waiter did not wait: {outcome:?}"),
                () = std::future::ready(()) => {}
            }
            tokio::spawn(obtain)
        }
        other => panic!("{other:?} keeps no fair queue"),
    }
}

/// The Redis server that holds the queue of `key`: on a cluster, the master
/// of the queue's slot.
fn queue_node<'a>(fx: &'a Fixture, key: &str) -> &'a RedisServer {
    fx.node_for(&format!("{{{key}}}:queue"))
        .expect("a Redis fixture")
}

/// Entries in the queue of `key`, read with the harness's own client.
fn queued(server: &RedisServer, key: &str) -> i64 {
    server.cmd(&["LLEN", &format!("{{{key}}}:queue")])
}

/// Entries in the queue of `key`, live or expired, as the store holds them;
/// `None` on the stores in this process, which cannot be read behind their
/// back.
async fn queue_len(fx: &Fixture, key: &str) -> Option<i64> {
    match fx.kind() {
        Kind::Redis | Kind::Valkey | Kind::Cluster | Kind::Sentinel => {
            Some(queued(queue_node(fx, key), key))
        }
        #[cfg(feature = "etcd")]
        Kind::Etcd => {
            let cluster = fx.etcd_cluster().expect("an etcd fixture");
            let mut client = etcd_client::Client::connect(cluster.endpoints(), None)
                .await
                .expect("connect to etcd");
            let count = client
                .get(
                    format!("{key}/queue/"),
                    Some(
                        etcd_client::GetOptions::new()
                            .with_prefix()
                            .with_count_only(),
                    ),
                )
                .await
                .expect("count the queue")
                .count();
            Some(count)
        }
        #[cfg(feature = "postgres")]
        Kind::Postgres => {
            let db = fx.postgres_db().expect("a PostgreSQL fixture");
            let count = format!(
                "SELECT count(*)::text FROM lockmacro_queue WHERE key = {}",
                lockmacro_testkit::pgdb::quote(key)
            );
            let rows = db.column(&count).await;
            Some(
                rows[0]
                    .as_deref()
                    .expect("a count")
                    .parse()
                    .expect("a number"),
            )
        }
        _ => None,
    }
}

/// Waits until the queue of `key` holds `n` entries, on etcd or PostgreSQL.
#[cfg(any(feature = "etcd", feature = "postgres"))]
async fn until_stored(fx: &Fixture, key: &str, n: i64) {
    for _ in 0..500 {
        if queue_len(fx, key).await == Some(n) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let message = format!(
        "the queue of `{key}` never held {n} waiters: {:?}",
        queue_len(fx, key).await
    );
    match fx.kind() {
        #[cfg(feature = "etcd")]
        Kind::Etcd => fx.etcd_cluster().expect("an etcd fixture").fail(message),
        #[cfg(feature = "postgres")]
        Kind::Postgres => fx
            .postgres_db()
            .expect("a PostgreSQL fixture")
            .server()
            .fail(message),
        _ => panic!("{message}"),
    }
}

async fn until_queued(server: &RedisServer, key: &str, n: i64) {
    for _ in 0..500 {
        if queued(server, key) == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The entries, with their expiry and the server's time, say whose
    // place stayed and whether it had lapsed.
    let entries: Vec<String> = server.cmd(&["LRANGE", &format!("{{{key}}}:queue"), "0", "-1"]);
    let (seconds, micros): (String, String) = server.cmd(&["TIME"]);
    server.fail(format_args!(
        "the queue of `{key}` holds {} waiters, not {n}: {entries:?} at server time {seconds}.{micros:0>6}",
        entries.len()
    ));
}

/// Script calls (`EVALSHA`, `EVAL`) since the last `CONFIG RESETSTAT`: every
/// command a locker sends is one of them.
fn script_calls(server: &RedisServer) -> u64 {
    let info: String = server.cmd(&["INFO", "commandstats"]);
    info.lines()
        .filter(|line| line.starts_with("cmdstat_eval"))
        .filter_map(|line| {
            line.split_once("calls=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

async fn promptly<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PROMPTLY, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {PROMPTLY:?}"))
}

/// The waiters on `lockers[1..]`, queued one after the other with `opts`
/// while `lockers[0]` holds the key with `held` (the whole key, or every
/// permit), obtain in that order once one holding is given back; each
/// releases at once, handing its turn to the next.
async fn served_in_arrival_order(
    fx: &Fixture,
    lockers: Vec<Locker>,
    held: ObtainOptions,
    holdings: usize,
    opts: ObtainOptions,
) {
    let mut holding = Vec::new();
    for _ in 0..holdings {
        holding.push(
            lockers[0]
                .obtain("job", TTL, held.clone())
                .await
                .expect("obtain"),
        );
    }
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for (place, locker) in lockers[1..].iter().enumerate() {
        let waiter = join(fx, locker, "job", opts.clone(), place as i64 + 1).await;
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let lock = waiter
                .await
                .expect("waiter task")
                .expect("the waiter obtains");
            order.lock().unwrap().push(place);
            lock.release().await.expect("release");
        }));
    }
    let first = holding.remove(0);
    first.release().await.expect("release");
    promptly("every waiter obtains in turn", async {
        for waiter in waiters {
            waiter.await.expect("waiter task");
        }
    })
    .await;
    for lock in holding {
        lock.release().await.expect("release");
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order, (0..lockers.len() - 1).collect::<Vec<_>>());
}

// The scenarios every backend with a fair queue runs, each on servers of its
// own: they count the commands a server runs and read its queues.
lockmacro_testkit::for_each_backend! {
    needs: [FairQueue],
    servers: own,
    runtime: (flavor = "multi_thread", worker_threads = 2),
    cases: crate::fair::[
        arrival_order_is_respected,
        waiters_gone_do_not_block_the_queue,
        a_waiter_that_gives_up_leaves_the_queue,
        ordinary_obtain_does_not_overtake,
        fair_locks_exclude,
        a_fair_waiter_leaves_the_queue_at_shutdown,
    ],
}

mod permits_on {
    lockmacro_testkit::for_each_backend! {
        needs: [FairQueue, Shares],
        servers: own,
        runtime: (flavor = "multi_thread", worker_threads = 2),
        cases: crate::fair::[permit_arrival_order_is_respected],
    }
}

/// Five waiters, queued one after the other, obtain in that order; each
/// releases at once, handing the key to the next.
///
/// On a cluster the queue lives in the lock's slot and releases hand the key
/// over the same way, and tell the waiter through the node its locker
/// subscribes on: with a 60 s backoff, waiters only get their turn in time if
/// they hear the hand-off.
pub async fn arrival_order_is_respected(fx: &Fixture) {
    let lockers = fx.lockers(6).await;
    served_in_arrival_order(fx, lockers, ObtainOptions::new(), 1, fair()).await;
}

/// Fair waiters for permits: with both of two permits held, four waiters
/// queue one after the other; giving one permit back hands it down the line
/// in that order (each releases at once), while the other stays held.
pub async fn permit_arrival_order_is_respected(fx: &Fixture) {
    let lockers = fx.lockers(5).await;
    let permits = ObtainOptions::new().permits(2);
    served_in_arrival_order(fx, lockers, permits, 2, fair().permits(2)).await;
}

/// Waits until the server has run `n` script calls since the last `CONFIG
/// RESETSTAT`: a waiter handed the key confirms it in the background, after
/// its obtain returned.
async fn until_script_calls(server: &RedisServer, n: u64) {
    for _ in 0..500 {
        if script_calls(server) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The release hands the key over for the waiter's grant lease: the key
/// holds the waiter's value, for a second at most, and the waiter, which
/// sent nothing while queued, goes on at once and confirms it with one call
/// that extends it to its ttl, moving the lock's local deadline with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_granted_waiter_is_handed_the_key_and_confirms_it_once() {
    let fx = Fixture::redis().await;
    let server = fx.master().expect("one server");
    let lockers = fx.lockers(2).await;
    let held = server.expect_ok(
        lockers[0].obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    let waiter = join(&fx, &lockers[1], "job", fair().metadata("next"), 1).await;
    let () = server.cmd(&["CONFIG", "RESETSTAT"]);
    server.expect_ok(held.release().await, "release");
    let value: String = server.cmd(&["GET", "job"]);
    // Handed over marked (see `mark.lua`): its release looks for waiters.
    assert!(value.ends_with("next\0"), "the key holds {value:?}");
    let lock = promptly("the waiter is handed the key", waiter)
        .await
        .expect("waiter task")
        .expect("the waiter obtains");
    assert_eq!(
        value,
        format!("{}next\0", lock.token()),
        "confirmed, still marked"
    );
    until_script_calls(server, 2).await;
    assert_eq!(
        script_calls(server),
        2,
        "the holder's release, then the waiter's confirmation"
    );
    let left: i64 = server.cmd(&["PTTL", "job"]);
    assert!(left > 1_000, "the grant lease was not extended: {left} ms");
    let deadline = lock.deadline();
    assert!(
        deadline > tokio::time::Instant::now() + TTL / 2,
        "the lock's deadline is still the grant lease's: {:?} from now",
        deadline - tokio::time::Instant::now()
    );
    assert_eq!(queued(server, "job"), 0);
    server.expect_ok(lock.release().await, "release");
}

/// Three queued waiters wait without a command; then each hand-off costs the
/// release and the new holder's confirmation (four releases, three
/// confirmations, no other attempt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_waiters_send_nothing_between_hand_offs() {
    let fx = Fixture::redis().await;
    let server = fx.master().expect("one server");
    let lockers = fx.lockers(4).await;
    let held = server.expect_ok(
        lockers[0].obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    let mut waiters = Vec::new();
    for (place, locker) in lockers[1..].iter().enumerate() {
        let waiter = join(&fx, locker, "job", fair(), place as i64 + 1).await;
        waiters.push(tokio::spawn(async move {
            let lock = waiter
                .await
                .expect("waiter task")
                .expect("the waiter obtains");
            lock.release().await.expect("release");
        }));
    }
    let () = server.cmd(&["CONFIG", "RESETSTAT"]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(script_calls(server), 0, "queued waiters sent commands");
    server.expect_ok(held.release().await, "release");
    promptly("the waiters obtain in turn", async {
        for waiter in waiters {
            waiter.await.expect("waiter task");
        }
    })
    .await;
    until_script_calls(server, 7).await;
    assert_eq!(script_calls(server), 7, "releases and confirmations only");
}

/// A waiter whose future is dropped, and one that gives up at its deadline,
/// leave the queue: the waiter behind them is handed the key.
pub async fn waiters_gone_do_not_block_the_queue(fx: &Fixture) {
    let lockers = fx.lockers(4).await;
    let held = lockers[0]
        .obtain("job", TTL, ObtainOptions::new())
        .await
        .expect("obtain");
    let dropped = join(fx, &lockers[1], "job", fair(), 1).await;
    // Its deadline outlasts the wait for it and the next waiter to stand
    // in the queue, which a loaded machine can stretch past several seconds
    // (the test waits it out: `gives_up` has a hang limit only).
    let impatient = fair_until(Duration::from_secs(8));
    let gave_up = join(fx, &lockers[2], "job", impatient, 2).await;
    let last = join(fx, &lockers[3], "job", fair(), 3).await;
    dropped.abort();
    gives_up(gave_up).await;
    if let Kind::Redis | Kind::Valkey | Kind::Cluster | Kind::Sentinel = fx.kind() {
        until_queued(queue_node(fx, "job"), "job", 1).await;
    }
    held.release().await.expect("release");
    let lock = promptly("the last waiter is handed the key", last)
        .await
        .expect("waiter task")
        .expect("the last waiter obtains");
    lock.release().await.expect("release");
}

/// A fair waiter that reaches its deadline behind another one has given its
/// place back by the time it returns `NotObtained`. Its last attempt, sent
/// at the deadline, does not join the queue, and its entry, expired by then,
/// is not at the front, where an attempt would drop it: only its giving back
/// removes it.
pub async fn a_waiter_that_gives_up_leaves_the_queue(fx: &Fixture) {
    let lockers = fx.lockers(3).await;
    let held = lockers[0]
        .obtain("job", TTL, ObtainOptions::new())
        .await
        .expect("obtain");
    let first = join(fx, &lockers[1], "job", fair(), 1).await;
    // Its deadline outlasts the wait for it to stand in the queue, which a
    // loaded machine can stretch past a second.
    let impatient = fair_until(Duration::from_secs(4));
    let gave_up = join(fx, &lockers[2], "job", impatient, 2).await;
    gives_up(gave_up).await;
    if let Some(entries) = queue_len(fx, "job").await {
        assert_eq!(
            entries, 1,
            "the queue holds {entries} entries, not the first waiter's alone"
        );
    }
    held.release().await.expect("release");
    let lock = promptly("the first waiter is handed the key", first)
        .await
        .expect("waiter task")
        .expect("the first waiter obtains");
    lock.release().await.expect("release");
}

/// A fair waiter whose locker shuts down ends with `ShutDown` and gives its
/// place in the queue back: the release hands the key to the waiter behind
/// it at once, instead of to a place nobody takes.
pub async fn a_fair_waiter_leaves_the_queue_at_shutdown(fx: &Fixture) {
    let lockers = fx.lockers(3).await;
    let held = lockers[0]
        .obtain("job", TTL, ObtainOptions::new())
        .await
        .expect("obtain");
    let shut = join(fx, &lockers[1], "job", fair(), 1).await;
    let last = join(fx, &lockers[2], "job", fair(), 2).await;
    let report = lockers[1].shutdown().await;
    assert!(report.is_complete(), "{report:?}");
    let shut = promptly("the waiter ends at the shutdown", shut)
        .await
        .expect("waiter task");
    assert!(
        matches!(&shut, Err(LockError::ShutDown { key }) if key == "job"),
        "{shut:?}"
    );
    if let Kind::Redis | Kind::Valkey | Kind::Cluster | Kind::Sentinel = fx.kind() {
        assert_eq!(queued(queue_node(fx, "job"), "job"), 1, "its place is left");
    }
    held.release().await.expect("release");
    let lock = promptly("the last waiter is handed the key", last)
        .await
        .expect("waiter task")
        .expect("the last waiter obtains");
    lock.release().await.expect("release");
}

/// Entries of waiters that died without leaving, more of them than a
/// release reads at a time (16), are skipped once they lapse: the live
/// waiter behind them is handed the key, and the queue is left empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_dead_waiters_are_skipped_after_their_expiry() {
    let fx = Fixture::redis().await;
    let server = fx.master().expect("one server");
    let lockers = fx.lockers(2).await;
    let held = server.expect_ok(
        lockers[0].obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    let (seconds, micros): (String, String) = server.cmd(&["TIME"]);
    let now_ms = seconds.parse::<u64>().unwrap() * 1000 + micros.parse::<u64>().unwrap() / 1000;
    const DEAD: u64 = 40;
    for n in 0..DEAD {
        let dead = format!(
            r#"{{"v":"d{n:031x}","t":30000,"e":{},"f":""}}"#,
            now_ms + 300
        );
        let _: i64 = server.cmd(&["RPUSH", "{job}:queue", &dead]);
    }
    let waiter = join(&fx, &lockers[1], "job", fair(), DEAD as i64 + 1).await;
    // Let the dead entries expire (a passage of time, not a synchronisation).
    tokio::time::sleep(Duration::from_millis(400)).await;
    server.expect_ok(held.release().await, "release");
    let lock = promptly("the live waiter is handed the key", waiter)
        .await
        .expect("waiter task")
        .expect("the live waiter obtains");
    assert_eq!(queued(server, "job"), 0, "lapsed entries left behind");
    server.expect_ok(lock.release().await, "release");
}

/// A waiter whose future is dropped behind more live waiters than a release
/// reads at a time (16) still leaves the queue at once, and the others stay
/// in line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_waiter_dropped_deep_in_the_queue_leaves_it() {
    let fx = Fixture::redis().await;
    let server = fx.master().expect("one server");
    let lockers = fx.lockers(2).await;
    let held = server.expect_ok(
        lockers[0].obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    const AHEAD: i64 = 20;
    for n in 0..AHEAD {
        let live = format!(r#"{{"v":"a{n:031x}","t":30000,"e":99999999999999,"f":""}}"#);
        let _: i64 = server.cmd(&["RPUSH", "{job}:queue", &live]);
    }
    let waiter = join(&fx, &lockers[1], "job", fair(), AHEAD + 1).await;
    waiter.abort();
    until_queued(server, "job", AHEAD).await;
    let entries: Vec<String> = server.cmd(&["LRANGE", "{job}:queue", "0", "-1"]);
    assert!(
        entries.iter().all(|entry| entry.contains(r#""v":"a"#)),
        "{entries:?}"
    );
    server.expect_ok(held.release().await, "release");
}

/// An ordinary obtain cannot overtake a queued fair waiter: the release hands
/// the key straight to the waiter.
pub async fn ordinary_obtain_does_not_overtake(fx: &Fixture) {
    let lockers = fx.lockers(3).await;
    let held = lockers[0]
        .obtain("job", TTL, ObtainOptions::new())
        .await
        .expect("obtain");
    let waiter = join(fx, &lockers[1], "job", fair(), 1).await;
    held.release().await.expect("release");
    let barging = lockers[2].obtain("job", TTL, ObtainOptions::new()).await;
    assert!(
        barging.as_ref().is_err_and(LockError::is_not_obtained),
        "{barging:?}"
    );
    let lock = promptly("the waiter is handed the key", waiter)
        .await
        .expect("waiter task")
        .expect("the waiter obtains");
    lock.release().await.expect("release");
}

/// 8 tasks × 300 non-atomic increments under fair locks: none lost.
///
/// On a smaller scale on etcd: a fair obtain there takes several round trips
/// (read the queue, grant, take), so 8 × 300 takes over a minute on a 2-core
/// machine. 4 tasks × 50 increments, none lost.
pub async fn fair_locks_exclude(fx: &Fixture) {
    let (workers, rounds) = match fx.kind() {
        Kind::Etcd => (4, 50),
        _ => (8, 300),
    };
    let counter = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = fx
        .lockers(workers)
        .await
        .into_iter()
        .map(|locker| {
            let counter = counter.clone();
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let lock = locker.obtain("counter", TTL, fair()).await.expect("obtain");
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    lock.release().await.expect("release");
                }
            })
        })
        .collect();
    tokio::time::timeout(Duration::from_secs(120), futures::future::join_all(tasks))
        .await
        .expect("the increments finish")
        .into_iter()
        .for_each(|task| task.expect("task"));
    assert_eq!(counter.load(Ordering::SeqCst), workers as u64 * rounds);
}

/// A waiter that waited longer than half its ttl confirms the handed-over
/// lease with one refresh, and holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_long_wait_confirms_the_lease() {
    let fx = Fixture::redis().await;
    let server = fx.master().expect("one server");
    let lockers = fx.lockers(2).await;
    let held = server.expect_ok(
        lockers[0].obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    let ttl = Duration::from_millis(600);
    let (locker, short) = (lockers[1].clone(), fair());
    let waiter = tokio::spawn(async move { locker.obtain("job", ttl, short).await });
    until_queued(server, "job", 1).await;
    // More than half the waiter's ttl passes (not a synchronisation).
    tokio::time::sleep(Duration::from_millis(400)).await;
    let () = server.cmd(&["CONFIG", "RESETSTAT"]);
    server.expect_ok(held.release().await, "release");
    let lock = promptly("the waiter is handed the key", waiter)
        .await
        .expect("waiter task")
        .expect("the waiter obtains");
    assert_eq!(script_calls(server), 2, "the release, then one refresh");
    let value: String = server.cmd(&["GET", "job"]);
    assert_eq!(
        value,
        format!("{}\0", lock.token()),
        "the handed value, marked"
    );
    server.expect_ok(lock.release().await, "release");
}

/// Fair obtains that cannot be served fairly fail before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfair_requests_are_refused() {
    let locker = Locker::memory();
    let several = locker.obtain_many(["a", "b"], TTL, fair()).await;
    assert!(
        matches!(several, Err(LockError::InvalidKey { .. })),
        "{several:?}"
    );
    let endless = ObtainOptions::new()
        .fair()
        .retry(RetryStrategy::linear(Duration::from_millis(10)));
    let endless = locker.obtain("a", TTL, endless).await;
    assert!(
        matches!(endless, Err(LockError::InvalidDuration { .. })),
        "{endless:?}"
    );

    let redlock_fx = Fixture::redlock().await;
    let redlock = redlock_fx.locker().await;
    let refused = redlock.obtain("a", TTL, fair()).await;
    match refused {
        Err(LockError::Backend(err)) => {
            assert!(err.to_string().contains("fairly"), "{err}");
        }
        other => panic!("redlock took a fair obtain: {other:?}"),
    }
}

#[distributed_lock(key = "job", ttl = "30s", wait = "30s", locker = locker)]
async fn attribute_waiter(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", ttl = "30s", wait = "30s", fair = true, locker = locker)]
async fn fair_attribute_waiter(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

/// The attribute's `wait` waits for the release, not by its 2–200 ms backoff:
/// a second of waiting costs no command, fair or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_attribute_waiters_send_nothing_between_wake_ups() {
    let fx = Fixture::redis().await;
    let server = fx.master().expect("one server");
    let lockers = fx.lockers(3).await;
    let held = server.expect_ok(
        lockers[0].obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    let before = script_calls(server);
    let plain = {
        let locker = lockers[1].clone();
        tokio::spawn(async move { attribute_waiter(&locker).await })
    };
    let fair = {
        let locker = lockers[2].clone();
        tokio::spawn(async move { fair_attribute_waiter(&locker).await })
    };
    // Each tries, listens, then tries once more.
    for _ in 0..500 {
        if script_calls(server) >= before + 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let () = server.cmd(&["CONFIG", "RESETSTAT"]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        script_calls(server),
        0,
        "waiting attribute calls sent commands"
    );
    server.expect_ok(held.release().await, "release");
    let (plain, fair) = promptly("both obtain in turn", futures::future::join(plain, fair)).await;
    plain.expect("task").expect("the plain waiter obtains");
    fair.expect("task").expect("the fair waiter obtains");
}
