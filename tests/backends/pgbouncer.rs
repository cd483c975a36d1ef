//! The PostgreSQL backend through PgBouncer in transaction mode, with two
//! server connections for many clients: every statement may land on another
//! server connection, so nothing may rely on a session (no prepared
//! statement outlives its statement). `LISTEN` goes to the server itself.

use std::sync::Arc;
use std::time::Duration;

use lockmacro_runtime::{Locker, ObtainOptions, PostgresBackend, PostgresConfig, RetryStrategy};
use lockmacro_testkit::Fixture;
use lockmacro_testkit::logs::Logs;
use lockmacro_testkit::pgbouncer::PgBouncer;
use lockmacro_testkit::witness::Witness;
use tokio::time::Instant;

const WORKERS: usize = 6;
const ROUNDS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_fenced_and_fair_locks_work_through_pgbouncer_in_transaction_mode() {
    let fx = Fixture::own_postgres().await;
    let db = fx.postgres_db().unwrap();
    let bouncer = PgBouncer::before(db, 2).await;
    let witness = Arc::new(Witness::new(Duration::from_secs(2)));
    let mut workers = Vec::new();
    for id in 0..WORKERS {
        let config = PostgresConfig::default().listen_url(db.url());
        let backend = PostgresBackend::connect_with(&bouncer.url(db.name()), config).await;
        let locker =
            Locker::new(backend.unwrap_or_else(|err| {
                panic!("connect through pgbouncer: {err:?}\n{}", bouncer.log())
            }));
        let witness = witness.clone();
        workers.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let mut opts = ObtainOptions::new().fence().retry(
                    RetryStrategy::linear(Duration::from_millis(200))
                        .deadline(Duration::from_secs(30)),
                );
                if round % 2 == 1 {
                    opts = opts.fair();
                }
                let called = Instant::now();
                let guard = locker
                    .obtain("job", Duration::from_secs(2), opts)
                    .await
                    .unwrap()
                    .keep_alive_every(Duration::from_millis(100))
                    .unwrap();
                let open = witness.enter(id, guard.fence_token().unwrap(), called);
                // Long enough for a few refreshes through the pooler.
                tokio::time::sleep(Duration::from_millis(250)).await;
                assert!(open.write(&guard), "the lease ran out through the pooler");
                guard.release().await.unwrap();
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
    let verdict = witness
        .verdict(&lockmacro_runtime::FencedStore::memory())
        .await;
    println!("{verdict}");
    assert_eq!(verdict.sections, WORKERS * ROUNDS);
    assert_eq!(verdict.overlaps, 0, "two holders at once");
    assert_eq!(
        verdict.tokens_out_of_order, 0,
        "a fencing token went backwards"
    );
    assert_eq!(verdict.lost_updates, 0, "an update was lost");
}

/// A stock PgBouncer refuses sqlx's default `extra_float_digits` at
/// connect. The backend's own connections leave it out, so a URL of the
/// pooler works as is (above); a service's own pool that sends it is told
/// which setting to add, as an error retrying cannot cure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_that_sends_what_a_stock_pgbouncer_refuses_is_told_which_setting_to_add() {
    let fx = Fixture::own_postgres().await;
    let db = fx.postgres_db().unwrap();
    let bouncer = PgBouncer::before(db, 2).await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_lazy(&bouncer.url(db.name()))
        .unwrap();
    let result = tokio::time::timeout(Duration::from_secs(30), PostgresBackend::from_pool(pool))
        .await
        .expect("connect hung");
    let err = match result {
        Err(lockmacro_runtime::LockError::Backend(err)) => err,
        other => panic!("expected a backend error, got {other:?}"),
    };
    assert_eq!(
        err.kind(),
        lockmacro_runtime::BackendErrorKind::Configuration,
        "{err}"
    );
    assert!(!err.kind().is_transient());
    assert!(
        err.to_string()
            .contains("ignore_startup_parameters = extra_float_digits"),
        "{err}"
    );
}

