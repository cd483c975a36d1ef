//! Hostile keys, metadata and tokens on the PostgreSQL backend, whose
//! statements carry them as quoted literals: each is stored and compared
//! exactly as given, and none is run as SQL.

use lockmacro_runtime::{LockError, ObtainOptions};
use lockmacro_testkit::Fixture;

use crate::LONG;
use crate::keys::hostile_keys;

/// Keys and metadata aimed at the quoting of a SQL literal.
const SQL_HOSTILE: [&str; 8] = [
    "'); DROP TABLE lockmacro_locks; --",
    "\\'; SELECT 1; --",
    "E'\\\\'",
    "$$; DROP TABLE lockmacro_fences; $$",
    "''''",
    "\\",
    "a\\nb",
    "]::text[]); --",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_keys_and_metadata_are_stored_as_given_and_never_run() {
    let fx = Fixture::postgres().await;
    let locker = fx.locker().await;
    let keys = hostile_keys()
        .into_iter()
        .filter(|key| key.len() <= 1000)
        .chain(SQL_HOSTILE.map(str::to_owned));
    for key in keys {
        let opts = ObtainOptions::new().fence().metadata(&key);
        let lock = fx.check(locker.obtain(&key, LONG, opts).await, "obtain");
        let value = fx.value(&key).await.expect("the key is held as given");
        assert_eq!(value, format!("{}{key}", lock.token()), "{key:?}");
        fx.check(lock.refresh(LONG).await, "refresh");
        fx.check(lock.remaining().await, "remaining");
        fx.check(lock.release().await, "release");
        assert!(!fx.is_held(&key).await, "{key:?} left held");
    }
    let tables = "SELECT count(*)::text FROM pg_class WHERE relname IN \
                  ('lockmacro_locks', 'lockmacro_fences', 'lockmacro_queue', 'lockmacro_given_back')";
    let db = fx.postgres_db().unwrap();
    assert_eq!(db.column(tables).await, [Some("4".to_owned())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_a_key_is_refused_before_anything_is_sent() {
    let fx = Fixture::postgres().await;
    let locker = fx.locker().await;
    let err = locker
        .obtain("a\0b", LONG, ObtainOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidKey { .. }), "{err:?}");
}
