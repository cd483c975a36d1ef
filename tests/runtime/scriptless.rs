//! Locks for a Redis user whose ACL denies scripts (`-@scripting`), on
//! Redis 7: chosen by itself in `Scripts::Auto`, exclusive and fenced under
//! contention, refusing stale tokens and what needs a script before writing
//! anything, and taking a retried attempt as the same one.

use std::sync::Arc;
use std::time::Duration;

use lockmacro_runtime::backend::{AcquireRequest, Acquired, Backend};
use lockmacro_runtime::{
    BackendErrorKind, FencedStore, KeyKind, LockError, Locker, ObtainOptions, RedisBackend,
    RedisConfig, RetryStrategy, Scripts,
};
use lockmacro_testkit::RedisServer;
use lockmacro_testkit::witness::Witness;
use tokio::time::Instant;

use crate::wakeup::{calls, until_listening};

const TTL: Duration = Duration::from_secs(30);
/// A bound for a hang, not a measurement.
const HANG: Duration = Duration::from_secs(20);

/// A Redis server with user `locker`, who may do anything but run scripts.
pub(crate) fn denied_scripts() -> RedisServer {
    deny_scripts(RedisServer::start())
}

/// Adds user `locker` to `server`, who may do anything but run scripts.
fn deny_scripts(server: RedisServer) -> RedisServer {
    let () = server.cmd(&[
        "ACL",
        "SETUSER",
        "locker",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
        "-@scripting",
    ]);
    server
}

fn url(server: &RedisServer) -> String {
    format!("redis://locker:pw@127.0.0.1:{}/", server.port())
}

async fn backend(server: &RedisServer, scripts: Scripts) -> RedisBackend {
    let config = RedisConfig::default().scripts(scripts);
    server.expect_ok(
        RedisBackend::connect_with(&url(server), config).await,
        "connect",
    )
}

async fn locker(server: &RedisServer, scripts: Scripts) -> Locker {
    Locker::new(backend(server, scripts).await)
}

fn unsupported(err: &LockError) -> bool {
    matches!(err, LockError::Backend(backend)
        if backend.kind() == BackendErrorKind::Unsupported && backend.to_string().contains("scripts"))
}

#[tokio::test]
async fn auto_mode_locks_without_scripts_when_the_user_is_denied_them() {
    let server = denied_scripts();
    let locker = locker(&server, Scripts::Auto).await;
    let lock = server.expect_ok(
        locker
            .obtain_many(["job", "other"], TTL, ObtainOptions::new().fence())
            .await,
        "a fenced obtain of two keys",
    );
    assert!(lock.fence_token().is_some());
    server.expect_ok(lock.refresh(TTL).await, "refresh");
    server.expect_ok(lock.release().await, "release");
    let left: i64 = server.cmd(&["EXISTS", "job", "other"]);
    assert_eq!(left, 0, "the release deleted both keys");
    assert_eq!(calls(&server, "evalsha"), 0, "no script ran");
}

#[tokio::test]
async fn required_mode_reports_the_denied_script() {
    let server = denied_scripts();
    let locker = locker(&server, Scripts::Required).await;
    let err = locker
        .obtain("job", TTL, ObtainOptions::new().fence())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Backend(backend) if backend.kind() == BackendErrorKind::Permission),
        "{err}"
    );
}

#[tokio::test]
async fn a_script_denied_after_connect_switches_auto_mode_over() {
    // Allowed at connect, denied before the first lock: the refusal of the
    // call itself is what switches.
    let server = RedisServer::start();
    let () = server.cmd(&["ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all"]);
    let locker = locker(&server, Scripts::Auto).await;
    let () = server.cmd(&["ACL", "SETUSER", "locker", "-@scripting"]);
    let lock = server.expect_ok(
        locker
            .obtain("job", TTL, ObtainOptions::new().fence())
            .await,
        "a fenced obtain",
    );
    server.expect_ok(lock.release().await, "release");
}

