//! A lock can be refreshed or released only with its exact token: 32
//! lowercase hex digits compared in full. Extends `wrong_or_short_token_is_refused`
//! of the runtime suite (an all-zero token, an empty one, an 8-digit prefix)
//! with the near misses an attacker would try next.

use std::time::Duration;

use lockmacro_testkit::Fixture;

use crate::{LONG, once};

lockmacro_testkit::for_each_backend! {
    needs: [],
    only: [Redis, Valkey, Cluster, Redlock, Memory],
    servers: own,
    runtime: (flavor = "multi_thread", worker_threads = 2),
    cases: crate::tokens::[near_miss_tokens_cannot_refresh_or_release],
}

pub async fn near_miss_tokens_cannot_refresh_or_release(fx: &Fixture) {
    let (locker, other_locker) = (fx.locker().await, fx.locker().await);
    let other = fx.check(
        other_locker.obtain("other", LONG, once()).await,
        "obtain other",
    );
    let theirs = other.token().to_owned();
    // The lock's metadata starts with a real token (another lock's) and is
    // stored right after the owner's token: `value = token + metadata`.
    let metadata = format!("{theirs}-and-more");
    let lock = fx.check(
        locker.obtain("job", LONG, once().metadata(&metadata)).await,
        "obtain",
    );
    let token = lock.token().to_owned();
    let value = format!("{token}{metadata}");
    let last_changed = {
        let (head, last) = token.split_at(31);
        format!("{head}{}", if last == "0" { "1" } else { "0" })
    };
    let forgeries = [
        ("truncated by one", token[..31].to_owned()),
        ("padded by one", format!("{token}0")),
        ("padded with a space", format!("{token} ")),
        ("shifted by one", format!("{}{}", &token[1..], &theirs[..1])),
        ("last digit changed", last_changed),
        ("upper case", token.to_uppercase()),
        ("another lock's token", theirs.clone()),
        ("the metadata", metadata.clone()),
        ("the start of the metadata", metadata[..32].to_owned()),
        ("the whole stored value", value.clone()),
        ("the stored value after the token", value[32..64].to_owned()),
    ];
    let keys = vec![locker.wire_key("job")];
    let backend = locker.backend();
    for (what, forged) in &forgeries {
        assert_ne!(forged, &token, "{what}");
        let refreshed = fx.check(
            backend
                .refresh(&keys, forged, Duration::from_millis(5))
                .await,
            what,
        );
        assert!(!refreshed, "refresh with {what} ({forged:?})");
        let released = fx.check(backend.release(&keys, forged).await, what);
        assert!(!released, "release with {what} ({forged:?})");
        let remaining = fx.check(backend.remaining(&keys, forged).await, what);
        assert_eq!(remaining, None, "ttl with {what}");
    }

    // Neither lock was shortened, released or handed over.
    let left = fx.check(lock.ttl().await, "owner ttl");
    assert!(left > LONG / 2, "{left:?}");
    assert_eq!(lock.metadata(), metadata);
    let err = other_locker.obtain("job", LONG, once()).await.unwrap_err();
    assert!(err.is_not_obtained(), "{err:?}");
    assert!(fx.check(other.ttl().await, "other ttl") > LONG / 2);
    fx.check(lock.refresh(LONG).await, "owner refresh");
    fx.check(lock.release().await, "owner release");
    fx.check(other.release().await, "other release");
}
