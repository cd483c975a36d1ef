//! Seeing and clearing a key (`Locker::inspect`, `Locker::force_release`),
//! and what a refusal tells of the holder (`NotObtained`, `retry_after`).

use std::time::Duration;

use lockmacro_runtime::{
    HeldAs, Inspection, KeyKind, LockError, Locker, ObtainOptions, RetryStrategy,
};

use lockmacro_testkit::Fixture;

const LONG: Duration = Duration::from_secs(30);
/// A hang limit, never a measurement.
const HANG: Duration = Duration::from_secs(20);

fn permits(n: u32) -> ObtainOptions {
    ObtainOptions::new().permits(n)
}

async fn inspect(fx: &Fixture, locker: &Locker, key: &str) -> Inspection {
    fx.check(locker.inspect(key).await, "inspect")
}

/// Every holder's lease is live and no longer than the ttl.
fn leases_within(seen: &Inspection, ttl: Duration) {
    for holder in &seen.holders {
        let left = holder.remaining.expect("a lease with an expiry");
        assert!(left > Duration::ZERO && left <= ttl, "{seen:?}");
    }
}

pub async fn inspect_sees_a_free_key(fx: &Fixture) {
    let locker = fx.locker().await;
    assert_eq!(inspect(fx, &locker, "idle").await, Inspection::free());
}

pub async fn inspect_sees_a_lock_its_metadata_and_lease(fx: &Fixture) {
    let locker = fx.locker().await;
    let lock = fx.check(
        locker
            .obtain("job", LONG, ObtainOptions::new().metadata("worker-7"))
            .await,
        "obtain",
    );
    let seen = inspect(fx, &locker, "job").await;
    assert_eq!(seen.kind, Some(KeyKind::Lock), "{seen:?}");
    assert_eq!(seen.holders.len(), 1, "{seen:?}");
    assert_eq!(seen.holders[0].held_as, HeldAs::Lock);
    assert_eq!(seen.holders[0].metadata, "worker-7");
    leases_within(&seen, LONG);
    fx.check(lock.release().await, "release");
    assert_eq!(inspect(fx, &locker, "job").await.kind, None);
}

pub async fn inspect_reports_the_last_fence_token(fx: &Fixture) {
    let locker = fx.locker().await;
    let lock = fx.check(
        locker
            .obtain("job", LONG, ObtainOptions::new().fence())
            .await,
        "obtain",
    );
    let fence = lock.fence_token();
    let seen = inspect(fx, &locker, "job").await;
    assert_eq!(seen.fence, fence, "{seen:?}");
    fx.check(lock.release().await, "release");
    // The counter outlives the lock.
    let seen = inspect(fx, &locker, "job").await;
    assert!(seen.holders.is_empty(), "{seen:?}");
    assert_eq!(seen.fence, fence, "{seen:?}");
}

pub async fn inspect_sees_two_permit_holders(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let one = fx.check(
        a.obtain("jobs", LONG, permits(3).metadata("a")).await,
        "obtain",
    );
    let two = fx.check(
        b.obtain("jobs", LONG, permits(3).metadata("b")).await,
        "obtain",
    );
    let seen = inspect(fx, &a, "jobs").await;
    assert_eq!(
        seen.kind,
        Some(KeyKind::Semaphore { permits: 3 }),
        "{seen:?}"
    );
    assert_eq!(seen.holders.len(), 2, "{seen:?}");
    assert!(
        seen.holders
            .iter()
            .all(|holder| holder.held_as == HeldAs::Permit),
        "{seen:?}"
    );
    leases_within(&seen, LONG);
    fx.check(one.release().await, "release");
    fx.check(two.release().await, "release");
    assert_eq!(inspect(fx, &a, "jobs").await, Inspection::free());
}

pub async fn inspect_sees_readers_then_the_writer(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let reads = [
        fx.check(
            a.obtain("doc", LONG, ObtainOptions::new().read()).await,
            "read",
        ),
        fx.check(
            b.obtain("doc", LONG, ObtainOptions::new().read()).await,
            "read",
        ),
    ];
    let seen = inspect(fx, &a, "doc").await;
    assert_eq!(seen.kind, Some(KeyKind::ReadWrite), "{seen:?}");
    let held: Vec<HeldAs> = seen.holders.iter().map(|holder| holder.held_as).collect();
    assert_eq!(held, [HeldAs::Read, HeldAs::Read], "{seen:?}");
    for read in reads {
        fx.check(read.release().await, "release");
    }
    let write = fx.check(
        a.obtain("doc", LONG, ObtainOptions::new().write()).await,
        "write",
    );
    let seen = inspect(fx, &a, "doc").await;
    let held: Vec<HeldAs> = seen.holders.iter().map(|holder| holder.held_as).collect();
    assert_eq!(held, [HeldAs::Write], "{seen:?}");
    fx.check(write.release().await, "release");
}

