//! Read-write locks (`ObtainOptions::read` / `write`): many readers or one
//! writer per key, a waiting writer ahead of readers that come after it,
//! re-entry of a read inside the write but not of the write inside a read.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockmacro_runtime::{
    BackendErrorKind, HoldOptions, LockError, Locker, ObtainOptions, RetryStrategy,
};
use tokio::time::Instant;

use lockmacro_testkit::Fixture;

const LONG: Duration = Duration::from_secs(30);
const PROMPTLY: Duration = Duration::from_secs(5);

fn read() -> ObtainOptions {
    ObtainOptions::new().read()
}

fn write() -> ObtainOptions {
    ObtainOptions::new().write()
}

/// Waits for a release, with a backoff far longer than any test: a waiter
/// that obtains in time was woken, it did not poll.
fn patient(opts: ObtainOptions) -> ObtainOptions {
    opts.retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(30)))
}

pub async fn readers_share_the_key_and_the_writer_is_alone(fx: &Fixture) {
    let lockers = [fx.locker().await, fx.locker().await, fx.locker().await];
    let mut reads = Vec::new();
    for locker in &lockers {
        reads.push(fx.check(locker.obtain("catalog", LONG, read()).await, "read"));
    }
    let busy = lockers[0]
        .obtain("catalog", LONG, write())
        .await
        .unwrap_err();
    assert!(busy.is_not_obtained(), "a writer beside readers: {busy:?}");
    for lock in reads {
        fx.check(lock.release().await, "release a read");
    }
    let written = fx.check(
        lockers[0].obtain("catalog", LONG, write()).await,
        "the write once the readers left",
    );
    let busy = lockers[1]
        .obtain("catalog", LONG, read())
        .await
        .unwrap_err();
    assert!(
        busy.is_not_obtained(),
        "a reader beside the writer: {busy:?}"
    );
    let busy = lockers[2]
        .obtain("catalog", LONG, write())
        .await
        .unwrap_err();
    assert!(busy.is_not_obtained(), "a second writer: {busy:?}");
    fx.check(written.release().await, "release the write");
    let again = fx.check(
        lockers[1].obtain("catalog", LONG, read()).await,
        "a read after the write",
    );
    fx.check(again.release().await, "release");
}

