//! A randomized run: workers contend for one key while random faults hit the
//! lock server and the network between it and half of the workers, and the
//! witness checks every critical section.
//!
//! `LOCKMACRO_CHAOS_SECS` sets its length (default 30 s);
//! `LOCKMACRO_CHAOS_SEED` replays the fault schedule of an earlier run (the
//! seed is printed; the interleaving of the workers is up to the scheduler).

use std::env;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockmacro_runtime::{
    FencedStore, LockError, Locker, RedisBackend, RedisConfig, distributed_lock,
};
use lockmacro_testkit::RedisServer;
use lockmacro_testkit::proxy::Proxy;
use tokio::time::Instant;

use lockmacro_testkit::witness::Witness;

const WORKERS: usize = 8;
const TTL: Duration = Duration::from_secs(1);

fn seconds() -> u64 {
    env::var("LOCKMACRO_CHAOS_SECS")
        .ok()
        .and_then(|secs| secs.parse().ok())
        .unwrap_or(30)
}

fn seed() -> u64 {
    env::var("LOCKMACRO_CHAOS_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos() as u64)
        })
}

/// How many of each fault the injector applied.
#[derive(Debug, Default)]
struct Faults {
    short_pauses: usize,
    long_pauses: usize,
    latencies: usize,
    slow_latencies: usize,
    drops: usize,
    black_holes: usize,
    restarts: usize,
}

/// Hits the lock server and the proxy in front of it with one random fault
/// after another until `stop`, then leaves both healthy.
fn inject(
    mut server: RedisServer,
    proxy: &Proxy,
    seed: u64,
    witness: &Witness,
    stop: &AtomicBool,
) -> Faults {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut faults = Faults::default();
    let millis = |rng: &mut fastrand::Rng, range: std::ops::Range<u64>| {
        Duration::from_millis(rng.u64(range))
    };
    while !stop.load(Ordering::SeqCst) {
        thread::sleep(millis(&mut rng, 300..1500));
        match rng.u8(0..6) {
            0 => {
                let long = rng.bool();
                let pause = if long {
                    faults.long_pauses += 1;
                    millis(&mut rng, 1100..1800)
                } else {
                    faults.short_pauses += 1;
                    millis(&mut rng, 100..700)
                };
                server.pause();
                thread::sleep(pause);
                server.resume();
            }
            1 => {
                // Half of them slower than the response timeout.
                let delay = millis(&mut rng, 20..500);
                if delay > RESPONSE_TIMEOUT {
                    faults.slow_latencies += 1;
                } else {
                    faults.latencies += 1;
                }
                proxy.latency(delay);
                thread::sleep(millis(&mut rng, 300..1500));
                proxy.heal();
            }
            2 => {
                faults.drops += 1;
                proxy.drop_connections();
            }
            3 => {
                faults.black_holes += 1;
                proxy.black_hole();
                thread::sleep(millis(&mut rng, 500..2500));
                proxy.heal();
            }
            4 => {
                faults.restarts += 1;
                let from = Instant::now();
                server.restart();
                witness.data_lost(from, Instant::now());
            }
            // A longer quiet spell.
            _ => {}
        }
    }
    proxy.heal();
    faults
}

const RESPONSE_TIMEOUT: Duration = Duration::from_millis(250);

struct Worker {
    id: usize,
    witness: Arc<Witness>,
    store: FencedStore,
}

#[distributed_lock(
    key = "chaos",
    ttl = "1s",
    locker = locker,
    wait = "2s",
    fence,
    on_lost = "abort",
    guard = lease
)]
async fn section(
    locker: &Locker,
    worker: &Worker,
    called: Instant,
    hold: Duration,
    write_delay: Duration,
) -> Result<bool, LockError> {
    let _ = locker;
    let token = lease.fence_token().expect("fenced");
    let open = worker.witness.enter(worker.id, token, called);
    tokio::time::sleep(hold).await;
    let valid = open.write(lease);
    // Sent even when the lease ran out: the store must refuse it if a newer
    // holder has written.
    worker
        .witness
        .fenced_write(&worker.store, token, write_delay);
    Ok(valid)
}

