//! A locker built from the service's own `redis::Client` or
//! `ConnectionManager` (`RedisBackend::from_client`, `from_manager`), or its
//! cluster client and connection (`ClusterBackend::from_client`,
//! `from_connection`): it takes
//! locks, mints fencing tokens and wakes waiters, and the service's own
//! connection goes on working beside it. Waiters have a 60 s backoff and a
//! 30 s deadline: they obtain within the 5 s bound only if the release wakes
//! them.

use std::time::Duration;

use lockmacro_runtime::{
    ClusterBackend, Lock, Locker, ObtainOptions, RedisBackend, RedisConfig, RetryStrategy,
};
use redis::aio::ConnectionManager;
use redis::cluster::ClusterClient;

use lockmacro_testkit::RedisServer;
use lockmacro_testkit::cluster::RedisCluster;

const TTL: Duration = Duration::from_secs(30);
const PROMPTLY: Duration = Duration::from_secs(5);

/// Locks, fencing and a woken waiter, through `holder` and `waiter`.
async fn locks_fences_and_wakes(server: &RedisServer, holder: &Locker, waiter: &Locker) {
    let first = server.expect_ok(
        holder
            .obtain("job", TTL, ObtainOptions::new().fence())
            .await,
        "obtain",
    );
    let value: Option<String> = server.cmd(&["GET", "job"]);
    assert!(
        value
            .as_deref()
            .is_some_and(|v| v.starts_with(first.token())),
        "the server does not hold the lock: {value:?}"
    );
    let busy = waiter.obtain("job", TTL, ObtainOptions::new()).await;
    assert!(
        busy.as_ref().is_err_and(|err| err.is_not_obtained()),
        "{busy:?}"
    );

    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let patient = ObtainOptions::new()
                .fence()
                .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(TTL));
            waiter.obtain("job", TTL, patient).await
        })
    };
    for _ in 0..500 {
        let (_, listening): (String, i64) =
            server.cmd(&["PUBSUB", "NUMSUB", "lockmacro:released:job"]);
        if listening > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = first.fence_token().expect("a fencing token was asked for");
    server.expect_ok(first.release().await, "release");
    let second: Lock = tokio::time::timeout(PROMPTLY, waiting)
        .await
        .unwrap_or_else(|_| server.fail("the waiter was not woken by the release"))
        .expect("the waiter task")
        .unwrap_or_else(|err| server.fail(format_args!("the waiter failed: {err:?}")));
    assert!(second.fence_token().expect("fenced") > before);
    server.expect_ok(second.release().await, "release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locker_from_the_services_client_takes_locks_fences_and_wakes_waiters() {
    let server = RedisServer::start();
    let client = server.client();
    let mut lockers = Vec::new();
    for _ in 0..2 {
        let backend = RedisBackend::from_client(client.clone(), RedisConfig::default()).await;
        lockers.push(Locker::new(server.expect_ok(backend, "from_client")));
    }
    locks_fences_and_wakes(&server, &lockers[0], &lockers[1]).await;

    // The client is the service's still.
    let mut conn = server.expect_ok(
        client.get_multiplexed_async_connection().await,
        "the service's connection",
    );
    let pong: String = server.expect_ok(redis::cmd("PING").query_async(&mut conn).await, "PING");
    assert_eq!(pong, "PONG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locker_on_the_services_connection_manager_sends_on_it_and_the_service_keeps_using_it() {
    let server = RedisServer::start();
    let client = server.client();
    let mut managers = Vec::new();
    let mut lockers = Vec::new();
    for n in 0..2 {
        let manager = server.expect_ok(ConnectionManager::new(client.clone()).await, "manager");
        // Both ways to the same: the one call, and the backend's own.
        let locker = if n == 0 {
            Locker::from_manager(manager.clone(), client.clone()).await
        } else {
            let config = RedisConfig::default();
            Locker::new(RedisBackend::from_manager(manager.clone(), client.clone(), config).await)
        };
        lockers.push(locker);
        managers.push(manager);
    }
    let mut service = managers[0].clone();
    let id: i64 = server.expect_ok(
        redis::cmd("CLIENT")
            .arg("ID")
            .query_async(&mut service)
            .await,
        "CLIENT ID",
    );

    let lock = server.expect_ok(
        lockers[0].obtain("shared", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    // The acquire went out on the service's connection: it is the last
    // command that connection sent (a plain obtain is a `SET`).
    let listed: String = server.cmd(&["CLIENT", "LIST", "ID", &id.to_string()]);
    assert!(
        listed.contains("cmd=set "),
        "the lock was not taken on the service's connection: {listed}"
    );
    let connections: String = server.cmd(&["CLIENT", "LIST", "TYPE", "normal"]);
    // The two managers, and this listing's own connection: the lockers
    // opened no command connection of their own.
    assert_eq!(
        connections.lines().count(),
        3,
        "connections besides the service's: {connections}"
    );

    // The service's own commands, beside the lock.
    let () = server.expect_ok(
        redis::cmd("SET")
            .arg("service:key")
            .arg("value")
            .query_async(&mut service)
            .await,
        "the service's SET",
    );
    let read: String = server.expect_ok(
        redis::cmd("GET")
            .arg("service:key")
            .query_async(&mut service)
            .await,
        "the service's GET",
    );
    assert_eq!(read, "value");
    server.expect_ok(lock.release().await, "release");

    locks_fences_and_wakes(&server, &lockers[0], &lockers[1]).await;
    let pong: String = server.expect_ok(
        redis::cmd("PING").query_async(&mut service).await,
        "the service's PING after the locks",
    );
    assert_eq!(pong, "PONG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locker_on_the_services_cluster_connection_takes_locks_fences_and_wakes_waiters() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    let seeds = cluster.seeds();
    let client = ClusterClient::new(seeds.clone())
        .unwrap_or_else(|err| cluster.fail(format_args!("the service's client: {err}")));
    let mut service = match client.get_async_connection().await {
        Ok(conn) => conn,
        Err(err) => cluster.fail(format_args!("the service's connection: {err}")),
    };
    let config = RedisConfig::default();
    let shared =
        ClusterBackend::from_connection(service.clone(), client.clone(), &seeds, config.clone());
    let holder = Locker::new(
        shared.unwrap_or_else(|err| cluster.fail(format_args!("from_connection: {err:?}"))),
    );
    let own = ClusterBackend::from_client(client.clone(), &seeds, config).await;
    let waiter =
        Locker::new(own.unwrap_or_else(|err| cluster.fail(format_args!("from_client: {err:?}"))));

    let first = holder
        .obtain("job", TTL, ObtainOptions::new().fence())
        .await
        .unwrap_or_else(|err| cluster.fail(format_args!("obtain: {err:?}")));
    let master = cluster.node(cluster.master_for("job"));
    let value: Option<String> = master.cmd(&["GET", "job"]);
    assert!(
        value
            .as_deref()
            .is_some_and(|v| v.starts_with(first.token())),
        "the key's master does not hold the lock: {value:?}"
    );
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let patient = ObtainOptions::new()
                .fence()
                .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(TTL));
            waiter.obtain("job", TTL, patient).await
        })
    };
    // The waiter subscribes on the first of `seeds`, node 0.
    for _ in 0..500 {
        let (_, listening): (String, i64) =
            cluster
                .node(0)
                .cmd(&["PUBSUB", "NUMSUB", "lockmacro:released:job"]);
        if listening > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // The service's own commands, beside the lock, on the shared connection.
    let set: redis::RedisResult<()> = redis::cmd("SET")
        .arg("service:key")
        .arg("value")
        .query_async(&mut service)
        .await;
    assert!(set.is_ok(), "the service's SET: {set:?}");

    let before = first.fence_token().expect("a fencing token was asked for");
    if let Err(err) = first.release().await {
        cluster.fail(format_args!("release: {err:?}"));
    }
    let second: Lock = match tokio::time::timeout(PROMPTLY, waiting).await {
        Ok(Ok(Ok(lock))) => lock,
        Ok(Ok(Err(err))) => cluster.fail(format_args!("the waiter failed: {err:?}")),
        Ok(Err(err)) => std::panic::resume_unwind(err.into_panic()),
        Err(_) => cluster.fail("the waiter was not woken by the release"),
    };
    assert!(second.fence_token().expect("fenced") > before);
    if let Err(err) = second.release().await {
        cluster.fail(format_args!("release: {err:?}"));
    }
    let read: redis::RedisResult<String> = redis::cmd("GET")
        .arg("service:key")
        .query_async(&mut service)
        .await;
    assert_eq!(read.ok().as_deref(), Some("value"), "the service's GET");
}
