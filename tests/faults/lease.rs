//! What a holder does with a lease it can no longer trust: a call never runs
//! its body, nor returns `Ok`, on a lease past its local deadline, whether the
//! server froze, the reply came late, or the holder's own process was paused;
//! it says so on the deadline, without waiting for the server; and a call
//! dropped or timed out mid-acquire leaves no key behind.

use std::env;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lockmacro_runtime::{
    BackendErrorKind, LockError, Locker, ObtainOptions, RedisBackend, RedisConfig, RetryStrategy,
    distributed_lock,
};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use lockmacro_testkit::RedisServer;
use lockmacro_testkit::program::Program;
use lockmacro_testkit::proxy::Proxy;

/// A locker on `url` that waits `response_timeout` for each reply.
async fn locker_with(server: &RedisServer, url: &str, response_timeout: Duration) -> Locker {
    let config = RedisConfig::default().response_timeout(response_timeout);
    Locker::new(server.expect_ok(RedisBackend::connect_with(url, config).await, "connect"))
}

fn waiting(deadline: Duration) -> ObtainOptions {
    ObtainOptions::new().retry(RetryStrategy::linear(Duration::from_millis(20)).deadline(deadline))
}

// The cases that freeze the server, or the holder beside it, on Redis and
// on Valkey.
on_each_program! {
    runtime: (flavor = "multi_thread", worker_threads = 2),
    cases: [
        lost_lease_is_reported_on_the_deadline_while_the_server_is_still_frozen,
        paused_holder_process_neither_writes_nor_returns_ok_after_its_lease,
    ],
}

