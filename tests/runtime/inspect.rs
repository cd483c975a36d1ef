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

/// What each holder holds and the metadata it shows, sorted: the order of
/// the holders is the backend's.
fn shown(seen: &Inspection) -> Vec<String> {
    let mut shown: Vec<String> = seen
        .holders
        .iter()
        .map(|holder| format!("{:?} {}", holder.held_as, holder.metadata))
        .collect();
    shown.sort_unstable();
    shown
}

/// Nothing of `key` is left in the store once its leases are given back:
/// not the key, nor what the backend keeps beside it by its name (on
/// Redis, the hash of its shares' metadata).
async fn nothing_left(fx: &Fixture, key: &str) {
    assert!(!fx.is_held(key).await, "`{key}` is left held");
    let left = fx.keys_named_after(key);
    assert!(left.is_empty(), "left behind `{key}`: {left:?}");
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
    assert_eq!(shown(&seen), ["Permit a", "Permit b"], "{seen:?}");
    fx.check(one.release().await, "release");
    let seen = inspect(fx, &a, "jobs").await;
    assert_eq!(shown(&seen), ["Permit b"], "{seen:?}");
    fx.check(two.release().await, "release");
    assert_eq!(inspect(fx, &a, "jobs").await, Inspection::free());
    nothing_left(fx, "jobs").await;
}

pub async fn inspect_sees_readers_then_the_writer(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let read = || ObtainOptions::new().read();
    let reads = [
        fx.check(
            a.obtain("doc", LONG, read().metadata("reader-a")).await,
            "read",
        ),
        // No metadata: shown as none.
        fx.check(b.obtain("doc", LONG, read()).await, "read"),
    ];
    let seen = inspect(fx, &a, "doc").await;
    assert_eq!(seen.kind, Some(KeyKind::ReadWrite), "{seen:?}");
    let held: Vec<HeldAs> = seen.holders.iter().map(|holder| holder.held_as).collect();
    assert_eq!(held, [HeldAs::Read, HeldAs::Read], "{seen:?}");
    assert_eq!(shown(&seen), ["Read ", "Read reader-a"], "{seen:?}");
    for read in reads {
        fx.check(read.release().await, "release");
    }
    nothing_left(fx, "doc").await;
    let write = fx.check(
        a.obtain("doc", LONG, ObtainOptions::new().write().metadata("writer"))
            .await,
        "write",
    );
    let seen = inspect(fx, &a, "doc").await;
    let held: Vec<HeldAs> = seen.holders.iter().map(|holder| holder.held_as).collect();
    assert_eq!(held, [HeldAs::Write], "{seen:?}");
    assert_eq!(shown(&seen), ["Write writer"], "{seen:?}");
    // A downgraded write keeps its holder's metadata.
    let read = fx.check(write.downgrade().await, "downgrade");
    let seen = inspect(fx, &a, "doc").await;
    assert_eq!(shown(&seen), ["Read writer"], "{seen:?}");
    fx.check(read.release().await, "release");
    nothing_left(fx, "doc").await;
}

