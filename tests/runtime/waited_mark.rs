//! The mark a waiter leaves on the lock it waits for (on Redis, appended to
//! the value; on PostgreSQL, the row's `waited`):
//! the holder's release then looks for waiters and wakes them; a release of
//! an unmarked value does not. The mark is the server's business: an
//! attempt retried after its reply was lost still knows the value as its
//! own, and what is shown of the holder (inspect, a refusal's metadata)
//! leaves it out. Every waiter here has a 60 s backoff and a 30 s
//! deadline, and every lease 30 s, so a waiter only obtains in time if the
//! release wakes it; the 5 s bounds are limits for a hang.

use std::time::Duration;

use lockmacro_runtime::backend::{AcquireRequest, Acquired, Backend};
use lockmacro_runtime::{
    LockError, Locker, ObtainOptions, RedisBackend, RedisConfig, RetryStrategy, Scripts,
};
use lockmacro_testkit::{Fixture, RedisServer};

const TTL: Duration = Duration::from_secs(30);
const PROMPTLY: Duration = Duration::from_secs(5);
/// The mark: one NUL at the end of the value.
const MARK: char = '\0';

fn patient() -> ObtainOptions {
    ObtainOptions::new()
        .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(30)))
}

/// Waits until the value at `key` ends with the mark: a waiter found the
/// key held and waits for its release. `value` reads the key as the store
/// holds it.
async fn until_marked<F>(key: &str, mut value: impl FnMut() -> F) -> String
where
    F: std::future::Future<Output = Option<String>>,
{
    for _ in 0..500 {
        if let Some(found) = value().await.filter(|found| found.ends_with(MARK)) {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no waiter marked `{key}`");
}

/// Holds `job` with metadata through `holder`, has a waiter on `waiter`
/// mark it, checks what is shown of the holder, then releases: the waiter
/// must obtain well before the holder's lease would have ended.
async fn released_to_the_marking_waiter<F>(
    holder: &Locker,
    waiter: &Locker,
    value: impl FnMut() -> F,
    what: &str,
) where
    F: std::future::Future<Output = Option<String>>,
{
    let held = holder
        .obtain("job", TTL, ObtainOptions::new().metadata("worker-7"))
        .await
        .unwrap_or_else(|err| panic!("{what}: obtain: {err}"));
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.obtain("job", TTL, patient()).await })
    };
    let marked = until_marked("job", value).await;
    assert!(
        marked.ends_with(&format!("worker-7{MARK}")),
        "{what}: the mark follows the metadata: {marked:?}"
    );

    let refused = holder
        .obtain("job", TTL, ObtainOptions::new())
        .await
        .expect_err("the key is held");
    let LockError::NotObtained { holder: shown, .. } = &refused else {
        panic!("{what}: {refused}");
    };
    if let Some(shown) = shown {
        assert_eq!(
            shown, "worker-7",
            "{what}: a refusal shows the metadata alone"
        );
    }

    held.release()
        .await
        .unwrap_or_else(|err| panic!("{what}: release: {err}"));
    let lock = tokio::time::timeout(PROMPTLY, waiting)
        .await
        .unwrap_or_else(|_| panic!("{what}: the release of a marked value did not wake the waiter"))
        .expect("the waiter task")
        .unwrap_or_else(|err| panic!("{what}: the waiter: {err}"));
    lock.release()
        .await
        .unwrap_or_else(|err| panic!("{what}: release: {err}"));
}

// Redlock's waiters wait by backoff (no release is heard across masters),
// but mark the value on each master all the same.
lockmacro_testkit::for_each_backend! {
    runtime: (flavor = "multi_thread", worker_threads = 2),
    cases: [crate::waited_mark],
    { needs: [], only: [Redis, Valkey, Cluster], servers: shared } => [
        a_marked_holder_s_release_wakes_its_waiter,
    ],
    { needs: [], only: [Redis, Valkey, Cluster, Redlock], servers: shared } => [
        inspect_shows_the_metadata_of_a_marked_value_without_the_mark,
    ],
}

async fn a_marked_holder_s_release_wakes_its_waiter(fx: &Fixture) {
    let (holder, waiter) = (fx.locker().await, fx.locker().await);
    let what = format!("{:?}", fx.kind());
    released_to_the_marking_waiter(&holder, &waiter, || fx.value("job"), &what).await;
}

async fn inspect_shows_the_metadata_of_a_marked_value_without_the_mark(fx: &Fixture) {
    let (holder, waiter) = (fx.locker().await, fx.locker().await);
    let held = fx.check(
        holder
            .obtain("job", TTL, ObtainOptions::new().metadata("worker-7"))
            .await,
        "obtain",
    );
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.obtain("job", TTL, patient()).await })
    };
    until_marked("job", || fx.value("job")).await;
    let seen = fx.check(holder.inspect("job").await, "inspect");
    let metadata: Vec<&str> = seen.holders.iter().map(|h| h.metadata.as_str()).collect();
    assert_eq!(metadata, ["worker-7"], "{:?}", fx.kind());
    waiting.abort();
    fx.check(held.release().await, "release");
}

async fn backend(server: &RedisServer, scripts: Scripts) -> RedisBackend {
    let config = RedisConfig::default().scripts(scripts);
    server.expect_ok(
        RedisBackend::connect_with(&server.url(), config).await,
        "connect",
    )
}