async fn lost_lease_is_reported_on_the_deadline_while_the_server_is_still_frozen(program: Program) {
    let server = RedisServer::start_as(program, &[]);
    // With a response timeout this long, a call that waited for its release
    // to be answered would still be waiting when the test gives up.
    let locker = locker_with(&server, &server.url(), Duration::from_secs(60)).await;

    #[distributed_lock(key = "job", ttl = "1s", locker = locker)]
    async fn job(locker: &Locker, entered: oneshot::Sender<()>) -> Result<(), LockError> {
        let _ = locker;
        let _ = entered.send(());
        std::future::pending::<()>().await;
        unreachable!("a pending future never completes")
    }

    let (entered_tx, entered) = oneshot::channel();
    let call = tokio::spawn({
        let locker = locker.clone();
        async move { job(&locker, entered_tx).await }
    });
    entered.await.unwrap();
    server.pause();
    let result = tokio::time::timeout(Duration::from_secs(20), call).await;
    // Resumed only once the call has answered (or the test gave up on it).
    server.resume();
    let err = result
        .expect("the call waited for the frozen server instead of returning on its deadline")
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Lost { key, .. } if key == "job"),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_whose_reply_comes_after_the_lease_is_not_a_lock() {
    let server = RedisServer::start();
    let proxy = Proxy::in_front_of(&server);
    let locker = locker_with(&server, &proxy.url(), Duration::from_secs(10)).await;
    // 700 ms each way: the reply to an acquire of a 1 s lease comes 1.4 s
    // after it was sent, when the lease is over.
    proxy.latency(Duration::from_millis(700));

    let late = locker
        .obtain("job", Duration::from_secs(1), ObtainOptions::new())
        .await;
    match late {
        Err(err) => assert!(err.is_not_obtained(), "{err:?}"),
        Ok(lock) => panic!(
            "obtained a lock whose deadline passed {:?} ago",
            tokio::time::Instant::now() - lock.deadline()
        ),
    }

    #[distributed_lock(key = "job", ttl = "1s", locker = locker)]
    async fn job(locker: &Locker, ran: Arc<AtomicBool>) -> Result<(), LockError> {
        let _ = locker;
        ran.store(true, Ordering::SeqCst);
        Ok(())
    }

    let ran = Arc::new(AtomicBool::new(false));
    let err = job(&locker, ran.clone()).await.unwrap_err();
    assert!(err.is_not_obtained(), "{err:?}");
    assert!(
        !ran.load(Ordering::SeqCst),
        "the body ran on an expired lease"
    );
    proxy.heal();
    // The late grants were given back before the calls returned.
    let value: Option<String> = server.cmd(&["GET", "job"]);
    assert_eq!(value, None, "a late grant was left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_obtains_leave_no_key_behind() {
    const KEYS: usize = 400;
    let server = RedisServer::start();
    let proxy = Proxy::in_front_of(&server);
    let locker = locker_with(&server, &proxy.url(), Duration::from_secs(3)).await;
    let contender = server.locker().await;
    let ttl = Duration::from_secs(60);
    // A round trip of 4 ms, so that the timeouts below (whole milliseconds,
    // as tokio's timer counts) cancel calls at every stage of the acquire:
    // before it is sent, while it is on its way or run, and once its reply
    // is on the way back.
    proxy.latency(Duration::from_millis(2));

    let mut completed = 0;
    for i in 0..KEYS {
        let cancel_after = Duration::from_micros(100 + (i as u64 * 6_000) / KEYS as u64);
        let key = format!("cancel:{i}");
        let obtain = locker.obtain(&key, ttl, ObtainOptions::new());
        if let Ok(lock) = tokio::time::timeout(cancel_after, obtain).await {
            completed += 1;
            server.expect_ok(lock, "obtain").release().await.unwrap();
        }
    }
    println!("{completed} of {KEYS} obtains completed before their timeout");

    // Every key must come free long before its 60 s ttl: waiters are woken by
    // the background release of what a cancelled call took.
    let mut free = JoinSet::new();
    for i in 0..KEYS {
        let contender = contender.clone();
        free.spawn(async move {
            let key = format!("cancel:{i}");
            let lock = contender
                .obtain(&key, ttl, waiting(Duration::from_secs(10)))
                .await;
            (key, lock.map(drop))
        });
    }
    let mut orphaned = Vec::new();
    while let Some(joined) = free.join_next().await {
        let (key, result) = joined.unwrap();
        match result {
            Ok(()) => {}
            Err(err) if err.is_not_obtained() => orphaned.push(key),
            Err(err) => panic!("{key}: {err}"),
        }
    }
    assert!(
        orphaned.is_empty(),
        "{} keys left held by cancelled calls, among them {:?}",
        orphaned.len(),
        &orphaned[..orphaned.len().min(10)]
    );
}

/// The same on a CPU kept busy by two spinning threads beside the test (the
/// client's tasks then run late, between any two of their steps), many
/// times over: once the locker has shut down, which waits for its
/// background releases, no key is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_obtains_leave_no_key_behind_on_a_busy_cpu() {
    const CALLS: usize = 4000;
    let server = RedisServer::start();
    let locker = locker_with(&server, &server.url(), Duration::from_secs(3)).await;
    let ttl = Duration::from_secs(60);
    let spinning = Arc::new(AtomicBool::new(true));
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let spinning = spinning.clone();
            std::thread::spawn(move || {
                while spinning.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let mut calls = JoinSet::new();
    for i in 0..CALLS {
        let locker = locker.clone();
        calls.spawn(async move {
            let cancel_after = Duration::from_micros((i as u64 * 2_000) / CALLS as u64);
            let key = format!("cancel:{i}");
            let obtain = locker.obtain(&key, ttl, ObtainOptions::new());
            // A lock obtained in time is dropped here: released in the
            // background, as a cancelled call's claim is.
            drop(tokio::time::timeout(cancel_after, obtain).await);
        });
        if calls.len() >= 64 {
            calls.join_next().await;
        }
    }
    while calls.join_next().await.is_some() {}
    let report = locker.shutdown().await;
    spinning.store(false, Ordering::Relaxed);
    for spinner in spinners {
        spinner.join().unwrap();
    }
    let left: Vec<String> = server.cmd(&["KEYS", "cancel:*"]);
    assert!(
        left.is_empty(),
        "{} keys left held by cancelled calls after the shutdown ({report:?}), among them {:?}",
        left.len(),
        &left[..left.len().min(10)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_that_times_out_gives_back_what_its_late_request_took() {
    let server = RedisServer::start();
    let proxy = Proxy::in_front_of(&server);
    let locker = locker_with(&server, &proxy.url(), Duration::from_millis(300)).await;
    let contender = server.locker().await;
    proxy.latency(Duration::from_millis(250));

    let err = locker
        .obtain("job", Duration::from_secs(60), ObtainOptions::new())
        .await
        .unwrap_err();
    let LockError::Backend(backend) = &err else {
        panic!("expected a timeout, got {err:?}")
    };
    assert_eq!(backend.kind(), BackendErrorKind::Timeout, "{err}");

    // The request reached the server after the timeout and took the key; the
    // call's give-back follows it on the same connection.
    let lock = contender
        .obtain(
            "job",
            Duration::from_secs(60),
            waiting(Duration::from_secs(10)),
        )
        .await;
    assert!(
        lock.is_ok(),
        "the timed-out acquire left the key held: {:?}",
        lock.err()
    );
}

/// Set, to the server's URL, for the child process that holds the lock.
const PAUSED_ENV: &str = "LOCKMACRO_FAULTS_PAUSED_HOLDER";
/// The list both holders append to, in the order the server receives them.
const WRITES: &str = "writes";
/// How long the holder's body waits before each write: far longer than the
/// parent needs to freeze it after it got inside, so that the freeze lands
/// while the body waits on this timer, never between its check and a write.
/// (The parent reads "inside" from a pipe and signals from a runtime
/// thread: on a machine loaded to 18 on 2 cores, 5 s was once not enough.)
const BODY_TIMER: Duration = Duration::from_secs(10);

/// Kills the child on drop, so that a failing test leaves no holder behind.
struct Holder(Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(child: &Child, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: `kill` has no memory-safety preconditions; the pid is our own
    // child's, which has not been waited for.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

async fn paused_holder_process_neither_writes_nor_returns_ok_after_its_lease(program: Program) {
    // The same test, run again in a child process, is the holder.
    if let Ok(url) = env::var(PAUSED_ENV) {
        return hold_and_write(&url).await;
    }
    let server = RedisServer::start_as(program, &[]);
    let test = format!(
        "lease::{}::paused_holder_process_neither_writes_nor_returns_ok_after_its_lease",
        crate::module_of(program)
    );
    let mut holder = Holder(
        Command::new(env::current_exe().unwrap())
            .args([test.as_str(), "--exact", "--nocapture"])
            .env(PAUSED_ENV, server.url())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(holder.0.stdout.take().unwrap()).lines();
    let mut next_line = move || lines.next().and_then(Result::ok);
    let (inside, next_line) = tokio::task::spawn_blocking(move || {
        let inside = std::iter::from_fn(&mut next_line).any(|line| line == "inside");
        (inside.then(tokio::time::Instant::now), next_line)
    })
    .await
    .unwrap();
    let inside = inside.expect("the holder exited without getting inside");

    // Frozen mid-body, waiting for a timer, with no write in flight: the
    // write due when the timer fires is the first thing it would do once
    // resumed.
    signal(&holder.0, libc::SIGSTOP);
    let early: Vec<String> = server.cmd(&["LRANGE", WRITES, "0", "-1"]);
    assert!(
        early.is_empty(),
        "the holder wrote before it was frozen ({early:?}): freezing it took longer than {BODY_TIMER:?}"
    );
    let contender = server.locker().await;
    let lock = server.expect_ok(
        contender
            .obtain(
                "job",
                Duration::from_secs(30),
                waiting(Duration::from_secs(20)),
            )
            .await,
        "obtain once the frozen holder's lease ran out",
    );
    let () = server.cmd(&["RPUSH", WRITES, "second holder"]);
    // Resumed once its body's timer is due too: the timer and the lease's
    // deadline then fire together, and the body must not be polled first.
    tokio::time::sleep_until(inside + BODY_TIMER + Duration::from_millis(100)).await;
    signal(&holder.0, libc::SIGCONT);

    let result = tokio::task::spawn_blocking(move || {
        // Read to the end, so that the child never writes to a closed pipe.
        std::iter::from_fn(next_line)
            .filter_map(|line| line.strip_prefix("result: ").map(str::to_owned))
            .last()
    })
    .await
    .unwrap()
    .expect("the holder exited without a result");
    holder.0.wait().unwrap();
    let writes: Vec<String> = server.cmd(&["LRANGE", WRITES, "0", "-1"]);
    let second = writes.iter().position(|w| w == "second holder").unwrap();
    assert!(
        writes[second + 1..].is_empty(),
        "the paused holder wrote after the second holder: {writes:?}"
    );
    assert_eq!(result, "lost", "the paused holder's call returned {result}");
    server.expect_ok(lock.release().await, "release");
}

/// The child process's part: writes every [`BODY_TIMER`] while holding the lock,
/// until the parent's pause costs it the lease.
///
/// The writes block: each lands during the poll that runs it, so the list
/// shows every poll of the body, even one whose future is dropped right
/// after (an async write dropped before it was sent would hide it).
async fn hold_and_write(url: &str) {
    let locker = Locker::connect(url).await.unwrap();
    let mut writer = redis::Client::open(url).unwrap().get_connection().unwrap();

    #[distributed_lock(key = "job", ttl = "1s", locker = locker)]
    async fn job(locker: &Locker, writer: &mut redis::Connection) -> Result<(), LockError> {
        let _ = locker;
        println!("inside");
        // Bounded, in case the parent is gone: 40 s of writes.
        for i in 0..4 {
            tokio::time::sleep(BODY_TIMER).await;
            let () = redis::cmd("RPUSH")
                .arg(WRITES)
                .arg(format!("first holder {i}"))
                .query(writer)
                .unwrap();
        }
        Ok(())
    }

    let result = match job(&locker, &mut writer).await {
        Ok(()) => "ok".to_owned(),
        Err(LockError::Lost { .. }) => "lost".to_owned(),
        Err(err) => format!("error {err}"),
    };
    println!("result: {result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_survives_round_trips_of_nearly_half_its_ttl() {
    let server = RedisServer::start();
    let proxy = Proxy::in_front_of(&server);
    let locker = locker_with(&server, &proxy.url(), Duration::from_secs(5)).await;
    let ttl = Duration::from_secs(2);
    // 900 ms round trips: more than the third of the ttl between two
    // refreshes, so that each refresh is sent before the previous one's
    // reply is back.
    proxy.latency(Duration::from_millis(450));
    let lock = server.expect_ok(
        locker.obtain("job", ttl, ObtainOptions::new()).await,
        "obtain",
    );
    let token = lock.token().to_owned();
    let guard = lock.keep_alive();
    let lost = tokio::time::timeout(ttl * 4, guard.lost()).await;
    assert!(lost.is_err(), "the lease was lost under 900 ms round trips");
    let value: Option<String> = server.cmd(&["GET", "job"]);
    assert!(
        value
            .as_deref()
            .is_some_and(|value| value.starts_with(&token)),
        "the key is no longer ours: {value:?}"
    );
    proxy.heal();
    server.expect_ok(guard.release().await, "release");
}
