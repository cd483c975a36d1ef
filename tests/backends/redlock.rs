//! `RedlockBackend` against independent `redis-server` masters, some of them
//! killed, frozen or restarted.

use lockmacro_testkit::redis::ClosedPort;
use std::time::Duration;

use lockmacro_runtime::{
    BackendErrorKind, LockError, Locker, ObtainOptions, RedisConfig, RedlockBackend, RetryStrategy,
};
use lockmacro_testkit::RedisServer;
use lockmacro_testkit::proxy::Proxy;
use tokio::time::Instant;

use lockmacro_testkit::witness::counter as witness;

const LONG: Duration = Duration::from_secs(30);

fn urls(masters: &[RedisServer]) -> Vec<String> {
    masters.iter().map(RedisServer::url).collect()
}

#[track_caller]
fn ok<T>(masters: &[RedisServer], result: Result<T, LockError>, what: &str) -> T {
    result.unwrap_or_else(|err| RedisServer::fail_all(masters, format_args!("{what}: {err}")))
}

/// A locker whose calls to a frozen master give up soon.
async fn impatient_locker(masters: &[RedisServer]) -> Locker {
    let config = RedisConfig::default()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500));
    let backend = RedlockBackend::connect_with(urls(masters), config).await;
    Locker::new(ok(masters, backend, "connect"))
}

/// Which masters hold `key` with a value that starts with `token`.
fn holders(masters: &[RedisServer], key: &str, token: &str) -> Vec<bool> {
    masters
        .iter()
        .map(|master| {
            master
                .cmd::<Option<String>>(&["GET", key])
                .is_some_and(|value| value.starts_with(token))
        })
        .collect()
}

