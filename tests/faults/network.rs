//! Network faults between the locker and Redis, made by a proxy: replies
//! slower than the response timeout, a black hole, dropped connections, and
//! healing from each.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockmacro_runtime::{
    BackendErrorKind, LockError, Locker, ObtainOptions, RedisBackend, RedisConfig, RetryStrategy,
    distributed_lock,
};
use tokio::sync::oneshot;
use tokio::time::Instant;

use lockmacro_testkit::RedisServer;
use lockmacro_testkit::proxy::Proxy;

const TTL: Duration = Duration::from_secs(1);
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(300);

/// A locker that reaches `server` through `proxy`.
async fn through(proxy: &Proxy, server: &RedisServer) -> Locker {
    let config = RedisConfig::default()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(RESPONSE_TIMEOUT);
    Locker::new(server.expect_ok(
        RedisBackend::connect_with(&proxy.url(), config).await,
        "connect through the proxy",
    ))
}

fn waiting() -> ObtainOptions {
    ObtainOptions::new()
        .retry(RetryStrategy::linear(Duration::from_millis(20)).deadline(Duration::from_secs(10)))
}

/// The proxy itself, checked with plain connections before the tests rely on
/// it.
#[test]
fn proxy_passes_delays_holds_and_drops() {
    let server = RedisServer::start();
    let proxy = Proxy::in_front_of(&server);
    let client = redis::Client::open(proxy.url()).unwrap();
    let connect = || {
        let connection = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        connection
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        connection
    };
    let ping = |connection: &mut redis::Connection| redis::cmd("PING").query::<String>(connection);

    let mut connection = connect();
    assert_eq!(ping(&mut connection).unwrap(), "PONG");

    proxy.latency(Duration::from_millis(100));
    let started = std::time::Instant::now();
    assert_eq!(ping(&mut connection).unwrap(), "PONG");
    // Both ways.
    assert!(started.elapsed() >= Duration::from_millis(200));
    proxy.heal();

    let mut held = connect();
    proxy.black_hole();
    let err = ping(&mut held).unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    proxy.heal();
    // The PING held in the black hole is delivered, and its reply comes first.
    assert_eq!(ping(&mut held).unwrap(), "PONG");
    assert_eq!(ping(&mut held).unwrap(), "PONG");

    let before = proxy.accepted();
    proxy.drop_connections();
    assert!(
        ping(&mut connection).is_err(),
        "the connection survived the drop"
    );
    let mut fresh = connect();
    assert_eq!(ping(&mut fresh).unwrap(), "PONG");
    assert_eq!(proxy.accepted(), before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_beyond_the_response_timeout_fails_obtain_with_a_timeout() {
    let server = RedisServer::start();
    let proxy = Proxy::in_front_of(&server);
    let locker = through(&proxy, &server).await;

    proxy.latency(Duration::from_secs(1));
    let started = Instant::now();
    let err = server.expect_err(
        locker.obtain("job", TTL, ObtainOptions::new()).await,
        "obtain with 1 s of latency",
    );
    let took = started.elapsed();
    assert!(
        matches!(&err, LockError::Backend(backend) if backend.kind() == BackendErrorKind::Timeout),
        "{err:?}"
    );
    assert!(took < Duration::from_secs(5), "failed only after {took:?}");

    // The attempt reached the server anyway, late, and may have taken the
    // key: it stays taken for at most its ttl, by nobody who knows its token.
    proxy.heal();
    let lock = server.expect_ok(
        locker.obtain("job", TTL, waiting()).await,
        "obtain once healed",
    );
    server.expect_ok(lock.release().await, "release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn black_hole_while_held_loses_the_lease_on_its_local_deadline() {
    let server = RedisServer::start();
    let proxy = Proxy::in_front_of(&server);
    let holder = through(&proxy, &server).await;
    let contender = server.locker().await;

    #[distributed_lock(key = "job", ttl = "1s", locker = locker, on_lost = "abort", guard = lease)]
    async fn job(
        locker: &Locker,
        entered: oneshot::Sender<Instant>,
        dropped: Arc<Mutex<Option<Instant>>>,
    ) -> Result<(), LockError> {
        let _ = locker;
        struct Flag(Arc<Mutex<Option<Instant>>>);
        impl Drop for Flag {
            fn drop(&mut self) {
                *self.0.lock().unwrap() = Some(Instant::now());
            }
        }
        let _flag = Flag(dropped);
        let _ = entered.send(lease.deadline());
        std::future::pending::<()>().await;
        unreachable!("a pending future never completes")
    }

    let dropped = Arc::new(Mutex::new(None));
    let (entered_tx, entered) = oneshot::channel();
    let call = tokio::spawn({
        let (holder, dropped) = (holder.clone(), dropped.clone());
        async move { job(&holder, entered_tx, dropped).await }
    });
    let first_deadline = entered.await.unwrap();
    proxy.black_hole();
    let cut = Instant::now();
    // Waiting from the start, to get in as soon as the server lets it.
    let contending = tokio::spawn(async move {
        let lock = contender.obtain("job", TTL, waiting()).await;
        (lock, Instant::now())
    });

    // Nothing hangs: the body is dropped on the local deadline, and the
    // release that follows gives up after the response timeout.
    let result = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the call hung in the black hole")
        .unwrap();
    let returned = Instant::now();
    let err = result.unwrap_err();
    assert!(
        matches!(&err, LockError::Lost { key, .. } if key == "job"),
        "{err:?}"
    );
    let stopped = dropped.lock().unwrap().expect("the body was not dropped");
    // No refresh sent after the cut was confirmed, so the lease could not be
    // declared lost before the deadline of one sent before it.
    assert!(
        returned >= first_deadline,
        "lost {:?} after the cut",
        returned - cut
    );

    // The server never heard of the loss: the key expires by its ttl.
    let (lock, contended) = contending.await.unwrap();
    let lock = server.expect_ok(lock, "contender after the holder's lease ran out");
    // Not asserted: the body is dropped when the timer of its deadline fires,
    // which is 1% of the ttl plus 2 ms before the key can expire on the
    // server; a holder stalled longer than that (a loaded machine) is still
    // inside when the contender gets in. Fencing covers the difference.
    match stopped.checked_duration_since(contended) {
        Some(late) => println!("the holder stopped {late:?} after the contender got in"),
        None => println!(
            "the holder stopped {:?} before the contender got in",
            contended - stopped
        ),
    }
    server.expect_ok(lock.release().await, "release");

    proxy.heal();
    let again = server.expect_ok(
        holder.obtain("job", TTL, waiting()).await,
        "obtain through the healed proxy",
    );
    server.expect_ok(again.release().await, "release once healed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connections_are_replaced_by_the_next_command() {
    let server = RedisServer::start();
    let proxy = Proxy::in_front_of(&server);
    let locker = through(&proxy, &server).await;
    let lock = server.expect_ok(
        locker.obtain("job", TTL * 10, ObtainOptions::new()).await,
        "obtain",
    );
    let before = proxy.accepted();

    proxy.drop_connections();
    server.expect_ok(lock.refresh(TTL * 10).await, "refresh after the drop");
    assert!(proxy.accepted() > before, "no new connection was made");
    let left: i64 = server.cmd(&["PTTL", "job"]);
    assert!(
        left > TTL.as_millis() as i64,
        "the refresh did not reach the server: {left}"
    );
    server.expect_ok(lock.release().await, "release");
}
