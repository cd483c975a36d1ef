//! `ObtainOptions::replicas` and the attribute's `replicas = N`: an obtain
//! that returns only once replicas have the lock, and that gives the lock
//! back and fails when they do not acknowledge it in time. Against a Redis
//! Cluster with a replica per master, one server with a replica, and one
//! with none; Redlock and memory refuse the option.

use std::time::Duration;

use lockmacro_runtime::{LockError, Locker, ObtainOptions, RetryStrategy, distributed_lock};

use lockmacro_testkit::RedisServer;
use lockmacro_testkit::cluster::RedisCluster;

const TTL: Duration = Duration::from_secs(30);
/// Long enough for a replica on a loaded machine; shorter than the response
/// timeout (3 s), which bounds the whole call.
const GENEROUS: Duration = Duration::from_secs(2);
/// For the waits that are meant to run out.
const SHORT: Duration = Duration::from_millis(200);

fn replicated(timeout: Duration) -> ObtainOptions {
    ObtainOptions::new().replicas(1).replica_timeout(timeout)
}

/// `GET key` on a replica, from its own copy.
fn get_readonly(node: &RedisServer, key: &str) -> Option<String> {
    let mut conn = node.connection();
    let () = node.expect_ok(redis::cmd("READONLY").query(&mut conn), "READONLY");
    node.expect_ok(redis::cmd("GET").arg(key).query(&mut conn), "GET")
}

