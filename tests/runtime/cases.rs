//! Behaviour every backend must show, written once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lockmacro_runtime::{HoldOptions, LockError, Locker, ObtainOptions, RetryStrategy};
use tokio::time::Instant;

use lockmacro_testkit::{Fixture, Kind};

const LONG: Duration = Duration::from_secs(30);

fn once() -> ObtainOptions {
    ObtainOptions::default()
}

pub async fn obtain_then_busy_then_release(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let lock = fx.check(a.obtain("job", LONG, once()).await, "first obtain");
    assert_eq!(lock.key(), "job");
    assert_eq!(lock.token().len(), 32);
    let busy = b.obtain("job", LONG, once()).await.unwrap_err();
    assert!(busy.is_not_obtained(), "{busy:?}");
    fx.check(lock.release().await, "release");
    let again = fx.check(b.obtain("job", LONG, once()).await, "obtain after release");
    fx.check(again.release().await, "second release");
}

pub async fn busy_error_names_the_key(fx: &Fixture) {
    let locker = fx.locker().await;
    let _held = fx.check(locker.obtain("user:42", LONG, once()).await, "obtain");
    let err = locker.obtain("user:42", LONG, once()).await.unwrap_err();
    assert!(
        matches!(&err, LockError::NotObtained { key, .. } if key == "user:42"),
        "{err:?}"
    );
    assert!(err.to_string().contains("user:42"), "{err}");
}

pub async fn refresh_extends_the_lease(fx: &Fixture) {
    let locker = fx.locker().await;
    let lock = fx.check(
        locker
            .obtain("job", Duration::from_millis(300), once())
            .await,
        "obtain",
    );
    fx.check(lock.refresh(LONG).await, "refresh");
    let left = fx.check(lock.ttl().await, "ttl");
    assert!(
        left > Duration::from_secs(20),
        "ttl after refresh is {left:?}"
    );
    assert!(lock.deadline() > Instant::now() + Duration::from_secs(20));
}

pub async fn ttl_reports_the_remaining_lease(fx: &Fixture) {
    let locker = fx.locker().await;
    let lock = fx.check(
        locker.obtain("job", Duration::from_secs(10), once()).await,
        "obtain",
    );
    let left = fx.check(lock.ttl().await, "ttl");
    assert!(
        left <= Duration::from_secs(10) && left > Duration::from_secs(5),
        "{left:?}"
    );
}

pub async fn lease_expires_without_refresh(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let lock = fx.check(
        a.obtain("job", Duration::from_millis(100), once()).await,
        "obtain",
    );
    // Waiting out the ttl is the behaviour under test: no signal exists for it.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(matches!(lock.ttl().await, Err(LockError::NotHeld { .. })));
    let next = fx.check(b.obtain("job", LONG, once()).await, "obtain after expiry");
    assert!(next.ttl().await.is_ok());
}

pub async fn stale_owner_can_neither_release_nor_refresh(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let short = Duration::from_millis(100);
    // An acquire whose reply comes after its lease is not a lock (the grant
    // is given back): on a loaded machine a 100 ms lease can end on the
    // way back, so it is asked for again.
    let mut tries = 0;
    let stale = loop {
        match a.obtain("job", short, once()).await {
            Ok(lock) => break lock,
            Err(err) if err.is_not_obtained() && tries < 50 => tries += 1,
            Err(err) => fx.check(Err(err), "obtain"),
        }
    };
    // Woken by the lease's end on the server, not by a sleep.
    let takeover = ObtainOptions::default().retry(RetryStrategy::linear(short).deadline(LONG));
    let owner = fx.check(b.obtain("job", LONG, takeover).await, "takeover");

    let err = stale.refresh(LONG).await.unwrap_err();
    assert!(
        matches!(&err, LockError::NotHeld { key, .. } if key == "job"),
        "{err:?}"
    );
    let err = stale.release().await.unwrap_err();
    assert!(
        matches!(&err, LockError::NotHeld { key, .. } if key == "job"),
        "{err:?}"
    );

    // The new owner's lease is untouched.
    let left = fx.check(owner.ttl().await, "owner ttl");
    assert!(left > Duration::from_secs(20), "{left:?}");
    assert!(
        b.obtain("job", LONG, once())
            .await
            .unwrap_err()
            .is_not_obtained()
    );
}

