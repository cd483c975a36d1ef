//! The PostgreSQL backend through PgBouncer in transaction mode, with two
//! server connections for many clients: every statement may land on another
//! server connection, so nothing may rely on a session (no prepared
//! statement outlives its statement). `LISTEN` goes to the server itself.

use std::sync::Arc;
use std::time::Duration;

use lockmacro_runtime::{Locker, ObtainOptions, PostgresBackend, PostgresConfig, RetryStrategy};
use lockmacro_testkit::Fixture;
use lockmacro_testkit::pgbouncer::PgBouncer;
use lockmacro_testkit::witness::Witness;
use tokio::time::Instant;

const WORKERS: usize = 6;
const ROUNDS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_fenced_and_fair_locks_work_through_pgbouncer_in_transaction_mode() {
    let fx = Fixture::own_postgres().await;
    let db = fx.postgres_db().unwrap();
    let bouncer = tokio::task::spawn_blocking({
        let port = db.server().port();
        move || PgBouncer::start(port, 2)
    })
    .await
    .unwrap();
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
