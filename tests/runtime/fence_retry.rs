//! An attempt sent again after its reply was lost finds the key already its
//! own, and is told a fence no lower than the one minted for the lost reply,
//! even when the fence counter expired in between (a `fence_expiry` shorter
//! than the lease): a fence below it would be refused as stale by every
//! fenced store that saw the key's earlier tokens. Each case sends the same
//! attempt twice on the backend, the first answer standing for the lost
//! reply, and deletes the counter between the two as its expiry would.
//!
//! A retry is minted a fence of its own, above every fence told before it,
//! also when its counter is shared with another lock that was told one in
//! between: reading the counter as it stands would tell the retry that
//! lock's fence, and two holders would carry the same one. And a token of
//! 0, which nothing mints, is never taken by a fenced store.

use std::time::Duration;

use lockmacro_runtime::backend::{AcquireRequest, Acquired, Backend, Share};
use lockmacro_runtime::{
    FencedStore, LockError, MemoryBackend, RedisBackend, RedisConfig, Scripts,
};

use lockmacro_testkit::RedisServer;

const LONG: Duration = Duration::from_secs(30);
const FENCE: &str = "{job}:fence";
/// A token (32 hex digits) and metadata, as the runtime stores them.
const VALUE: &str = "0123456789abcdef0123456789abcdef worker-7";
const OTHER: &str = "fedcba9876543210fedcba9876543210 worker-8";

fn fence_of(server: &RedisServer, acquired: Acquired, what: &str) -> u64 {
    match acquired {
        Acquired::Obtained { fence: Some(fence) } => fence,
        other => server.fail(format!("{what}: expected a fenced lease, got {other:?}")),
    }
}

/// Sends `request` twice with the counter deleted in between; asserts the
/// second answer is not below the first, and that a later acquisition by
/// another owner (`later`, after the keys are freed) is told more still.
async fn retried_after_the_counter_expired(
    server: &RedisServer,
    request: AcquireRequest<'_>,
    later: AcquireRequest<'_>,
) {
    let backend = server.expect_ok(RedisBackend::connect(&server.url()).await, "connect");
    let lost = fence_of(
        server,
        server.expect_ok(backend.acquire(request).await, "first attempt"),
        "first attempt",
    );
    let deleted: i64 = server.cmd(&["DEL", FENCE]);
    assert_eq!(deleted, 1, "the first attempt kept no counter at {FENCE}");

    let retried = fence_of(
        server,
        server.expect_ok(backend.acquire(request).await, "retry"),
        "retry",
    );
    assert!(
        retried >= lost,
        "the retry was told fence {retried}, below {lost} minted for the same attempt"
    );

    for key in request.keys {
        let _: i64 = server.cmd(&["DEL", key]);
    }
    let next = fence_of(
        server,
        server.expect_ok(backend.acquire(later).await, "next owner"),
        "next owner",
    );
    assert!(
        next > retried,
        "the next owner was told fence {next}, not above the retry's {retried}"
    );
}

#[tokio::test]
async fn a_retried_lock_is_told_a_fence_after_its_counter_expired() {
    let server = RedisServer::start();
    let keys = ["{job}".to_owned()];
    retried_after_the_counter_expired(
        &server,
        AcquireRequest::new(&keys, VALUE, LONG).fence_key(FENCE),
        AcquireRequest::new(&keys, OTHER, LONG).fence_key(FENCE),
    )
    .await;
}

#[tokio::test]
async fn a_retried_lock_of_several_keys_is_told_a_fence_after_its_counter_expired() {
    let server = RedisServer::start();
    let keys = ["{job}:a".to_owned(), "{job}:b".to_owned()];
    retried_after_the_counter_expired(
        &server,
        AcquireRequest::new(&keys, VALUE, LONG).fence_key(FENCE),
        AcquireRequest::new(&keys, OTHER, LONG).fence_key(FENCE),
    )
    .await;
}

#[tokio::test]
async fn a_retried_fair_lock_is_told_a_fence_after_its_counter_expired() {
    let server = RedisServer::start();
    let keys = ["{job}".to_owned()];
    retried_after_the_counter_expired(
        &server,
        AcquireRequest::new(&keys, VALUE, LONG)
            .fence_key(FENCE)
            .queue_for(LONG),
        AcquireRequest::new(&keys, OTHER, LONG)
            .fence_key(FENCE)
            .queue_for(LONG),
    )
    .await;
}