pub async fn wrong_or_short_token_is_refused(fx: &Fixture) {
    let locker = fx.locker().await;
    let lock = fx.check(locker.obtain("job", LONG, once()).await, "obtain");
    let keys = vec![locker.wire_key("job")];
    let backend = locker.backend();
    let wrong = "0".repeat(32);
    let prefix = &lock.token()[..8];
    for token in [wrong.as_str(), "", prefix] {
        assert!(
            !fx.check(backend.refresh(&keys, token, LONG).await, "refresh"),
            "refresh with {token:?}"
        );
        assert!(
            !fx.check(backend.release(&keys, token).await, "release"),
            "release with {token:?}"
        );
        assert_eq!(
            fx.check(backend.remaining(&keys, token).await, "remaining"),
            None
        );
    }
    assert!(job_is_held(&locker).await);
    fx.check(lock.release().await, "owner release");
}

/// True when `job` is held by someone else: `locker` is refused it.
async fn job_is_held(locker: &Locker) -> bool {
    locker
        .obtain("job", LONG, once())
        .await
        .unwrap_err()
        .is_not_obtained()
}

/// Obtains and releases `job`: it was free.
async fn is_free(fx: &Fixture, locker: &Locker, what: &str) {
    let lock = fx.check(locker.obtain("job", LONG, once()).await, what);
    fx.check(lock.release().await, what);
}

/// A release told the lease's metadata (`Backend::release_value`, which
/// the Redis backends compare with the stored value whole) or only its
/// token: the token decides, whatever metadata comes with it.
pub async fn a_release_is_decided_by_the_token_with_or_without_the_metadata(fx: &Fixture) {
    let locker = fx.locker().await;
    let keys = vec![locker.wire_key("job")];
    let backend = locker.backend();
    let with_metadata = || once().metadata("worker-7");

    let lock = fx.check(locker.obtain("job", LONG, with_metadata()).await, "obtain");
    let other = "0".repeat(32);
    assert!(
        !fx.check(
            backend.release_value(&keys, &other, "worker-7").await,
            "release"
        ),
        "another token with the same metadata released the lock"
    );
    assert!(job_is_held(&locker).await);
    fx.check(lock.release().await, "owner release");

    for (metadata, what) in [
        (Some("worker-7"), "the token and its metadata"),
        (None, "the token alone"),
        (Some("worker-8"), "the token with other metadata"),
    ] {
        let lock = fx.check(locker.obtain("job", LONG, with_metadata()).await, "obtain");
        let released = match metadata {
            Some(metadata) => backend.release_value(&keys, lock.token(), metadata).await,
            None => backend.release(&keys, lock.token()).await,
        };
        assert!(fx.check(released, what), "{what}: not released");
        is_free(fx, &locker, what).await;
        drop(lock);
    }
}