#[track_caller]
fn expect_not_replicated<T: std::fmt::Debug>(
    result: Result<T, LockError>,
    key: &str,
    context: &dyn Fn() -> String,
) {
    match result {
        Err(LockError::NotReplicated {
            key: named,
            wanted: 1,
            acknowledged: 0,
            ..
        }) if named == key => {}
        other => panic!(
            "expected NotReplicated for `{key}`, got {other:?}\n{}",
            context()
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_obtain_returns_once_the_replica_has_the_lock_and_gives_it_back_without_one() {
    let mut cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    let locker = match Locker::cluster(cluster.seeds()).await {
        Ok(locker) => locker,
        Err(err) => cluster.fail(format_args!("connect: {err}")),
    };
    let master = cluster.master_for("job");
    let replica = cluster.replica_of(master);

    let lock = locker
        .obtain("job", TTL, replicated(GENEROUS).fence())
        .await
        .unwrap_or_else(|err| cluster.fail(format_args!("obtain: {err}")));
    // Acknowledged: the replica's own copy has it as soon as obtain returns.
    let copy = get_readonly(cluster.node(replica), "job");
    if !copy
        .as_deref()
        .is_some_and(|value| value.starts_with(lock.token()))
    {
        cluster.fail(format_args!(
            "the replica does not have the lock: {copy:?}{}",
            cluster.describe("job")
        ));
    }
    lock.release()
        .await
        .unwrap_or_else(|err| cluster.fail(format_args!("release: {err}")));

    // Without its replica, the master grants the lock, the wait runs out,
    // and the lock is given back.
    cluster.kill(replica);
    let result = locker.obtain("job", TTL, replicated(SHORT)).await;
    expect_not_replicated(result, "job", &|| cluster.describe("job"));
    let left: Option<String> = cluster.node(master).cmd(&["GET", "job"]);
    assert_eq!(left, None, "the unreplicated lock was not given back");
    // Without `replicas` the key can be taken at once.
    let lock = locker
        .obtain("job", TTL, ObtainOptions::new())
        .await
        .unwrap_or_else(|err| cluster.fail(format_args!("obtain without replicas: {err}")));
    lock.release()
        .await
        .unwrap_or_else(|err| cluster.fail(format_args!("release: {err}")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_with_a_replica_has_it_acknowledge_the_lock() {
    let master = RedisServer::start();
    let replica = RedisServer::start();
    let () = replica.cmd(&["REPLICAOF", "127.0.0.1", &master.port().to_string()]);
    let synced = |server: &RedisServer| {
        let info: String = server.cmd(&["INFO", "replication"]);
        info.contains("master_link_status:up")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !synced(&replica) {
        assert!(
            std::time::Instant::now() < deadline,
            "the replica did not sync: {}",
            replica.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let locker = master.locker().await;

    let lock = master.expect_ok(
        locker.obtain("job", TTL, replicated(GENEROUS)).await,
        "obtain",
    );
    let copy: Option<String> = replica.cmd(&["GET", "job"]);
    assert!(
        copy.as_deref()
            .is_some_and(|value| value.starts_with(lock.token())),
        "the replica does not have the lock: {copy:?}"
    );
    master.expect_ok(lock.release().await, "release");

    // A frozen replica acknowledges nothing.
    replica.pause();
    let result = locker.obtain("job", TTL, replicated(SHORT)).await;
    replica.resume();
    expect_not_replicated(result, "job", &|| master.log());
    let left: Option<String> = master.cmd(&["GET", "job"]);
    assert_eq!(left, None, "the unreplicated lock was not given back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_without_replicas_fails_the_wait_and_keeps_nothing() {
    let server = RedisServer::start();
    let locker = server.locker().await;
    let other = server.locker().await;

    let result = locker.obtain("job", TTL, replicated(SHORT).fence()).await;
    expect_not_replicated(result, "job", &|| server.log());
    let left: Option<String> = server.cmd(&["GET", "job"]);
    assert_eq!(left, None, "the unreplicated lock was not given back");
    // Nothing blocks the next owner.
    let lock = server.expect_ok(
        other.obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    server.expect_ok(lock.release().await, "release");

    // The message says what happened.
    let err = locker
        .obtain("job", TTL, replicated(SHORT))
        .await
        .expect_err("no replica acknowledged");
    assert_eq!(
        err.to_string(),
        "lock `job` was released: 0 of the 1 replica(s) asked for acknowledged it within 200ms"
    );

    // A wait the response timeout (3 s) would cut short is refused.
    let err = locker
        .obtain("job", TTL, replicated(Duration::from_secs(3)))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Backend(_)) && err.to_string().contains("response timeout"),
        "{err:?}"
    );
    let left: Option<String> = server.cmd(&["GET", "job"]);
    assert_eq!(left, None, "a refused obtain took the key");

    // A fair waiter is handed its key by a release, which nothing waits for.
    let fair = ObtainOptions::new()
        .fair()
        .retry(RetryStrategy::linear(Duration::from_millis(10)).deadline(Duration::from_secs(1)))
        .replicas(1);
    let err = locker.obtain("job", TTL, fair).await.unwrap_err();
    assert!(
        matches!(&err, LockError::Backend(_)) && err.to_string().contains("`fair`"),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_and_memory_refuse_replicas_before_taking_anything() {
    let servers = RedisServer::start_many(3);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock = servers[0].expect_ok(Locker::redlock(&urls).await, "connect");
    for (name, locker) in [("redlock", redlock), ("memory", Locker::memory())] {
        let err = locker
            .obtain("job", TTL, ObtainOptions::new().replicas(1))
            .await
            .expect_err(name);
        assert!(
            matches!(&err, LockError::Backend(_))
                && err.to_string().contains("cannot wait for replicas"),
            "{name}: {err:?}"
        );
        // Refused before anything was taken.
        let lock = locker
            .obtain("job", TTL, ObtainOptions::new())
            .await
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        lock.release()
            .await
            .unwrap_or_else(|err| panic!("{name}: {err}"));
    }
}

#[distributed_lock(key = "payout:{id}", ttl = "30s", replicas = 1, locker = locker)]
async fn pay_out(locker: &Locker, id: u64) -> Result<u64, LockError> {
    let _ = locker;
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribute_replicas_runs_the_body_only_once_replicated() {
    let server = RedisServer::start();
    let locker = server.locker().await;
    // One server, no replica: the body never runs.
    match pay_out(&locker, 7).await {
        Err(LockError::NotReplicated { key, wanted: 1, .. }) if key == "payout:7" => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    let left: Option<String> = server.cmd(&["GET", "payout:7"]);
    assert_eq!(left, None);

    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    let locker = match Locker::cluster(cluster.seeds()).await {
        Ok(locker) => locker,
        Err(err) => cluster.fail(format_args!("connect: {err}")),
    };
    match pay_out(&locker, 7).await {
        Ok(7) => {}
        other => cluster.fail(format_args!("on a cluster with replicas: {other:?}")),
    }
}

const SECURITY_DOC: &str = include_str!("../../docs/security.md");

/// The `ACL SETUSER` line of docs/security.md for everything but `replicas`, and its
/// addition for `replicas`, as separate rules.
fn documented_rules() -> (Vec<&'static str>, Vec<&'static str>) {
    let line = |wanted: &dyn Fn(&str) -> bool| -> Vec<&'static str> {
        let line = SECURITY_DOC
            .lines()
            .find(|line| wanted(line))
            .expect("docs/security.md shows the line under \"Permissions a Redis user needs\"");
        line.split_whitespace().skip(3).collect()
    };
    (
        line(&|line| {
            line.starts_with("ACL SETUSER locks ") && !line.starts_with("ACL SETUSER locks +")
        }),
        line(&|line| line.starts_with("ACL SETUSER locks +") && line.contains("+wait")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_permissions_for_replicas_are_enough_and_needed() {
    let (base, extras) = documented_rules();
    let server = RedisServer::start();
    let user = |name: &str, rules: &[&str]| {
        let mut args = vec!["ACL", "SETUSER", name];
        args.extend_from_slice(rules);
        let () = server.cmd(&args);
        format!("redis://{name}:change-me@127.0.0.1:{}/", server.port())
    };
    let with = user("with", &[base.as_slice(), extras.as_slice()].concat());
    let without = user("without", &base);

    let locker = server.expect_ok(Locker::connect(&with).await, "connect");
    // Refused by the replicas, not by the ACL.
    let result = locker.obtain("billing:job", TTL, replicated(SHORT)).await;
    expect_not_replicated(result, "billing:job", &|| server.log());
    let denied: Vec<redis::Value> = server.cmd(&["ACL", "LOG"]);
    let denied: Vec<String> = denied
        .iter()
        .map(|entry| format!("{entry:?}"))
        .filter(|entry| !entry.contains("client|setinfo"))
        .collect();
    assert!(denied.is_empty(), "refused: {denied:#?}");

    let locker = server.expect_ok(Locker::connect(&without).await, "connect");
    let err = locker
        .obtain("billing:job", TTL, replicated(SHORT))
        .await
        .expect_err("refused without the additions");
    assert!(
        matches!(&err, LockError::Backend(backend) if backend.kind() == lockmacro_runtime::BackendErrorKind::Permission),
        "{err:?}"
    );
}
