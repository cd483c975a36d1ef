//! Fair waiters whose process dies while queued (SIGKILL) cannot stall the
//! queue: the release hands the key to the first of them for its short grant
//! lease only, and the live waiter behind them gets the key once those leases
//! run out, long before the dead waiters' ttl or their wait would have.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use lockmacro_runtime::{Locker, ObtainOptions, RetryStrategy};
use lockmacro_testkit::RedisServer;
use lockmacro_testkit::cluster::RedisCluster;

use crate::process::{Holder, rerun_as_child};

/// Set, to `redis <url>` or `cluster <seed>,<seed>,…`, for a child process
/// that queues as a fair waiter and then waits to be killed.
const WAITER_ENV: &str = "LOCKMACRO_FAULTS_FAIR_WAITER";
/// Far longer than the live waiter's deadline: a dead waiter handed the key
/// for its ttl would make the live one give up.
const TTL: Duration = Duration::from_secs(120);
const LIVE_WAIT: Duration = Duration::from_secs(30);
const DEAD: usize = 2;

enum Target {
    Redis(RedisServer),
    Cluster(RedisCluster),
}

impl Target {
    /// What the child is told to connect to.
    fn describe(&self) -> String {
        match self {
            Target::Redis(server) => format!("redis {}", server.url()),
            Target::Cluster(cluster) => format!("cluster {}", cluster.seeds().join(",")),
        }
    }

    /// The server that holds the queue of `job`.
    fn node(&self) -> &RedisServer {
        match self {
            Target::Redis(server) => server,
            Target::Cluster(cluster) => cluster.node(cluster.master_for("{job}:queue")),
        }
    }

    async fn locker(&self) -> Locker {
        connect(&self.describe()).await
    }
}

async fn connect(target: &str) -> Locker {
    match target.split_once(' ') {
        Some(("redis", url)) => Locker::connect(url).await.unwrap(),
        Some(("cluster", seeds)) => Locker::cluster(seeds.split(',')).await.unwrap(),
        _ => panic!("unknown target {target:?}"),
    }
}

fn fair(wait: Duration) -> ObtainOptions {
    ObtainOptions::new()
        .fair()
        .fence()
        .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(wait))
}

/// Polls the queue's length, as another client would, until it is `n`.
async fn until_queued(node: &RedisServer, n: i64) {
    for _ in 0..3000 {
        let queued: i64 = node.cmd(&["LLEN", "{job}:queue"]);
        if queued == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    node.fail(format_args!("the queue of `job` never held {n} waiters"));
}

async fn killed_waiters_delay_the_next_by_their_grant_lease_only(target: Target, test: &str) {
    let holder = target.locker().await;
    let held = target.node().expect_ok(
        holder.obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    let mut dead: Vec<Holder> = Vec::new();
    for n in 1..=DEAD {
        let mut child = rerun_as_child(test, WAITER_ENV, &target.describe());
        // Its stdout closes when it dies; read it so that it never blocks.
        let stdout = child.0.stdout.take().unwrap();
        std::thread::spawn(move || BufReader::new(stdout).lines().for_each(drop));
        until_queued(target.node(), n as i64).await;
        dead.push(child);
    }
    let live = target.locker().await;
    let waiter = tokio::spawn(async move { live.obtain("job", TTL, fair(LIVE_WAIT)).await });
    until_queued(target.node(), DEAD as i64 + 1).await;
    for mut child in dead {
        child.0.kill().unwrap();
        child.0.wait().unwrap();
    }
    let released = tokio::time::Instant::now();
    target.node().expect_ok(held.release().await, "release");
    let lock = target.node().expect_ok(
        waiter.await.expect("waiter task"),
        "the live waiter behind the dead ones obtains before its deadline",
    );
    println!(
        "obtained {:?} after the release, behind {DEAD} killed waiters",
        released.elapsed()
    );
    let value: String = target.node().cmd(&["GET", "job"]);
    assert_eq!(
        value,
        lock.token(),
        "the key does not hold the live waiter's token"
    );
    let left: i64 = target.node().cmd(&["PTTL", "job"]);
    assert!(
        left > 60_000,
        "the live waiter's lease was not confirmed: {left} ms"
    );
    let queued: i64 = target.node().cmd(&["LLEN", "{job}:queue"]);
    assert_eq!(queued, 0, "entries left in the queue");
    target.node().expect_ok(lock.release().await, "release");
}

/// The child's part: queue fairly for `job` and wait there until killed.
async fn wait_in_line(target: &str) {
    let locker = connect(target).await;
    let outcome = locker.obtain("job", TTL, fair(TTL)).await;
    // Reached only if the parent did not kill this process in time.
    println!("waiter ended: {:?}", outcome.map(|lock| lock.fence_token()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_fair_waiters_delay_the_next_by_their_grant_lease_only() {
    if let Ok(target) = std::env::var(WAITER_ENV) {
        return wait_in_line(&target).await;
    }
    killed_waiters_delay_the_next_by_their_grant_lease_only(
        Target::Redis(RedisServer::start()),
        "dead_waiter::redis_killed_fair_waiters_delay_the_next_by_their_grant_lease_only",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_killed_fair_waiters_delay_the_next_by_their_grant_lease_only() {
    if let Ok(target) = std::env::var(WAITER_ENV) {
        return wait_in_line(&target).await;
    }
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .expect("starting the cluster");
    killed_waiters_delay_the_next_by_their_grant_lease_only(
        Target::Cluster(cluster),
        "dead_waiter::cluster_killed_fair_waiters_delay_the_next_by_their_grant_lease_only",
    )
    .await;
}
