//! A holder process frozen (SIGSTOP) in the middle of its read-modify-write,
//! past its lease, while another process takes the lock and writes: with a
//! transaction-scoped lock the database itself refuses the old holder's
//! late commit, with a plain lease its write overwrites the newer one
//! unless the write is fenced.
//!
//! Each trial is driven by signals and lines, not by timing luck: the child
//! reads the counter and reports it, is frozen, the parent takes the lock
//! once the child's lease has ended and increments the counter, then the
//! child is thawed and told to write what it read plus one.

use std::env;
use std::io::{BufRead, BufReader, Lines, Write};
use std::process::ChildStdout;
use std::time::Duration;

use lockmacro_runtime::{Locker, ObtainOptions, RetryStrategy};
use lockmacro_testkit::Fixture;
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool, Row};
use tokio::io::{AsyncBufReadExt, BufReader as AsyncBufReader};

use crate::process::rerun_as_child;

/// Set, to `mode url`, for the child process that holds the lock.
const HOLDER_ENV: &str = "LOCKMACRO_FAULTS_PG_TX_HOLDER";
/// The frozen holder's lease.
const TTL: Duration = Duration::from_millis(500);
const TRIALS: usize = 20;
/// The hang limit of every wait below.
const HANG: Duration = Duration::from_secs(30);
const KEY: &str = "counter";

/// How the lock and the write are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `Locker::obtain_in`: the write commits with the lock.
    Transaction,
    /// A lease, then a plain write.
    Lease,
    /// A lease, then a write refused when its fencing token is not above
    /// the last one written.
    Fenced,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Transaction => "transaction",
            Mode::Lease => "lease",
            Mode::Fenced => "fenced",
        }
    }

    fn parse(name: &str) -> Self {
        [Mode::Transaction, Mode::Lease, Mode::Fenced]
            .into_iter()
            .find(|mode| mode.name() == name)
            .unwrap_or_else(|| panic!("no mode {name}"))
    }
}

