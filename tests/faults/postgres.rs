//! Faults on the PostgreSQL backend, against a real server of the test's
//! own: frozen (SIGSTOP) past the ttl, killed and restarted (quickly, and
//! for longer than a lease), restarted under a contended, fenced workload.
//! The lease lives in a table on the server's clock: a restart keeps it, and
//! only a restart longer than the holder's local deadline loses it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lockmacro_runtime::{FencedStore, LockError, Locker, ObtainOptions, RetryStrategy};
use lockmacro_testkit::Fixture;
use lockmacro_testkit::witness::Witness;
use tokio::sync::watch;
use tokio::time::Instant;

/// The hang limit of every wait below.
const HANG: Duration = Duration::from_secs(30);

fn patient() -> ObtainOptions {
    ObtainOptions::new()
        .retry(RetryStrategy::linear(Duration::from_millis(50)).deadline(Duration::from_secs(15)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_server_loses_the_lease_on_its_local_deadline_and_frees_it_after_the_ttl() {
    let fx = Fixture::own_postgres().await;
    let (holder, contender) = (fx.locker().await, fx.locker().await);
    let guard = fx
        .check(
            holder
                .obtain("job", Duration::from_secs(1), ObtainOptions::new())
                .await,
            "obtain",
        )
        .keep_alive();
    fx.pause();
    // No refresh is answered: only the local deadline can end this.
    let lost = tokio::time::timeout(HANG, guard.lost()).await;
    fx.resume();
    lost.expect("the lease was not reported lost while the server was frozen");
    // The server's clock ran on while it was frozen: the row has expired.
    let lock = fx.check(
        contender
            .obtain("job", Duration::from_secs(5), patient())
            .await,
        "the contender after the freeze",
    );
    assert!(
        matches!(guard.ttl().await, Err(LockError::NotHeld { .. })),
        "the old holder's token still holds the key"
    );
    fx.check(lock.release().await, "release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_restart_keeps_the_lease_and_the_holder_refreshes_after_it() {
    let fx = Fixture::own_postgres().await;
    let (holder, contender) = (fx.locker().await, fx.locker().await);
    let guard = fx
        .check(
            holder
                .obtain("job", Duration::from_secs(10), ObtainOptions::new())
                .await,
            "obtain",
        )
        .keep_alive_every(Duration::from_millis(500))
        .unwrap();
    let db = fx.postgres_db().expect("a PostgreSQL fixture");
    db.server().kill();
    db.server().start_again();
    // Committed before the crash: the row is there after recovery.
    let value = fx
        .value("job")
        .await
        .expect("the lease did not survive the restart");
    assert!(value.starts_with(guard.token()), "{value}");
    // The watchdog's next refreshes reconnect and land.
    let before = fx.lease_left("job").await.expect("a live lease");
    let refreshed = tokio::time::timeout(HANG, async {
        while fx.lease_left("job").await.is_none_or(|left| left <= before) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(refreshed.is_ok(), "no refresh landed after the restart");
    assert!(
        !guard.is_lost(),
        "the lease was lost across a quick restart"
    );
    assert!(
        contender
            .obtain("job", Duration::from_secs(1), ObtainOptions::new())
            .await
            .unwrap_err()
            .is_not_obtained(),
        "the key was free after the restart"
    );
    fx.check(guard.release().await, "release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_longer_than_the_lease_loses_it_on_the_local_deadline() {
    let fx = Fixture::own_postgres().await;
    let (holder, contender) = (fx.locker().await, fx.locker().await);
    let guard = fx
        .check(
            holder
                .obtain("job", Duration::from_secs(1), ObtainOptions::new().fence())
                .await,
            "obtain",
        )
        .keep_alive();
    let held = guard.fence_token().unwrap();
    let db = fx.postgres_db().expect("a PostgreSQL fixture");
    db.server().kill();
    let lost = tokio::time::timeout(HANG, guard.lost()).await;
    db.server().start_again();
    lost.expect("the lease was not reported lost while the server was down");
    let lock = fx.check(
        contender
            .obtain("job", Duration::from_secs(5), patient().fence())
            .await,
        "the contender after the restart",
    );
    let new = lock.fence_token().unwrap();
    assert!(new > held, "token {new} after the restart, {held} before");
    fx.check(lock.release().await, "release");
}

/// One worker's share of the load: what it may touch, and what it reports
/// to.
struct Load {
    key: &'static str,
    witness: Arc<Witness>,
    store: FencedStore,
    /// The highest token any worker, on any key, had when its obtain
    /// returned: a later obtain must get more.
    highest: Arc<AtomicU64>,
    sections: watch::Sender<usize>,
    stop: watch::Receiver<bool>,
}

/// Returns the obtains that failed, and those whose token was not above
/// every token handed out before they were called.
async fn work(id: usize, locker: Locker, load: Load) -> (usize, usize) {
    // Obtains that failed: the server was down, or busy past the deadline.
    let (mut failed, mut backwards) = (0, 0);
    let ttl = Duration::from_secs(1);
    while !*load.stop.borrow() {
        let called = Instant::now();
        let floor = load.highest.load(Ordering::SeqCst);
        let opts = ObtainOptions::new().fence().retry(
            RetryStrategy::linear(Duration::from_millis(20)).deadline(Duration::from_secs(2)),
        );
        let lock = match locker.obtain(load.key, ttl, opts).await {
            Ok(lock) => lock,
            Err(_) => {
                failed += 1;
                continue;
            }
        };
        let guard = lock.keep_alive();
        let token = guard.fence_token().expect("fenced");
        if token <= floor {
            backwards += 1;
        }
        load.highest.fetch_max(token, Ordering::SeqCst);
        let open = load.witness.enter(id, token, called);
        tokio::time::sleep(Duration::from_millis(20)).await;
        open.write(&guard);
        load.witness
            .fenced_write(&load.store, token, Duration::ZERO);
        load.sections.send_modify(|n| *n += 1);
        let _ = guard.release().await;
    }
    (failed, backwards)
}

/// Two keys, two workers on each: every key's sections are witnessed, and
/// every token is checked against all those handed out before, on either
/// key (one sequence serves them all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_load_never_sends_fence_tokens_backwards() {
    let fx = Fixture::own_postgres().await;
    let keys = ["job", "other"];
    let witnesses = keys.map(|_| Arc::new(Witness::new(Duration::from_secs(1))));
    let stores = keys.map(|_| FencedStore::memory());
    let highest = Arc::new(AtomicU64::new(0));
    let (sections, done) = watch::channel(0);
    let (stop_tx, stop) = watch::channel(false);
    let mut workers = Vec::new();
    for id in 0..4 {
        let load = Load {
            key: keys[id % 2],
            witness: witnesses[id % 2].clone(),
            store: stores[id % 2].clone(),
            highest: highest.clone(),
            sections: sections.clone(),
            stop: stop.clone(),
        };
        workers.push(tokio::spawn(work(id, fx.locker().await, load)));
    }
    let db = fx.postgres_db().expect("a PostgreSQL fixture");
    let until = |n: usize| {
        let mut done = done.clone();
        async move {
            tokio::time::timeout(HANG, done.wait_for(|seen| *seen >= n))
                .await
                .expect("the workers made no progress")
                .expect("the workers are alive");
        }
    };
    until(10).await;
    db.server().kill();
    db.server().start_again();
    let after = *done.borrow();
    until(after + 10).await;
    stop_tx.send_replace(true);
    let (mut failed, mut backwards) = (0, 0);
    for worker in workers {
        let (worker_failed, worker_backwards) = worker.await.expect("a worker panicked");
        failed += worker_failed;
        backwards += worker_backwards;
    }
    println!("obtains that failed across the restart: {failed}");
    assert_eq!(
        backwards, 0,
        "a token was not above one handed out before, across keys"
    );
    for ((key, witness), store) in keys.iter().zip(&witnesses).zip(&stores) {
        let verdict = witness.verdict(store).await;
        println!("`{key}`: {verdict}");
        assert!(verdict.increments > 0, "no critical section completed");
        assert_eq!(verdict.overlaps, 0, "valid critical sections overlapped");
        assert_eq!(
            verdict.tokens_out_of_order, 0,
            "a fencing token went backwards"
        );
        assert_eq!(
            verdict.stale_writes_accepted, 0,
            "the resource accepted a stale write"
        );
        assert_eq!(verdict.lost_updates, 0, "an update was lost");
    }
}
