//! Transaction-scoped locks on PostgreSQL (`Locker::obtain_in`): held
//! against leases and other transactions, ended by the transaction's commit
//! or rollback (or drop), bounded by the ttl, fenced from the one sequence
//! every key shares, and through PgBouncer in transaction mode.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lockmacro_runtime::{
    BackendErrorKind, HeldAs, KeyKind, LockError, Locker, ObtainOptions, PostgresBackend,
    PostgresConfig, RetryStrategy,
};
use lockmacro_testkit::Fixture;
use lockmacro_testkit::pgbouncer::PgBouncer;
use lockmacro_testkit::pgdb::PostgresDb;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgPool, Row};
use tokio::sync::oneshot;

/// The hang limit of every wait below.
const HANG: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(30);

fn once() -> ObtainOptions {
    ObtainOptions::new()
}

fn patient() -> ObtainOptions {
    ObtainOptions::new()
        .retry(RetryStrategy::linear(Duration::from_millis(50)).deadline(Duration::from_secs(20)))
}

/// A pool that prepares nothing, as PgBouncer in transaction mode needs.
/// A service's own pool, as one that goes through PgBouncer in
/// transaction mode is set: no prepared statement, and no
/// `extra_float_digits` at connect (a stock PgBouncer refuses it).
fn pool(url: &str, connections: u32) -> PgPool {
    let options: PgConnectOptions = url.parse().unwrap();
    PgPoolOptions::new()
        .max_connections(connections)
        .connect_lazy_with(options.statement_cache_capacity(0).extra_float_digits(None))
}

async fn setup(fx: &Fixture) -> (&PostgresDb, Locker, PgPool) {
    let db = fx.postgres_db().expect("a PostgreSQL fixture");
    (db, fx.locker().await, pool(&db.url(), 4))
}

