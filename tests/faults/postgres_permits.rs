//! Semaphores on PostgreSQL under faults: permit holders killed (SIGKILL)
//! give their permits back after their ttl on the server's clock, never
//! sooner, and not much later.

use std::env;
use std::io::{BufRead, BufReader};
use std::time::Duration;

use lockmacro_runtime::{Locker, ObtainOptions, PostgresBackend, RetryStrategy};
use lockmacro_testkit::Fixture;

use crate::process::rerun_as_child;

/// Set, to the database's URL, for the child processes that hold permits.
const HOLDER_ENV: &str = "LOCKMACRO_FAULTS_PG_PERMIT_HOLDER";
const TTL: Duration = Duration::from_secs(1);
const PERMITS: u32 = 2;
/// The hang limit of every wait below, never a measurement.
const HANG: Duration = Duration::from_secs(20);

/// When each live share of `api` ends, in ms of the server's clock.
const EXPIRIES: &str = "SELECT (extract(epoch FROM expires_at) * 1000)::bigint::text \
     FROM lockmacro_shares WHERE key = 'api' AND expires_at > clock_timestamp()";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_permit_holders_give_their_permits_back_after_their_ttl_never_sooner() {
    // The same test, run again in child processes, are the holders.
    if let Ok(url) = env::var(HOLDER_ENV) {
        let locker = Locker::new(PostgresBackend::connect(&url).await.expect("connect"));
        let lock = locker
            .obtain("api", TTL, ObtainOptions::new().permits(PERMITS))
            .await
            .expect("the holder takes a permit");
        let _guard = lock.keep_alive();
        println!("inside");
        std::future::pending::<()>().await;
    }
    let fx = Fixture::own_postgres().await;
    let db = fx.postgres_db().expect("a PostgreSQL fixture");
    let mut holders = Vec::new();
    for _ in 0..PERMITS {
        let mut holder = rerun_as_child(
            "postgres_permits::killed_permit_holders_give_their_permits_back_after_their_ttl_never_sooner",
            HOLDER_ENV,
            &db.url(),
        );
        let stdout = holder.0.stdout.take().unwrap();
        let inside = tokio::task::spawn_blocking(move || {
            BufReader::new(stdout)
                .lines()
                .any(|line| line.is_ok_and(|line| line == "inside"))
        });
        let inside = tokio::time::timeout(HANG, inside)
            .await
            .expect("a holder did not get inside")
            .unwrap();
        assert!(inside, "a holder exited without getting inside");
        holders.push(holder);
    }

    let contender = fx.locker().await;
    let refused = contender
        .obtain("api", TTL, ObtainOptions::new().permits(PERMITS))
        .await;
    assert!(
        refused.is_err_and(|err| err.is_not_obtained()),
        "a third holder got in beside two living ones"
    );
    for holder in &mut holders {
        holder.0.kill().unwrap();
        holder.0.wait().unwrap();
    }
    // The permits end no earlier than the expiries the server has for them
    // now; a refresh still in flight could only move them later.
    let expiries: Vec<u64> = db
        .column(EXPIRIES)
        .await
        .into_iter()
        .map(|ms| ms.expect("an expiry").parse().expect("ms"))
        .collect();
    assert_eq!(
        expiries.len(),
        PERMITS as usize,
        "permits held: {expiries:?}"
    );
    let first_expiry = *expiries.iter().min().unwrap();
    let waiting = ObtainOptions::new()
        .permits(PERMITS)
        .retry(RetryStrategy::linear(Duration::from_millis(10)).deadline(HANG));
    let lock = fx.check(
        contender.obtain("api", TTL, waiting).await,
        "a permit after the holders died",
    );
    // The new permit was taken `TTL` before its expiry, on the server's clock.
    let taken = db
        .column(EXPIRIES)
        .await
        .into_iter()
        .flatten()
        .filter_map(|ms| ms.parse::<u64>().ok())
        .max()
        .expect("the contender's permit")
        - u64::try_from(TTL.as_millis()).unwrap();
    assert!(
        taken >= first_expiry,
        "a permit came back at {taken} ms, before the first dead holder's expired at {first_expiry} ms"
    );
    assert!(
        taken <= first_expiry + 5_000,
        "a dead holder's permit came back {} ms after it expired",
        taken - first_expiry
    );
    fx.check(lock.release().await, "release");
}
