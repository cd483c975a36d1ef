use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lockmacro_runtime::{LockError, Locker, ObtainOptions, distributed_lock};
use tokio::sync::oneshot;

use lockmacro_testkit::Fixture;

/// Sets its flag when dropped: shows that a body's future was dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

pub async fn body_longer_than_the_ttl_keeps_the_lock(fixture: &Fixture) {
    let locker = fixture.locker().await;
    let contender = fixture.locker().await;

    // The watchdog refreshes about every third of the ttl: a ttl of 3 s
    // leaves it two seconds to get a turn on a loaded machine (with 300 ms,
    // leases were lost while two builds ran beside the suite; with 2 s, once
    // on Redlock at a load of 10).
    #[distributed_lock(key = "report", ttl = "3s", locker = locker, guard = lease)]
    async fn report(locker: &Locker, contender: &Locker) -> Result<u32, LockError> {
        let _ = locker;
        let mut refused = 0;
        // Three ttls long; the lease must hold all along.
        for _ in 0..15 {
            tokio::time::sleep(Duration::from_millis(600)).await;
            let attempt = contender
                .obtain("report", Duration::from_secs(5), ObtainOptions::new())
                .await;
            if attempt.is_err_and(|err| err.is_not_obtained()) {
                refused += 1;
            }
            assert!(!lease.is_lost());
        }
        Ok(refused)
    }

    assert_eq!(
        report(&locker, &contender).await.unwrap(),
        15,
        "the contender got in while the body ran"
    );
}

pub async fn lost_lease_under_abort_drops_the_body_and_returns_lost(fixture: &Fixture) {
    let locker = fixture.locker().await;

    #[distributed_lock(key = "job", ttl = "600ms", locker = locker)]
    async fn job(
        locker: &Locker,
        entered: oneshot::Sender<()>,
        dropped: Arc<AtomicBool>,
    ) -> Result<(), LockError> {
        let _ = locker;
        let _flag = DropFlag(dropped);
        let _ = entered.send(());
        std::future::pending::<()>().await;
        unreachable!("a pending future never completes")
    }

    let dropped = Arc::new(AtomicBool::new(false));
    let (entered_tx, entered) = oneshot::channel();
    let call = tokio::spawn({
        let (locker, dropped) = (locker.clone(), dropped.clone());
        async move { job(&locker, entered_tx, dropped).await }
    });
    entered.await.unwrap();
    // Someone else overwrites the key: the next refresh is refused.
    fixture.overwrite("job", "someone-else").await;
    let err = call.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, LockError::Lost { key, .. } if key == "job"),
        "{err:?}"
    );
    assert!(
        dropped.load(Ordering::SeqCst),
        "the body's future was not dropped"
    );
    assert_eq!(
        fixture.value("job").await.as_deref(),
        Some("someone-else"),
        "the other owner's key was touched"
    );
}

pub async fn lost_lease_under_continue_lets_the_body_finish(fixture: &Fixture) {
    let locker = fixture.locker().await;

    #[distributed_lock(key = "job", ttl = "600ms", locker = locker, on_lost = "continue", guard = lease)]
    async fn job(locker: &Locker, entered: oneshot::Sender<()>) -> Result<bool, LockError> {
        let _ = locker;
        let _ = entered.send(());
        lease.lost().await;
        Ok(lease.is_lost())
    }

    let (entered_tx, entered) = oneshot::channel();
    let call = tokio::spawn({
        let locker = locker.clone();
        async move { job(&locker, entered_tx).await }
    });
    entered.await.unwrap();
    fixture.overwrite("job", "someone-else").await;
    assert!(call.await.unwrap().unwrap());
    assert_eq!(fixture.value("job").await.as_deref(), Some("someone-else"));
}

