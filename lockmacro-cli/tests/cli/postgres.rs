//! On PostgreSQL: a database without lockmacro's tables is left without
//! them, whatever the command, and a key held by a transaction
//! (`Locker::obtain_in`) is shown as such, with what ends it, since
//! force-release cannot.

use std::process::Output;

use lockmacro_runtime::{HeldAs, ObtainOptions};
use lockmacro_testkit::Fixture;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection};

use super::{LONG, exits, json, run, stderr, stdout};

/// The one count `sql` selects, in the database at `url`.
async fn count(url: &str, sql: &'static str) -> i64 {
    let mut connection = PgConnection::connect(url).await.expect("connect");
    sqlx::query_scalar(sql)
        .fetch_one(&mut connection)
        .await
        .unwrap_or_else(|err| panic!("`{sql}`: {err}"))
}

/// `lockmacro` with `args`, on the keys of `namespace`.
async fn run_in(url: &str, namespace: &str, args: &[&str]) -> Output {
    let mut all = vec!["--namespace", namespace];
    all.extend_from_slice(args);
    run(url, &all).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_without_lockmacro_tables_is_said_so_and_left_without_them() {
    super::binary();
    let fx = Fixture::postgres().await;
    let server = fx.postgres_db().expect("a PostgreSQL fixture").server();
    let url = server.url(&server.database().await);

    for args in [
        &["list"][..],
        &["--json", "list"],
        &["inspect", "report"],
        &["watch", "report"],
        &["force-release", "report", "--yes"],
    ] {
        let said = run(&url, args).await;
        exits(&said, 4);
        let message = stderr(&said);
        assert!(
            message.contains("no lockmacro tables in this database"),
            "{args:?}: {message}"
        );
        assert!(!message.contains("migration"), "{args:?}: {message}");
        assert_eq!(stdout(&said), "", "{args:?}");
    }
    let tables = "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'lockmacro%'";
    assert_eq!(count(&url, tables).await, 0, "tables");
    let sequences = "SELECT count(*) FROM pg_sequences WHERE sequencename LIKE 'lockmacro%'";
    assert_eq!(count(&url, sequences).await, 0, "sequences");
    let functions = "SELECT count(*) FROM pg_proc WHERE proname LIKE 'lockmacro%'";
    assert_eq!(count(&url, functions).await, 0, "functions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_held_by_a_transaction_is_named_and_left_to_it() {
    super::binary();
    let fx = Fixture::postgres().await;
    let url = fx.postgres_db().expect("a PostgreSQL fixture").url();
    let namespace = fx.namespace();
    let locker = fx.locker().await;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .expect("a pool");
    let mut tx = pool.begin().await.expect("begin");
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *tx)
        .await
        .expect("the session's pid");
    let _held = fx.check(
        locker
            .obtain_in(&mut tx, "orders", LONG, ObtainOptions::new())
            .await,
        "obtain_in",
    );

    let seen = run_in(&url, namespace, &["inspect", "orders"]).await;
    exits(&seen, 0);
    let text = stdout(&seen);
    assert!(
        text.contains(&format!(
            "lock by a database transaction, in session {pid}\n"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("pg_terminate_backend({pid})")),
        "{text}"
    );
    assert!(!text.contains("left"), "{text}");
    let seen = run_in(&url, namespace, &["--json", "inspect", "orders"]).await;
    exits(&seen, 0);
    let seen = json(&seen);
    assert_eq!(seen["holders"][0]["held_as"], "transaction", "{seen}");
    assert_eq!(seen["holders"][0]["pid"], pid, "{seen}");
    assert_eq!(seen["holders"][0]["remaining_ms"], serde_json::Value::Null);

    // With --yes or without, before any prompt: nothing can be released.
    for args in [
        &["force-release", "orders", "--yes"][..],
        &["force-release", "orders"],
    ] {
        let refused = run_in(&url, namespace, args).await;
        exits(&refused, 3);
        let message = stderr(&refused);
        assert!(
            message.contains("`orders` is held by a database transaction")
                && message.contains("force-release cannot end it")
                && message.contains(&format!("pg_terminate_backend({pid})")),
            "{args:?}: {message}"
        );
        assert!(!message.contains("not held"), "{args:?}: {message}");
        assert_eq!(stdout(&refused), "", "{args:?}");
    }
    let still = fx.check(locker.inspect("orders").await, "inspect");
    assert_eq!(still.holders.len(), 1, "{still:?}");
    assert_eq!(still.holders[0].held_as, HeldAs::Transaction);
    assert_eq!(still.holders[0].pid, u32::try_from(pid).ok());
    // The transaction goes on, unharmed.
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut *tx)
        .await
        .expect("the transaction is alive");
    assert_eq!(one, 1);

    tx.commit().await.expect("commit");
    let free = run_in(&url, namespace, &["inspect", "orders"]).await;
    exits(&free, 1);
    assert!(
        stdout(&free).contains("`orders` is free"),
        "{}",
        stdout(&free)
    );
    let mine = fx.check(
        locker.obtain("orders", LONG, ObtainOptions::new()).await,
        "obtain once the transaction ended",
    );
    fx.check(mine.release().await, "release");
}
