//! Semaphores (`ObtainOptions::permits`): at most N holders of a key at
//! once, each permit a lease of its own, on every backend that keeps
//! permits; a clear refusal on those that do not.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockmacro_runtime::{BackendErrorKind, KeyKind, LockError, ObtainOptions, RetryStrategy};
use tokio::time::Instant;

use lockmacro_testkit::Fixture;

const LONG: Duration = Duration::from_secs(30);
const PROMPTLY: Duration = Duration::from_secs(5);

fn permits(n: u32) -> ObtainOptions {
    ObtainOptions::new().permits(n)
}

/// Waits for a release, with a backoff far longer than any test: a waiter
/// that obtains in time was woken, it did not poll.
fn patient(n: u32) -> ObtainOptions {
    permits(n)
        .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(30)))
}

pub async fn at_most_n_holders_and_a_release_frees_one(fx: &Fixture) {
    let lockers = [
        fx.locker().await,
        fx.locker().await,
        fx.locker().await,
        fx.locker().await,
    ];
    let mut held = Vec::new();
    for locker in &lockers[..3] {
        held.push(fx.check(locker.obtain("api", LONG, permits(3)).await, "obtain"));
    }
    let tokens: std::collections::HashSet<&str> = held.iter().map(|lock| lock.token()).collect();
    assert_eq!(tokens.len(), 3, "each permit has its own token");
    let busy = lockers[3]
        .obtain("api", LONG, permits(3))
        .await
        .unwrap_err();
    assert!(busy.is_not_obtained(), "a fourth permit of three: {busy:?}");

    let first = held.remove(0);
    fx.check(first.release().await, "release");
    let fourth = fx.check(
        lockers[3].obtain("api", LONG, permits(3)).await,
        "obtain after a release",
    );
    for lock in held.into_iter().chain([fourth]) {
        fx.check(lock.release().await, "release");
    }
}

pub async fn a_permit_is_refreshed_measured_and_kept_alive(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let short = Duration::from_secs(1);
    let lock = fx.check(a.obtain("api", short, permits(1)).await, "obtain");
    let left = fx.check(lock.ttl().await, "ttl");
    assert!(left <= short && left > Duration::ZERO, "ttl {left:?}");
    fx.check(lock.refresh(LONG).await, "refresh");
    let left = fx.check(lock.ttl().await, "ttl after refresh");
    assert!(
        left > short,
        "the refresh did not extend the permit: {left:?}"
    );

    // Kept alive past several ttls, the permit stays taken.
    let guard = lock.keep_alive();
    tokio::time::sleep(short * 3).await;
    assert!(!guard.is_lost(), "the watchdog lost the permit");
    let busy = b.obtain("api", short, permits(1)).await.unwrap_err();
    assert!(busy.is_not_obtained(), "{busy:?}");
    fx.check(guard.release().await, "release");
    let next = fx.check(
        b.obtain("api", short, permits(1)).await,
        "obtain after release",
    );
    fx.check(next.release().await, "release");
}

/// A holder that dies without releasing gives its permit back after its
/// ttl, and not before.
pub async fn a_dead_holders_permit_comes_back_after_its_ttl_never_sooner(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let ttl = Duration::from_secs(1);
    let taken = Instant::now();
    let lock = fx.check(a.obtain("api", ttl, permits(1)).await, "obtain");
    // Neither released nor renewed: as a process that died would leave it.
    std::mem::forget(lock);
    let wait = permits(1)
        .retry(RetryStrategy::linear(Duration::from_millis(20)).deadline(Duration::from_secs(10)));
    let next = fx.check(b.obtain("api", ttl, wait).await, "obtain after the ttl");
    let after = taken.elapsed();
    assert!(
        after >= ttl - ttl / 10,
        "the permit came back {after:?} after it was taken, before its ttl of {ttl:?}"
    );
    fx.check(next.release().await, "release");
}

pub async fn fence_tokens_strictly_increase_across_permits(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let mut last = 0;
    for round in 0..4 {
        let locker = if round % 2 == 0 { &a } else { &b };
        let first = fx.check(
            locker.obtain("api", LONG, permits(2).fence()).await,
            "obtain",
        );
        let second = fx.check(
            locker.obtain("api", LONG, permits(2).fence()).await,
            "obtain",
        );
        for lock in [&first, &second] {
            let token = lock.fence_token().expect("a fence token was asked for");
            assert!(token > last, "fence token {token} after {last}");
            last = token;
        }
        fx.check(first.release().await, "release");
        fx.check(second.release().await, "release");
    }
}

pub async fn a_waiter_for_a_permit_is_woken_by_a_release(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let held = fx.check(a.obtain("api", LONG, permits(1)).await, "obtain");
    let waiter = tokio::spawn(async move { b.obtain("api", LONG, patient(1)).await });
    // Whether the waiter tried before this release or after, it has the
    // permit well before its 60 s backoff or the holder's 30 s lease: the
    // Redis cases in `redis_permits` wait until it listens first.
    fx.check(held.release().await, "release");
    let lock = tokio::time::timeout(PROMPTLY, waiter)
        .await
        .expect("the waiter was not woken by the release")
        .expect("waiter task");
    let lock = fx.check(lock, "the waiter obtains");
    fx.check(lock.release().await, "release");
}

