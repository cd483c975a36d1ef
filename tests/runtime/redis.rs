//! What only a real Redis can show: the format on the wire, other clients,
//! connection failures, and mutual exclusion between independent connections.

use std::net::TcpListener;
use std::time::Duration;

use lockmacro_runtime::{
    BackendErrorKind, LockError, Locker, ObtainOptions, RedisBackend, RedisConfig, RetryStrategy,
};
use redis::Commands;
use tokio::time::Instant;

use lockmacro_testkit::RedisServer;
use lockmacro_testkit::proxy::Proxy;

const LONG: Duration = Duration::from_secs(30);

#[tokio::test]
async fn lock_is_a_plain_string_that_starts_with_the_token() {
    let server = RedisServer::start();
    let locker = server.locker().await.with_namespace("billing");
    let lock = server.expect_ok(
        locker
            .obtain(
                "user:1",
                LONG,
                ObtainOptions::new().metadata("host-a").fence(),
            )
            .await,
        "obtain",
    );
    let mut raw = server.client().get_connection().unwrap();
    let value: String = raw.get("billing:user:1").unwrap();
    assert_eq!(value, format!("{}host-a", lock.token()));
    let pttl: i64 = redis::cmd("PTTL")
        .arg("billing:user:1")
        .query(&mut raw)
        .unwrap();
    assert!(pttl > 20_000 && pttl <= 30_000, "{pttl}");
    let fence: u64 = raw.get("{billing:user:1}:fence").unwrap();
    assert_eq!(Some(fence), lock.fence_token());

    server.expect_ok(lock.release().await, "release");
    let exists: bool = raw.exists("billing:user:1").unwrap();
    assert!(!exists, "release deletes the key");
    let fence_after: u64 = raw.get("{billing:user:1}:fence").unwrap();
    assert_eq!(fence_after, fence, "the fence counter survives release");
}

#[tokio::test]
async fn other_clients_using_set_nx_exclude_and_are_excluded() {
    let server = RedisServer::start();
    let locker = server.locker().await;
    let mut raw = server.client().get_connection().unwrap();

    // Another client (redis-py's Lock, bsm/redislock) took the key first.
    let _: () = redis::cmd("SET")
        .arg("job")
        .arg("their-token")
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query(&mut raw)
        .unwrap();
    assert!(
        locker
            .obtain("job", LONG, ObtainOptions::new())
            .await
            .unwrap_err()
            .is_not_obtained()
    );
    let _: () = raw.del("job").unwrap();

    // We hold it: their SET NX fails, and our release leaves their key alone.
    let lock = server.expect_ok(
        locker.obtain("job", LONG, ObtainOptions::new()).await,
        "obtain",
    );
    let theirs: Option<String> = redis::cmd("SET")
        .arg("job")
        .arg("their-token")
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query(&mut raw)
        .unwrap();
    assert_eq!(theirs, None, "SET NX must fail while we hold the key");
    let _: () = raw.set("job", "overwritten-by-someone").unwrap();
    assert!(matches!(
        lock.release().await,
        Err(LockError::NotHeld { .. })
    ));
    let value: String = raw.get("job").unwrap();
    assert_eq!(value, "overwritten-by-someone");
}