/// One worker's sections: obtain (fenced, with a retry), enter the
/// witness, increment its counter, write to the fenced store, release.
async fn sections(
    id: usize,
    locker: Locker,
    witness: Arc<Witness>,
    store: FencedStore,
    keys: &'static [&'static str],
) {
    let retry = RetryStrategy::exponential(Duration::from_millis(1), Duration::from_millis(20))
        .deadline(HANG);
    for round in 0..40 {
        let called = Instant::now();
        let lock = locker
            .obtain_many(
                keys.iter().copied(),
                Duration::from_secs(5),
                ObtainOptions::new().fence().retry(retry.clone()),
            )
            .await
            .unwrap_or_else(|err| panic!("worker {id}, round {round}: {err}"));
        let guard = lock.keep_alive();
        let token = guard.fence_token().expect("fenced");
        let open = witness.enter(id, token, called);
        tokio::task::yield_now().await;
        assert!(open.write(&guard), "worker {id}: the lease ran out inside");
        witness.fenced_write(&store, token, Duration::ZERO);
        guard.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_keeps_exclusion_and_fences_increasing() {
    contention(denied_scripts()).await;
}

/// On Valkey 8.1, the watchdog's refreshes go by `SET … IFEQ`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_on_valkey_keeps_exclusion_and_fences_increasing() {
    contention(deny_scripts(RedisServer::valkey())).await;
}

/// Six workers on `server`, each on connections of its own, as separate
/// processes: no two sections overlap, no update is lost, and fencing
/// tokens increase in the order the sections begin.
async fn contention(server: RedisServer) {
    let resource = RedisServer::start();
    let store = resource.expect_ok(FencedStore::connect(&resource.url()).await, "connect");
    let witness = Arc::new(Witness::new(Duration::from_secs(5)));
    let mut workers = tokio::task::JoinSet::new();
    for id in 0..6 {
        // Separate connections, as separate processes; half take a second
        // key too, all or none, through the transaction path.
        let locker = locker(&server, Scripts::Never).await;
        let keys: &'static [&'static str] = if id % 2 == 0 {
            &["job"]
        } else {
            &["job", "job-2"]
        };
        workers.spawn(sections(id, locker, witness.clone(), store.clone(), keys));
    }
    while let Some(done) = workers.join_next().await {
        if let Err(err) = done {
            std::panic::resume_unwind(err.into_panic());
        }
    }
    let verdict = witness.verdict(&store).await;
    assert_eq!(verdict.sections, 240, "{verdict:?}");
    assert_eq!(verdict.overlaps, 0, "{verdict:?}");
    assert_eq!(verdict.lost_updates, 0, "{verdict:?}");
    assert_eq!(verdict.tokens_out_of_order, 0, "{verdict:?}");
    assert_eq!(verdict.stale_writes_accepted, 0, "{verdict:?}");
    assert_eq!(calls(&server, "evalsha") + calls(&server, "eval"), 0);
}

#[tokio::test]
async fn refresh_and_release_refuse_a_stale_token() {
    let server = denied_scripts();
    let backend = backend(&server, Scripts::Never).await;
    let keys = ["job".to_owned(), "job-2".to_owned()];
    let mine = "a".repeat(32);
    let stale = "b".repeat(32);
    let take = AcquireRequest::new(&keys, &mine, TTL);
    let taken = server.expect_ok(backend.acquire(take).await, "acquire");
    assert!(matches!(taken, Acquired::Obtained { .. }), "{taken:?}");
    for refreshed in [
        backend.refresh(&keys, &stale, TTL).await,
        backend.refresh(&keys[1..], &stale, TTL).await,
    ] {
        assert!(
            !server.expect_ok(refreshed, "refresh"),
            "a stale token refreshed"
        );
    }
    let released = server.expect_ok(backend.release(&keys, &stale).await, "release");
    assert!(!released, "a stale token released");
    let values: Vec<String> = server.cmd(&["MGET", "job", "job-2"]);
    assert_eq!(
        values,
        [mine.clone(), mine.clone()],
        "the keys are untouched"
    );
    assert!(server.expect_ok(backend.refresh(&keys, &mine, TTL).await, "refresh"));
    assert!(server.expect_ok(backend.release(&keys, &mine).await, "release"));
}

#[tokio::test]
async fn what_needs_a_script_is_refused_before_anything_is_written() {
    let server = denied_scripts();
    let locker = locker(&server, Scripts::Auto).await;
    let patient = || {
        ObtainOptions::new()
            .retry(RetryStrategy::linear(Duration::from_millis(5)).deadline(Duration::from_secs(1)))
    };
    for (what, options) in [
        ("fair", patient().fair()),
        ("permits", ObtainOptions::new().permits(3)),
        ("read", ObtainOptions::new().read()),
        ("write", ObtainOptions::new().write()),
    ] {
        let err = locker.obtain("job", TTL, options).await.unwrap_err();
        assert!(unsupported(&err), "{what}: {err}");
        let written: i64 = server.cmd(&["DBSIZE"]);
        assert_eq!(written, 0, "{what}: the refusal wrote a key");
    }
}

