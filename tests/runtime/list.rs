//! Listing what is held (`Locker::list`): the keys under a prefix with
//! what `inspect` tells of each, and none of the names kept beside a lock.

use std::time::Duration;

use lockmacro_runtime::{BackendErrorKind, HeldAs, KeyInfo, KeyKind, LockError, ObtainOptions};

use lockmacro_testkit::Fixture;

const LONG: Duration = Duration::from_secs(30);

fn keys(listed: &[KeyInfo]) -> Vec<&str> {
    listed.iter().map(|info| info.key.as_str()).collect()
}

pub async fn list_shows_held_keys_with_their_holders(fx: &Fixture) {
    let locker = fx.locker().await;
    let one = fx.check(
        locker
            .obtain(
                "job:1",
                LONG,
                ObtainOptions::new().metadata("worker-1").fence(),
            )
            .await,
        "obtain job:1",
    );
    let _two = fx.check(
        locker.obtain("job:2", LONG, ObtainOptions::new()).await,
        "obtain job:2",
    );
    let _other = fx.check(
        locker.obtain("report", LONG, ObtainOptions::new()).await,
        "obtain report",
    );
    // Released: its fence counter stays, and neither is listed.
    let gone = fx.check(
        locker
            .obtain("job:3", LONG, ObtainOptions::new().fence())
            .await,
        "obtain job:3",
    );
    fx.check(gone.release().await, "release job:3");

    let jobs = fx.check(locker.list("job:").await, "list job:");
    assert_eq!(keys(&jobs), ["job:1", "job:2"], "{jobs:?}");
    let seen = &jobs[0].inspection;
    assert_eq!(seen.kind, Some(KeyKind::Lock), "{seen:?}");
    assert_eq!(seen.holders.len(), 1, "{seen:?}");
    assert_eq!(seen.holders[0].held_as, HeldAs::Lock);
    assert_eq!(seen.holders[0].metadata, "worker-1");
    let left = seen.holders[0].remaining.expect("a lease with an expiry");
    assert!(left > Duration::ZERO && left <= LONG, "{seen:?}");
    assert_eq!(seen.fence, one.fence_token(), "{seen:?}");

    let everything = fx.check(locker.list("").await, "list");
    assert_eq!(keys(&everything), ["job:1", "job:2", "report"]);
    let elsewhere = locker.with_namespace("elsewhere");
    assert!(
        fx.check(elsewhere.list("").await, "list elsewhere")
            .is_empty()
    );
}

pub async fn list_takes_the_prefix_literally(fx: &Fixture) {
    let locker = fx.locker().await;
    let _glob = fx.check(
        locker.obtain("a[1]*?", LONG, ObtainOptions::new()).await,
        "obtain a[1]*?",
    );
    let _plain = fx.check(
        locker.obtain("a1", LONG, ObtainOptions::new()).await,
        "obtain a1",
    );
    let listed = fx.check(locker.list("a[1]*").await, "list a[1]*");
    assert_eq!(keys(&listed), ["a[1]*?"], "{listed:?}");
}

pub async fn list_shows_every_share_of_a_key_once(fx: &Fixture) {
    let locker = fx.locker().await;
    let opts = |who| ObtainOptions::new().permits(2).metadata(who);
    let _a = fx.check(locker.obtain("jobs", LONG, opts("a")).await, "obtain a");
    let _b = fx.check(locker.obtain("jobs", LONG, opts("b")).await, "obtain b");
    let listed = fx.check(locker.list("").await, "list");
    assert_eq!(keys(&listed), ["jobs"], "{listed:?}");
    let seen = &listed[0].inspection;
    assert_eq!(seen.kind, Some(KeyKind::Semaphore { permits: 2 }));
    assert_eq!(seen.holders.len(), 2, "{seen:?}");
    assert!(
        seen.holders
            .iter()
            .all(|holder| holder.held_as == HeldAs::Permit)
    );
}

pub async fn list_is_refused_where_the_backend_cannot_list(fx: &Fixture) {
    let locker = fx.locker().await;
    match locker.list("").await {
        Err(LockError::Backend(err)) if err.kind() == BackendErrorKind::Unsupported => {
            assert!(err.to_string().contains("cannot list its keys"), "{err}");
        }
        other => panic!("expected `Unsupported`, got {other:?}"),
    }
}
