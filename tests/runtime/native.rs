//! Valkey 8.1's native compare-and-set (`SET key value IFEQ old`), found
//! at connect and used to refresh locks without scripts; and the default,
//! scripted path on Valkey, unchanged.

use std::time::Duration;

use lockmacro_runtime::backend::{AcquireRequest, Acquired, Backend};
use lockmacro_runtime::{Locker, ObtainOptions, RedisBackend, RedisConfig, Scripts};
use lockmacro_testkit::RedisServer;

use crate::wakeup::calls;

const TTL: Duration = Duration::from_secs(30);

async fn backend(server: &RedisServer, scripts: Scripts) -> RedisBackend {
    let config = RedisConfig::default().scripts(scripts);
    server.expect_ok(
        RedisBackend::connect_with(&server.url(), config).await,
        "connect",
    )
}

#[tokio::test]
async fn valkey_refreshes_by_set_ifeq_without_a_transaction() {
    let server = RedisServer::valkey();
    let backend = backend(&server, Scripts::Never).await;
    let keys = ["job".to_owned()];
    let mine = format!("{}meta", "a".repeat(32));
    let taken = server.expect_ok(
        backend
            .acquire(AcquireRequest::new(&keys, &mine, TTL))
            .await,
        "acquire",
    );
    assert!(matches!(taken, Acquired::Obtained { .. }), "{taken:?}");
    let () = server.cmd(&["CONFIG", "RESETSTAT"]);
    let refreshed = backend
        .refresh(&keys, &mine[..32], Duration::from_secs(90))
        .await;
    assert!(server.expect_ok(refreshed, "refresh"));
    let left: i64 = server.cmd(&["PTTL", "job"]);
    assert!(left > 60_000, "the refresh set the new ttl: {left} ms left");
    let value: String = server.cmd(&["GET", "job"]);
    assert_eq!(value, mine, "the refresh kept the value");
    assert_eq!(calls(&server, "watch"), 0, "no transaction");
    assert_eq!(calls(&server, "evalsha"), 0, "no script");
    assert_eq!(calls(&server, "set"), 1, "one SET … IFEQ");

    let stale = "b".repeat(32);
    let refused = backend.refresh(&keys, &stale, TTL).await;
    assert!(!server.expect_ok(refused, "a stale refresh"));
    assert!(server.expect_ok(backend.release(&keys, &mine[..32]).await, "release"));
    let left: i64 = server.cmd(&["EXISTS", "job"]);
    assert_eq!(left, 0);
}

#[tokio::test]
async fn valkey_runs_the_scripted_path_by_default() {
    let server = RedisServer::valkey();
    let locker = Locker::new(backend(&server, Scripts::Auto).await);
    let lock = server.expect_ok(
        locker
            .obtain_many(["job", "other"], TTL, ObtainOptions::new().fence())
            .await,
        "a fenced obtain of two keys",
    );
    server.expect_ok(lock.refresh(TTL).await, "refresh");
    server.expect_ok(lock.release().await, "release");
    assert!(calls(&server, "evalsha") >= 3, "the scripts ran");
    assert_eq!(calls(&server, "watch"), 0, "no transaction");
}
