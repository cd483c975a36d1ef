//! A process that shuts its locker down before it exits leaves no key held:
//! its lock, guard, permit, leadership and a lock it dropped just before are
//! all free once the process is gone, not a 30 s ttl later.

use std::env;
use std::io::{BufRead, BufReader};
use std::time::Duration;

use lockmacro_runtime::{LockError, Locker, ObtainOptions};
use lockmacro_testkit::{Fixture, Kind, RedisServer};

use crate::process::rerun_as_child;

/// Set for the child process: `<backend>|<namespace>|<url>[,<url>…]`.
const CHILD_ENV: &str = "LOCKMACRO_FAULTS_SHUTDOWN";
/// Far longer than the test: a key still there at the end was not given back.
const TTL: Duration = Duration::from_secs(30);
const HANG: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_keys_are_free_once_a_process_that_shut_down_exits() {
    if let Ok(spec) = env::var(CHILD_ENV) {
        return hold_then_shut_down(&spec).await;
    }
    let fx = Fixture::on(Kind::Redis).await;
    let url = fx.master().expect("one server").url();
    let keys = ["lock", "guard", "permit", "leader", "dropped"];
    keys_are_free_after_exit(
        &fx,
        "shutdown::redis_keys_are_free_once_a_process_that_shut_down_exits",
        &format!("redis|{}|{url}", fx.namespace()),
        &keys,
    )
    .await;
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_keys_are_free_once_a_process_that_shut_down_exits() {
    if let Ok(spec) = env::var(CHILD_ENV) {
        return hold_then_shut_down(&spec).await;
    }
    let fx = Fixture::on(Kind::Etcd).await;
    let endpoints = fx.etcd_cluster().expect("an etcd fixture").endpoints();
    // etcd keeps no permits: the rest.
    let keys = ["lock", "guard", "leader", "dropped"];
    keys_are_free_after_exit(
        &fx,
        "shutdown::etcd_keys_are_free_once_a_process_that_shut_down_exits",
        &format!("etcd|{}|{}", fx.namespace(), endpoints.join(",")),
        &keys,
    )
    .await;
}

/// Runs `test` again as the child, checks that it holds every one of `keys`,
/// lets it shut down and exit, and checks that none is held then.
async fn keys_are_free_after_exit(fx: &Fixture, test: &str, spec: &str, keys: &[&str]) {
    let mut child = rerun_as_child(test, CHILD_ENV, spec);
    let stdout = child.0.stdout.take().unwrap();
    let (holding_tx, holding) = tokio::sync::oneshot::channel();
    let output = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
        let _ = holding_tx.send(lines.any(|line| line == "holding"));
        // Read to the end, so that the child never blocks on a full pipe.
        lines.collect::<Vec<_>>()
    });
    let holding = tokio::time::timeout(HANG, holding)
        .await
        .expect("the child did not take its keys in time");
    assert_eq!(
        holding,
        Ok(true),
        "the child exited without taking its keys"
    );
    for key in keys {
        assert!(fx.is_held(key).await, "the child does not hold `{key}`");
    }
    // The child shuts down once it has been told to, on its standard input
    // closing: until then it holds its keys.
    drop(child.0.stdin.take());
    let output = tokio::time::timeout(HANG, output)
        .await
        .expect("the child did not exit in time")
        .unwrap();
    let status = tokio::task::spawn_blocking(move || child.0.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "the child failed: {output:?}");
    for key in keys {
        assert!(
            !fx.is_held(key).await,
            "`{key}` is still held after the child exited: {output:?}"
        );
    }
}

/// The child's part: takes a lock, a guard, a permit (where the backend
/// keeps shares), a leadership and a lock it drops; waits for its standard
/// input to close; shuts the locker down and returns, which ends the
/// process.
async fn hold_then_shut_down(spec: &str) {
    let mut parts = spec.splitn(3, '|');
    let (backend, namespace, urls) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let locker = match backend {
        "redis" => Locker::connect(urls).await.unwrap(),
        #[cfg(feature = "etcd")]
        "etcd" => Locker::etcd(urls.split(',')).await.unwrap(),
        other => panic!("unknown backend {other}"),
    }
    .with_namespace(namespace);
    let once = ObtainOptions::new;
    let lock = locker.obtain("lock", TTL, once()).await.unwrap();
    let guard = locker
        .obtain("guard", TTL, once())
        .await
        .unwrap()
        .keep_alive();
    let permit = match backend {
        "redis" => Some(
            locker
                .obtain("permit", TTL, once().permits(3))
                .await
                .unwrap(),
        ),
        _ => None,
    };
    let leader = locker.election("leader", TTL).campaign().await.unwrap();
    let dropped = locker.obtain("dropped", TTL, once()).await.unwrap();
    println!("holding");
    tokio::task::spawn_blocking(|| std::io::stdin().lines().count())
        .await
        .unwrap();
    drop(dropped);
    let report = locker.shutdown().await;
    println!("shut down: {report:?}");
    assert!(report.is_complete(), "{report:?}");
    // The handles outlive the shutdown, as in a service whose tasks still
    // hold them when `main` returns.
    assert!(guard.is_lost() && leader.is_lost());
    drop((lock, permit));
}

/// A shutdown that comes while an obtain's first attempt waits on a frozen
/// server: the attempt is not cut off (its `SET` is on the wire), and once
/// the server answers, what it took is given back before the obtain says
/// `ShutDown` and before the shutdown returns. Nothing is left held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_in_flight_at_shutdown_gives_back_what_it_took() {
    let server = RedisServer::start();
    let locker = server.locker().await;
    server.pause();
    let mut obtain = Box::pin(locker.obtain("job", TTL, ObtainOptions::new()));
    // One poll sends the attempt; the frozen server cannot answer it yet.
    assert!(futures::poll!(obtain.as_mut()).is_pending());
    let mut shutdown = Box::pin(locker.shutdown_within(HANG));
    // One poll closes the locker; it then waits for the attempt.
    assert!(futures::poll!(shutdown.as_mut()).is_pending());
    server.resume();
    let (obtained, report) = tokio::time::timeout(HANG, async { tokio::join!(obtain, shutdown) })
        .await
        .expect("the obtain and the shutdown end once the server answers");
    assert!(
        matches!(&obtained, Err(LockError::ShutDown { key }) if key == "job"),
        "{obtained:?}"
    );
    assert!(report.is_complete(), "{report:?}");
    let left: i64 = server.cmd(&["EXISTS", "job"]);
    assert_eq!(
        left, 0,
        "the key taken by the attempt in flight was left held"
    );
}