#[tokio::test]
async fn a_retry_after_a_lost_reply_is_taken_as_the_same_attempt() {
    let server = denied_scripts();
    let backend = backend(&server, Scripts::Never).await;
    let one = ["job".to_owned()];
    let two = ["job-a".to_owned(), "job-b".to_owned()];
    let value = format!("{}meta", "c".repeat(32));
    for keys in [&one[..], &two[..]] {
        let fence_key = format!("{{{}}}:fence", keys[0]);
        let req = AcquireRequest::new(keys, &value, TTL).fence_key(&fence_key);
        let first = server.expect_ok(backend.acquire(req).await, "acquire");
        let again = server.expect_ok(backend.acquire(req).await, "the same attempt again");
        let (Acquired::Obtained { fence: Some(first) }, Acquired::Obtained { fence: Some(again) }) =
            (&first, &again)
        else {
            server.fail(format_args!("{keys:?}: {first:?}, then {again:?}"))
        };
        // A fence of its own: the counter may be shared with other locks.
        assert!(
            *again > *first,
            "{keys:?}: the retry is told {again}, not above {first} minted before"
        );
        // Another value is refused: the retry was recognised by the value.
        let other = "d".repeat(32);
        let refused = server.expect_ok(
            backend
                .acquire(AcquireRequest::new(keys, &other, TTL))
                .await,
            "another attempt",
        );
        assert!(matches!(refused, Acquired::Busy { .. }), "{refused:?}");
    }
}

#[tokio::test]
async fn a_lock_on_a_key_held_as_permits_answers_wrong_kind() {
    let server = denied_scripts();
    let scripted = server.locker().await;
    let permit = server.expect_ok(
        scripted
            .obtain("pool", TTL, ObtainOptions::new().permits(2))
            .await,
        "a permit",
    );
    let locker = locker(&server, Scripts::Never).await;
    let err = locker
        .obtain("pool", TTL, ObtainOptions::new().fence())
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            LockError::WrongKind {
                held: KeyKind::Semaphore { permits: 2 },
                ..
            }
        ),
        "{err}"
    );
    server.expect_ok(permit.release().await, "release");
}

#[tokio::test]
async fn a_waiter_is_woken_by_a_release_without_scripts() {
    let server = denied_scripts();
    let holder = locker(&server, Scripts::Never).await;
    let waiter = locker(&server, Scripts::Never).await;
    let held = server.expect_ok(
        holder
            .obtain("job", TTL, ObtainOptions::new().fence())
            .await,
        "obtain",
    );
    // A backoff longer than the hang bound: only the release's message
    // wakes the waiter in time.
    let patient = ObtainOptions::new()
        .fence()
        .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(50)));
    let waiting = tokio::spawn(async move { waiter.obtain("job", TTL, patient).await });
    until_listening(&server, "job", 1).await;
    server.expect_ok(held.release().await, "release");
    let taken = tokio::time::timeout(HANG, waiting)
        .await
        .expect("the waiter was not woken by the release")
        .expect("the waiter task");
    server.expect_ok(taken, "the waiter's obtain");
}

#[tokio::test]
async fn inspect_and_force_release_work_without_scripts() {
    let server = denied_scripts();
    let locker = locker(&server, Scripts::Never).await;
    let lock = server.expect_ok(
        locker
            .obtain("job", TTL, ObtainOptions::new().fence().metadata("host-1"))
            .await,
        "obtain",
    );
    let seen = server.expect_ok(locker.inspect("job").await, "inspect");
    assert_eq!(seen.kind, Some(KeyKind::Lock));
    assert_eq!(seen.fence, lock.fence_token());
    assert_eq!(seen.holders.len(), 1);
    assert_eq!(seen.holders[0].metadata, "host-1");
    assert!(server.expect_ok(locker.force_release("job").await, "force_release"));
    let left: i64 = server.cmd(&["EXISTS", "job"]);
    assert_eq!(left, 0);
    assert!(!server.expect_ok(locker.force_release("job").await, "again"));
}