/// Concurrent holders on separate lockers never number more than the
/// permits: a witness that does not trust the library counts them.
pub async fn holders_never_exceed_the_permits(fx: &Fixture) {
    const PERMITS: u32 = 3;
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..8 {
        let locker = fx.locker().await;
        let (inside, most) = (inside.clone(), most.clone());
        workers.push(tokio::spawn(async move {
            let wait = permits(PERMITS).retry(
                RetryStrategy::linear(Duration::from_millis(50)).deadline(Duration::from_secs(30)),
            );
            for _ in 0..10 {
                let lock = locker
                    .obtain("api", LONG, wait.clone())
                    .await
                    .expect("obtain");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                lock.release().await.expect("release");
            }
        }));
    }
    for worker in workers {
        worker.await.expect("worker");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= PERMITS as usize,
        "{most} holders at once for {PERMITS} permits"
    );
}

pub async fn misuses_are_refused_before_anything_is_sent(fx: &Fixture) {
    let locker = fx.locker().await;
    let zero = locker.obtain("api", LONG, permits(0)).await.unwrap_err();
    assert!(
        matches!(&zero, LockError::InvalidKey { reason, .. } if reason.contains("at least 1")),
        "{zero:?}"
    );
    let several = locker
        .obtain_many(["api:a", "api:b"], LONG, permits(2))
        .await
        .unwrap_err();
    assert!(
        matches!(&several, LockError::InvalidKey { reason, .. } if reason.contains("one key")),
        "{several:?}"
    );
    let fair = locker
        .obtain("api", LONG, ObtainOptions::new().read().fair())
        .await
        .unwrap_err();
    assert!(fair.to_string().contains("`fair`"), "{fair}");
    assert!(
        !fx.is_held("api").await,
        "a refused obtain left the key behind"
    );
}

/// A key is a lock or a semaphore, not both: each refuses the other.
pub async fn a_lock_and_a_semaphore_cannot_share_a_key(fx: &Fixture) {
    let locker = fx.locker().await;
    let lock = fx.check(
        locker.obtain("job", LONG, ObtainOptions::new()).await,
        "obtain",
    );
    let refused = locker.obtain("job", LONG, permits(2)).await.unwrap_err();
    assert!(
        matches!(&refused, LockError::WrongKind { key, held: KeyKind::Lock, .. } if key == "job"),
        "{refused:?}"
    );
    fx.check(lock.release().await, "release");

    let permit = fx.check(locker.obtain("api", LONG, permits(2)).await, "obtain");
    let refused = locker.obtain("api", LONG, ObtainOptions::new()).await;
    assert!(
        matches!(
            &refused,
            Err(LockError::WrongKind {
                asked: KeyKind::Lock,
                ..
            })
        ),
        "a lock on a key holding permits: {refused:?}"
    );
    fx.check(permit.release().await, "release");
}

/// Backends that keep no permits say so, naming what to use instead.
pub async fn permits_are_refused_where_the_backend_keeps_none(fx: &Fixture) {
    let locker = fx.locker().await;
    let err = locker.obtain("api", LONG, permits(2)).await.unwrap_err();
    match &err {
        LockError::Backend(backend) => {
            assert_eq!(backend.kind(), BackendErrorKind::Unsupported, "{err}");
            assert!(err.to_string().contains("keeps no permits"), "{err}");
        }
        other => panic!("expected an unsupported-option error, got {other:?}"),
    }
    assert!(
        !fx.is_held("api").await,
        "a refused obtain left the key behind"
    );
}

/// On Redis: a waiter for a permit listens, sends nothing while it waits,
/// and is woken by the release.
pub async fn redis_waiter_for_a_permit_sends_nothing_and_is_woken(
    server: &lockmacro_testkit::RedisServer,
) {
    let a = server.locker().await;
    let b = server.locker().await;
    let held = server.expect_ok(a.obtain("api", LONG, permits(1)).await, "obtain");
    let waiter = tokio::spawn(async move { b.obtain("api", LONG, patient(1)).await });
    crate::wakeup::until_listening(server, "api", 1).await;
    // Listening, then one more attempt, which marks the key as awaited.
    for _ in 0..500 {
        let flagged: bool = server.cmd(&["EXISTS", "{api}:waiters"]);
        if flagged {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let () = server.cmd(&["CONFIG", "RESETSTAT"]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sent = crate::wakeup::commands(server);
    assert!(sent.is_empty(), "a waiting locker sent commands: {sent:?}");
    server.expect_ok(held.release().await, "release");
    let lock = tokio::time::timeout(PROMPTLY, waiter)
        .await
        .expect("the waiter was not woken by the release")
        .expect("waiter task");
    let lock = server.expect_ok(lock, "the waiter obtains");
    server.expect_ok(lock.release().await, "release");
}