/// Whether `c`'s reads of `catalog` come to be refused: once a writer has
/// found the readers, later readers wait behind it. A read that gets in
/// first is given back, and the next tried 10 ms later, 500 times at most.
async fn readers_held_back(fx: &Fixture, c: &Locker) -> bool {
    for _ in 0..500 {
        match c.obtain("catalog", LONG, read()).await {
            Ok(late) => fx.check(late.release().await, "release"),
            Err(err) if err.is_not_obtained() => return true,
            Err(err) => panic!("a late read: {err:?}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Waits for the `writer` woken by the last reader's release, and gives its
/// write back.
async fn written_once_woken(
    fx: &Fixture,
    writer: tokio::task::JoinHandle<Result<lockmacro_runtime::Lock, LockError>>,
) {
    let written = tokio::time::timeout(PROMPTLY, writer)
        .await
        .expect("the writer was not woken when the reader left")
        .expect("writer task");
    let written = fx.check(written, "the write");
    fx.check(written.release().await, "release the write");
}

/// A writer waiting for a reader holds back the readers that come after it,
/// and gets the key as soon as the reader leaves.
pub async fn a_waiting_writer_is_not_starved_by_new_readers(fx: &Fixture) {
    let (a, b, c) = (fx.locker().await, fx.locker().await, fx.locker().await);
    let first = fx.check(a.obtain("catalog", LONG, read()).await, "read");
    let writer = tokio::spawn(async move { b.obtain("catalog", LONG, patient(write())).await });
    assert!(
        readers_held_back(fx, &c).await,
        "readers kept getting in beside a waiting writer"
    );
    fx.check(first.release().await, "release the first read");
    written_once_woken(fx, writer).await;
    let late = fx.check(
        c.obtain("catalog", LONG, read()).await,
        "a read after the write",
    );
    fx.check(late.release().await, "release");
}

/// The last reader's release leaves a waiting writer's mark in place: a
/// reader that asks the moment the last read is given back, before the
/// woken writer's attempt, is held back, and the writer gets the key.
/// Readers back to back would otherwise take turns past the writer for as
/// long as they keep coming.
pub async fn a_waiting_writers_mark_outlives_the_last_readers_release(fx: &Fixture) {
    let (a, b, c) = (fx.locker().await, fx.locker().await, fx.locker().await);
    for round in 0..3 {
        let first = fx.check(a.obtain("catalog", LONG, read()).await, "read");
        let writer = {
            let b = b.clone();
            tokio::spawn(async move { b.obtain("catalog", LONG, patient(write())).await })
        };
        assert!(
            readers_held_back(fx, &c).await,
            "round {round}: the writer never held readers back"
        );
        fx.check(first.release().await, "release the last read");
        let late = c.obtain("catalog", LONG, read()).await;
        let late_got_in = late.is_ok();
        if let Ok(late) = late {
            fx.check(late.release().await, "release the late read");
        }
        written_once_woken(fx, writer).await;
        assert!(
            !late_got_in,
            "round {round}: a reader got in past the waiting writer as the last read was given back"
        );
    }
}

/// A reader that dies without releasing holds the writer back for its ttl,
/// no longer, and no shorter.
pub async fn a_dead_readers_share_comes_back_after_its_ttl(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let ttl = Duration::from_secs(1);
    let taken = Instant::now();
    let lock = fx.check(a.obtain("catalog", ttl, read()).await, "read");
    std::mem::forget(lock);
    let wait = write()
        .retry(RetryStrategy::linear(Duration::from_millis(20)).deadline(Duration::from_secs(10)));
    let written = fx.check(
        b.obtain("catalog", ttl, wait).await,
        "the write after the ttl",
    );
    let after = taken.elapsed();
    assert!(
        after >= ttl - ttl / 10,
        "the writer got in {after:?} after a read of ttl {ttl:?} was taken"
    );
    fx.check(written.release().await, "release");
}

/// A task holding the write may read (re-entry); one holding a read that
/// asks for the write is refused, not deadlocked.
pub async fn the_writer_may_read_but_a_reader_may_not_upgrade(fx: &Fixture) {
    let locker = fx.locker().await;
    let options = |opts: fn(HoldOptions) -> HoldOptions| opts(HoldOptions::new(LONG));
    let nested = locker
        .hold(["catalog"], options(HoldOptions::write), |_| {
            let locker = locker.clone();
            async move {
                locker
                    .hold(["catalog"], options(HoldOptions::read), |_| async {
                        "read inside"
                    })
                    .await
            }
        })
        .await;
    let nested = fx.check(nested, "the write");
    assert_eq!(fx.check(nested, "a read inside the write"), "read inside");

    let upgrade = locker
        .hold(["catalog"], options(HoldOptions::read), |_| {
            let locker = locker.clone();
            async move {
                locker
                    .hold(["catalog"], options(HoldOptions::write), |_| async {})
                    .await
            }
        })
        .await;
    let upgrade = fx.check(upgrade, "the read");
    assert!(
        matches!(&upgrade, Err(LockError::UpgradeRefused { key }) if key == "catalog"),
        "{upgrade:?}"
    );
    assert!(!fx.is_held("catalog").await, "the key is left held");
}

/// Readers and writers on separate lockers, at once: a witness that does not
/// trust the lock sees no writer beside anyone.
pub async fn no_reader_or_writer_is_ever_beside_a_writer(fx: &Fixture) {
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let both = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for worker in 0..6 {
        let locker = fx.locker().await;
        let (readers, writers, both) = (readers.clone(), writers.clone(), both.clone());
        workers.push(tokio::spawn(async move {
            let writing = worker % 3 == 0;
            for _ in 0..8 {
                let opts = if writing { write() } else { read() }.retry(
                    RetryStrategy::linear(Duration::from_millis(50))
                        .deadline(Duration::from_secs(30)),
                );
                let lock = locker.obtain("catalog", LONG, opts).await.expect("obtain");
                let (mine, other) = if writing {
                    (&writers, &readers)
                } else {
                    (&readers, &writers)
                };
                let inside = mine.fetch_add(1, Ordering::SeqCst) + 1;
                if other.load(Ordering::SeqCst) > 0 || (writing && inside > 1) {
                    both.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                mine.fetch_sub(1, Ordering::SeqCst);
                lock.release().await.expect("release");
            }
        }));
    }
    for worker in workers {
        worker.await.expect("worker");
    }
    assert_eq!(
        both.load(Ordering::SeqCst),
        0,
        "a writer was beside someone"
    );
}

/// Backends that keep no shares say so for read-write locks too.
pub async fn read_write_locks_are_refused_where_the_backend_keeps_none(fx: &Fixture) {
    let locker: Locker = fx.locker().await;
    for opts in [read(), write()] {
        let err = locker.obtain("catalog", LONG, opts).await.unwrap_err();
        match &err {
            LockError::Backend(backend) => {
                assert_eq!(backend.kind(), BackendErrorKind::Unsupported, "{err}");
                assert!(err.to_string().contains("read-write"), "{err}");
            }
            other => panic!("expected an unsupported-option error, got {other:?}"),
        }
    }
    assert!(
        !fx.is_held("catalog").await,
        "a refused obtain left the key behind"
    );
}