pub async fn fence_tokens_strictly_increase_across_releases_and_lockers(fx: &Fixture) {
    let mut last = 0;
    for round in 0..6 {
        let locker = fx.locker().await;
        let lock = fx.check(locker.obtain("job", LONG, once().fence()).await, "obtain");
        let token = lock.fence_token().expect("a fence token was asked for");
        assert!(
            token > last,
            "round {round}: fence token {token} after {last}"
        );
        last = token;
        if round % 2 == 0 {
            fx.check(lock.release().await, "release");
        } else {
            // Expiry instead of release must not reset the counter either.
            fx.check(lock.refresh(Duration::from_millis(50)).await, "shorten");
            while fx.is_held("job").await {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

pub async fn explicit_fence_key_is_used_and_namespaced(fx: &Fixture) {
    let base = fx.locker().await;
    let billing = base.with_namespace("billing");
    // The counters of `billing`'s and `base`'s fence key `shared`, named as
    // `base` names them (the fixture adds its own namespace, if any).
    fx.set_fence_counter("billing:shared", 1_000).await;
    fx.set_fence_counter("shared", 1_000_000).await;
    let first = fx.check(
        billing.obtain("a", LONG, once().fence_key("shared")).await,
        "obtain a",
    );
    let other = fx.check(
        base.obtain("c", LONG, once().fence_key("shared")).await,
        "obtain c",
    );
    let second = fx.check(
        billing.obtain("b", LONG, once().fence_key("shared")).await,
        "obtain b",
    );
    let first = first.fence_token().expect("fenced");
    let between = other.fence_token().expect("fenced");
    if fx.kind() == Kind::Postgres {
        // One sequence for every key: `c`'s token falls between the two.
        let second = second.fence_token().expect("fenced");
        assert!(
            first < between && between < second,
            "{first}, {between}, {second}"
        );
        return;
    }
    // Had the namespace not applied to the fence key, `c` would have counted
    // on the same counter in between, and `b` would be `first + 2`.
    assert_eq!(
        second.fence_token(),
        Some(first + 1),
        "both locks count on one fence key, and `c` on another"
    );
}

pub async fn no_fence_token_unless_asked(fx: &Fixture) {
    let locker = fx.locker().await;
    let lock = fx.check(locker.obtain("job", LONG, once()).await, "obtain");
    assert_eq!(lock.fence_token(), None);
}

pub async fn namespaces_isolate(fx: &Fixture) {
    let base = fx.locker().await;
    // On shared servers the fixture's lockers are in the test's namespace:
    // others nest in it.
    let nested = |namespace: &str| match fx.namespace() {
        "" => namespace.to_owned(),
        outer => format!("{outer}:{namespace}"),
    };
    assert_eq!(base.namespace(), fx.namespace());
    let (a, b) = (base.with_namespace("a"), base.with_namespace("b"));
    assert_eq!(a.namespace(), nested("a"));
    assert_eq!(a.with_namespace("x").namespace(), nested("a:x"));
    let _in_a = fx.check(a.obtain("job", LONG, once()).await, "obtain in a");
    let _in_b = fx.check(b.obtain("job", LONG, once()).await, "obtain in b");
    let _plain = fx.check(
        base.obtain("job", LONG, once()).await,
        "obtain without namespace",
    );
    let again_a = fx.locker().await.with_namespace("a");
    assert!(job_is_held(&again_a).await);
}

pub async fn metadata_round_trips(fx: &Fixture) {
    let locker = fx.locker().await;
    let lock = fx.check(
        locker
            .obtain("job", LONG, once().metadata("worker-7 ✓"))
            .await,
        "obtain",
    );
    assert_eq!(lock.metadata(), "worker-7 ✓");
    // Metadata does not weaken the token check.
    fx.check(lock.refresh(LONG).await, "refresh");
    fx.check(lock.release().await, "release");
}

async fn obtains_once_the_holder_releases(fx: &Fixture, retry: RetryStrategy) {
    let (holder, waiter) = (fx.locker().await, fx.locker().await);
    let lock = fx.check(holder.obtain("job", LONG, once()).await, "holder obtain");
    let released = Arc::new(AtomicBool::new(false));
    let release = {
        let released = released.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            released.store(true, Ordering::SeqCst);
            lock.release().await
        })
    };
    let got = waiter
        .obtain(
            "job",
            LONG,
            once().retry(retry.deadline(Duration::from_secs(10))),
        )
        .await;
    let got = fx.check(got, "waiter obtain");
    assert!(
        released.load(Ordering::SeqCst),
        "obtained before the holder released"
    );
    fx.check(release.await.expect("release task"), "holder release");
    fx.check(got.release().await, "waiter release");
}

pub async fn linear_retry_obtains_once_the_holder_releases(fx: &Fixture) {
    obtains_once_the_holder_releases(fx, RetryStrategy::linear(Duration::from_millis(10))).await;
}

pub async fn exponential_retry_obtains_once_the_holder_releases(fx: &Fixture) {
    let retry = RetryStrategy::exponential(Duration::from_millis(1), Duration::from_millis(50));
    obtains_once_the_holder_releases(fx, retry).await;
}

pub async fn retry_gives_up_at_its_deadline(fx: &Fixture) {
    let locker = fx.locker().await;
    let _held = fx.check(locker.obtain("job", LONG, once()).await, "obtain");
    for retry in [
        RetryStrategy::linear(Duration::from_millis(70)),
        RetryStrategy::exponential(Duration::from_millis(5), Duration::from_secs(5)),
        // A backoff longer than the deadline still gives up at the deadline.
        RetryStrategy::linear(Duration::from_secs(60)),
    ] {
        let deadline = Duration::from_millis(300);
        let start = Instant::now();
        let err = locker
            .obtain("job", LONG, once().retry(retry.deadline(deadline)))
            .await
            .unwrap_err();
        let waited = start.elapsed();
        assert!(err.is_not_obtained(), "{err:?}");
        assert!(
            waited >= deadline,
            "gave up after {waited:?}, before the deadline"
        );
        // Generous: shows the wait is bounded by the deadline, not by the backoff.
        assert!(
            waited < deadline + Duration::from_secs(5),
            "waited {waited:?}"
        );
    }
}

pub async fn retry_gives_up_after_max_attempts(fx: &Fixture) {
    let locker = fx.locker().await;
    let _held = fx.check(locker.obtain("job", LONG, once()).await, "obtain");
    let start = Instant::now();
    let retry = RetryStrategy::linear(Duration::from_millis(40)).max_attempts(3);
    let err = locker
        .obtain("job", LONG, once().retry(retry))
        .await
        .unwrap_err();
    assert!(err.is_not_obtained());
    // Two pauses between three attempts.
    assert!(
        start.elapsed() >= Duration::from_millis(80),
        "{:?}",
        start.elapsed()
    );
}

pub async fn retry_wait_is_cut_short_by_the_holders_expiry(fx: &Fixture) {
    let (holder, waiter) = (fx.locker().await, fx.locker().await);
    let _expiring = fx.check(
        holder
            .obtain("job", Duration::from_millis(200), once())
            .await,
        "obtain",
    );
    let start = Instant::now();
    // The backoff alone would wait a minute; the holder's remaining lease
    // bounds the pause, so the waiter gets in soon after the expiry.
    let retry = RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(30));
    let got = fx.check(
        waiter.obtain("job", LONG, once().retry(retry)).await,
        "waiter",
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    fx.check(got.release().await, "release");
}

pub async fn obtain_many_is_all_or_nothing(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let held = fx.check(a.obtain("k:b", LONG, once()).await, "hold k:b");
    let err = b
        .obtain_many(["k:c", "k:a", "k:b"], LONG, once())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::NotObtained { key, .. } if key == "k:b"),
        "{err:?}"
    );
    // Neither of the free keys was left locked.
    let free = fx.check(
        a.obtain_many(["k:a", "k:c"], LONG, once()).await,
        "free keys",
    );
    fx.check(free.release().await, "release free keys");
    fx.check(held.release().await, "release k:b");

    let all = fx.check(
        b.obtain_many(["k:c", "k:a", "k:b", "k:a"], LONG, once())
            .await,
        "all",
    );
    assert_eq!(all.keys(), ["k:a", "k:b", "k:c"]);
    for key in ["k:a", "k:b", "k:c"] {
        assert!(
            a.obtain(key, LONG, once())
                .await
                .unwrap_err()
                .is_not_obtained(),
            "{key}"
        );
    }
}