/// 8 tasks, each with its own connection, do 300 non-atomic increments
/// (GET, yield, SET) of a Redis counter. Under the lock none is lost; without
/// it the same code loses updates, which shows the witness can fail.
async fn increments(server: &RedisServer, with_lock: bool) -> i64 {
    const TASKS: usize = 8;
    const ROUNDS: usize = 300;
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let locker = server.locker().await;
        let mut conn = server.witness_connection().await;
        tasks.push(tokio::spawn(async move {
            let retry =
                RetryStrategy::exponential(Duration::from_micros(200), Duration::from_millis(5))
                    .deadline(Duration::from_secs(60));
            for _ in 0..ROUNDS {
                let lock = if with_lock {
                    Some(
                        locker
                            .obtain(
                                "counter-lock",
                                Duration::from_secs(10),
                                ObtainOptions::new().retry(retry.clone()),
                            )
                            .await
                            .unwrap(),
                    )
                } else {
                    None
                };
                lockmacro_testkit::witness::counter::increment(&mut conn).await;
                if let Some(lock) = lock {
                    lock.release().await.unwrap();
                }
            }
        }));
    }
    for task in tasks {
        task.await
            .unwrap_or_else(|err| panic!("worker failed: {err}\n{}", server.log()));
    }
    let mut raw = server.client().get_connection().unwrap();
    raw.get("counter").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_exclusion_witness_loses_no_update() {
    let server = RedisServer::start();
    assert_eq!(increments(&server, true).await, 2400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn witness_sees_lost_updates_without_the_lock() {
    let server = RedisServer::start();
    let total = increments(&server, false).await;
    assert!(
        total < 2400,
        "without the lock no update was lost ({total}): the witness could not fail"
    );
}

#[tokio::test]
async fn unparsable_url_is_named_in_the_error() {
    for url in [
        "not a url",
        "http://127.0.0.1:6379",
        "redis://user:hunter2@127.0.0.1:notaport",
    ] {
        let err = Locker::connect(url).await.unwrap_err();
        let LockError::InvalidUrl { url: named, .. } = &err else {
            panic!("{url}: {err:?}")
        };
        assert!(
            !err.to_string().contains("hunter2"),
            "password leaked: {err}"
        );
        assert!(!named.is_empty(), "{err}");
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn refused_connection_is_a_backend_error_in_bounded_time() {
    let start = Instant::now();
    let err = Locker::connect(&format!("redis://127.0.0.1:{}/", free_port()))
        .await
        .unwrap_err();
    let LockError::Backend(backend) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(backend.kind(), BackendErrorKind::Unreachable, "{err}");
    assert!(err.is_transient(), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

/// A port on which nothing listens: bound, then closed, so connecting to it
/// is refused.
fn closed_port_url() -> String {
    format!("redis://127.0.0.1:{}/", free_port())
}

#[tokio::test]
async fn refused_connection_names_the_address_it_could_not_reach() {
    let url = closed_port_url();
    let address = url.trim_start_matches("redis://").trim_end_matches('/');
    let single = Locker::connect(&url).await.map(drop);
    let cluster = Locker::cluster([&url]).await.map(drop);
    let others = [closed_port_url(), closed_port_url()];
    let redlock = Locker::redlock([url.as_str(), &others[0], &others[1]])
        .await
        .map(drop);
    for (backend, result) in [
        ("redis", single),
        ("cluster", cluster),
        ("redlock", redlock),
    ] {
        let err = result.expect_err(backend);
        let LockError::Backend(error) = &err else {
            panic!("{backend}: expected a backend error, got {err:?}")
        };
        assert_eq!(
            error.kind(),
            BackendErrorKind::Unreachable,
            "{backend}: {err}"
        );
        assert!(err.to_string().contains(address), "{backend}: {err}");
        assert!(err.to_string().contains("refused"), "{backend}: {err}");
    }
}

#[tokio::test]
async fn silent_server_times_out_in_bounded_time() {
    // Accepts connections and never answers, like a black-holed host.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}/", listener.local_addr().unwrap());
    let config = RedisConfig::default()
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300));
    let start = Instant::now();
    let err = RedisBackend::connect_with(&url, config).await.unwrap_err();
    let LockError::Backend(backend) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(backend.kind(), BackendErrorKind::Timeout, "{err}");
    assert!(err.is_transient(), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    drop(listener);
}

#[tokio::test]
async fn server_gone_after_connect_fails_obtain_in_bounded_time() {
    let server = RedisServer::start();
    let backend = server.expect_ok(
        RedisBackend::connect_with(
            &server.url(),
            RedisConfig::default().response_timeout(Duration::from_millis(300)),
        )
        .await,
        "connect",
    );
    let locker = Locker::new(backend);
    server.pause();
    let start = Instant::now();
    let err = locker
        .obtain("job", LONG, ObtainOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Backend(_)), "{err:?}");
    assert!(
        err.is_transient(),
        "a frozen server is worth trying again: {err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    server.resume();
}

#[tokio::test]
async fn wrong_password_says_authentication_failed() {
    let server = RedisServer::start_with(&["--requirepass", "right-password"]);
    let url = format!("redis://:wrong-password@127.0.0.1:{}/", server.port());
    let err = Locker::connect(&url).await.unwrap_err();
    let LockError::Backend(backend) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(backend.kind(), BackendErrorKind::Authentication, "{err}");
    assert!(!err.is_transient(), "wrong credentials stay wrong: {err}");
    assert!(err.to_string().contains("authentication failed"), "{err}");
    assert!(!err.to_string().contains("wrong-password"), "{err}");

    let good = format!("redis://:right-password@127.0.0.1:{}/", server.port());
    let locker = server.expect_ok(
        Locker::connect(&good).await,
        "connect with the right password",
    );
    server.expect_ok(
        locker.obtain("job", LONG, ObtainOptions::new()).await,
        "obtain",
    );
}

#[tokio::test]
async fn refresh_survives_a_connection_cut_while_idle() {
    let server = RedisServer::start();
    let locker = server.locker().await;
    let lock = server.expect_ok(
        locker.obtain("job", LONG, ObtainOptions::new()).await,
        "obtain",
    );
    // What an idle timeout in a proxy or the server does to a quiet connection.
    let mut raw = server.client().get_connection().unwrap();
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut raw)
        .unwrap();
    assert!(killed >= 1, "no connection was cut");
    server.expect_ok(lock.refresh(LONG).await, "refresh after the cut");
    server.expect_ok(lock.release().await, "release");
}

/// A connection cut with many calls in flight on it is opened again once,
/// and every call is sent again on the new one: the calls that find it
/// dropped do not each open a connection of their own.
#[tokio::test]
async fn calls_in_flight_on_a_cut_connection_go_again_on_one_new_connection() {
    const CALLS: usize = 64;
    let server = RedisServer::start();
    let locker = server.locker().await;
    let mut raw = server.client().get_connection().unwrap();
    let info = |raw: &mut redis::Connection, field: &str| -> i64 {
        let info: String = redis::cmd("INFO").query(raw).unwrap();
        let line = info
            .lines()
            .find(|line| line.starts_with(&format!("{field}:")));
        line.and_then(|line| line.split(':').nth(1)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in INFO"))
    };
    let connections = info(&mut raw, "total_connections_received");
    // Writes are held, so that every obtain waits on the connection.
    let () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "10000", "WRITE"])
        .query(&mut raw)
        .unwrap();
    let keys: Vec<String> = (0..CALLS).map(|i| format!("job:{i}")).collect();
    let obtains = futures::future::join_all(
        keys.iter()
            .map(|key| locker.obtain(key, LONG, ObtainOptions::new())),
    );
    let cut = async {
        let started = Instant::now();
        while info(&mut raw, "blocked_clients") == 0 {
            assert!(started.elapsed() < LONG, "no obtain reached the server");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let killed: i64 = redis::cmd("CLIENT")
            .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
            .query(&mut raw)
            .unwrap();
        assert_eq!(killed, 1, "the locker's one command connection");
        let () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut raw).unwrap();
    };
    let (locks, ()) = tokio::join!(obtains, cut);
    for lock in locks {
        server.expect_ok(lock, "an obtain sent again after the cut");
    }
    assert_eq!(
        info(&mut raw, "total_connections_received") - connections,
        1,
        "the cut connection was opened again once"
    );
}

/// A connection that cannot be opened is tried once more after a short
/// pause, at connect and when a dropped one is opened again: one reset (a
/// server still starting, a load balancer between targets) is ridden out,
/// two in a row are reported.
#[tokio::test]
async fn a_connection_reset_while_opening_is_tried_once_more() {
    let server = RedisServer::start();
    let proxy = Proxy::in_front_of(&server);
    proxy.refuse_next(1);
    let locker = server.expect_ok(
        Locker::connect(&proxy.url()).await,
        "connect through one reset",
    );
    assert_eq!(proxy.accepted(), 2, "the reset connection, then one more");
    let lock = server.expect_ok(
        locker.obtain("job", LONG, ObtainOptions::new()).await,
        "obtain",
    );

    // The connection drops, and its first reopening is reset too: the call
    // that found it dropped waits for the second.
    proxy.refuse_next(1);
    proxy.drop_connections();
    server.expect_ok(
        lock.refresh(LONG).await,
        "refresh through a drop and a reset",
    );
    assert_eq!(proxy.accepted(), 4, "the reset reopening, then one more");

    proxy.refuse_next(2);
    let err = Locker::connect(&proxy.url()).await.unwrap_err();
    assert!(
        matches!(&err, LockError::Backend(backend) if backend.kind() == BackendErrorKind::Unreachable),
        "{err:?}"
    );
}

#[tokio::test]
async fn restart_without_persistence_loses_the_lease_and_the_owner_learns_it() {
    let mut server = RedisServer::start();
    let locker = server.locker().await;
    let lock = server.expect_ok(
        locker.obtain("job", LONG, ObtainOptions::new()).await,
        "obtain",
    );
    server.restart();
    let err = lock.refresh(LONG).await.unwrap_err();
    assert!(matches!(err, LockError::NotHeld { .. }), "{err:?}");
    server.expect_ok(
        locker.obtain("job", LONG, ObtainOptions::new()).await,
        "obtain after restart",
    );
}

/// Calls per command since the last `CONFIG RESETSTAT`, from `INFO commandstats`.
fn command_calls(server: &RedisServer) -> std::collections::HashMap<String, u64> {
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

#[tokio::test]
async fn a_plain_obtain_is_one_set_command_busy_or_not() {
    let server = RedisServer::start();
    let (holder, other) = (server.locker().await, server.locker().await);
    let ttl = Duration::from_secs(30);
    let () = server.cmd(&["CONFIG", "RESETSTAT"]);

    let lock = server.expect_ok(
        holder.obtain("job", ttl, ObtainOptions::new()).await,
        "obtain",
    );
    let busy = other.obtain("job", ttl, ObtainOptions::new()).await;
    assert!(busy.is_err_and(|err| err.is_not_obtained()));
    let calls = command_calls(&server);
    assert_eq!(calls.get("set"), Some(&2), "{calls:?}");
    assert_eq!(
        calls.keys().filter(|name| name.starts_with("eval")).count(),
        0,
        "a script ran: {calls:?}"
    );
    // What the plain attempt wrote is the lock any other client sees.
    let value: String = server.cmd(&["GET", "job"]);
    assert!(value.starts_with(lock.token()));
    let left: i64 = server.cmd(&["PTTL", "job"]);
    assert!(left > 29_000, "{left}");
    server.expect_ok(lock.release().await, "release");
}
