//! One kind per key, kept with the key: a lock, a semaphore of N permits or
//! a read-write lock, and an obtain of another kind (or another count) is
//! refused with `WrongKind` before anything is written; a write turned into
//! a read in one step.

use std::time::Duration;

use lockmacro_runtime::{KeyKind, LockError, Locker, ObtainOptions, RetryStrategy};

use lockmacro_testkit::Fixture;

const LONG: Duration = Duration::from_secs(30);
/// A hang limit, never a measurement.
const HANG: Duration = Duration::from_secs(20);

fn permits(n: u32) -> ObtainOptions {
    ObtainOptions::new().permits(n)
}

/// Waits with a backoff far longer than the test: an obtain that succeeds
/// in time was woken, or found the key free at once.
fn patient(opts: ObtainOptions) -> ObtainOptions {
    opts.retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(LONG))
}

/// Asserts `result` is `WrongKind` for `key`, held as `held`, asked `asked`.
fn wrong_kind<T: std::fmt::Debug>(
    result: Result<T, LockError>,
    key: &str,
    held: KeyKind,
    asked: KeyKind,
) {
    match result {
        Err(LockError::WrongKind {
            key: named,
            held: was,
            asked: wanted,
        }) => {
            assert_eq!(
                (named.as_str(), was, wanted),
                (key, held, asked),
                "the refusal names another key or kind"
            );
        }
        other => panic!("expected WrongKind for `{key}`, got {other:?}"),
    }
}

/// Takes every permit of `count` left on `key` with fresh lockers, to show
/// that a refused obtain wrote nothing: exactly `count - held` more fit.
async fn permits_left(fx: &Fixture, key: &str, count: u32) -> usize {
    let locker = fx.locker().await;
    let mut taken = Vec::new();
    while let Ok(lock) = locker.obtain(key, LONG, permits(count)).await {
        taken.push(lock);
    }
    let left = taken.len();
    for lock in taken {
        fx.check(lock.release().await, "release");
    }
    left
}

pub async fn permits_on_a_key_held_as_a_read_are_refused(fx: &Fixture) {
    let locker = fx.locker().await;
    let read = fx.check(
        locker
            .obtain("doc", LONG, ObtainOptions::new().read())
            .await,
        "read",
    );
    wrong_kind(
        locker.obtain("doc", LONG, permits(3)).await,
        "doc",
        KeyKind::ReadWrite,
        KeyKind::Semaphore { permits: 3 },
    );
    // Waiting does not help: the refusal comes at once, not at the deadline.
    wrong_kind(
        locker.obtain("doc", LONG, patient(permits(3))).await,
        "doc",
        KeyKind::ReadWrite,
        KeyKind::Semaphore { permits: 3 },
    );
    let other = fx.check(
        locker
            .obtain("doc", LONG, ObtainOptions::new().read())
            .await,
        "a second reader beside the first",
    );
    fx.check(read.release().await, "release");
    fx.check(other.release().await, "release");
    let permit = fx.check(
        locker.obtain("doc", LONG, permits(3)).await,
        "permits once the readers are gone",
    );
    fx.check(permit.release().await, "release");
}

pub async fn a_different_permit_count_than_the_holders_is_refused(fx: &Fixture) {
    let (a, b, c) = (fx.locker().await, fx.locker().await, fx.locker().await);
    let first = fx.check(a.obtain("jobs", LONG, permits(2)).await, "first permit");
    let second = fx.check(b.obtain("jobs", LONG, permits(2)).await, "second permit");
    wrong_kind(
        c.obtain("jobs", LONG, permits(5)).await,
        "jobs",
        KeyKind::Semaphore { permits: 2 },
        KeyKind::Semaphore { permits: 5 },
    );
    let busy = c.obtain("jobs", LONG, permits(2)).await.unwrap_err();
    assert!(busy.is_not_obtained(), "a third of two permits: {busy:?}");
    fx.check(first.release().await, "release");
    assert_eq!(
        permits_left(fx, "jobs", 2).await,
        1,
        "the refused obtain took a permit"
    );
    fx.check(second.release().await, "release");
}