pub async fn obtain_many_releases_and_refreshes_every_key(fx: &Fixture) {
    let locker = fx.locker().await;
    let all = fx.check(
        locker
            .obtain_many(["x", "y"], Duration::from_millis(300), once())
            .await,
        "obtain",
    );
    fx.check(all.refresh(LONG).await, "refresh");
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(
        locker
            .obtain("y", LONG, once())
            .await
            .unwrap_err()
            .is_not_obtained(),
        "refresh covered y"
    );
    fx.check(all.release().await, "release");
    for key in ["x", "y"] {
        fx.check(locker.obtain(key, LONG, once()).await, key);
    }
}

pub async fn empty_key_is_invalid(fx: &Fixture) {
    let locker = fx.locker().await;
    let err = locker.obtain("", LONG, once()).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidKey { .. }), "{err:?}");
    let none: [&str; 0] = [];
    let err = locker.obtain_many(none, LONG, once()).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidKey { .. }), "{err:?}");
    let err = locker
        .obtain_many(["a", ""], LONG, once())
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidKey { .. }), "{err:?}");
    // Nothing was taken by the refused call.
    fx.check(locker.obtain("a", LONG, once()).await, "a is free");
}

pub async fn zero_and_huge_ttls_are_invalid(fx: &Fixture) {
    let locker = fx.locker().await;
    for ttl in [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::from_secs(u64::MAX / 4),
    ] {
        let err = locker.obtain("job", ttl, once()).await.unwrap_err();
        assert!(
            matches!(&err, LockError::InvalidDuration { key, .. } if key == "job"),
            "{err:?}"
        );
    }
    let lock = fx.check(locker.obtain("job", LONG, once()).await, "obtain");
    let err = lock.refresh(Duration::ZERO).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidDuration { .. }), "{err:?}");
    assert!(
        lock.ttl().await.is_ok(),
        "a refused refresh leaves the lease alone"
    );
}

