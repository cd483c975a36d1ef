//! Redis (or Valkey) frozen (SIGSTOP) for longer than the ttl while a body
//! runs under `on_lost = "abort"`: the holder gives up on its own local
//! deadline, without hearing from the server, and has stopped before a
//! second holder gets in.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockmacro_runtime::{
    LockError, LockGuard, Locker, ObtainOptions, RetryStrategy, distributed_lock,
};
use tokio::sync::oneshot;
use tokio::time::Instant;

use lockmacro_testkit::RedisServer;
use lockmacro_testkit::program::Program;

const TTL: Duration = Duration::from_secs(1);

/// When the body stopped, and the lease's local deadline then.
#[derive(Debug, Clone, Copy)]
struct Stop {
    at: Instant,
    deadline: Instant,
}

/// Records the moment the body's future is dropped (aborted) or finishes.
struct RecordStop<'a> {
    lease: &'a LockGuard,
    stop: Arc<Mutex<Option<Stop>>>,
}

impl Drop for RecordStop<'_> {
    fn drop(&mut self) {
        *self.stop.lock().unwrap() = Some(Stop {
            at: Instant::now(),
            deadline: self.lease.deadline(),
        });
    }
}

on_each_program! {
    runtime: (flavor = "multi_thread", worker_threads = 2),
    cases: [paused_server_holder_stops_on_its_deadline_before_a_second_holder_gets_in],
}

async fn paused_server_holder_stops_on_its_deadline_before_a_second_holder_gets_in(
    program: Program,
) {
    let server = RedisServer::start_as(program, &[]);
    let holder = server.locker().await;
    let contender = server.locker().await;

    #[distributed_lock(key = "job", ttl = "1s", locker = locker, on_lost = "abort", guard = lease)]
    async fn job(
        locker: &Locker,
        entered: oneshot::Sender<()>,
        stop: Arc<Mutex<Option<Stop>>>,
    ) -> Result<(), LockError> {
        let _ = locker;
        let _record = RecordStop { lease, stop };
        let _ = entered.send(());
        std::future::pending::<()>().await;
        unreachable!("a pending future never completes")
    }

    let stop = Arc::new(Mutex::new(None));
    let (entered_tx, entered) = oneshot::channel();
    let call = tokio::spawn({
        let (holder, stop) = (holder.clone(), stop.clone());
        async move { job(&holder, entered_tx, stop).await }
    });
    entered.await.unwrap();

    server.pause();
    let paused = Instant::now();
    // Every refresh confirmed before the pause was sent before it, so the key
    // expires on the server's clock by `paused + TTL`; resuming a little
    // later lets its expiry, not the resume, decide when a second holder can
    // get in.
    tokio::time::sleep_until(paused + TTL + Duration::from_millis(300)).await;
    server.resume();
    let waiting = ObtainOptions::new()
        .retry(RetryStrategy::linear(Duration::from_millis(10)).deadline(Duration::from_secs(10)));
    let second = server.expect_ok(contender.obtain("job", TTL, waiting).await, "second holder");
    let second_at = Instant::now();

    let result = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the call hung after the server was paused")
        .unwrap();
    let err = result.unwrap_err();
    assert!(
        matches!(&err, LockError::Lost { key, .. } if key == "job"),
        "{err:?}"
    );
    let stop = stop.lock().unwrap().expect("the body was not dropped");
    println!(
        "paused at 0; deadline {:?}, body stopped {:?}, second holder in {:?}",
        stop.deadline - paused,
        stop.at - paused,
        second_at - paused,
    );
    assert!(
        stop.deadline <= paused + TTL,
        "the deadline counts from a refresh sent during the pause"
    );
    assert!(
        stop.at >= stop.deadline,
        "declared lost {:?} before its deadline",
        stop.deadline - stop.at
    );
    assert!(
        stop.at < second_at,
        "the body still ran {:?} after the second holder got in",
        stop.at - second_at
    );
    server.expect_ok(second.release().await, "release");
}
