//! The PostgreSQL backend's connections failing: killed by the server
//! (`pg_terminate_backend`), black-holed by the network, or gone with a
//! holder process killed by SIGKILL.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use lockmacro_runtime::{
    LockError, Locker, ObtainOptions, PostgresBackend, PostgresConfig, RetryStrategy,
    distributed_lock,
};
use lockmacro_testkit::Fixture;
use lockmacro_testkit::pgdb::{PostgresDb, quote};
use lockmacro_testkit::postgres::PASSWORD;
use lockmacro_testkit::proxy::Proxy;
use sqlx::Connection;

use crate::process::rerun_as_child;

/// The hang limit of every wait below.
const HANG: Duration = Duration::from_secs(30);
/// Set, to the database's URL, for the child process that holds the lock.
const HOLDER_ENV: &str = "LOCKMACRO_FAULTS_POSTGRES_HOLDER";

/// The pid of a session of `db` other than this one and `not` that matches
/// `condition` (SQL over `pg_stat_activity`), once there is one; `what`
/// names it in the failure.
async fn session_where(db: &PostgresDb, condition: &str, not: Option<&str>, what: &str) -> String {
    let sql = format!(
        "SELECT pid::text FROM pg_stat_activity WHERE datname = {} \
         AND pid <> pg_backend_pid() AND {condition}",
        quote(db.name())
    );
    let found = tokio::time::timeout(HANG, async {
        loop {
            if let Some(pid) = db
                .column(&sql)
                .await
                .into_iter()
                .flatten()
                .find(|pid| Some(pid.as_str()) != not)
            {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| db.server().fail(format_args!("no session {what}")))
}

/// The pid of the session that listens for releases, once there is one
/// other than `not`.
async fn listening_session(db: &PostgresDb, not: Option<&str>) -> String {
    let listen = "query = 'LISTEN \"lockmacro_release\"'";
    session_where(db, listen, not, "listens for releases").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_are_replaced_and_a_waiter_still_hears_the_release() {
    let fx = Fixture::own_postgres().await;
    let db = fx.postgres_db().expect("a PostgreSQL fixture");
    let (holder, waiter) = (fx.locker().await, fx.locker().await);
    let lock = fx.check(
        holder
            .obtain("job", Duration::from_secs(60), ObtainOptions::new())
            .await,
        "obtain",
    );
    // Only a wake-up can end this wait before its deadline: its pause is a
    // minute, and the holder's lease as long.
    let opts = ObtainOptions::new()
        .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(25)));
    let waiting =
        tokio::spawn(async move { waiter.obtain("job", Duration::from_secs(5), opts).await });
    let first = listening_session(db, None).await;
    assert!(db.terminate_sessions().await > 0, "no session to end");
    // The listener connects again, and the waiter listens anew.
    listening_session(db, Some(&first)).await;
    // The holder's pool replaces its connection: the lease is still there.
    fx.check(
        lock.refresh(Duration::from_secs(60)).await,
        "refresh after the kill",
    );
    fx.check(lock.release().await, "release after the kill");
    let obtained = tokio::time::timeout(HANG, waiting)
        .await
        .expect("the waiter hung")
        .expect("the waiter panicked");
    fx.check(obtained, "the waiter, woken by the release")
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn black_hole_loses_the_lease_on_its_local_deadline_and_a_contender_moves_on() {
    let fx = Fixture::own_postgres().await;
    let db = fx.postgres_db().expect("a PostgreSQL fixture");
    let proxy = Proxy::start(SocketAddr::from((Ipv4Addr::LOCALHOST, db.server().port())));
    let url = format!(
        "postgres://postgres:{PASSWORD}@127.0.0.1:{}/{}",
        proxy.addr().port(),
        db.name()
    );
    let config = PostgresConfig::default().response_timeout(Duration::from_secs(3));
    let backend = fx.check(PostgresBackend::connect_with(&url, config).await, "connect");
    let holder = Locker::new(backend);
    let contender = fx.locker().await;
    let guard = fx
        .check(
            holder
                .obtain("job", Duration::from_secs(1), ObtainOptions::new())
                .await,
            "obtain",
        )
        .keep_alive();
    proxy.black_hole();
    let lost = tokio::time::timeout(HANG, guard.lost()).await;
    lost.expect("the lease was not reported lost behind a black hole");
    let waiting = ObtainOptions::new()
        .retry(RetryStrategy::linear(Duration::from_millis(50)).deadline(Duration::from_secs(15)));
    let lock = fx.check(
        contender
            .obtain("job", Duration::from_secs(5), waiting)
            .await,
        "the contender once the lease ran out",
    );
    proxy.heal();
    fx.check(lock.release().await, "release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_killed_mid_body_frees_the_lock_once_its_lease_ends() {
    if let Ok(url) = std::env::var(HOLDER_ENV) {
        return hold_until_killed(&url).await;
    }
    let fx = Fixture::own_postgres().await;
    let db = fx.postgres_db().expect("a PostgreSQL fixture");
    let mut holder = rerun_as_child(
        "postgres_network::holder_killed_mid_body_frees_the_lock_once_its_lease_ends",
        HOLDER_ENV,
        &db.url(),
    );
    let stdout = holder.0.stdout.take().unwrap();
    let inside = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout).lines().find_map(|line| {
            line.ok()?
                .strip_prefix("inside, fence ")?
                .parse::<u64>()
                .ok()
        })
    });
    let held = tokio::time::timeout(HANG, inside)
        .await
        .expect("the holder did not get inside")
        .unwrap()
        .expect("the holder exited without getting inside");
    let contender = fx.locker().await;
    assert!(
        contender
            .obtain("job", Duration::from_secs(1), ObtainOptions::new())
            .await
            .is_err_and(|err| err.is_not_obtained()),
        "the contender got in while the holder was alive"
    );
    holder.0.kill().unwrap();
    holder.0.wait().unwrap();
    let waiting = ObtainOptions::new()
        .fence()
        .retry(RetryStrategy::linear(Duration::from_millis(20)).deadline(Duration::from_secs(20)));
    let lock = fx.check(
        contender
            .obtain("job", Duration::from_secs(1), waiting)
            .await,
        "obtain after the holder died",
    );
    assert!(
        lock.fence_token().unwrap() > held,
        "the fence token went backwards"
    );
    fx.check(lock.release().await, "release");
}

/// The child process's part: takes the lock and holds it until killed.
async fn hold_until_killed(url: &str) {
    let locker = Locker::postgres(url).await.unwrap();

    #[distributed_lock(key = "job", ttl = "1s", locker = locker, fence, guard = lease)]
    async fn job(locker: &Locker) -> Result<(), LockError> {
        let _ = locker;
        println!("inside, fence {}", lease.fence_token().unwrap());
        // The parent kills this process here. Bounded, in case it is gone.
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok(())
    }

    job(&locker).await.unwrap();
}

/// The pid of a session of `db` that waits for a lock, once there is one
/// other than `not`.
async fn session_waiting_for_a_lock(db: &PostgresDb, not: Option<&str>) -> String {
    let waiting = "wait_event_type = 'Lock'";
    session_where(db, waiting, not, "waits for the table lock").await
}

/// A statement whose session the server ends while it runs (an
/// administrator's `pg_terminate_backend`, a shutdown) was rolled back, and
/// is sent once more on another connection: the obtain goes through. The
/// statement is held up at the lock table, which a transaction behind the
/// library's back holds, so that its session is ended while it runs, not
/// between two statements.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_whose_session_is_ended_while_it_runs_is_sent_again() {
    let fx = Fixture::own_postgres().await;
    let db = fx.postgres_db().expect("a PostgreSQL fixture");
    let locker = fx.locker().await;
    let mut blocker = sqlx::PgConnection::connect(&db.url())
        .await
        .unwrap_or_else(|err| db.server().fail(format_args!("connect: {err}")));
    sqlx::raw_sql("BEGIN; LOCK TABLE lockmacro_locks IN ACCESS EXCLUSIVE MODE")
        .execute(&mut blocker)
        .await
        .unwrap_or_else(|err| db.server().fail(format_args!("lock the table: {err}")));
    let obtaining = tokio::spawn(async move {
        let obtained = locker
            .obtain("job", Duration::from_secs(30), ObtainOptions::new())
            .await;
        (locker, obtained)
    });

    let first = session_waiting_for_a_lock(db, None).await;
    let ended = db
        .column(&format!("SELECT pg_terminate_backend({first})::text"))
        .await;
    assert_eq!(
        ended,
        [Some("true".to_owned())],
        "session {first} not ended"
    );
    // Sent again, on another session, which waits at the table lock too.
    session_waiting_for_a_lock(db, Some(&first)).await;
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut blocker)
        .await
        .unwrap_or_else(|err| db.server().fail(format_args!("unlock the table: {err}")));

    let (locker, obtained) = tokio::time::timeout(HANG, obtaining)
        .await
        .expect("the obtain hung")
        .expect("the obtain panicked");
    let lock = fx.check(obtained, "the obtain whose session was ended");
    assert!(
        db.is_held(&locker.wire_key("job")).await,
        "the obtain answered, but the key is not held"
    );
    lock.release().await.unwrap();
}