pub async fn dropped_lock_is_released_in_the_background(fx: &Fixture) {
    let locker = fx.locker().await;
    drop(fx.check(locker.obtain("job", LONG, once()).await, "obtain"));
    let retry = RetryStrategy::linear(Duration::from_millis(5)).deadline(Duration::from_secs(5));
    fx.check(
        locker.obtain("job", LONG, once().retry(retry)).await,
        "obtain after drop",
    );
}

pub async fn keep_alive_outlives_the_ttl_and_release_stops_it(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    // The watchdog refreshes about every third of the ttl; a ttl of 2 s
    // leaves it over a second to get a turn on a loaded machine (with 1 s,
    // an etcd lease was lost once while two builds ran beside the suite).
    let ttl = Duration::from_secs(2);
    let guard = fx
        .check(a.obtain("job", ttl, once()).await, "obtain")
        .keep_alive();
    tokio::time::sleep(ttl * 3).await;
    assert!(!guard.is_lost(), "the watchdog lost the lock");
    let busy = b.obtain("job", LONG, once()).await;
    assert!(
        matches!(&busy, Err(err) if err.is_not_obtained()),
        "another locker took the kept-alive lock: {busy:?}"
    );
    fx.check(guard.release().await, "release");
    fx.check(b.obtain("job", LONG, once()).await, "obtain after release");
}