#[tokio::test]
async fn a_retried_share_is_told_a_fence_after_its_counter_expired() {
    let keys = ["{job}".to_owned()];
    for share in [Share::Permits(2), Share::Read, Share::Write] {
        let server = RedisServer::start();
        retried_after_the_counter_expired(
            &server,
            AcquireRequest::new(&keys, VALUE, LONG)
                .fence_key(FENCE)
                .share(share),
            AcquireRequest::new(&keys, OTHER, LONG)
                .fence_key(FENCE)
                .share(share),
        )
        .await;
    }
}

/// `a` is taken, `b` is taken by another owner on the same counter, and
/// `a`'s attempt is sent again: each is told more than the one before.
async fn retried_on_a_shared_counter(backend: &dyn Backend, what: &str) {
    let (a, b) = (["{job}:a".to_owned()], ["{job}:b".to_owned()]);
    let fence = |acquired: Result<Acquired, LockError>, step: &str| match acquired {
        Ok(Acquired::Obtained { fence: Some(fence) }) => fence,
        other => panic!("{what}, {step}: expected a fenced lease, got {other:?}"),
    };
    let first = fence(
        backend
            .acquire(AcquireRequest::new(&a, VALUE, LONG).fence_key(FENCE))
            .await,
        "first attempt",
    );
    let other = fence(
        backend
            .acquire(AcquireRequest::new(&b, OTHER, LONG).fence_key(FENCE))
            .await,
        "the other lock",
    );
    let retried = fence(
        backend
            .acquire(AcquireRequest::new(&a, VALUE, LONG).fence_key(FENCE))
            .await,
        "retry",
    );
    assert!(
        other > first,
        "{what}: the other lock was told {other} after {first}"
    );
    assert!(
        retried > other,
        "{what}: the retry was told {retried}, not above {other} told to the other lock since"
    );
}

#[tokio::test]
async fn a_retry_on_a_shared_counter_is_told_a_fence_of_its_own() {
    let server = RedisServer::start();
    let scripted = server.expect_ok(RedisBackend::connect(&server.url()).await, "connect");
    retried_on_a_shared_counter(&scripted, "with scripts").await;
    let _: i64 = server.cmd(&["DEL", "{job}:a", "{job}:b"]);
    let config = RedisConfig::default().scripts(Scripts::Never);
    let scriptless = server.expect_ok(
        RedisBackend::connect_with(&server.url(), config).await,
        "connect",
    );
    retried_on_a_shared_counter(&scriptless, "without scripts").await;
    retried_on_a_shared_counter(&MemoryBackend::new(), "in memory").await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_on_a_shared_counter_is_told_a_fence_of_its_own_on_postgres() {
    let fx = lockmacro_testkit::Fixture::own_postgres().await;
    let db = fx.postgres_db().expect("a PostgreSQL fixture");
    let backend = fx.check(
        lockmacro_runtime::PostgresBackend::connect(&db.url()).await,
        "connect",
    );
    retried_on_a_shared_counter(&backend, "on PostgreSQL").await;
}

/// Fence 0 is refused before anything is written, by the store in memory
/// and on Redis, and by the script itself for any other client of it; a
/// real token is then taken, and an older one refused over it.
#[tokio::test]
async fn a_fenced_store_refuses_token_zero() {
    let server = RedisServer::start();
    let redis = server.expect_ok(FencedStore::connect(&server.url()).await, "connect");
    for store in [FencedStore::memory(), redis] {
        let refused = store.set("report", "unfenced", 0).await;
        assert!(
            matches!(refused, Err(LockError::InvalidToken { token: 0, .. })),
            "{store:?}: token 0 gave {refused:?}"
        );
        assert_eq!(
            store.get("report").await.unwrap(),
            None,
            "{store:?}: token 0 wrote"
        );
        assert!(
            store.set("report", "new", 42).await.unwrap(),
            "{store:?}: token 42"
        );
        assert!(
            !store.set("report", "stale", 41).await.unwrap(),
            "{store:?}: token 41 after 42"
        );
    }
    let mut conn = server.connection();
    let script = include_str!("../../lockmacro-runtime/src/backend/scripts/fenced_set.lua");
    for token in ["0", "007", "-1", "1e3", ""] {
        let reply: redis::RedisResult<i64> = redis::Script::new(script)
            .key("raw")
            .arg(token)
            .arg("value")
            .invoke(&mut conn);
        let err = reply.expect_err(token);
        assert!(
            err.to_string().contains("BADTOKEN"),
            "token {token:?}: {err}"
        );
    }
    let exists: i64 = server.cmd(&["EXISTS", "raw"]);
    assert_eq!(exists, 0, "a refused token wrote the key");
}