/// What the trials came to.
#[derive(Debug)]
struct Outcome {
    /// Increments whose writer was told they committed.
    claimed: i64,
    /// What the counter says.
    counted: i64,
    /// The old holder's writes that committed.
    stale_committed: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_holders_late_commit_is_refused_with_a_transaction_lock() {
    if let Ok(args) = env::var(HOLDER_ENV) {
        return child(&args).await;
    }
    let outcome = trials(
        "postgres_transaction::a_frozen_holders_late_commit_is_refused_with_a_transaction_lock",
        Mode::Transaction,
    )
    .await;
    assert_eq!(outcome.stale_committed, 0, "{outcome:?}");
    assert_eq!(
        outcome.claimed, outcome.counted,
        "lost updates: {outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_holders_late_write_is_lost_with_a_plain_lease() {
    if let Ok(args) = env::var(HOLDER_ENV) {
        return child(&args).await;
    }
    let outcome = trials(
        "postgres_transaction::a_frozen_holders_late_write_is_lost_with_a_plain_lease",
        Mode::Lease,
    )
    .await;
    // The comparison the transaction-scoped lock is measured against.
    assert!(
        outcome.counted < outcome.claimed,
        "no update was lost: {outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_holders_late_write_is_refused_with_a_lease_and_a_fenced_write() {
    if let Ok(args) = env::var(HOLDER_ENV) {
        return child(&args).await;
    }
    let outcome = trials(
        "postgres_transaction::a_frozen_holders_late_write_is_refused_with_a_lease_and_a_fenced_write",
        Mode::Fenced,
    )
    .await;
    assert_eq!(outcome.stale_committed, 0, "{outcome:?}");
    assert_eq!(
        outcome.claimed, outcome.counted,
        "lost updates: {outcome:?}"
    );
}

fn pool(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(2)
        .connect_lazy(url)
        .unwrap()
}

/// Runs the trials against a child holder playing `mode`.
async fn trials(test: &str, mode: Mode) -> Outcome {
    let fx = Fixture::postgres().await;
    let db = fx.postgres_db().expect("a PostgreSQL fixture");
    db.execute("CREATE TABLE counter (n bigint NOT NULL, fence bigint NOT NULL); INSERT INTO counter VALUES (0, 0)")
        .await;
    // No namespace: the child names the key as it is.
    let (locker, pool) = (db.locker().await, pool(&db.url()));
    let mut holder = rerun_as_child(test, HOLDER_ENV, &format!("{} {}", mode.name(), db.url()));
    let mut stdin = holder.0.stdin.take().unwrap();
    let mut lines = BufReader::new(holder.0.stdout.take().unwrap()).lines();
    let pid = i32::try_from(holder.0.id()).unwrap();
    let mut outcome = Outcome {
        claimed: 0,
        counted: 0,
        stale_committed: 0,
    };
    for trial in 0..TRIALS {
        writeln!(stdin, "start").unwrap();
        let read = reply(&mut lines, "read ");
        // SAFETY: `pid` is our own child, alive until `holder` drops.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        contend(&locker, &pool, mode).await;
        outcome.claimed += 1;
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
        writeln!(stdin, "go").unwrap();
        match reply(&mut lines, "wrote ").as_str() {
            "committed" => {
                outcome.claimed += 1;
                outcome.stale_committed += 1;
            }
            "refused" => {}
            other => panic!("trial {trial} (read {read}): the holder said {other}"),
        }
    }
    drop(stdin);
    let row = sqlx::query("SELECT n FROM counter")
        .fetch_one(&pool)
        .await
        .unwrap();
    outcome.counted = row.get(0);
    println!("{mode:?}: {outcome:?}");
    outcome
}

/// The rest of the child's next line that starts with `prefix`.
fn reply(lines: &mut Lines<BufReader<ChildStdout>>, prefix: &str) -> String {
    let prefix = prefix.to_owned();
    tokio::task::block_in_place(|| {
        lines
            .find_map(|line| line.ok()?.strip_prefix(&prefix).map(str::to_owned))
            .unwrap_or_else(|| panic!("the holder exited before `{prefix}`"))
    })
}

/// The parent's increment, once the frozen holder's lock has ended.
async fn contend(locker: &Locker, pool: &PgPool, mode: Mode) {
    let patient = ObtainOptions::new()
        .fence()
        .retry(RetryStrategy::linear(Duration::from_millis(20)).deadline(HANG));
    if mode == Mode::Transaction {
        let mut tx = pool.begin().await.unwrap();
        locker.obtain_in(&mut tx, KEY, HANG, patient).await.unwrap();
        sqlx::raw_sql("UPDATE counter SET n = n + 1")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    } else {
        let lock = locker.obtain(KEY, HANG, patient).await.unwrap();
        let token = lock.fence_token().unwrap();
        let sql = format!("UPDATE counter SET n = n + 1, fence = {token} WHERE fence < {token}");
        let done = sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(pool)
            .await
            .unwrap();
        assert_eq!(
            done.rows_affected(),
            1,
            "the live holder's write was refused"
        );
        lock.release().await.unwrap();
    }
}

/// The child's part: for each `start`, takes the lock, reads the counter
/// and says so, then on `go` writes what it read plus one and says whether
/// that committed.
async fn child(args: &str) {
    let (mode, url) = args.split_once(' ').unwrap();
    let mode = Mode::parse(mode);
    let locker = Locker::postgres(url).await.unwrap();
    let pool = pool(url);
    let mut stdin = AsyncBufReader::new(tokio::io::stdin()).lines();
    let once = ObtainOptions::new().fence();
    while let Some(line) = stdin.next_line().await.unwrap() {
        assert_eq!(line, "start");
        let committed = if mode == Mode::Transaction {
            let mut tx = pool.begin().await.unwrap();
            locker
                .obtain_in(&mut tx, KEY, TTL, once.clone())
                .await
                .unwrap();
            let n: i64 = sqlx::query("SELECT n FROM counter")
                .fetch_one(&mut *tx)
                .await
                .unwrap()
                .get(0);
            println!("read {n}");
            assert_eq!(stdin.next_line().await.unwrap().as_deref(), Some("go"));
            let write = format!("UPDATE counter SET n = {}", n + 1);
            match sqlx::raw_sql(AssertSqlSafe(write)).execute(&mut *tx).await {
                Ok(_) => tx.commit().await.is_ok(),
                Err(_) => false,
            }
        } else {
            let lock = locker.obtain(KEY, TTL, once.clone()).await.unwrap();
            let token = lock.fence_token().unwrap();
            let n: i64 = sqlx::query("SELECT n FROM counter")
                .fetch_one(&pool)
                .await
                .unwrap()
                .get(0);
            println!("read {n}");
            assert_eq!(stdin.next_line().await.unwrap().as_deref(), Some("go"));
            let fenced = if mode == Mode::Fenced {
                format!(" WHERE fence < {token}")
            } else {
                String::new()
            };
            let write = format!("UPDATE counter SET n = {}, fence = {token}{fenced}", n + 1);
            let done = sqlx::raw_sql(AssertSqlSafe(write))
                .execute(&pool)
                .await
                .unwrap();
            drop(lock);
            done.rows_affected() == 1
        };
        println!("wrote {}", if committed { "committed" } else { "refused" });
    }
}