/// A permit, a read and a write show their holder's metadata after a
/// refresh, and while the watchdog keeps them past their ttl; once every
/// share is given back, nothing of them is left in the store.
pub async fn inspect_shows_every_shares_metadata_then_leaves_nothing(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let short = Duration::from_secs(1);
    let kept = fx
        .check(
            a.obtain("jobs", short, permits(3).metadata("worker-a"))
                .await,
            "obtain",
        )
        .keep_alive();
    let refreshed = fx.check(
        b.obtain("jobs", short, permits(3).metadata("worker-b"))
            .await,
        "obtain",
    );
    fx.check(refreshed.refresh(LONG).await, "refresh");
    // Past several ttls: the watchdog renewed the first permit meanwhile.
    tokio::time::sleep(short * 3).await;
    assert!(!kept.is_lost(), "the watchdog lost the permit");
    let seen = inspect(fx, &a, "jobs").await;
    assert_eq!(
        shown(&seen),
        ["Permit worker-a", "Permit worker-b"],
        "{seen:?}"
    );
    fx.check(kept.release().await, "release");
    fx.check(refreshed.release().await, "release");
    assert_eq!(inspect(fx, &a, "jobs").await, Inspection::free());
    nothing_left(fx, "jobs").await;

    let read = fx.check(
        a.obtain("doc", short, ObtainOptions::new().read().metadata("reader"))
            .await,
        "read",
    );
    fx.check(read.refresh(LONG).await, "refresh");
    tokio::time::sleep(short + short / 2).await;
    let seen = inspect(fx, &a, "doc").await;
    assert_eq!(shown(&seen), ["Read reader"], "{seen:?}");
    fx.check(read.release().await, "release");
    nothing_left(fx, "doc").await;

    let write = fx
        .check(
            b.obtain(
                "doc",
                short,
                ObtainOptions::new().write().metadata("writer"),
            )
            .await,
            "write",
        )
        .keep_alive();
    tokio::time::sleep(short * 3).await;
    assert!(!write.is_lost(), "the watchdog lost the write");
    let seen = inspect(fx, &a, "doc").await;
    assert_eq!(shown(&seen), ["Write writer"], "{seen:?}");
    fx.check(write.release().await, "release");
    nothing_left(fx, "doc").await;
}

/// A holder that dies without giving its permit back takes its metadata
/// with it once its share lapses, whether or not other shares are held.
pub async fn a_dead_holders_metadata_goes_with_its_share(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let ttl = Duration::from_secs(1);
    let alive = fx.check(
        a.obtain("jobs", LONG, permits(2).metadata("alive")).await,
        "obtain",
    );
    let dead = fx.check(
        b.obtain("jobs", ttl, permits(2).metadata("dead")).await,
        "obtain",
    );
    // Neither released nor renewed: as a process that died would leave it.
    std::mem::forget(dead);
    // Tried once at a time, not waited for: a waiting attempt leaves a
    // waiters flag beside the key for a while, which `nothing_left` would
    // find.
    let late = tokio::time::timeout(HANG, async {
        loop {
            match b.obtain("jobs", LONG, permits(2).metadata("late")).await {
                Err(err) if err.is_not_obtained() => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => return other,
            }
        }
    });
    let late = late
        .await
        .expect("the dead holder's permit never came back");
    let late = fx.check(late, "obtain after the ttl");
    let seen = inspect(fx, &a, "jobs").await;
    assert_eq!(shown(&seen), ["Permit alive", "Permit late"], "{seen:?}");
    // On Redis the hash beside the set keeps no field for the dead share.
    let holders = format!("{{{}}}:holders", fx.wire_key("jobs"));
    for server in fx.servers_for(&fx.wire_key("jobs")) {
        let mut kept: Vec<String> = server.cmd(&["HVALS", &holders]);
        kept.sort_unstable();
        assert_eq!(kept, ["alive", "late"], "`{holders}`");
    }
    fx.check(alive.release().await, "release");
    fx.check(late.release().await, "release");
    nothing_left(fx, "jobs").await;
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

/// A permit handed to a fair waiter by the release of the one before shows
/// the waiter's metadata.
pub async fn a_permit_handed_to_a_fair_waiter_shows_its_metadata(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let first = fx.check(
        a.obtain("job", LONG, permits(1).metadata("first")).await,
        "obtain",
    );
    let fair = permits(1)
        .metadata("second")
        .fair()
        .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(LONG));
    let waiter = tokio::spawn(async move { b.obtain("job", LONG, fair).await });
    until(fx, &a, |seen| seen.waiters == 1).await;
    fx.check(first.release().await, "release");
    let second = tokio::time::timeout(HANG, waiter)
        .await
        .expect("the waiter was never handed the permit")
        .expect("the waiter's task");
    let second = fx.check(second, "the waiter's obtain");
    let seen = inspect(fx, &a, "job").await;
    assert_eq!(shown(&seen), ["Permit second"], "{seen:?}");
    fx.check(second.release().await, "release");
    assert!(inspect(fx, &a, "job").await.holders.is_empty());
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