pub async fn keep_alive_period_must_fit_within_the_ttl(fx: &Fixture) {
    let locker = fx.locker().await;
    let ttl = Duration::from_secs(3);
    for period in [Duration::ZERO, ttl, Duration::from_secs(5)] {
        let lock = fx.check(locker.obtain("job", ttl, once()).await, "obtain");
        let err = lock.keep_alive_every(period).unwrap_err();
        assert!(
            matches!(&err, LockError::InvalidDuration { key, value, .. } if key == "job" && *value == period),
            "{period:?}: {err:?}"
        );
        // The refused lock was given back: the next round can take the key.
        let retry =
            RetryStrategy::linear(Duration::from_millis(5)).deadline(Duration::from_secs(5));
        fx.check(
            locker.obtain("job", ttl, once().retry(retry)).await,
            "obtain after the refused keep-alive",
        )
        .release()
        .await
        .unwrap();
    }
    let guard = fx
        .check(locker.obtain("job", ttl, once()).await, "obtain")
        .keep_alive_every(Duration::from_secs(1))
        .unwrap();
    fx.check(guard.release().await, "release");
}

pub async fn ttl_within_the_drift_margin_is_invalid(fx: &Fixture) {
    let locker = fx.locker().await;
    // The drift margin is ttl / 100 + 2 ms: a 1 ms or 3 ms lease would be
    // lost (or nearly) the moment it is taken.
    for ttl in [Duration::from_millis(1), Duration::from_millis(3)] {
        let err = locker.obtain("job", ttl, once()).await.unwrap_err();
        assert!(
            matches!(&err, LockError::InvalidDuration { key, what: "ttl", .. } if key == "job"),
            "{ttl:?}: {err:?}"
        );
    }
    // Nothing was taken by the refused calls.
    fx.check(locker.obtain("job", LONG, once()).await, "obtain")
        .release()
        .await
        .unwrap();
}

pub async fn max_hold_stops_renewing_and_the_lease_is_lost(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    // A second's ttl, so that a stall of a few hundred ms on a loaded
    // machine does not lose the lease before max_hold does.
    let ttl = Duration::from_secs(1);
    let max_hold = Duration::from_millis(2500);
    let guard = fx
        .check(
            a.obtain("job", ttl, once().max_hold(max_hold)).await,
            "obtain",
        )
        .keep_alive();
    let taken = Instant::now();
    assert!(guard.deadline() <= taken + ttl);
    tokio::time::timeout(Duration::from_secs(20), guard.lost())
        .await
        .expect("the lease outlived max_hold by far");
    let lost = Instant::now();
    println!("lost {:?} after it was taken", lost - taken);
    assert!(
        lost >= taken + max_hold - ttl,
        "the watchdog stopped renewing before max_hold"
    );
    assert!(guard.is_lost());
    // Released (it is no longer renewed): someone else gets in within a ttl.
    drop(guard);
    let retry = RetryStrategy::linear(Duration::from_millis(10)).deadline(Duration::from_secs(10));
    fx.check(
        b.obtain("job", LONG, once().retry(retry)).await,
        "obtain after max_hold",
    );
}

pub async fn hold_runs_the_body_while_holding_and_releases_after(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let options = HoldOptions::new(LONG).fence();
    let (inner_a, inner_b) = (a.clone(), b.clone());
    let (fence, refused, nested) = fx.check(
        a.hold(["job"], options.clone(), |guard| async move {
            let refused = inner_b.obtain("job", LONG, once()).await;
            // A nested hold of a held key re-enters the same lease.
            let nested = inner_a
                .hold(["job"], HoldOptions::new(LONG), |inner| async move {
                    inner.token().to_owned()
                })
                .await;
            (
                guard.fence_token(),
                refused.is_err_and(|err| err.is_not_obtained()),
                nested.map(|token| token == guard.token()),
            )
        })
        .await,
        "hold",
    );
    assert!(fence.is_some());
    assert!(refused, "another locker got in while the body ran");
    assert!(
        matches!(nested, Ok(true)),
        "the nested hold did not re-enter: {nested:?}"
    );
    let held = fx.check(b.obtain("job", LONG, once()).await, "obtain after the hold");
    let busy = a.hold(["job"], options, |_| async {}).await.unwrap_err();
    assert!(busy.is_not_obtained(), "{busy:?}");
    fx.check(held.release().await, "release");
}