pub async fn inspect_counts_fair_waiters(fx: &Fixture) {
    let lockers = fx.lockers(3).await;
    let holder = fx.check(
        lockers[0].obtain("job", LONG, ObtainOptions::new()).await,
        "obtain",
    );
    let fair = ObtainOptions::new()
        .fair()
        .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(LONG));
    let waiters: Vec<_> = lockers[1..]
        .iter()
        .map(|locker| {
            let (locker, fair) = (locker.clone(), fair.clone());
            tokio::spawn(async move { locker.obtain("job", LONG, fair).await })
        })
        .collect();
    let queued = until(fx, &lockers[0], |seen| seen.waiters == 2).await;
    assert_eq!(queued.holders.len(), 1, "{queued:?}");
    fx.check(holder.release().await, "release");
    let seen = until(fx, &lockers[0], |seen| {
        seen.waiters == 1 && seen.holders.len() == 1
    })
    .await;
    assert_eq!(seen.kind, Some(KeyKind::Lock), "{seen:?}");
    for waiter in waiters {
        waiter.abort();
    }
}

/// Inspects `job` until `done` holds of what it sees (within the hang limit).
async fn until(fx: &Fixture, locker: &Locker, done: impl Fn(&Inspection) -> bool) -> Inspection {
    let polled = tokio::time::timeout(HANG, async {
        loop {
            let seen = inspect(fx, locker, "job").await;
            if done(&seen) {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    polled.await.expect("inspect never saw it")
}

/// The holder keeps its lease with the watchdog; the force-release ends
/// it: its `lost()` completes, and someone else obtains.
pub async fn force_release_clears_a_key_and_its_holder_learns_it(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let ttl = Duration::from_secs(3);
    let guard = fx
        .check(a.obtain("job", ttl, ObtainOptions::new()).await, "obtain")
        .keep_alive();
    assert!(fx.check(b.force_release("job").await, "force-release"));
    tokio::time::timeout(HANG, guard.lost())
        .await
        .expect("the holder never learnt its lease was gone");
    assert!(guard.is_lost());
    let next = fx.check(
        b.obtain("job", LONG, ObtainOptions::new()).await,
        "obtain after",
    );
    assert!(
        !fx.check(a.force_release("idle").await, "force-release of a free key"),
        "a free key reported held"
    );
    fx.check(next.release().await, "release");
}

pub async fn force_release_clears_every_share(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let one = fx.check(a.obtain("jobs", LONG, permits(2)).await, "obtain");
    let two = fx.check(b.obtain("jobs", LONG, permits(2)).await, "obtain");
    assert!(fx.check(a.force_release("jobs").await, "force-release"));
    for lock in [&one, &two] {
        let refused = lock.refresh(LONG).await;
        assert!(
            refused.as_ref().is_err_and(LockError::is_not_held),
            "{refused:?}"
        );
    }
    assert_eq!(inspect(fx, &a, "jobs").await, Inspection::free());
    // Free for any kind now.
    let lock = fx.check(a.obtain("jobs", LONG, ObtainOptions::new()).await, "a lock");
    fx.check(lock.release().await, "release");
}

/// A refusal says how long the holder has left and what it recorded, with
/// or without a wait.
pub async fn a_refusal_tells_the_holders_lease_and_metadata(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let lock = fx.check(
        a.obtain("job", LONG, ObtainOptions::new().metadata("worker-7"))
            .await,
        "obtain",
    );
    let waiting = ObtainOptions::new()
        .retry(RetryStrategy::linear(Duration::from_millis(20)).max_attempts(2));
    for opts in [ObtainOptions::new(), waiting] {
        let err = b.obtain("job", LONG, opts).await.unwrap_err();
        let LockError::NotObtained { key, holder, .. } = &err else {
            panic!("expected NotObtained, got {err:?}");
        };
        assert_eq!(key, "job");
        assert_eq!(holder.as_deref(), Some("worker-7"), "{err:?}");
        let left = err.retry_after().expect("the holder's lease");
        assert!(left > Duration::ZERO && left <= LONG, "{left:?}");
    }
    fx.check(lock.release().await, "release");
}