/// Without scripts (the transaction on Redis, the native compare commands
/// on Valkey), the waiter marks the value in its transaction, and the
/// holder's release of the marked value wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_scripts_a_marked_holder_s_release_wakes_its_waiter() {
    for server in [RedisServer::start(), RedisServer::valkey()] {
        let holder = Locker::new(backend(&server, Scripts::Never).await);
        let waiter = Locker::new(backend(&server, Scripts::Never).await);
        let value = || async { server.cmd::<Option<String>>(&["GET", "job"]) };
        released_to_the_marking_waiter(&holder, &waiter, value, "without scripts").await;
    }
}

/// A plain attempt (`SET … NX PX`) sent again after its reply was
/// lost, once a waiter marked the value it wrote, is still told the key is
/// its own; another value is still refused. With scripts and without.
#[tokio::test]
async fn a_retry_after_a_waiter_marked_the_value_is_taken_as_the_same_attempt() {
    let server = RedisServer::start();
    for scripts in [Scripts::Auto, Scripts::Never] {
        let () = server.cmd(&["FLUSHALL"]);
        let backend = backend(&server, scripts).await;
        let keys = ["job".to_owned()];
        let mine = format!("{}meta", "a".repeat(32));
        let plain = AcquireRequest::new(&keys, &mine, TTL);
        assert!(plain.is_plain());
        let taken = server.expect_ok(backend.acquire(plain).await, "acquire");
        assert!(
            matches!(taken, Acquired::Obtained { .. }),
            "{scripts:?}: {taken:?}"
        );

        let other = format!("{}else", "b".repeat(32));
        let waiting = AcquireRequest::new(&keys, &other, TTL).waiting();
        let busy = server.expect_ok(backend.acquire(waiting).await, "a waiter's attempt");
        assert!(
            matches!(busy, Acquired::Busy { .. }),
            "{scripts:?}: {busy:?}"
        );
        let value: String = server.cmd(&["GET", "job"]);
        assert_eq!(
            value,
            format!("{mine}{MARK}"),
            "{scripts:?}: the waiter marked it"
        );

        // The reply of the first attempt was lost: the same attempt again.
        let again = server.expect_ok(backend.acquire(plain).await, "the same attempt again");
        assert!(
            matches!(again, Acquired::Obtained { .. }),
            "{scripts:?}: the retry was not recognised: {again:?}"
        );
        let value: String = server.cmd(&["GET", "job"]);
        assert_eq!(
            value,
            format!("{mine}{MARK}"),
            "{scripts:?}: the retry kept the mark"
        );

        let refused = server.expect_ok(
            backend
                .acquire(AcquireRequest::new(&keys, &other, TTL))
                .await,
            "another attempt",
        );
        let Acquired::Busy { holder, .. } = &refused else {
            panic!("{scripts:?}: {refused:?}");
        };
        if let Some(holder) = holder {
            assert_eq!(
                holder, "meta",
                "{scripts:?}: the holder's metadata without the mark"
            );
        }
        assert!(server.expect_ok(backend.release(&keys, &mine[..32]).await, "release"));
    }
}

/// On PostgreSQL the mark is the lock row's `waited`, set by a waiter that
/// listens for releases: the holder's release then notifies, and the
/// waiter obtains long before the holder's lease would have ended. A
/// release nobody waited for notifies nobody: a notification sent after
/// it, on the same channel, is the first one a listener hears
/// (PostgreSQL delivers notifications in the order their transactions
/// commit).
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_only_a_marked_holder_s_release_notifies() {
    use sqlx::postgres::PgListener;

    let fx = Fixture::postgres().await;
    let db = fx.postgres_db().expect("a PostgreSQL fixture");
    let waited = |key: String| async move {
        db.column(&format!(
            "SELECT waited::text FROM lockmacro_locks WHERE key = {}",
            lockmacro_testkit::pgdb::quote(&key)
        ))
        .await
        .first()
        .cloned()
        .flatten()
    };
    let (holder, waiter) = (fx.locker().await, fx.locker().await);
    let mut heard = PgListener::connect(&db.url()).await.unwrap();
    heard.listen("lockmacro_release").await.unwrap();

    let quiet = fx.check(
        holder.obtain("quiet", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    assert_eq!(waited(fx.wire_key("quiet")).await.as_deref(), Some("false"));
    fx.check(quiet.release().await, "release");
    db.execute("SELECT pg_notify('lockmacro_release', 'after the quiet release')")
        .await;
    let first = tokio::time::timeout(PROMPTLY, next_heard(&mut heard))
        .await
        .expect("no notification");
    assert_eq!(
        first, "after the quiet release",
        "a release nobody waited for notified"
    );

    let held = fx.check(
        holder.obtain("job", TTL, ObtainOptions::new()).await,
        "obtain",
    );
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.obtain("job", TTL, patient()).await })
    };
    let mut marked = false;
    for _ in 0..500 {
        if waited(fx.wire_key("job")).await.as_deref() == Some("true") {
            marked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(marked, "no waiter marked `job`");
    fx.check(held.release().await, "release");
    let next = tokio::time::timeout(PROMPTLY, next_heard(&mut heard))
        .await
        .expect("the marked release notified nobody");
    assert_eq!(next, fx.wire_key("job"));
    let lock = tokio::time::timeout(PROMPTLY, waiting)
        .await
        .expect("the release of a marked lock did not wake the waiter")
        .expect("the waiter task");
    fx.check(fx.check(lock, "the waiter").release().await, "release");
}

/// The payload of the next notification `listener` hears, past the probe a
/// backend's listener sends itself to check that it hears.
#[cfg(feature = "postgres")]
async fn next_heard(listener: &mut sqlx::postgres::PgListener) -> String {
    loop {
        let heard = listener.recv().await.unwrap();
        if !heard.payload().starts_with("lockmacro-probe:") {
            return heard.payload().to_owned();
        }
    }
}
