//! The guard the attribute hands to the body gives its tasks the end of the
//! lease as a `CancellationToken`: a task spawned with it stops when the
//! body returns, when the lease is lost, and when the locker shuts down.
//! Timeouts here are limits for a hang, not measurements.

use std::time::Duration;

use lockmacro_runtime::{LockError, Locker, distributed_lock};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use lockmacro_testkit::Fixture;

const HANG: Duration = Duration::from_secs(20);

async fn stops(worker: oneshot::Receiver<JoinHandle<()>>, when: &str) {
    let worker = tokio::time::timeout(HANG, worker)
        .await
        .expect("the body did not start its worker")
        .expect("the body ended before it started its worker");
    tokio::time::timeout(HANG, worker)
        .await
        .unwrap_or_else(|_| panic!("the worker outlived the lease {when}"))
        .expect("worker task");
}

pub async fn a_task_spawned_with_the_bodys_token_stops_when_the_body_returns(fixture: &Fixture) {
    let locker = fixture.locker().await;

    #[distributed_lock(key = "job", ttl = "30s", locker = locker, guard = lease)]
    async fn job(locker: &Locker, out: oneshot::Sender<JoinHandle<()>>) -> Result<bool, LockError> {
        let _ = locker;
        let token = lease.cancellation_token();
        let _ = out.send(tokio::spawn(token.clone().cancelled_owned()));
        tokio::task::yield_now().await;
        Ok(token.is_cancelled())
    }

    let (out, worker) = oneshot::channel();
    let cancelled_inside = fixture.check(job(&locker, out).await, "job");
    assert!(
        !cancelled_inside,
        "the token was cancelled while the body ran"
    );
    stops(worker, "released as the body returned").await;
}

pub async fn a_task_spawned_with_the_bodys_token_stops_when_the_lease_is_lost(fixture: &Fixture) {
    let locker = fixture.locker().await;

    // `max_hold` ends the renewals: the lease is lost at its deadline.
    #[distributed_lock(key = "job", ttl = "1s", max_hold = "1500ms", locker = locker, guard = lease)]
    async fn job(locker: &Locker, out: oneshot::Sender<JoinHandle<()>>) -> Result<(), LockError> {
        let _ = locker;
        let _ = out.send(tokio::spawn(lease.cancellation_token().cancelled_owned()));
        std::future::pending::<()>().await;
        unreachable!("a pending future never completes")
    }

    let (out, worker) = oneshot::channel();
    let call = tokio::spawn({
        let locker = locker.clone();
        async move { job(&locker, out).await }
    });
    stops(worker, "lost").await;
    let err = tokio::time::timeout(HANG, call)
        .await
        .expect("the body outlived its lease")
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Lost { key } if key == "job"),
        "{err:?}"
    );
}

pub async fn shutdown_ends_the_body_with_shut_down_and_cancels_its_token(fixture: &Fixture) {
    let locker = fixture.locker().await;

    #[distributed_lock(key = "job", ttl = "30s", locker = locker, guard = lease)]
    async fn job(locker: &Locker, out: oneshot::Sender<JoinHandle<()>>) -> Result<(), LockError> {
        let _ = locker;
        let _ = out.send(tokio::spawn(lease.cancellation_token().cancelled_owned()));
        std::future::pending::<()>().await;
        unreachable!("a pending future never completes")
    }

    let (out, worker) = oneshot::channel();
    let (started_tx, started) = oneshot::channel();
    let call = tokio::spawn({
        let locker = locker.clone();
        async move {
            let (out_tx, out_rx) = oneshot::channel();
            let running = job(&locker, out_tx);
            tokio::pin!(running);
            // Hands the worker on once the body started it.
            let worker = tokio::select! {
                worker = out_rx => worker.expect("the body started its worker"),
                result = &mut running => panic!("the body ended: {result:?}"),
            };
            let _ = started_tx.send(());
            let _ = out.send(worker);
            running.await
        }
    });
    tokio::time::timeout(HANG, started)
        .await
        .expect("the body did not start")
        .unwrap();
    let report = locker.shutdown().await;
    assert_eq!(report.given_back, 1, "{report:?}");
    stops(worker, "given back by the shutdown").await;
    let err = tokio::time::timeout(HANG, call)
        .await
        .expect("the body outlived the shutdown")
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&err, LockError::ShutDown { key } if key == "job"),
        "{err:?}"
    );
    assert!(!fixture.is_held("job").await, "the key is still held");
}