pub async fn lease_is_lost_on_its_local_deadline_while_redis_is_unreachable(fixture: &Fixture) {
    let locker = fixture.locker().await;

    #[distributed_lock(key = "job", ttl = "1s", locker = locker)]
    async fn job(
        locker: &Locker,
        entered: oneshot::Sender<tokio::time::Instant>,
    ) -> Result<(), LockError> {
        let _ = locker;
        let _ = entered.send(tokio::time::Instant::now());
        std::future::pending::<()>().await;
        unreachable!("a pending future never completes")
    }

    let (entered_tx, entered) = oneshot::channel();
    let call = tokio::spawn({
        let locker = locker.clone();
        async move { job(&locker, entered_tx).await }
    });
    let body_started = entered.await.unwrap();
    fixture.pause();
    // No refresh can succeed while every server is frozen (on one server and
    // on the cluster a request waits for the response timeout, 3 s, longer
    // than the ttl; Redlock gives up on each master after a tenth of the ttl
    // and asks again): only the local deadline can end the call.
    let result = tokio::time::timeout(Duration::from_secs(20), call).await;
    let lost_at = tokio::time::Instant::now();
    fixture.resume();
    let err = result
        .expect("the call hung while the servers were paused")
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, LockError::Lost { .. }),
        "{err:?}\n{}",
        fixture.logs()
    );
    // The lease was taken before the body started, so its deadline is at most
    // a ttl after that: the lease was not declared lost before the deadline.
    assert!(
        lost_at >= body_started + Duration::from_millis(600),
        "lost after {:?}",
        lost_at - body_started
    );
}

pub async fn no_task_outlives_its_lock(fixture: &Fixture) {
    let locker = fixture.locker().await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let baseline = metrics.num_alive_tasks();

    // A body longer than the ttl: the watchdog refreshes it. The ttl leaves
    // the watchdog two thirds of a second to get a turn (with 300 ms, the
    // lease was lost once on a loaded machine).
    #[distributed_lock(key = "job", ttl = "1s", locker = locker)]
    async fn job(locker: &Locker) -> Result<(), LockError> {
        let _ = locker;
        tokio::time::sleep(Duration::from_millis(1200)).await;
        Ok(())
    }

    job(&locker).await.unwrap();
    let (entered_tx, entered) = oneshot::channel::<()>();
    let cancelled = tokio::spawn({
        let locker = locker.clone();
        async move {
            #[distributed_lock(key = "other", ttl = "30s", locker = locker)]
            async fn forever(
                locker: &Locker,
                entered: oneshot::Sender<()>,
            ) -> Result<(), LockError> {
                let _ = (locker, entered.send(()));
                std::future::pending().await
            }
            forever(&locker, entered_tx).await
        }
    });
    entered.await.unwrap();
    cancelled.abort();
    let _ = cancelled.await;

    // The watchdog and the background release finish on their own; wait for
    // them, bounded by a hang limit.
    for _ in 0..1000 {
        if metrics.num_alive_tasks() <= baseline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // At most the baseline: a connection pool (sqlx's) hands a connection
    // back in a task of its own, which may still be alive when the baseline
    // is taken and gone by now.
    assert!(
        metrics.num_alive_tasks() <= baseline,
        "tasks outlived their locks: {} alive, {baseline} before",
        metrics.num_alive_tasks()
    );
    // The count can drop below the baseline while the release is still on
    // its way (a pool's task ending meanwhile), so the key gets a hang limit
    // of its own, far inside its ttl: only a release frees it in time.
    let mut held = true;
    for _ in 0..100 {
        held = fixture.is_held("other").await;
        if !held {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!held, "the cancelled call's key was not released");
}

pub async fn max_hold_aborts_a_body_that_runs_too_long(fixture: &Fixture) {
    let locker = fixture.locker().await;
    let contender = fixture.locker().await;

    #[distributed_lock(key = "job", ttl = "300ms", max_hold = "1s", locker = locker)]
    async fn job(locker: &Locker, dropped: Arc<AtomicBool>) -> Result<(), LockError> {
        let _ = locker;
        let _flag = DropFlag(dropped);
        // Stuck: only `max_hold` can end it.
        std::future::pending::<()>().await;
        unreachable!("a pending future never completes")
    }

    let dropped = Arc::new(AtomicBool::new(false));
    let err = tokio::time::timeout(Duration::from_secs(20), job(&locker, dropped.clone()))
        .await
        .expect("the body outlived max_hold by far")
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Lost { key, .. } if key == "job"),
        "{err:?}"
    );
    assert!(dropped.load(Ordering::SeqCst), "the body was not dropped");
    let waiting = ObtainOptions::new().retry(
        lockmacro_runtime::RetryStrategy::linear(Duration::from_millis(10))
            .deadline(Duration::from_secs(10)),
    );
    fixture.check(
        contender
            .obtain("job", Duration::from_secs(30), waiting)
            .await,
        "obtain after max_hold",
    );
}
