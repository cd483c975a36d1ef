//! Bad input on the PostgreSQL backend: each a clear error within its
//! bound, nothing left behind.

use std::net::{Ipv4Addr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use lockmacro_runtime::{
    BackendErrorKind, LockError, Locker, ObtainOptions, POSTGRES_MIGRATION, PostgresBackend,
    PostgresConfig,
};
use lockmacro_testkit::Fixture;
use lockmacro_testkit::pgdb::PostgresDb;
use lockmacro_testkit::postgres::PostgresServer;
use sqlx::postgres::PgPoolOptions;

/// The hang limit of every call below.
const HANG: Duration = Duration::from_secs(30);

fn backend_error(result: Result<impl std::fmt::Debug, LockError>) -> (BackendErrorKind, String) {
    match result {
        Err(LockError::Backend(err)) => (err.kind(), err.to_string()),
        other => panic!("expected a backend error, got {other:?}"),
    }
}

async fn connect(url: &str, config: PostgresConfig) -> Result<PostgresBackend, LockError> {
    tokio::time::timeout(HANG, PostgresBackend::connect_with(url, config))
        .await
        .expect("connect hung")
}

/// Nothing listens: the connect is refused, and the backend says so at
/// once, not when a connect timeout far longer than the hang limit ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_unreachable_at_once() {
    let closed = lockmacro_testkit::redis::ClosedPort::bind();
    let port = closed.port();
    let url = format!("postgres://postgres:x@127.0.0.1:{port}/db");
    let config = PostgresConfig::default().connect_timeout(HANG * 2);
    let result = connect(&url, config).await;
    assert!(result.as_ref().is_err_and(LockError::is_transient));
    let (kind, message) = backend_error(result);
    assert_eq!(kind, BackendErrorKind::Unreachable, "{message}");
    assert!(message.contains("connection refused"), "{message}");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(message.contains("connect to database `db`"), "{message}");
}

/// A database the server does not have: an error retrying cannot cure,
/// naming the step and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_database_is_a_configuration_error() {
    let fx = Fixture::postgres().await;
    let db = fx.postgres_db().unwrap();
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/nosuchdb",
        db.server().port()
    );
    let result = connect(&url, PostgresConfig::default()).await;
    assert!(result.as_ref().is_err_and(|err| !err.is_transient()));
    let (kind, message) = backend_error(result);
    assert_eq!(kind, BackendErrorKind::Configuration, "{message}");
    assert!(
        message.contains("connect to database `nosuchdb`"),
        "{message}"
    );
    assert!(message.contains("create the database"), "{message}");
    assert!(!message.contains("schema"), "{message}");
}

