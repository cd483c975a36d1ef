//! An attempt sent again after its reply was lost finds the key already its
//! own, and is told a fence no lower than the one minted for the lost reply,
//! even when the fence counter expired in between (a `fence_expiry` shorter
//! than the lease): a fence below it would be refused as stale by every
//! fenced store that saw the key's earlier tokens. Each case sends the same
//! attempt twice on the backend, the first answer standing for the lost
//! reply, and deletes the counter between the two as its expiry would.

use std::time::Duration;

use lockmacro_runtime::RedisBackend;
use lockmacro_runtime::backend::{AcquireRequest, Acquired, Backend, Share};

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