/// The metadata of shares taken by a client with scripts (permits, a read,
/// the write) is shown by `inspect` without scripts, and a force-release
/// without scripts takes it with the shares.
#[tokio::test]
async fn inspect_and_force_release_without_scripts_see_and_clear_shares_metadata() {
    let server = denied_scripts();
    let scripted = server.locker().await;
    let locker = locker(&server, Scripts::Never).await;
    let shown = |seen: &lockmacro_runtime::Inspection| {
        let mut shown: Vec<String> = seen
            .holders
            .iter()
            .map(|holder| format!("{:?} {}", holder.held_as, holder.metadata))
            .collect();
        shown.sort_unstable();
        shown
    };
    let permits = || ObtainOptions::new().permits(3);
    let first = server.expect_ok(
        scripted
            .obtain("pool", TTL, permits().metadata("worker-1"))
            .await,
        "a permit",
    );
    let second = server.expect_ok(scripted.obtain("pool", TTL, permits()).await, "a permit");
    let seen = server.expect_ok(locker.inspect("pool").await, "inspect");
    assert_eq!(seen.kind, Some(KeyKind::Semaphore { permits: 3 }));
    assert_eq!(shown(&seen), ["Permit ", "Permit worker-1"], "{seen:?}");

    let read = ObtainOptions::new().read().metadata("reader");
    let read = server.expect_ok(scripted.obtain("doc", TTL, read).await, "a read");
    let seen = server.expect_ok(locker.inspect("doc").await, "inspect");
    assert_eq!(shown(&seen), ["Read reader"], "{seen:?}");
    server.expect_ok(read.release().await, "release");
    let left: i64 = server.cmd(&["EXISTS", "doc", "{doc}:holders"]);
    assert_eq!(left, 0, "the released read left something behind");
    let write = ObtainOptions::new().write().metadata("writer");
    let write = server.expect_ok(scripted.obtain("doc", TTL, write).await, "the write");
    let seen = server.expect_ok(locker.inspect("doc").await, "inspect");
    assert_eq!(shown(&seen), ["Write writer"], "{seen:?}");
    server.expect_ok(write.release().await, "release");

    assert!(server.expect_ok(locker.force_release("pool").await, "force_release"));
    let left: i64 = server.cmd(&["EXISTS", "pool", "{pool}:holders"]);
    assert_eq!(left, 0, "the forced release left something behind");
    for permit in [first, second] {
        let refused = permit.refresh(TTL).await;
        assert!(
            refused.as_ref().is_err_and(LockError::is_not_held),
            "{refused:?}"
        );
    }
    let left: i64 = server.cmd(&["DBSIZE"]);
    assert_eq!(left, 0, "keys left behind");
}

/// Two obtains race for a key whose only share lapsed (its holder died):
/// exactly one is granted it, with or without scripts. Without scripts the
/// transaction reads the set under `WATCH`; a read that ended the `WATCH`
/// (an `EXEC` of its own) left both writes unguarded, and both were granted.
async fn one_of_two_gets_a_lapsed_share(server: &RedisServer, scripts: Scripts) {
    const RACES: usize = 3000;
    let (a, b) = (locker(server, scripts).await, locker(server, scripts).await);
    let mut conn = server.connection();
    for race in 0..RACES {
        let key = format!("lapsed:{race}");
        let (seconds, micros): (i64, i64) = server.cmd(&["TIME"]);
        let lapsed = (seconds * 1000 + micros / 1000 - 5000).to_string();
        let () = server.expect_ok(
            redis::pipe()
                .cmd("ZADD")
                .arg(&key)
                .arg("+inf")
                .arg("kind:2")
                .ignore()
                .cmd("ZADD")
                .arg(&key)
                .arg(&lapsed)
                .arg("0123456789abcdef0123456789abcdef")
                .ignore()
                .query(&mut conn),
            "a lapsed permit",
        );
        let fenced = || ObtainOptions::new().fence();
        let (first, second) = tokio::join!(
            a.obtain(key.as_str(), TTL, fenced()),
            b.obtain(key.as_str(), TTL, fenced()),
        );
        let granted: Vec<_> = [first, second]
            .into_iter()
            .filter_map(|outcome| match outcome {
                Ok(lock) => Some(lock),
                Err(err) if err.is_not_obtained() => None,
                Err(err) => server.fail(format!("race {race}: {err:?}")),
            })
            .collect();
        assert_eq!(
            granted.len(),
            1,
            "race {race}: {} of two obtains were granted `{key}`",
            granted.len()
        );
        for lock in granted {
            server.expect_ok(lock.release().await, "release");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_obtains_gets_a_lapsed_share_without_scripts() {
    let server = denied_scripts();
    one_of_two_gets_a_lapsed_share(&server, Scripts::Never).await;
    assert_eq!(calls(&server, "evalsha") + calls(&server, "eval"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_obtains_gets_a_lapsed_share_with_scripts() {
    let server = RedisServer::start();
    let () = server.cmd(&["ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all"]);
    one_of_two_gets_a_lapsed_share(&server, Scripts::Auto).await;
}