fn is_not_obtained<T: std::fmt::Debug>(result: Result<T, LockError>) -> bool {
    match result {
        Err(err) => err.is_not_obtained(),
        Ok(held) => panic!("obtained while held: {held:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_lock_and_a_lease_exclude_each_other() {
    let fx = Fixture::postgres().await;
    let (_, locker, pool) = setup(&fx).await;
    let mut tx = pool.begin().await.unwrap();
    let held = fx.check(
        locker.obtain_in(&mut tx, "k", TTL, once()).await,
        "obtain_in",
    );
    assert_eq!(held.key(), "k");
    assert!(
        is_not_obtained(locker.obtain("k", TTL, once()).await),
        "a lease"
    );
    let mut other = pool.begin().await.unwrap();
    assert!(
        is_not_obtained(locker.obtain_in(&mut other, "k", TTL, once()).await),
        "another transaction"
    );
    // Another key is free: the lock is on `k` alone.
    fx.check(locker.obtain_in(&mut other, "j", TTL, once()).await, "j");
    other.rollback().await.unwrap();
    tx.commit().await.unwrap();

    let lease = fx.check(
        locker.obtain("k", TTL, once()).await,
        "the lease after the commit",
    );
    let mut tx = pool.begin().await.unwrap();
    assert!(
        is_not_obtained(locker.obtain_in(&mut tx, "k", TTL, once()).await),
        "a transaction while the lease holds"
    );
    fx.check(lease.release().await, "release");
    fx.check(
        locker.obtain_in(&mut tx, "k", TTL, once()).await,
        "after the release",
    );
    tx.rollback().await.unwrap();
}

/// A waiter on `key` (a lease, or a transaction of its own): it finds the
/// key taken (then `tried` is sent), waits, and may only get in once `ended`
/// is set.
fn waiter(
    locker: &Locker,
    pool: &PgPool,
    key: &'static str,
    in_transaction: bool,
    ended: Arc<AtomicBool>,
) -> (tokio::task::JoinHandle<()>, oneshot::Receiver<()>) {
    let (locker, pool) = (locker.clone(), pool.clone());
    let (tried, heard) = oneshot::channel();
    let task = tokio::spawn(async move {
        let early = "got in before the holder's transaction ended";
        if in_transaction {
            let mut tx = pool.begin().await.unwrap();
            assert!(is_not_obtained(
                locker.obtain_in(&mut tx, key, TTL, once()).await
            ));
            tried.send(()).unwrap();
            locker
                .obtain_in(&mut tx, key, TTL, patient())
                .await
                .unwrap();
            assert!(ended.load(Ordering::SeqCst), "{early}");
            tx.commit().await.unwrap();
        } else {
            assert!(is_not_obtained(locker.obtain(key, TTL, once()).await));
            tried.send(()).unwrap();
            let lock = locker.obtain(key, TTL, patient()).await.unwrap();
            assert!(ended.load(Ordering::SeqCst), "{early}");
            lock.release().await.unwrap();
        }
    });
    (task, heard)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_ends_at_commit_at_rollback_and_when_the_transaction_is_dropped() {
    let fx = Fixture::postgres().await;
    let (_, locker, pool) = setup(&fx).await;
    for (round, end) in ["commit", "rollback", "drop"].into_iter().enumerate() {
        let mut tx = pool.begin().await.unwrap();
        fx.check(
            locker.obtain_in(&mut tx, "job", TTL, once()).await,
            "obtain_in",
        );
        let ended = Arc::new(AtomicBool::new(false));
        let (lease, tried_lease) = waiter(&locker, &pool, "job", false, ended.clone());
        let (other, tried_other) = waiter(&locker, &pool, "job", true, ended.clone());
        for tried in [tried_lease, tried_other] {
            tokio::time::timeout(HANG, tried).await.unwrap().unwrap();
        }
        ended.store(true, Ordering::SeqCst);
        match round {
            0 => tx.commit().await.unwrap(),
            1 => tx.rollback().await.unwrap(),
            _ => drop(tx),
        }
        for waiter in [lease, other] {
            tokio::time::timeout(HANG, waiter)
                .await
                .unwrap_or_else(|_| panic!("a waiter hung after the {end}"))
                .unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_commit_with_the_lock_and_roll_back_with_it() {
    let fx = Fixture::postgres().await;
    let (db, locker, pool) = setup(&fx).await;
    db.execute("CREATE TABLE counter (n bigint NOT NULL); INSERT INTO counter VALUES (0)")
        .await;
    let bump = "UPDATE counter SET n = n + 1";
    let mut tx = pool.begin().await.unwrap();
    fx.check(
        locker.obtain_in(&mut tx, "c", TTL, once()).await,
        "obtain_in",
    );
    sqlx::raw_sql(bump).execute(&mut *tx).await.unwrap();
    tx.rollback().await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    fx.check(
        locker.obtain_in(&mut tx, "c", TTL, once()).await,
        "after the rollback",
    );
    sqlx::raw_sql(bump).execute(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        db.column("SELECT n::text FROM counter").await,
        [Some("1".to_owned())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_holder_past_its_ttl_is_ended_and_cannot_commit() {
    let fx = Fixture::postgres().await;
    let (db, locker, pool) = setup(&fx).await;
    db.execute("CREATE TABLE marks (who text)").await;
    let mut stale = pool.begin().await.unwrap();
    fx.check(
        locker
            .obtain_in(&mut stale, "job", Duration::from_millis(300), once())
            .await,
        "obtain_in",
    );
    sqlx::raw_sql("INSERT INTO marks VALUES ('stale')")
        .execute(&mut *stale)
        .await
        .unwrap();
    // The stale holder sends nothing more: once the server has ended its
    // session, the key is free.
    let mut next = pool.begin().await.unwrap();
    fx.check(
        locker.obtain_in(&mut next, "job", TTL, patient()).await,
        "the next holder",
    );
    sqlx::raw_sql("INSERT INTO marks VALUES ('next')")
        .execute(&mut *next)
        .await
        .unwrap();
    next.commit().await.unwrap();
    assert!(stale.commit().await.is_err(), "the stale holder committed");
    assert_eq!(
        db.column("SELECT who FROM marks").await,
        [Some("next".to_owned())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_tokens_increase_across_keys_leases_and_transactions() {
    let fx = Fixture::postgres().await;
    let (_, locker, pool) = setup(&fx).await;
    let mut last = 0;
    for (round, key) in ["a", "b", "a", "c", "b", "a"].into_iter().enumerate() {
        let token = if round % 2 == 0 {
            let lock = fx.check(locker.obtain(key, TTL, once().fence()).await, "obtain");
            let token = lock.fence_token().expect("fenced");
            fx.check(lock.release().await, "release");
            token
        } else {
            let mut tx = pool.begin().await.unwrap();
            let lock = fx.check(
                locker.obtain_in(&mut tx, key, TTL, once().fence()).await,
                "in",
            );
            tx.commit().await.unwrap();
            lock.fence_token().expect("fenced")
        };
        assert!(
            token > last,
            "round {round} on `{key}`: token {token} after {last}"
        );
        last = token;
    }
    let mut tx = pool.begin().await.unwrap();
    let unfenced = fx.check(
        locker.obtain_in(&mut tx, "d", TTL, once()).await,
        "unfenced",
    );
    assert_eq!(unfenced.fence_token(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_transaction_lock_cannot_keep_is_refused() {
    let fx = Fixture::postgres().await;
    let (_, locker, pool) = setup(&fx).await;
    let unsupported = |result: Result<_, LockError>| match result {
        Err(LockError::Backend(err)) => (err.kind(), err.to_string()),
        other => panic!("expected a backend error, got {other:?}"),
    };
    let mut tx = pool.begin().await.unwrap();
    for (opts, named) in [
        (once().fair(), "`fair`"),
        (once().permits(2), "permits"),
        (once().metadata("me"), "metadata"),
        (once().max_hold(TTL), "`max_hold`"),
    ] {
        let (kind, message) = unsupported(locker.obtain_in(&mut tx, "k", TTL, opts).await);
        assert_eq!(kind, BackendErrorKind::Unsupported, "{message}");
        assert!(message.contains(named), "{message}");
    }
    let (kind, message) = unsupported(Locker::memory().obtain_in(&mut tx, "k", TTL, once()).await);
    assert_eq!(kind, BackendErrorKind::Unsupported, "{message}");
    assert!(message.contains("PostgreSQL"), "{message}");
    tx.rollback().await.unwrap();

    let mut tx = pool.begin().await.unwrap();
    sqlx::raw_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *tx)
        .await
        .unwrap();
    let (_, message) = unsupported(locker.obtain_in(&mut tx, "k", TTL, once()).await);
    assert!(message.contains("READ COMMITTED"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_locks_count_without_loss_through_pgbouncer_in_transaction_mode() {
    const WORKERS: usize = 4;
    const ROUNDS: usize = 10;
    let fx = Fixture::own_postgres().await;
    let db = fx.postgres_db().unwrap();
    db.execute("CREATE TABLE counter (n bigint NOT NULL); INSERT INTO counter VALUES (0)")
        .await;
    let bouncer = PgBouncer::before(db, 3).await;
    let url = bouncer.url(db.name());
    let config = PostgresConfig::default().listen_url(db.url());
    let backend = PostgresBackend::connect_with(&url, config).await;
    let locker = Locker::new(
        backend
            .unwrap_or_else(|err| panic!("connect through pgbouncer: {err:?}\n{}", bouncer.log())),
    );
    let pool = pool(&url, WORKERS as u32);
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let (locker, pool) = (locker.clone(), pool.clone());
        workers.push(tokio::spawn(async move {
            let mut last = 0;
            for _ in 0..ROUNDS {
                let mut tx = pool.begin().await.unwrap();
                let lock = locker
                    .obtain_in(&mut tx, "counter", TTL, patient().fence())
                    .await
                    .unwrap();
                let token = lock.fence_token().unwrap();
                assert!(token > last, "token {token} after {last}");
                last = token;
                // A read, then a write of what was read: only exclusion
                // keeps every increment.
                let row = sqlx::raw_sql("SELECT n FROM counter")
                    .fetch_one(&mut *tx)
                    .await
                    .unwrap();
                let n: i64 = row.get(0);
                sqlx::raw_sql(AssertSqlSafe(format!("UPDATE counter SET n = {}", n + 1)))
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
            }
        }));
    }
    for worker in workers {
        tokio::time::timeout(Duration::from_secs(120), worker)
            .await
            .expect("a worker hung")
            .unwrap_or_else(|panic| {
                eprintln!("{}", bouncer.log());
                std::panic::resume_unwind(panic.into_panic())
            });
    }
    assert_eq!(
        db.column("SELECT n::text FROM counter").await,
        [Some((WORKERS * ROUNDS).to_string())],
        "an increment was lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_with_per_key_counters_is_upgraded_and_tokens_start_above_them_for_locks_and_shares()
 {
    let fx = Fixture::postgres().await;
    let db = fx.postgres_db().expect("a PostgreSQL fixture");
    // What a schema of version 1 had, and one of version 2 with shares but
    // before the sequence: a counter per fence key, no sequence. Shares
    // then take their tokens from the sequence too.
    for (version, top) in [(1, 500), (2, 5000)] {
        db.execute(&format!(
            "DROP SEQUENCE lockmacro_fence_seq; \
             INSERT INTO lockmacro_fences (key, value) VALUES ('old:fence{version}', {top}); \
             CREATE OR REPLACE FUNCTION lockmacro_schema_version() RETURNS integer \
             LANGUAGE sql IMMUTABLE AS $$ SELECT {version} $$"
        ))
        .await;
        let locker = db.locker().await;
        let lock = fx.check(locker.obtain("new", TTL, once().fence()).await, "obtain");
        let token = lock.fence_token().expect("fenced");
        assert!(
            token > top,
            "token {token} after the upgrade from {version}"
        );
        fx.check(lock.release().await, "release");
        let permit = fx.check(
            locker
                .obtain("new-permits", TTL, once().permits(2).fence())
                .await,
            "a permit",
        );
        let after = permit.fence_token().expect("fenced");
        assert!(after > token, "a permit's token {after} after {token}");
        fx.check(permit.release().await, "release");
        assert_eq!(
            db.column("SELECT lockmacro_schema_version()::text").await,
            [Some("7".to_owned())]
        );
    }
}

/// Shares (permits, reads, the write) and transaction-scoped locks answer
/// each other busy: a share's acquire finds the transaction's advisory
/// lock, and `obtain_in` finds the shares' rows (busy, not `WrongKind`,
/// which would abort the transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_and_transaction_locks_answer_each_other_busy() {
    let fx = Fixture::postgres().await;
    let (_, locker, pool) = setup(&fx).await;
    for (name, share) in [
        ("permit", once().permits(3)),
        ("read", once().read()),
        ("write", once().write()),
    ] {
        let key = format!("shared-{name}");
        let mut tx = pool.begin().await.unwrap();
        fx.check(locker.obtain_in(&mut tx, &key, TTL, once()).await, "in");
        assert!(
            is_not_obtained(locker.obtain(&key, TTL, share.clone()).await),
            "a {name} under a transaction lock"
        );
        tx.commit().await.unwrap();

        let held = fx.check(locker.obtain(&key, TTL, share).await, name);
        let mut tx = pool.begin().await.unwrap();
        assert!(
            is_not_obtained(locker.obtain_in(&mut tx, &key, TTL, once()).await),
            "a transaction lock on a key held as a {name}"
        );
        // The transaction is not aborted: it goes on, and takes another key.
        fx.check(
            locker
                .obtain_in(&mut tx, &format!("{key}-other"), TTL, once())
                .await,
            "another key in the same transaction",
        );
        fx.check(held.release().await, "release");
        fx.check(
            locker.obtain_in(&mut tx, &key, TTL, once()).await,
            "after the share's release",
        );
        tx.rollback().await.unwrap();
    }
}

/// `inspect` shows a key held by a transaction lock as a lock held by a
/// transaction, with no metadata, no time left and the session holding it;
/// `force_release` leaves it to its transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_sees_a_transaction_lock_and_force_release_leaves_it() {
    let fx = Fixture::postgres().await;
    let (_, locker, pool) = setup(&fx).await;
    let mut tx = pool.begin().await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    fx.check(locker.obtain_in(&mut tx, "seen", TTL, once()).await, "in");
    let seen = fx.check(locker.inspect("seen").await, "inspect");
    assert_eq!(seen.kind, Some(KeyKind::Lock), "{seen:?}");
    assert_eq!(seen.holders.len(), 1, "{seen:?}");
    assert_eq!(seen.holders[0].held_as, HeldAs::Transaction);
    assert_eq!(seen.holders[0].metadata, "");
    assert_eq!(seen.holders[0].remaining, None);
    assert_eq!(seen.holders[0].pid, u32::try_from(pid).ok());
    assert_eq!(
        fx.check(locker.inspect("unseen").await, "inspect").kind,
        None,
        "another key"
    );
    assert!(!fx.check(locker.force_release("seen").await, "force_release"));
    assert!(
        is_not_obtained(locker.obtain("seen", TTL, once()).await),
        "still held after force_release"
    );
    tx.commit().await.unwrap();
    assert_eq!(
        fx.check(locker.inspect("seen").await, "inspect").kind,
        None,
        "after the commit"
    );
}

/// Shares take their fencing tokens from the sequence locks use: tokens
/// increase across keys and kinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_fence_tokens_come_from_the_shared_sequence() {
    let fx = Fixture::postgres().await;
    let (_, locker, pool) = setup(&fx).await;
    let mut last = 0;
    for (round, key) in ["a", "b", "c", "d", "e"].into_iter().enumerate() {
        let token = match round {
            0 | 3 => {
                let lock = fx.check(locker.obtain(key, TTL, once().fence()).await, "lock");
                let token = lock.fence_token().expect("fenced");
                fx.check(lock.release().await, "release");
                token
            }
            1 => {
                let permit = fx.check(
                    locker.obtain(key, TTL, once().permits(2).fence()).await,
                    "permit",
                );
                let token = permit.fence_token().expect("fenced");
                fx.check(permit.release().await, "release");
                token
            }
            2 => {
                let mut tx = pool.begin().await.unwrap();
                let lock = fx.check(
                    locker.obtain_in(&mut tx, key, TTL, once().fence()).await,
                    "in",
                );
                tx.commit().await.unwrap();
                lock.fence_token().expect("fenced")
            }
            _ => {
                let write = fx.check(
                    locker.obtain(key, TTL, once().write().fence()).await,
                    "write",
                );
                let token = write.fence_token().expect("fenced");
                fx.check(write.release().await, "release");
                token
            }
        };
        assert!(
            token > last,
            "round {round} on `{key}`: token {token} after {last}"
        );
        last = token;
    }
}