/// Without `listen_url`, the backend's `LISTEN` goes through PgBouncer in
/// transaction mode, where nothing is heard. The listener finds that out,
/// says so once (per backend), and waiters, plain and fair, poll by their retry
/// strategy: each obtains after the release, long before the holder's
/// 30 s lease would have ended and within its 20 s deadline. (One thread,
/// so that the listener's task logs where this test captures.)
#[tokio::test(flavor = "current_thread")]
async fn through_pgbouncer_without_a_listen_url_waiters_poll_and_the_log_says_why() {
    let captured = Logs::capture(tracing::Level::WARN);

    let fx = Fixture::own_postgres().await;
    let db = fx.postgres_db().unwrap();
    let bouncer = PgBouncer::before(db, 2).await;
    let connect = || async {
        let config = PostgresConfig::default().connect_timeout(Duration::from_secs(2));
        let backend = PostgresBackend::connect_with(&bouncer.url(db.name()), config).await;
        Locker::new(backend.unwrap_or_else(|err| panic!("{err}\n{}", bouncer.log())))
    };
    let (holder, waiter) = (connect().await, connect().await);
    let ttl = Duration::from_secs(30);
    let patient = || {
        ObtainOptions::new().retry(
            RetryStrategy::linear(Duration::from_millis(200)).deadline(Duration::from_secs(20)),
        )
    };
    for (round, opts) in [patient(), patient().fair()].into_iter().enumerate() {
        let held = holder
            .obtain("job", ttl, ObtainOptions::new())
            .await
            .unwrap();
        let waiting = {
            let waiter = waiter.clone();
            tokio::spawn(async move { waiter.obtain("job", ttl, opts).await })
        };
        let marked = "SELECT waited::text FROM lockmacro_locks WHERE key = 'job'";
        while db.column(marked).await != [Some("true".to_owned())] {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        held.release().await.unwrap();
        let lock = tokio::time::timeout(Duration::from_secs(25), waiting)
            .await
            .expect("the waiter hung")
            .unwrap()
            .unwrap_or_else(|err| panic!("round {round}: the waiter was never woken: {err}"));
        lock.release().await.unwrap();
    }
    let logs = captured.text();
    // Once per backend that listened: two lockers, two backends.
    let said = logs.matches("wait by their retry strategy").count();
    assert!((1..=2).contains(&said), "{logs}");
    assert!(logs.contains("PostgresConfig::listen_url"), "{logs}");
}

/// PostgreSQL down behind PgBouncer: PgBouncer answers for it ("server
/// login has been failing", a connection error, SQLSTATE class 08), which
/// the backend reports as unreachable, a failure that trying again may
/// cure; once the server is back, an obtain goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_behind_pgbouncer_is_unreachable_and_transient() {
    let fx = Fixture::own_postgres().await;
    let db = fx.postgres_db().unwrap();
    let bouncer = PgBouncer::before(db, 2).await;
    let config = PostgresConfig::default()
        .listen_url(db.url())
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(10));
    let backend = PostgresBackend::connect_with(&bouncer.url(db.name()), config).await;
    let locker = Locker::new(backend.unwrap());
    let ttl = Duration::from_secs(5);
    locker
        .obtain("job", ttl, ObtainOptions::new())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    db.server().kill();
    let err = locker
        .obtain("job", ttl, ObtainOptions::new())
        .await
        .expect_err("PostgreSQL is down");
    let lockmacro_runtime::LockError::Backend(backend) = &err else {
        panic!("expected a backend error, got {err:?}");
    };
    assert!(
        matches!(
            backend.kind(),
            lockmacro_runtime::BackendErrorKind::Unreachable
                | lockmacro_runtime::BackendErrorKind::Timeout
        ),
        "{err}\n{}",
        bouncer.log()
    );
    assert!(err.is_transient(), "{err}");

    db.server().start_again();
    // PgBouncer waits `server_login_retry` (15 s) before it tries the
    // server again: a service retries a transient error for as long.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = None;
    while Instant::now() < deadline {
        match locker.obtain("job", ttl, ObtainOptions::new()).await {
            Ok(lock) => {
                lock.release().await.unwrap();
                return;
            }
            // An attempt sent as the server went down may have taken the
            // key, its reply lost: it is held until its ttl runs out.
            Err(err @ lockmacro_runtime::LockError::NotObtained { .. }) => last = Some(err),
            Err(err) if err.is_transient() => last = Some(err),
            Err(err) => panic!("not transient: {err}"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!(
        "never obtained after the restart: {last:?}\n{}",
        bouncer.log()
    );
}
