//! An operator clears a key held by another process: `Locker::inspect` shows
//! the holder's metadata and lease, `Locker::force_release` deletes it, and
//! the holder, whose watchdog's next refresh is refused, learns that its
//! lease is lost; then someone else obtains.

use std::env;
use std::io::{BufRead, BufReader};
use std::time::Duration;

use lockmacro_runtime::{HeldAs, KeyKind, Locker, ObtainOptions};

use lockmacro_testkit::RedisServer;

use crate::process::rerun_as_child;

/// Set, to the server's URL, for the child process that holds the key.
const HOLDER_ENV: &str = "LOCKMACRO_FAULTS_FORCED_HOLDER";
const TTL: Duration = Duration::from_secs(3);
/// The child's exit code once it saw its lease lost.
const LOST: i32 = 3;
/// A hang limit, never a measurement.
const HANG: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_released_holder_in_another_process_reports_lost() {
    if let Ok(url) = env::var(HOLDER_ENV) {
        return hold_until_lost(&url).await;
    }
    let server = RedisServer::start();
    let mut holder = rerun_as_child(
        "force_release::a_force_released_holder_in_another_process_reports_lost",
        HOLDER_ENV,
        &server.url(),
    );
    let mut lines = BufReader::new(holder.0.stdout.take().unwrap()).lines();
    let (holding, lines) = tokio::task::spawn_blocking(move || {
        let holding =
            lines.find_map(|line| line.ok()?.strip_prefix("holding as ").map(str::to_owned));
        (holding, lines)
    })
    .await
    .unwrap();
    let metadata = holding.expect("the holder exited without taking the key");

    let operator = server.locker().await;
    let seen = server.expect_ok(operator.inspect("job").await, "inspect");
    assert_eq!(seen.kind, Some(KeyKind::Lock), "{seen:?}");
    assert_eq!(seen.holders.len(), 1, "{seen:?}");
    assert_eq!(seen.holders[0].held_as, HeldAs::Lock);
    assert_eq!(seen.holders[0].metadata, metadata);
    let left = seen.holders[0].remaining.expect("a lease with an expiry");
    assert!(left > Duration::ZERO && left <= TTL, "{seen:?}");

    assert!(server.expect_ok(operator.force_release("job").await, "force-release"));
    let reported = tokio::task::spawn_blocking(move || {
        let mut lines = lines;
        lines.any(|line| line.is_ok_and(|line| line == "lost"))
    });
    let reported = tokio::time::timeout(HANG, reported)
        .await
        .expect("the holder did not report within the hang limit")
        .unwrap();
    assert!(
        reported,
        "the holder exited without reporting its lease lost"
    );
    let status = tokio::task::spawn_blocking(move || holder.0.wait());
    let status = tokio::time::timeout(HANG, status)
        .await
        .expect("the holder did not exit within the hang limit")
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(LOST), "the holder's exit: {status:?}");

    let next = server.expect_ok(
        operator.obtain("job", TTL, ObtainOptions::new()).await,
        "obtain after the force-release",
    );
    server.expect_ok(next.release().await, "release");
}

/// The child's part: holds the key with the watchdog, says so, and exits
/// with [`LOST`] once its lease is lost (bounded, in case nobody clears it).
async fn hold_until_lost(url: &str) {
    let locker = Locker::connect(url).await.unwrap();
    let metadata = format!("billing-worker pid {}", std::process::id());
    let guard = locker
        .obtain("job", TTL, ObtainOptions::new().metadata(metadata.clone()))
        .await
        .unwrap()
        .keep_alive();
    println!("holding as {metadata}");
    if tokio::time::timeout(Duration::from_secs(60), guard.lost())
        .await
        .is_ok()
    {
        println!("lost");
        std::process::exit(LOST);
    }
}