/// Waits up to 5 s for `done`, for what follows a call that returned once a
/// majority answered.
async fn eventually(masters: &[RedisServer], what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        if Instant::now() > deadline {
            RedisServer::fail_all(masters, format_args!("not within 5 s: {what}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A URL where nothing listens, while the port it holds lives.
fn closed_url() -> (String, ClosedPort) {
    let closed = ClosedPort::bind();
    (format!("redis://127.0.0.1:{}/", closed.port()), closed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_exclusion_witness_loses_no_update() {
    let masters = RedisServer::start_many(5);
    let counter = RedisServer::start();
    let mut lockers = Vec::new();
    for _ in 0..witness::TASKS {
        lockers.push(RedisServer::redlock_locker(&masters).await);
    }
    let total = witness::increments(lockers, &counter, Duration::from_secs(10)).await;
    assert_eq!(total, (witness::TASKS * witness::ROUNDS) as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_is_the_same_plain_key_on_every_master() {
    let masters = RedisServer::start_many(3);
    let locker = RedisServer::redlock_locker(&masters).await;
    let lock = ok(
        &masters,
        locker
            .obtain("job", LONG, ObtainOptions::new().metadata("host-a"))
            .await,
        "obtain",
    );
    // The call returns once a majority granted it.
    let granted: Vec<&RedisServer> = masters
        .iter()
        .filter(|master| master.cmd::<bool>(&["EXISTS", "job"]))
        .collect();
    assert!(granted.len() >= 2, "held on {} of 3 masters", granted.len());
    for master in granted {
        let value: String = master.cmd(&["GET", "job"]);
        assert_eq!(value, format!("{}host-a", lock.token()));
        let pttl: i64 = master.cmd(&["PTTL", "job"]);
        assert!(pttl > 20_000 && pttl <= 30_000, "{pttl}");
    }
    ok(&masters, lock.release().await, "release");
    // Likewise the release; the last master follows.
    eventually(&masters, "the key is gone everywhere", || {
        holders(&masters, "job", "") == [false; 3]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_with_two_of_five_masters_down() {
    let mut masters = RedisServer::start_many(5);
    let (a, b) = (
        RedisServer::redlock_locker(&masters).await,
        RedisServer::redlock_locker(&masters).await,
    );
    masters[1].stop();
    masters[3].stop();
    let up = [0, 2, 4];

    let lock = ok(
        &masters,
        a.obtain("job", LONG, ObtainOptions::new().fence()).await,
        "obtain with 3 of 5",
    );
    for &index in &up {
        let value: Option<String> = masters[index].cmd(&["GET", "job"]);
        assert!(value.is_some_and(|value| value.starts_with(lock.token())));
        let counter: Option<u64> = masters[index].cmd(&["GET", "{job}:fence"]);
        assert_eq!(
            counter,
            lock.fence_token(),
            "written back to master {index}"
        );
    }
    let busy = b
        .obtain("job", LONG, ObtainOptions::new())
        .await
        .unwrap_err();
    assert!(busy.is_not_obtained(), "{busy:?}");
    ok(&masters, lock.refresh(LONG).await, "refresh with 3 of 5");
    let left = ok(&masters, lock.ttl().await, "ttl with 3 of 5");
    assert!(left > Duration::from_secs(20), "{left:?}");
    let first = lock.fence_token().expect("fenced");
    ok(&masters, lock.release().await, "release with 3 of 5");
    let next = ok(
        &masters,
        b.obtain("job", LONG, ObtainOptions::new().fence()).await,
        "obtain after release",
    );
    assert_eq!(next.fence_token(), Some(first + 1));

    // Connecting needs a majority too, not every master.
    let late = ok(
        &masters,
        Locker::redlock(urls(&masters)).await,
        "connect with 3 of 5",
    );
    let busy = late
        .obtain("job", LONG, ObtainOptions::new())
        .await
        .unwrap_err();
    assert!(busy.is_not_obtained(), "{busy:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_with_three_of_five_masters_down() {
    let mut masters = RedisServer::start_many(5);
    let locker = RedisServer::redlock_locker(&masters).await;
    for index in [0, 2, 4] {
        masters[index].stop();
    }
    let start = Instant::now();
    let err = locker
        .obtain("job", LONG, ObtainOptions::new())
        .await
        .unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let LockError::Backend(backend) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(backend.kind(), BackendErrorKind::Unreachable, "{err}");
    let message = err.to_string();
    assert!(
        message.contains("2 of 5 masters answered, a majority (3) is needed"),
        "{message}"
    );
    for index in [0, 2, 4] {
        assert!(
            message.contains(&masters[index].port().to_string()),
            "{message}"
        );
    }
    // The two that granted were undone.
    for index in [1, 3] {
        assert!(!masters[index].cmd::<bool>(&["EXISTS", "job"]));
    }

    let start = Instant::now();
    let err = Locker::redlock(urls(&masters)).await.unwrap_err();
    assert!(matches!(err, LockError::Backend(_)), "{err:?}");
    assert!(err.to_string().contains("2 of 5 masters answered"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

/// One critical section of [`timed_increments`], on this process's monotonic
/// clock.
#[derive(Debug, Clone, Copy)]
struct Section {
    task: usize,
    round: usize,
    /// Just after `obtain` returned.
    start: Instant,
    /// Just before the release was sent.
    end: Instant,
    /// [`Lock::deadline`](lockmacro_runtime::Lock::deadline): the lease is
    /// valid until then, counted from when the request was sent.
    deadline: Instant,
}

/// The witness of `witness::increments`, recording every section instead of
/// failing on the first overlap: `ROUNDS` increments (GET, yield, SET) of a
/// counter in a server of its own, per locker, each under the lock
/// `counter-lock` for `ttl`. Returns the counter and the sections.
async fn timed_increments(
    lockers: Vec<Locker>,
    counter: &RedisServer,
    ttl: Duration,
) -> (i64, Vec<Section>) {
    let mut tasks = Vec::new();
    for (task, locker) in lockers.into_iter().enumerate() {
        let mut conn = counter.witness_connection().await;
        tasks.push(tokio::spawn(async move {
            let retry =
                RetryStrategy::exponential(Duration::from_micros(200), Duration::from_millis(5))
                    .deadline(Duration::from_secs(60));
            let mut sections = Vec::with_capacity(witness::ROUNDS);
            for round in 0..witness::ROUNDS {
                // A backend error (no majority answered in time while a
                // master is frozen) is retried: the witness checks safety,
                // not availability.
                let give_up = Instant::now() + Duration::from_secs(60);
                let lock = loop {
                    let options = ObtainOptions::new().retry(retry.clone());
                    match locker.obtain("counter-lock", ttl, options).await {
                        Ok(lock) => break lock,
                        Err(LockError::Backend(_)) if Instant::now() < give_up => {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        Err(err) => panic!("task {task}, round {round}: obtain: {err}"),
                    }
                };
                let start = Instant::now();
                witness::increment(&mut conn).await;
                sections.push(Section {
                    task,
                    round,
                    start,
                    end: Instant::now(),
                    deadline: lock.deadline(),
                });
                // A release that fails (a master frozen mid-run) leaves the
                // key to expire, which is allowed.
                let _ = lock.release().await;
            }
            sections
        }));
    }
    let mut sections = Vec::new();
    for task in tasks {
        match task.await {
            Ok(done) => sections.extend(done),
            Err(err) => std::panic::resume_unwind(err.into_panic()),
        }
    }
    let total = counter.cmd::<Option<i64>>(&["GET", "counter"]).unwrap_or(0);
    (total, sections)
}

/// Pairs of sections that overlap, the one that started first first.
fn overlaps(sections: &mut [Section]) -> Vec<(Section, Section)> {
    sections.sort_by_key(|section| section.start);
    let mut pairs = Vec::new();
    for (i, first) in sections.iter().enumerate() {
        for second in sections[i + 1..]
            .iter()
            .take_while(|second| second.start < first.end)
        {
            pairs.push((*first, *second));
        }
    }
    pairs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_paused_and_resumed_mid_run_never_yields_two_holders() {
    let masters = RedisServer::start_many(3);
    let counter = RedisServer::start();
    let mut lockers = Vec::new();
    for _ in 0..witness::TASKS {
        lockers.push(impatient_locker(&masters).await);
    }
    // With one of three frozen, every grant needs both others; a frozen
    // master wakes up with its old keys, longer than their ttl later.
    let ttl = Duration::from_millis(500);
    let faults = async {
        for (index, frozen) in [(0, 300), (1, 1500), (2, 300), (0, 1500)] {
            tokio::time::sleep(Duration::from_millis(200)).await;
            masters[index].pause();
            tokio::time::sleep(Duration::from_millis(frozen)).await;
            masters[index].resume();
        }
    };
    let ((total, mut sections), ()) =
        tokio::join!(timed_increments(lockers, &counter, ttl), faults);

    // A section can outlast its lease when this process stalls (a loaded
    // machine, a long pause of the runtime), and the next holder may then
    // start while it still runs: a lease is not a mutex. What the lock
    // promises is that nobody starts while another holder's lease is valid
    // by its own deadline, the moment this process stops trusting it.
    let overlapping = overlaps(&mut sections);
    for (first, second) in &overlapping {
        assert!(
            second.start >= first.deadline,
            "task {} (round {}) started {:?} before the lease of task {} (round {}) ran \
             out, while that section ran; {first:?}, {second:?}",
            second.task,
            second.round,
            first.deadline - second.start,
            first.task,
            first.round,
        );
    }
    let expected = (witness::TASKS * witness::ROUNDS) as i64;
    assert_eq!(sections.len() as i64, expected);
    // Every lost increment needs a section that overlapped it.
    assert!(
        total <= expected && total + overlapping.len() as i64 >= expected,
        "counter {total} of {expected}, with {} overlapping pairs",
        overlapping.len()
    );
    let overran = sections
        .iter()
        .filter(|section| section.end > section.deadline)
        .count();
    eprintln!(
        "{} sections, {overran} ran past their deadline, {} overlapping pairs, counter {total}",
        sections.len(),
        overlapping.len(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_to_every_master_at_once() {
    let masters = RedisServer::start_many(3);
    let proxies: Vec<Proxy> = masters.iter().map(Proxy::in_front_of).collect();
    let locker = ok(
        &masters,
        Locker::redlock(proxies.iter().map(Proxy::url)).await,
        "connect through the proxies",
    );
    // Loads the scripts, so that each master needs one request.
    let warm = ok(
        &masters,
        locker.obtain("warm", LONG, ObtainOptions::new()).await,
        "warm up",
    );
    ok(&masters, warm.release().await, "warm up");
    // Every request and every reply is held this long on its way, so a round
    // trip to any master takes twice as long; a majority asked one master
    // after the other would take two round trips.
    let delay = Duration::from_millis(150);
    for proxy in &proxies {
        proxy.latency(delay);
    }
    let round_trip = delay * 2;
    let start = Instant::now();
    let lock = locker.obtain("job", LONG, ObtainOptions::new()).await;
    let took = start.elapsed();
    proxies.iter().for_each(Proxy::heal);
    let lock = ok(&masters, lock, "obtain");
    assert!(
        took >= round_trip,
        "obtain took {took:?}: the proxies did not delay it"
    );
    assert!(
        took < round_trip * 2,
        "obtain took {took:?}: the masters were asked one by one"
    );
    // The call returns with a majority; the last grant follows.
    eventually(&masters, "every master granted the lock", || {
        holders(&masters, "job", lock.token()) == [true; 3]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_frozen_masters_of_five_do_not_slow_down_obtain() {
    let masters = RedisServer::start_many(5);
    let locker = RedisServer::redlock_locker(&masters).await;
    masters[0].pause();
    masters[4].pause();
    // The per-master timeout for a 30 s ttl is 3 s; a majority answers at once.
    let start = Instant::now();
    let lock = locker.obtain("job", LONG, ObtainOptions::new()).await;
    let took = start.elapsed();
    masters[0].resume();
    masters[4].resume();
    let lock = ok(&masters, lock, "obtain");
    assert!(took < Duration::from_secs(1), "obtain took {took:?}");
    ok(&masters, lock.release().await, "release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_that_answers_after_the_validity_is_no_lock() {
    let masters = RedisServer::start_many(3);
    let proxies: Vec<Proxy> = masters.iter().map(Proxy::in_front_of).collect();
    let locker = ok(
        &masters,
        Locker::redlock(proxies.iter().map(Proxy::url)).await,
        "connect through the proxies",
    );
    // Loads the scripts, so that each master needs one request.
    let warm = ok(
        &masters,
        locker.obtain("warm", LONG, ObtainOptions::new()).await,
        "warm up",
    );
    ok(&masters, warm.release().await, "warm up");
    // 20 ms round trips, within the per-master timeout (at least 50 ms), to
    // take a 10 ms lease: every master grants it, but no answer can come
    // while the lease is still valid.
    for proxy in &proxies {
        proxy.latency(Duration::from_millis(10));
    }
    let err = locker
        .obtain("job", Duration::from_millis(10), ObtainOptions::new())
        .await
        .unwrap_err();
    proxies.iter().for_each(Proxy::heal);
    assert!(err.is_not_obtained(), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_tokens_increase_when_majorities_differ() {
    let mut masters = RedisServer::start_many(3);
    let locker = RedisServer::redlock_locker(&masters).await;
    let fenced = || ObtainOptions::new().fence();
    // Counters drift apart when a master grants an attempt that fails
    // elsewhere; made here by hand, far above the clock-seeded counters the
    // others start with.
    const AHEAD: u64 = 5_000_000_000_000_000;
    let () = masters[0].cmd(&["SET", "{job}:fence", &AHEAD.to_string()]);
    let counter = |master: &RedisServer| master.cmd::<Option<u64>>(&["GET", "{job}:fence"]);

    masters[1].stop();
    let first = ok(
        &masters,
        locker.obtain("job", LONG, fenced()).await,
        "first",
    );
    assert_eq!(
        first.fence_token(),
        Some(AHEAD + 1),
        "the largest counter wins"
    );
    ok(&masters, first.release().await, "release first");
    // Written back to every master that granted it.
    assert_eq!(counter(&masters[2]), Some(AHEAD + 1));

    // The next majority leaves out the master that had the largest counter,
    // and still counts past it.
    masters[0].stop();
    masters[1].restart();
    let second = ok(
        &masters,
        locker.obtain("job", LONG, fenced()).await,
        "second",
    );
    assert_eq!(second.fence_token(), Some(AHEAD + 2));
    ok(&masters, second.release().await, "release second");

    // A master that forgot its counter (restarted without persistence)
    // starts again from its clock, below AHEAD here: both others carry the
    // last token, and the largest wins.
    masters[0].restart();
    let third = ok(
        &masters,
        locker.obtain("job", LONG, fenced()).await,
        "third",
    );
    assert_eq!(third.fence_token(), Some(AHEAD + 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_down_at_connect_joins_when_it_comes_up() {
    let mut masters = RedisServer::start_many(3);
    masters[2].stop();
    let locker = RedisServer::redlock_locker(&masters).await;
    let lock = ok(
        &masters,
        locker.obtain("job", LONG, ObtainOptions::new()).await,
        "obtain with 2 of 3",
    );
    assert_eq!(holders(&masters[..2], "job", lock.token()), [true; 2]);
    ok(&masters, lock.release().await, "release");

    masters[2].restart();
    // Tried again at most once a second, in the course of later calls.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lock = ok(
            &masters,
            locker.obtain("job", LONG, ObtainOptions::new()).await,
            "obtain",
        );
        let joined = holders(&masters, "job", lock.token())[2];
        ok(&masters, lock.release().await, "release");
        if joined {
            break;
        }
        if Instant::now() > deadline {
            RedisServer::fail_all(&masters, "the restarted master never joined");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn fewer_than_a_majority_at_connect_is_an_error_in_bounded_time() {
    let master = RedisServer::start();
    let ((dead_a, _a), (dead_b, _b)) = (closed_url(), closed_url());
    let start = Instant::now();
    let err = Locker::redlock([master.url(), dead_a.clone(), dead_b.clone()])
        .await
        .unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let LockError::Backend(backend) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(backend.kind(), BackendErrorKind::Unreachable, "{err}");
    let message = err.to_string();
    for dead in [&dead_a, &dead_b] {
        let addr = dead.trim_start_matches("redis://").trim_end_matches('/');
        assert!(message.contains(addr), "{addr} missing from: {message}");
    }
    assert!(
        message.contains("1 of 3 masters answered, a majority (2) is needed"),
        "{message}"
    );
}

#[tokio::test]
async fn bad_missing_or_repeated_urls_are_refused() {
    let master = RedisServer::start();
    let none: [&str; 0] = [];
    for (urls, expected) in [
        (vec![master.url(), master.url()], "given twice"),
        (vec!["not a url".to_owned()], ""),
        (
            none.iter().map(ToString::to_string).collect(),
            "no masters given",
        ),
    ] {
        let err = Locker::redlock(&urls).await.unwrap_err();
        assert!(
            matches!(&err, LockError::InvalidUrl { reason, .. } if reason.contains(expected)),
            "{urls:?}: {err:?}"
        );
    }
}
