//! The operator's command line (`lockmacro`, package `lockmacro-cli`), run
//! as a user runs it, against servers of the test's own: what `list`,
//! `inspect`, `force-release` and `watch` print, what a holder in this
//! process sees of them, and the exit codes. What is PostgreSQL's alone
//! (a database without lockmacro's tables, locks held by a transaction) is
//! in `postgres.rs`.

#[cfg(feature = "postgres")]
mod postgres;

use std::process::{Output, Stdio};
use std::time::Duration;

use lockmacro_runtime::ObtainOptions;
use lockmacro_testkit::RedisServer;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

const LONG: Duration = Duration::from_secs(30);
/// A hang limit, never a measurement.
const HANG: Duration = Duration::from_secs(60);

/// The `lockmacro` binary of this package, which Cargo builds for its tests.
fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_lockmacro")
}

fn lockmacro(url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(binary());
    command
        .arg("--url")
        .arg(url)
        .args(args)
        .env_remove("LOCKMACRO_URL")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

async fn run(url: &str, args: &[&str]) -> Output {
    let output = lockmacro(url, args).output();
    tokio::time::timeout(HANG, output)
        .await
        .unwrap_or_else(|_| panic!("`lockmacro {args:?}` hung"))
        .expect("cannot run lockmacro")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts the exit code, showing everything the run printed otherwise.
fn exits(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(output),
        stderr(output)
    );
}

fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("not JSON ({err}):\n{}", stdout(output)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_a_held_key_with_its_metadata_and_remaining_lease() {
    binary();
    let server = RedisServer::start();
    let url = server.url();
    let locker = server.locker().await.with_namespace("billing");
    let opts = ObtainOptions::new().metadata("worker-7").fence();
    let lock = server
        .expect_ok(locker.obtain("user:1", LONG, opts).await, "obtain")
        .keep_alive();
    let fence = lock.fence_token().expect("a fence");

    let table = run(&url, &["--namespace", "billing", "list"]).await;
    exits(&table, 0);
    let text = stdout(&table);
    let row = text
        .lines()
        .find(|line| line.starts_with("user:1 "))
        .unwrap_or_else(|| panic!("no row for user:1:\n{text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[..4], ["user:1", "lock", "lock", "worker-7"], "{text}");
    assert!(cells[4].ends_with('s'), "the remaining lease: {text}");
    assert_eq!(cells[5], fence.to_string(), "{text}");

    let listed = run(&url, &["--namespace", "billing", "--json", "list"]).await;
    exits(&listed, 0);
    let listed = json(&listed);
    let key = &listed[0];
    assert_eq!(key["key"], "user:1", "{listed}");
    assert_eq!(key["kind"], "lock", "{listed}");
    assert_eq!(key["fence"], fence, "{listed}");
    assert_eq!(key["holders"][0]["metadata"], "worker-7", "{listed}");
    let left = key["holders"][0]["remaining_ms"]
        .as_u64()
        .expect("remaining_ms");
    assert!(left > 0 && left <= 30_000, "{listed}");

    // Outside the namespace the key is not there.
    let elsewhere = run(&url, &["--namespace", "shipping", "--json", "list"]).await;
    exits(&elsewhere, 0);
    assert_eq!(json(&elsewhere), serde_json::json!([]));
    server.expect_ok(lock.release().await, "release");
}

/// Every share's holder shows its metadata in `list`, and the hash that
/// keeps it beside the key (`billing:{pool}:holders`, under the prefix) is
/// not listed as a key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_the_metadata_of_every_share() {
    binary();
    let server = RedisServer::start();
    let url = server.url();
    let locker = server.locker().await.with_namespace("billing");
    let permits = |worker| ObtainOptions::new().permits(2).metadata(worker);
    let mut held = Vec::new();
    for worker in ["worker-1", "worker-2"] {
        held.push(server.expect_ok(
            locker.obtain("{pool}", LONG, permits(worker)).await,
            "permit",
        ));
    }
    let read = ObtainOptions::new().read().metadata("reader-1");
    held.push(server.expect_ok(locker.obtain("doc", LONG, read).await, "read"));

    let listed = run(&url, &["--namespace", "billing", "--json", "list"]).await;
    exits(&listed, 0);
    let listed = json(&listed);
    let keys: Vec<&str> = listed
        .as_array()
        .expect("a list")
        .iter()
        .map(|key| key["key"].as_str().expect("a key"))
        .collect();
    assert_eq!(keys, ["doc", "{pool}"], "{listed}");
    let shown = |key: &serde_json::Value| {
        let mut shown: Vec<String> = key["holders"]
            .as_array()
            .expect("holders")
            .iter()
            .map(|holder| format!("{} {}", holder["held_as"], holder["metadata"]))
            .collect();
        shown.sort_unstable();
        shown
    };
    assert_eq!(shown(&listed[0]), [r#""read" "reader-1""#], "{listed}");
    assert_eq!(
        shown(&listed[1]),
        [r#""permit" "worker-1""#, r#""permit" "worker-2""#],
        "{listed}"
    );
    for lease in held {
        server.expect_ok(lease.release().await, "release");
    }
    let left: i64 = server.cmd(&["DBSIZE"]);
    assert_eq!(left, 0, "keys left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_says_whether_a_key_is_free_or_held() {
    binary();
    let server = RedisServer::start();
    let url = server.url();
    let free = run(&url, &["inspect", "report"]).await;
    exits(&free, 1);
    assert!(
        stdout(&free).contains("`report` is free"),
        "{}",
        stdout(&free)
    );

    let locker = server.locker().await;
    let opts = ObtainOptions::new().metadata("nightly");
    let lock = server
        .expect_ok(locker.obtain("report", LONG, opts).await, "obtain")
        .keep_alive();
    let held = run(&url, &["--json", "inspect", "report"]).await;
    exits(&held, 0);
    let seen = json(&held);
    assert_eq!(seen["held"], true, "{seen}");
    assert_eq!(seen["holders"][0]["metadata"], "nightly", "{seen}");
    server.expect_ok(lock.release().await, "release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_makes_the_holder_lose_its_lease_and_frees_the_key() {
    binary();
    let server = RedisServer::start();
    let url = server.url();
    let (holder, other) = (server.locker().await, server.locker().await);
    let opts = ObtainOptions::new().metadata("stuck-worker");
    let guard = server
        .expect_ok(holder.obtain("job", LONG, opts).await, "obtain")
        .keep_alive();
    let cancelled = guard.cancellation_token();

    // Standard input is not a terminal: nothing happens without --yes.
    let refused = run(&url, &["force-release", "job"]).await;
    exits(&refused, 2);
    assert!(stderr(&refused).contains("--yes"), "{}", stderr(&refused));
    assert!(!cancelled.is_cancelled());

    let released = run(&url, &["force-release", "job", "--yes"]).await;
    exits(&released, 0);
    let text = stdout(&released);
    assert!(
        text.contains("released `job`") && text.contains("stuck-worker"),
        "{text}"
    );
    tokio::time::timeout(HANG, cancelled.cancelled())
        .await
        .expect("the holder never learnt that its lease was gone");
    assert!(guard.is_lost());
    let mine = server.expect_ok(
        other.obtain("job", LONG, ObtainOptions::new()).await,
        "obtain after the force-release",
    );

    let again = run(&url, &["force-release", "idle", "--yes"]).await;
    exits(&again, 1);
    assert!(stdout(&again).contains("not held"), "{}", stdout(&again));
    server.expect_ok(mine.release().await, "release");
}

/// The next line `watch` prints that contains `word`, skipping others.
async fn next_line_with(lines: &mut Lines<BufReader<ChildStdout>>, word: &str) -> String {
    let found = async {
        while let Some(line) = lines.next_line().await.expect("read watch's output") {
            if line.contains(word) {
                return line;
            }
        }
        panic!("watch ended before printing `{word}`");
    };
    tokio::time::timeout(HANG, found)
        .await
        .unwrap_or_else(|_| panic!("watch never printed `{word}`"))
}

fn interrupt(child: &Child) {
    let pid = child.id().expect("watch is running");
    let pid = libc::pid_t::try_from(pid).expect("a pid");
    // SAFETY: a signal to the child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_the_acquire_and_the_release_of_a_key() {
    binary();
    let server = RedisServer::start();
    let url = server.url();
    let mut child = lockmacro(&url, &["watch", "deploy"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("cannot start watch");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = next_line_with(&mut lines, "watching").await;
    assert!(first.contains("(free)"), "{first}");

    let locker = server.locker().await;
    let opts = ObtainOptions::new().metadata("deployer-3");
    let lock = server.expect_ok(locker.obtain("deploy", LONG, opts).await, "obtain");
    let acquired = next_line_with(&mut lines, "acquired").await;
    assert!(acquired.contains("deployer-3"), "{acquired}");
    server.expect_ok(lock.release().await, "release");
    let released = next_line_with(&mut lines, "released").await;
    assert!(released.contains("deployer-3"), "{released}");

    interrupt(&child);
    let status = tokio::time::timeout(HANG, child.wait())
        .await
        .expect("watch did not stop on Ctrl-C")
        .expect("wait for watch");
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_url_is_a_usage_error_and_an_unreachable_server_a_backend_error() {
    let unknown = run("mysql://root:hunter2@db/app", &["list"]).await;
    exits(&unknown, 2);
    let said = stderr(&unknown);
    assert!(said.contains("unknown scheme `mysql://`"), "{said}");
    assert!(!said.contains("hunter2"), "the password is shown: {said}");

    let closed = lockmacro_testkit::redis::ClosedPort::bind();
    let down = run(&format!("redis://127.0.0.1:{}/", closed.port()), &["list"]).await;
    exits(&down, 3);
    assert!(stderr(&down).contains("unreachable"), "{}", stderr(&down));

    let mut nowhere = Command::new(binary());
    nowhere
        .arg("list")
        .env_remove("LOCKMACRO_URL")
        .stdin(Stdio::null());
    let nowhere = nowhere.output().await.expect("cannot run lockmacro");
    exits(&nowhere, 2);
    assert!(
        stderr(&nowhere).contains("LOCKMACRO_URL"),
        "{}",
        stderr(&nowhere)
    );
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_etcd_list_and_force_release_reach_the_holder() {
    binary();
    let etcd = lockmacro_testkit::etcd::EtcdCluster::single();
    let hosts: Vec<String> = etcd
        .endpoints()
        .iter()
        .map(|url| url.trim_start_matches("http://").to_owned())
        .collect();
    let url = format!("etcd://{}", hosts.join(","));
    let locker = etcd.locker().await;
    let opts = ObtainOptions::new().metadata("etcd-worker");
    let guard = locker
        .obtain("job", LONG, opts)
        .await
        .expect("obtain on etcd")
        .keep_alive();

    let listed = run(&url, &["--json", "list"]).await;
    exits(&listed, 0);
    let listed = json(&listed);
    assert_eq!(listed[0]["key"], "job", "{listed}");
    assert_eq!(
        listed[0]["holders"][0]["metadata"], "etcd-worker",
        "{listed}"
    );

    let released = run(&url, &["force-release", "job", "--yes"]).await;
    exits(&released, 0);
    tokio::time::timeout(HANG, guard.cancellation_token().cancelled())
        .await
        .expect("the holder never learnt that its lease was gone");
    let free = run(&url, &["inspect", "job"]).await;
    exits(&free, 1);
}