#[tokio::test]
async fn random_faults_never_break_exclusion_or_fencing() {
    let secs = seconds();
    let seed = seed();
    println!(
        "chaos: seed {seed} (LOCKMACRO_CHAOS_SEED), {secs} s (LOCKMACRO_CHAOS_SECS), {WORKERS} workers, ttl {TTL:?}"
    );
    let server = RedisServer::start();
    let resource = RedisServer::start();
    let proxy = Proxy::in_front_of(&server);
    let store = resource.expect_ok(FencedStore::connect(&resource.url()).await, "connect");
    let witness = Arc::new(Witness::new(TTL));
    let config = RedisConfig::default()
        .connect_timeout(RESPONSE_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT);

    let mut lockers = Vec::new();
    // Half the workers reach the server through the proxy, half directly:
    // a network fault cuts off the first half only, as a partition would,
    // while the others go on taking the lock.
    for id in 0..WORKERS {
        let url = if id % 2 == 0 {
            proxy.url()
        } else {
            server.url()
        };
        let backend = server.expect_ok(
            RedisBackend::connect_with(&url, config.clone()).await,
            "connect",
        );
        lockers.push(Locker::new(backend));
    }

    let end = Instant::now() + Duration::from_secs(secs);
    let stop = Arc::new(AtomicBool::new(false));
    let injector = thread::spawn({
        let (witness, stop) = (witness.clone(), stop.clone());
        move || {
            let faults = inject(server, &proxy, seed, &witness, &stop);
            drop(proxy);
            faults
        }
    });

    let mut workers = tokio::task::JoinSet::new();
    for (id, locker) in lockers.into_iter().enumerate() {
        let worker = Worker {
            id,
            witness: witness.clone(),
            store: store.clone(),
        };
        let mut rng = fastrand::Rng::with_seed(seed.wrapping_add(id as u64 + 1));
        workers.spawn(async move {
            let mut outcomes = Outcomes::default();
            while Instant::now() < end {
                // Most sections are short; one in six outlasts the ttl, kept
                // by the watchdog, so that faults catch holders inside.
                let hold = if rng.u8(0..6) == 0 {
                    Duration::from_millis(rng.u64(300..3000))
                } else {
                    Duration::from_millis(rng.u64(0..30))
                };
                // A quarter of the writes are held up, up to one and a half
                // ttls: some arrive after a newer holder has written.
                let write_delay = if rng.u8(0..4) == 0 {
                    Duration::from_millis(rng.u64(0..1500))
                } else {
                    Duration::ZERO
                };
                match section(&locker, &worker, Instant::now(), hold, write_delay).await {
                    Ok(true) => outcomes.done += 1,
                    Ok(false) => outcomes.expired += 1,
                    Err(LockError::NotObtained { .. }) => outcomes.busy += 1,
                    Err(LockError::Lost { .. }) => outcomes.lost += 1,
                    Err(LockError::Backend(_)) => {
                        outcomes.backend += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(err) => panic!("worker {id}: unexpected error: {err}"),
                }
                // Time between jobs: without it, the worker that just
                // released takes the key again before any waiter wakes.
                tokio::time::sleep(Duration::from_millis(rng.u64(0..20))).await;
            }
            outcomes
        });
    }
    let mut outcomes = Outcomes::default();
    let deadline = end + Duration::from_secs(30);
    while let Some(done) = tokio::time::timeout_at(deadline, workers.join_next())
        .await
        .expect("workers still running 30 s after the end of the run")
    {
        outcomes.add(&done.unwrap());
    }
    stop.store(true, Ordering::SeqCst);
    let faults = tokio::task::spawn_blocking(move || injector.join())
        .await
        .unwrap()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));

    let verdict = witness.verdict(&store).await;
    println!("faults                 {faults:?}");
    println!(
        "calls                  {} completed, {} ended past their deadline, {} lost their lease, {} found the key busy, {} failed on the backend",
        outcomes.done, outcomes.expired, outcomes.lost, outcomes.busy, outcomes.backend
    );
    println!("{verdict}");

    assert!(verdict.increments > 0, "no critical section completed");
    assert_eq!(
        verdict.overlaps, 0,
        "seed {seed}: valid critical sections overlapped"
    );
    assert_eq!(
        verdict.tokens_out_of_order, 0,
        "seed {seed}: a fencing token did not increase"
    );
    assert_eq!(
        verdict.stale_writes_accepted, 0,
        "seed {seed}: the resource accepted a stale write"
    );
    assert!(
        verdict.lost_updates <= verdict.overlaps_after_data_loss as u64,
        "seed {seed}: updates were lost without an overlap to explain them"
    );
    assert_eq!(
        verdict.applied,
        Some(verdict.newest_confirmed),
        "seed {seed}: the resource does not hold the newest accepted token"
    );
}

#[derive(Debug, Default)]
struct Outcomes {
    done: usize,
    expired: usize,
    lost: usize,
    busy: usize,
    backend: usize,
}

impl Outcomes {
    fn add(&mut self, other: &Outcomes) {
        self.done += other.done;
        self.expired += other.expired;
        self.lost += other.lost;
        self.busy += other.busy;
        self.backend += other.backend;
    }
}