/// `Locker::postgres` with a URL of another scheme is refused as a URL,
/// before anything connects: a listener on the URL's port is never
/// called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_of_another_scheme_is_refused_before_any_connection() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    for url in [
        format!("mysql://app:secret@127.0.0.1:{port}/db"),
        format!("redis://127.0.0.1:{port}/"),
        format!("127.0.0.1:{port}"),
    ] {
        let result = tokio::time::timeout(HANG, Locker::postgres(&url))
            .await
            .expect("connect hung");
        match result {
            Err(LockError::InvalidUrl { url: shown, reason }) => {
                assert!(!shown.contains("secret"), "the password leaked: {shown}");
                assert!(reason.contains("postgres://"), "{reason}");
            }
            other => panic!("{url}: expected InvalidUrl, got {other:?}"),
        }
    }
    assert!(
        matches!(listener.accept(), Err(err) if err.kind() == std::io::ErrorKind::WouldBlock),
        "something connected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_an_authentication_error() {
    let fx = Fixture::own_postgres().await;
    let db = fx.postgres_db().unwrap();
    db.execute("CREATE ROLE app LOGIN PASSWORD 'right'").await;
    let url = format!(
        "postgres://app:wrong@127.0.0.1:{}/{}",
        db.server().port(),
        db.name()
    );
    let result = connect(&url, PostgresConfig::default()).await;
    assert!(result.as_ref().is_err_and(|err| !err.is_transient()));
    let (kind, message) = backend_error(result);
    assert_eq!(kind, BackendErrorKind::Authentication, "{message}");
    assert!(!message.contains("wrong"), "the password leaked: {message}");
    assert!(message.contains("connect to database"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_not_create_the_tables_is_told_which_migration_to_run() {
    let server = Arc::new(
        tokio::task::spawn_blocking(PostgresServer::start)
            .await
            .unwrap(),
    );
    let name = server.database().await;
    server
        .execute("postgres", "CREATE ROLE weak LOGIN PASSWORD 'weak'")
        .await;
    let url = format!("postgres://weak:weak@127.0.0.1:{}/{name}", server.port());
    let (kind, message) = backend_error(connect(&url, PostgresConfig::default()).await);
    assert_eq!(kind, BackendErrorKind::Permission, "{message}");
    assert!(
        message.contains("migrations/postgres/0001_lockmacro.sql"),
        "{message}"
    );
    // Nothing half-created: the migration runs in one transaction.
    let tables = "SELECT count(*)::text FROM pg_class WHERE relname LIKE 'lockmacro%'";
    let db = PostgresDb::existing(server.clone(), &name);
    assert_eq!(db.column(tables).await, [Some("0".to_owned())]);
    // Told not to create it, the backend names the migration too.
    let config = PostgresConfig::default().create_schema(false);
    let (_, message) = backend_error(connect(&db.url(), config).await);
    assert!(message.contains("0001_lockmacro.sql"), "{message}");

    // Run by the owner, with the grants it asks for, the weak user locks.
    db.execute(POSTGRES_MIGRATION).await;
    db.execute(
        "GRANT SELECT, INSERT, UPDATE, DELETE \
         ON lockmacro_locks, lockmacro_fences, lockmacro_queue, lockmacro_given_back, \
         lockmacro_shares, lockmacro_writing TO weak; \
         GRANT USAGE ON SEQUENCE lockmacro_fence_seq TO weak",
    )
    .await;
    let locker = Locker::new(connect(&url, PostgresConfig::default()).await.unwrap());
    let lock = locker
        .obtain(
            "job",
            Duration::from_secs(5),
            ObtainOptions::new().fence().fair(),
        )
        .await
        .unwrap();
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_too_long_for_the_column_is_refused_before_anything_is_sent() {
    let fx = Fixture::postgres().await;
    let locker = fx.locker().await;
    let key = "k".repeat(lockmacro_runtime::backend::POSTGRES_MAX_KEY_LEN + 1);
    let err = locker
        .obtain(&key, Duration::from_secs(5), ObtainOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidKey { .. }), "{err:?}");
    let rows = "SELECT count(*)::text FROM lockmacro_locks";
    assert_eq!(
        fx.postgres_db().unwrap().column(rows).await,
        [Some("0".to_owned())]
    );
    // The longest key that fits is taken.
    let key =
        "k".repeat(lockmacro_runtime::backend::POSTGRES_MAX_KEY_LEN - fx.namespace().len() - 1);
    let lock = fx.check(
        locker
            .obtain(&key, Duration::from_secs(5), ObtainOptions::new())
            .await,
        "obtain",
    );
    fx.check(lock.release().await, "release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_without_free_connections_fails_within_its_acquire_timeout() {
    let fx = Fixture::postgres().await;
    let db = fx.postgres_db().unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_millis(500))
        .connect(&db.url())
        .await
        .unwrap();
    let locker = Locker::postgres_pool(pool.clone())
        .await
        .unwrap()
        .with_namespace(fx.namespace());
    let taken = pool.acquire().await.unwrap();
    let obtain = locker.obtain("job", Duration::from_secs(5), ObtainOptions::new());
    let result = tokio::time::timeout(HANG, obtain)
        .await
        .expect("obtain hung");
    let (kind, message) = backend_error(result);
    assert_eq!(kind, BackendErrorKind::Timeout, "{message}");
    assert!(message.contains("pool"), "{message}");
    assert!(
        !fx.is_held("job").await,
        "the failed obtain left the key held"
    );
    drop(taken);
    let lock = fx.check(
        locker
            .obtain("job", Duration::from_secs(5), ObtainOptions::new())
            .await,
        "obtain once a connection is free",
    );
    fx.check(lock.release().await, "release");
}

/// A database on an earlier version of the schema without shares (version
/// 1, or a version 2 with the fence sequence and transaction-scoped locks):
/// a backend that may create tables brings it up to date as it starts; one
/// that may not says it is out of date and names the migration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_of_an_earlier_version_is_brought_up_to_date() {
    let fx = Fixture::postgres().await;
    let db = fx.postgres_db().unwrap();
    for version in [1, 2] {
        db.execute(&format!(
            "DROP TABLE lockmacro_shares, lockmacro_writing; \
         CREATE OR REPLACE FUNCTION lockmacro_schema_version() RETURNS integer \
         LANGUAGE sql IMMUTABLE AS $$ SELECT {version} $$"
        ))
        .await;
        let config = PostgresConfig::default().create_schema(false);
        let (_, message) = backend_error(connect(&db.url(), config).await);
        assert!(
            message.contains("out of date") && message.contains("0001_lockmacro.sql"),
            "{message}"
        );
        let locker = Locker::new(connect(&db.url(), PostgresConfig::default()).await.unwrap());
        let permit = fx.check(
            locker
                .obtain(
                    "api",
                    Duration::from_secs(5),
                    ObtainOptions::new().permits(2),
                )
                .await,
            "a permit on the schema brought up to date",
        );
        fx.check(permit.release().await, "release");
        assert_eq!(
            db.column("SELECT lockmacro_schema_version()::text").await,
            [Some("7".to_owned())]
        );
    }
}

/// `Locker::from_url_if_set_up` changes no schema: none on a database
/// without lockmacro's tables, which it leaves without them; a locker on one
/// with them; an error naming the migration, and nothing brought up to
/// date, on one whose schema is out of date.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_url_if_set_up_opens_only_a_database_with_the_schema() {
    let fx = Fixture::postgres().await;
    let db = fx.postgres_db().unwrap();
    let server = db.server();
    let empty = server.url(&server.database().await);
    let opened = Locker::from_url_if_set_up(&empty).await.unwrap();
    assert!(opened.is_none(), "{opened:?}");
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&empty)
        .await
        .unwrap();
    for sql in [
        "SELECT count(*) FROM pg_class WHERE relname LIKE 'lockmacro%'",
        "SELECT count(*) FROM pg_proc WHERE proname LIKE 'lockmacro%'",
    ] {
        let found: i64 = sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap();
        assert_eq!(found, 0, "{sql}");
    }

    let locker = Locker::from_url_if_set_up(&db.url())
        .await
        .unwrap()
        .expect("a locker where the schema is")
        .with_namespace(fx.namespace());
    let lock = fx.check(
        locker
            .obtain("job", Duration::from_secs(5), ObtainOptions::new())
            .await,
        "obtain",
    );
    fx.check(lock.release().await, "release");

    db.execute(
        "CREATE OR REPLACE FUNCTION lockmacro_schema_version() RETURNS integer \
         LANGUAGE sql IMMUTABLE AS $$ SELECT 5 $$",
    )
    .await;
    let (_, message) = backend_error(Locker::from_url_if_set_up(&db.url()).await);
    assert!(
        message.contains("out of date") && message.contains("0001_lockmacro.sql"),
        "{message}"
    );
    assert_eq!(
        db.column("SELECT lockmacro_schema_version()::text").await,
        [Some("5".to_owned())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_a_pool_of_one_connection_does_not_take_it_for_its_listener() {
    let fx = Fixture::postgres().await;
    let db = fx.postgres_db().unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(2))
        .connect(&db.url())
        .await
        .unwrap();
    let locker = Locker::postgres_pool(pool)
        .await
        .unwrap()
        .with_namespace(fx.namespace());
    let lock = fx.check(
        locker
            .obtain("job", Duration::from_secs(30), ObtainOptions::new())
            .await,
        "obtain",
    );
    // Its retry pause is a minute: only a wake-up heard on the listener's
    // connection ends this wait in time.
    let opts = ObtainOptions::new().retry(
        lockmacro_runtime::RetryStrategy::linear(Duration::from_secs(60))
            .deadline(Duration::from_secs(20)),
    );
    let waiting = tokio::spawn({
        let locker = locker.clone();
        async move { locker.obtain("job", Duration::from_secs(5), opts).await }
    });
    let listening = format!(
        "SELECT pid::text FROM pg_stat_activity WHERE datname = {} AND query LIKE 'LISTEN%'",
        lockmacro_testkit::pgdb::quote(db.name())
    );
    tokio::time::timeout(HANG, async {
        while db.column(&listening).await.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the waiter never listened");
    // The pool's one connection is still free for the holder.
    fx.check(lock.release().await, "release while a waiter listens");
    let obtained = tokio::time::timeout(HANG, waiting)
        .await
        .expect("the waiter hung")
        .unwrap();
    fx.check(obtained, "the waiter, woken by the release")
        .release()
        .await
        .unwrap();
}
