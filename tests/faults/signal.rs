//! A service stopped as a deploy stops it, with SIGTERM: waiting on
//! `shutdown_signal()` and then `Locker::shutdown()`, the process gives back
//! every lease before it ends, so the next instance does not wait out the
//! ttls. Without the signal handler, SIGTERM ends the process at once and
//! the keys stay held (the second case).

use std::env;
use std::io::{BufRead, BufReader};
use std::time::Duration;

use lockmacro_runtime::{Locker, ObtainOptions, shutdown_signal};

use lockmacro_testkit::RedisServer;

use crate::process::rerun_as_child;

/// Set, to the server's URL, for the child process that holds the locks.
const SERVICE_ENV: &str = "LOCKMACRO_FAULTS_SERVICE";
const TTL: Duration = Duration::from_secs(60);
/// A bound for a hang, not a measurement.
const HANG: Duration = Duration::from_secs(20);

/// The child's part: holds `billing` (a plain lock) and `nightly` (kept
/// alive by the watchdog), says so, and, when `graceful`, gives both back
/// on SIGTERM.
async fn serve(url: &str, graceful: bool) {
    let locker = Locker::connect(url).await.expect("connect");
    let stop = graceful.then(shutdown_signal);
    let billing = locker
        .obtain("billing", TTL, ObtainOptions::new())
        .await
        .expect("billing");
    let nightly = locker
        .obtain("nightly", TTL, ObtainOptions::new())
        .await
        .expect("nightly")
        .keep_alive();
    println!("held");
    match stop {
        Some(stop) => {
            stop.await;
            let report = locker.shutdown().await;
            println!("given back {}", report.given_back);
        }
        None => std::future::pending::<()>().await,
    }
    drop((billing, nightly));
}

/// Runs `test` again as the service, sends it SIGTERM once it holds its
/// locks, and returns how many of them are still held once it has ended.
async fn stopped_with_sigterm(test: &str, server: &RedisServer) -> i64 {
    let mut service = rerun_as_child(test, SERVICE_ENV, &server.url());
    let stdout = service.0.stdout.take().unwrap();
    let (held_tx, held) = tokio::sync::oneshot::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
        let _ = held_tx.send(lines.any(|line| line == "held"));
        lines.collect::<Vec<_>>()
    });
    let held = tokio::time::timeout(HANG, held).await;
    assert!(
        matches!(held, Ok(Ok(true))),
        "the service never held its locks"
    );
    let pid = libc::pid_t::try_from(service.0.id()).unwrap();
    // SAFETY: `kill` only sends a signal, to the child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let ended = tokio::task::spawn_blocking(move || service.0.wait());
    let status = tokio::time::timeout(HANG, ended)
        .await
        .expect("the service did not end after SIGTERM")
        .unwrap()
        .unwrap();
    let rest = reader.join().unwrap();
    println!("service ended ({status}), then printed {rest:?}");
    server.cmd(&["EXISTS", "billing", "nightly"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_gives_back_every_lease_before_the_process_ends() {
    if let Ok(url) = env::var(SERVICE_ENV) {
        return serve(&url, true).await;
    }
    let server = RedisServer::start();
    let held = stopped_with_sigterm(
        "signal::sigterm_gives_back_every_lease_before_the_process_ends",
        &server,
    )
    .await;
    assert_eq!(held, 0, "keys left held after a graceful SIGTERM");
}

/// What the shutdown signal is for: waiting on Ctrl-C only, a SIGTERM ends
/// the process with its keys held for their ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_without_a_handler_leaves_the_keys_held() {
    if let Ok(url) = env::var(SERVICE_ENV) {
        return serve(&url, false).await;
    }
    let server = RedisServer::start();
    let held = stopped_with_sigterm(
        "signal::sigterm_without_a_handler_leaves_the_keys_held",
        &server,
    )
    .await;
    assert_eq!(held, 2, "SIGTERM without a handler gave keys back");
}