pub async fn a_semaphore_on_a_lock_and_a_lock_on_a_semaphore_are_refused(fx: &Fixture) {
    let locker = fx.locker().await;
    let lock = fx.check(
        locker.obtain("job", LONG, ObtainOptions::new()).await,
        "lock",
    );
    wrong_kind(
        locker.obtain("job", LONG, permits(2)).await,
        "job",
        KeyKind::Lock,
        KeyKind::Semaphore { permits: 2 },
    );
    fx.check(lock.release().await, "release");
    assert!(
        !fx.is_held("job").await,
        "the refused semaphore left the key"
    );

    let permit = fx.check(locker.obtain("api", LONG, permits(2)).await, "permit");
    // Plain, and waiting (which Redis sends as a script): both refused.
    for opts in [ObtainOptions::new(), patient(ObtainOptions::new())] {
        wrong_kind(
            locker.obtain("api", LONG, opts).await,
            "api",
            KeyKind::Semaphore { permits: 2 },
            KeyKind::Lock,
        );
    }
    assert_eq!(
        permits_left(fx, "api", 2).await,
        1,
        "the refused lock changed the semaphore"
    );
    fx.check(permit.release().await, "release");
    let lock = fx.check(
        locker.obtain("api", LONG, ObtainOptions::new()).await,
        "a lock once the semaphore is gone",
    );
    fx.check(lock.release().await, "release");
}

pub async fn a_read_or_write_on_a_semaphore_is_refused(fx: &Fixture) {
    let locker = fx.locker().await;
    let permit = fx.check(locker.obtain("api", LONG, permits(2)).await, "permit");
    for opts in [ObtainOptions::new().read(), ObtainOptions::new().write()] {
        wrong_kind(
            locker.obtain("api", LONG, opts).await,
            "api",
            KeyKind::Semaphore { permits: 2 },
            KeyKind::ReadWrite,
        );
    }
    fx.check(permit.release().await, "release");
}

pub async fn a_refused_upgrade_is_upgrade_refused(fx: &Fixture) {
    let locker = fx.locker().await;
    let refused = locker
        .hold(
            ["doc"],
            lockmacro_runtime::HoldOptions::new(LONG).read(),
            |_| {
                let locker = locker.clone();
                async move {
                    locker
                        .hold(
                            ["doc"],
                            lockmacro_runtime::HoldOptions::new(LONG).write(),
                            |_| async {},
                        )
                        .await
                }
            },
        )
        .await;
    let refused = fx.check(refused, "the read");
    assert!(
        matches!(&refused, Err(LockError::UpgradeRefused { key }) if key == "doc"),
        "{refused:?}"
    );
}

/// The writer downgrades: a reader waiting behind it enters, a writer
/// still cannot, and the lease keeps its token and fence.
pub async fn a_downgrade_lets_a_waiting_reader_in_and_no_writer(fx: &Fixture) {
    let (a, b, c) = (fx.locker().await, fx.locker().await, fx.locker().await);
    let write = fx.check(
        a.obtain("cfg", LONG, ObtainOptions::new().write().fence())
            .await,
        "write",
    );
    let (token, fence) = (write.token().to_owned(), write.fence_token());
    let early = b.obtain("cfg", LONG, ObtainOptions::new().read()).await;
    assert!(
        early.as_ref().is_err_and(LockError::is_not_obtained),
        "a reader beside the writer: {early:?}"
    );
    let reader = tokio::spawn(async move {
        b.obtain("cfg", LONG, patient(ObtainOptions::new().read()))
            .await
    });
    let read = fx.check(write.downgrade().await, "downgrade");
    assert_eq!((read.token(), read.fence_token()), (token.as_str(), fence));
    let other = tokio::time::timeout(HANG, reader)
        .await
        .expect("the waiting reader hung")
        .expect("the reader panicked");
    let other = fx.check(other, "a reader after the downgrade");
    let writer = c.obtain("cfg", LONG, ObtainOptions::new().write()).await;
    assert!(
        writer.as_ref().is_err_and(LockError::is_not_obtained),
        "a writer beside the downgraded read: {writer:?}"
    );
    fx.check(
        read.refresh(LONG).await,
        "the downgraded read is still held",
    );
    fx.check(read.release().await, "release");
    fx.check(other.release().await, "release");
    let writer = fx.check(
        c.obtain("cfg", LONG, ObtainOptions::new().write()).await,
        "the write once the readers are gone",
    );
    fx.check(writer.release().await, "release");
}

/// Only the write can be downgraded.
pub async fn only_a_write_can_be_downgraded(fx: &Fixture) {
    let locker: Locker = fx.locker().await;
    let read = fx.check(
        locker
            .obtain("cfg", LONG, ObtainOptions::new().read())
            .await,
        "read",
    );
    let refused = read.downgrade().await;
    assert!(
        matches!(&refused, Err(LockError::InvalidKey { key, .. }) if key == "cfg"),
        "{refused:?}"
    );
}
