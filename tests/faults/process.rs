//! A lock holder whose process dies without releasing (SIGKILL): the key is
//! free once its lease ends, not before, and not much after.

use std::env;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lockmacro_runtime::{LockError, Locker, ObtainOptions, RetryStrategy, distributed_lock};
use tokio::time::Instant;

use lockmacro_testkit::RedisServer;

/// Set, to the server's URL, for the child process that holds the lock.
const HOLDER_ENV: &str = "LOCKMACRO_FAULTS_HOLDER";
const TTL: Duration = Duration::from_secs(1);

/// Kills the child on drop, so that a failing test leaves no holder behind.
pub struct Holder(pub Child);

/// Runs the test `test` of this binary again in a child process, with `env`
/// set to `value`: the test sees the variable and plays the child's part.
/// Its standard input and output are piped to the caller.
pub fn rerun_as_child(test: &str, env: &str, value: &str) -> Holder {
    Holder(
        Command::new(env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture"])
            .env(env, value)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_killed_mid_body_frees_the_lock_once_its_lease_ends() {
    // The same test, run again in a child process, is the holder.
    if let Ok(url) = env::var(HOLDER_ENV) {
        return hold_until_killed(&url).await;
    }
    let server = RedisServer::start();
    let mut holder = rerun_as_child(
        "process::holder_killed_mid_body_frees_the_lock_once_its_lease_ends",
        HOLDER_ENV,
        &server.url(),
    );
    let stdout = holder.0.stdout.take().unwrap();
    let inside = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout).lines().find_map(|line| {
            line.ok()?
                .strip_prefix("inside, fence ")?
                .parse::<u64>()
                .ok()
        })
    });
    let held_fence = tokio::time::timeout(Duration::from_secs(20), inside)
        .await
        .expect("the holder did not get inside within 20 s")
        .unwrap()
        .expect("the holder exited without getting inside");

    let contender = server.locker().await;
    let refused = contender.obtain("job", TTL, ObtainOptions::new()).await;
    assert!(
        refused.is_err_and(|err| err.is_not_obtained()),
        "the contender got in while the holder was alive"
    );
    // The lease ends no earlier than this: the server still gave it `left` at
    // `probe`, and a refresh still in flight could only extend it.
    let probe = Instant::now();
    let left: i64 = server.cmd(&["PTTL", "job"]);
    assert!(left > 0, "the key is not held by the living holder: {left}");
    let left = Duration::from_millis(left as u64);

    holder.0.kill().unwrap();
    holder.0.wait().unwrap();
    let killed = Instant::now();

    let waiting = ObtainOptions::new()
        .fence()
        .retry(RetryStrategy::linear(Duration::from_millis(20)).deadline(Duration::from_secs(20)));
    let lock = server.expect_ok(
        contender.obtain("job", TTL, waiting).await,
        "obtain after the holder died",
    );
    let obtained = Instant::now();
    println!(
        "lease left at the probe {left:?}; obtained {:?} after the kill",
        obtained - killed
    );
    // PTTL counts whole milliseconds of the server's wall clock; 5 ms covers
    // the rounding and any drift between the two clocks over a second.
    assert!(
        obtained + Duration::from_millis(5) >= probe + left,
        "obtained {:?} before the lease could have ended",
        (probe + left) - obtained
    );
    assert!(
        obtained <= killed + TTL + Duration::from_secs(5),
        "obtained only {:?} after the kill",
        obtained - killed
    );
    assert!(
        lock.fence_token().unwrap() > held_fence,
        "fence {} after {held_fence}",
        lock.fence_token().unwrap()
    );
}

/// The child process's part: takes the lock and holds it until killed.
async fn hold_until_killed(url: &str) {
    let locker = Locker::connect(url).await.unwrap();

    #[distributed_lock(key = "job", ttl = "1s", locker = locker, fence, guard = lease)]
    async fn job(locker: &Locker) -> Result<(), LockError> {
        let _ = locker;
        println!("inside, fence {}", lease.fence_token().unwrap());
        // The parent kills this process here; the watchdog keeps the
        // lease until then. Bounded, in case the parent is gone.
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok(())
    }

    job(&locker).await.unwrap();
}
