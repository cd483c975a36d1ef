//! What the runtime tells `tracing`: every step, with the key and never the
//! token.

use std::time::Duration;

use lockmacro_runtime::{Locker, ObtainOptions, RetryStrategy};
use lockmacro_testkit::logs::Logs;

#[tokio::test(flavor = "current_thread")]
async fn events_name_the_key_and_never_the_token() {
    let captured = Logs::capture(tracing::Level::TRACE);

    let locker = Locker::memory();
    // Tests on other threads hit the same callsites. One that registers a
    // callsite while this thread installs its subscriber can leave it
    // cached as uninteresting; once every callsite has registered (a first
    // round), rebuilding the cache settles it, and the second round counts.
    steps(&locker).await;
    tracing::callsite::rebuild_interest_cache();
    captured.clear();
    let token = steps(&locker).await;

    let logs = captured.text();
    for event in [
        "obtained",
        "busy, retrying",
        "busy",
        "refreshed",
        "released",
    ] {
        assert!(logs.contains(event), "no `{event}` event in:\n{logs}");
    }
    assert!(
        logs.lines().all(|line| line.contains("user:42")),
        "an event without the key:\n{logs}"
    );
    assert!(
        !logs.contains(&token),
        "the token leaked into the logs:\n{logs}"
    );
}

/// Obtains, is refused, refreshes and releases; returns the lock's token.
async fn steps(locker: &Locker) -> String {
    let ttl = Duration::from_secs(5);
    let lock = locker
        .obtain("user:42", ttl, ObtainOptions::new())
        .await
        .unwrap();
    let retry = RetryStrategy::linear(Duration::from_millis(1)).max_attempts(2);
    let busy = locker
        .obtain("user:42", ttl, ObtainOptions::new().retry(retry))
        .await;
    assert!(busy.is_err());
    lock.refresh(ttl).await.unwrap();
    let token = lock.token().to_owned();
    lock.release().await.unwrap();
    token
}
