//! Semaphores and read-write locks under faults: holders killed (SIGKILL)
//! give their permits back after their ttl, never sooner; with the server
//! frozen (SIGSTOP) past the ttl, a witness that does not trust the lock
//! never sees more holders acting at once than there are permits, nor a
//! writer beside anyone (on Redis and on Valkey).

use std::env;
use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockmacro_runtime::{HoldOptions, LockGuard, Locker, ObtainOptions, RetryStrategy};
use lockmacro_testkit::RedisServer;
use lockmacro_testkit::program::Program;
use tokio::time::Instant;

use crate::process::rerun_as_child;

/// Set, to the server's URL, for the child processes that hold permits.
const HOLDER_ENV: &str = "LOCKMACRO_FAULTS_PERMIT_HOLDER";
const TTL: Duration = Duration::from_secs(1);
const PERMITS: u32 = 2;

/// The server's clock, in ms, as the permit script reads it.
fn server_ms(server: &RedisServer) -> u64 {
    let (seconds, micros): (u64, u64) = server.cmd(&["TIME"]);
    seconds * 1000 + micros / 1000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holders_give_their_permits_back_after_their_ttl_never_sooner() {
    // The same test, run again in child processes, are the holders.
    if let Ok(url) = env::var(HOLDER_ENV) {
        let locker = Locker::connect(&url).await.expect("connect");
        let lock = locker
            .obtain("api", TTL, ObtainOptions::new().permits(PERMITS))
            .await
            .expect("the holder takes a permit");
        let _guard = lock.keep_alive();
        println!("inside");
        std::future::pending::<()>().await;
    }
    let server = RedisServer::start();
    let mut holders = Vec::new();
    for _ in 0..PERMITS {
        let mut holder = rerun_as_child(
            "permits::killed_holders_give_their_permits_back_after_their_ttl_never_sooner",
            HOLDER_ENV,
            &server.url(),
        );
        let stdout = holder.0.stdout.take().unwrap();
        let inside = tokio::task::spawn_blocking(move || {
            BufReader::new(stdout)
                .lines()
                .any(|line| line.is_ok_and(|line| line == "inside"))
        });
        let inside = tokio::time::timeout(Duration::from_secs(20), inside)
            .await
            .expect("a holder did not get inside within 20 s")
            .unwrap();
        assert!(inside, "a holder exited without getting inside");
        holders.push(holder);
    }

    let contender = server.locker().await;
    let refused = contender
        .obtain("api", TTL, ObtainOptions::new().permits(PERMITS))
        .await;
    assert!(
        refused.is_err_and(|err| err.is_not_obtained()),
        "a third holder got in beside two living ones"
    );
    for holder in &mut holders {
        holder.0.kill().unwrap();
        holder.0.wait().unwrap();
    }
    // The permits end no earlier than the scores the server has for them;
    // a refresh still in flight could only move them later. The key's kind
    // (`kind:2`, scored +inf) is no permit.
    let scores: Vec<(String, f64)> = server.cmd(&["ZRANGE", "api", "0", "-1", "WITHSCORES"]);
    let scores: Vec<(String, f64)> = scores
        .into_iter()
        .filter(|(member, _)| !member.starts_with("kind:"))
        .collect();
    assert_eq!(scores.len(), PERMITS as usize, "permits held: {scores:?}");
    let first_expiry = scores.iter().map(|(_, score)| *score as u64).min().unwrap();
    let waiting = ObtainOptions::new()
        .permits(PERMITS)
        .retry(RetryStrategy::linear(Duration::from_millis(10)).deadline(Duration::from_secs(10)));
    let lock = server.expect_ok(
        contender.obtain("api", TTL, waiting).await,
        "a permit after the holders died",
    );
    let obtained_ms = server_ms(&server);
    assert!(
        obtained_ms >= first_expiry,
        "a permit came back at {obtained_ms} ms, before the first dead holder's expired at {first_expiry} ms"
    );
    assert!(
        obtained_ms <= first_expiry + 5_000,
        "a dead holder's permit came back {} ms after it expired",
        obtained_ms - first_expiry
    );
    server.expect_ok(lock.release().await, "release");
}

/// One body's time holding a permit, on this process's clock.
#[derive(Debug, Clone, Copy)]
struct Section {
    start: Instant,
    /// When the body stopped: it returned, or was dropped on its deadline.
    end: Instant,
    /// The lease's local deadline when the body stopped.
    deadline: Instant,
}

/// Records a section when the body ends or is dropped.
struct Recording {
    start: Instant,
    guard: LockGuard,
    sections: Arc<Mutex<Vec<Section>>>,
}

impl Drop for Recording {
    fn drop(&mut self) {
        let section = Section {
            start: self.start,
            end: Instant::now(),
            deadline: self.guard.deadline(),
        };
        self.sections.lock().unwrap().push(section);
    }
}

/// The most sections that overlap at any instant, each counted from its
/// start to when it stopped or its deadline, whichever came first: past its
/// deadline a body promises nothing (a fenced write is what stops it then).
fn most_at_once(sections: &[Section]) -> usize {
    let mut events: Vec<(Instant, i32)> = Vec::new();
    for section in sections {
        events.push((section.start, 1));
        events.push((section.end.min(section.deadline), -1));
    }
    // Ends before starts at the same instant.
    events.sort_by_key(|&(at, change)| (at, change));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, change) in events {
        now += change;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// Sections of one kind of holder.
type Sections = Arc<Mutex<Vec<Section>>>;

/// Workers that each hold `key` with their options, in turn, for bodies
/// longer than the ttl (the watchdog keeps them), while the server is frozen
/// past the ttl once and then resumed. Returns how many bodies lost their
/// lease, and when the server resumed.
async fn freeze_while_held(
    server: &RedisServer,
    key: &'static str,
    workers: Vec<(HoldOptions, Sections)>,
    after_resume: Duration,
) -> (usize, Instant) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let entered = Arc::new(tokio::sync::Notify::new());
    let mut running = Vec::new();
    for (options, sections) in workers {
        let locker = server.locker().await;
        let (stop, entered) = (stop.clone(), entered.clone());
        running.push(tokio::spawn(async move {
            let mut lost = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let (sections, entered) = (sections.clone(), entered.clone());
                let outcome = locker
                    .hold([key], options.clone(), move |guard| async move {
                        entered.notify_one();
                        let _recording = Recording {
                            start: Instant::now(),
                            guard,
                            sections,
                        };
                        tokio::time::sleep(TTL * 3 / 2).await;
                    })
                    .await;
                match outcome {
                    Ok(()) => {}
                    Err(lockmacro_runtime::LockError::Lost { .. }) => lost += 1,
                    // The server frozen: the obtain timed out or failed.
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
            lost
        }));
    }
    // Frozen while a body holds its share (each body outlasts the ttl), so
    // that the freeze costs at least that holder its lease.
    tokio::time::timeout(Duration::from_secs(20), entered.notified())
        .await
        .expect("no holder got in before the freeze");
    server.pause();
    tokio::time::sleep(TTL + TTL / 2).await;
    server.resume();
    let resumed = Instant::now();
    tokio::time::sleep(after_resume).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut lost = 0;
    for worker in running {
        lost += tokio::time::timeout(Duration::from_secs(30), worker)
            .await
            .expect("a worker hung")
            .expect("worker");
    }
    assert!(
        lost >= 1,
        "no holder lost its share to the frozen server: the fault did not happen"
    );
    (lost, resumed)
}

fn holding(options: HoldOptions) -> HoldOptions {
    options.wait(Duration::from_secs(10))
}

on_each_program! {
    runtime: (flavor = "multi_thread", worker_threads = 4),
    cases: [
        frozen_server_never_lets_more_holders_act_than_permits,
        frozen_server_never_lets_a_writer_act_beside_anyone,
    ],
}

async fn frozen_server_never_lets_more_holders_act_than_permits(program: Program) {
    let server = RedisServer::start_as(program, &[]);
    let sections: Sections = Arc::default();
    let workers = (0..5)
        .map(|_| {
            (
                holding(HoldOptions::new(TTL).permits(PERMITS)),
                sections.clone(),
            )
        })
        .collect();
    let (lost, resumed) = freeze_while_held(&server, "api", workers, TTL * 2).await;
    let sections = sections.lock().unwrap().clone();
    assert!(
        sections.iter().any(|section| section.start > resumed),
        "nobody held a permit after the server came back"
    );
    let most = most_at_once(&sections);
    assert!(
        most <= PERMITS as usize,
        "{most} holders acted at once with {PERMITS} permits ({} sections, {lost} lost)",
        sections.len()
    );
}

/// Readers and writers while the server is frozen past the ttl: a witness
/// that counts each section until it ended or its deadline never sees a
/// writer beside anyone.
async fn frozen_server_never_lets_a_writer_act_beside_anyone(program: Program) {
    let server = RedisServer::start_as(program, &[]);
    let (reads, writes): (Sections, Sections) = (Arc::default(), Arc::default());
    let workers = (0..5)
        .map(|worker| {
            if worker % 2 == 0 {
                (holding(HoldOptions::new(TTL).write()), writes.clone())
            } else {
                (holding(HoldOptions::new(TTL).read()), reads.clone())
            }
        })
        .collect();
    freeze_while_held(&server, "catalog", workers, TTL * 3).await;
    let reads = reads.lock().unwrap().clone();
    let writes = writes.lock().unwrap().clone();
    assert!(!writes.is_empty(), "no writer got in");
    let until = |section: &Section| section.end.min(section.deadline);
    for write in &writes {
        let beside = reads
            .iter()
            .chain(writes.iter().filter(|other| other.start != write.start))
            .find(|other| other.start < until(write) && write.start < until(other));
        assert!(
            beside.is_none(),
            "a writer acted beside another holder: {write:?} and {beside:?}"
        );
    }
}
