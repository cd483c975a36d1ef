//! What each simulated client does: a seeded sequence of obtains of a few
//! keys, as locks, fair locks, permits, reads and writes, each held for a
//! while, refreshed with a ttl of its own, written to the fenced resource,
//! and released, dropped (cancelled) or let lapse. What the client
//! believed is recorded as it happens.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockmacro_history::{FencedWrite, Held, History, Hold};
use lockmacro_runtime::{
    FencedStore, Lock, LockError, LockGuard, Locker, ObtainOptions, RetryStrategy,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

/// The keys the clients contend on, with how each is held.
pub const KEYS: [(&str, Kind); 5] = [
    ("job", Kind::Lock),
    ("queue", Kind::Fair),
    ("pool", Kind::Permits(2)),
    ("table", Kind::ReadWrite),
    ("mixed", Kind::Any),
];

/// The ttls a client picks from: short enough that leases lapse, refreshes
/// and hand-offs happen within a run.
const TTLS_MS: [u64; 3] = [200, 500, 1_500];

#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Lock,
    Fair,
    Permits(u32),
    ReadWrite,
    /// Asked for as any of the others: refused as the wrong kind while
    /// held as another, and taken as one kind after another's lease lapsed.
    Any,
}

/// The history every client of a run appends to, on the simulation's clock.
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<History>>);

impl Recorder {
    pub fn new(ttl: Duration) -> Self {
        Recorder(Arc::new(Mutex::new(History::new(ttl))))
    }

    pub fn hold(&self, hold: Hold) {
        self.0.lock().unwrap().holds.push(hold);
    }

    pub fn write(&self, write: FencedWrite) {
        self.0.lock().unwrap().writes.push(write);
    }

    pub fn data_lost(&self, from: Duration, to: Duration) {
        self.0.lock().unwrap().data_loss.push((from, to));
    }

    pub fn held_forever(&self, key: &str) {
        self.0.lock().unwrap().held_forever.push(key.to_owned());
    }

    pub fn history(&self) -> History {
        self.0.lock().unwrap().clone()
    }
}

/// Now on the simulation's clock, which every host shares.
pub fn now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

/// `at`, a time on this host's tokio clock, on the simulation's clock.
fn on_sim_clock(at: Instant) -> Duration {
    let here = Instant::now();
    if at >= here {
        now() + (at - here)
    } else {
        now().saturating_sub(here - at)
    }
}

/// Runs client `id`'s `operations` on `keys`, seeded with `seed`, on
/// `locker`.
pub async fn run(
    id: usize,
    seed: u64,
    keys: &[(&'static str, Kind)],
    operations: usize,
    locker: Locker,
    store: FencedStore,
    recorder: Recorder,
) {
    let mut rng = StdRng::seed_from_u64(seed ^ (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    for _ in 0..operations {
        let (key, kind) = keys[rng.random_range(0..keys.len())];
        let ttl = Duration::from_millis(TTLS_MS[rng.random_range(0..TTLS_MS.len())]);
        let (options, held) = options(kind, &mut rng);
        if rng.random_bool(0.5) {
            // On the next 50 ms of the simulation's clock, as the other
            // clients that do the same: their attempts race.
            let into = now().as_millis() as u64 % 50;
            tokio::time::sleep(Duration::from_millis(50 - into)).await;
        }
        let called = now();
        let attempt = locker.obtain(key, ttl, options);
        // Some attempts are cancelled part-way: dropped, as a timeout does.
        let lock = if rng.random_bool(0.1) {
            let patience = Duration::from_millis(rng.random_range(0..300));
            match tokio::time::timeout(patience, attempt).await {
                Ok(result) => result,
                Err(_) => continue,
            }
        } else {
            attempt.await
        };
        let Ok(lock) = lock else {
            continue;
        };
        // Half the holds are kept alive by the watchdog, whose refreshes
        // then overlap the client's own.
        let lock = if rng.random_bool(0.5) {
            Holding::Guarded(lock.keep_alive())
        } else {
            Holding::Plain(lock)
        };
        let start = now();
        let end = hold(id, key, &lock, ttl, &mut rng, &store, &recorder).await;
        let fence = lock.fence_token();
        let end = end.min(on_sim_clock(lock.deadline()));
        recorder.hold(Hold {
            client: id,
            key: key.to_owned(),
            held,
            called,
            start,
            end,
            fence,
            counts: true,
        });
        match rng.random_range(0..10) {
            // Dropped: the lock's drop releases it in the background.
            0 => drop(lock),
            // Let lapse: never released, as by a holder that died (a
            // guard's watchdog stops at the lease's local deadline).
            1 | 2 => lock.forget(),
            _ => {
                let _ = lock.release().await;
            }
        }
        let pause = Duration::from_millis(rng.random_range(0..50));
        tokio::time::sleep(pause).await;
    }
}

fn options(kind: Kind, rng: &mut StdRng) -> (ObtainOptions, Held) {
    let kind = match kind {
        Kind::Any => [
            Kind::Lock,
            Kind::Permits(2),
            Kind::Permits(2),
            Kind::ReadWrite,
        ][rng.random_range(0..4)],
        kind => kind,
    };
    let waits = rng.random_bool(0.5);
    let mut options = ObtainOptions::new().fence();
    if waits {
        // No jitter: a seed replays only if every delay comes from it.
        let patience = Duration::from_millis(rng.random_range(100..2_000));
        options =
            options.retry(RetryStrategy::linear(Duration::from_millis(50)).deadline(patience));
    }
    match kind {
        Kind::Lock => (options, Held::Lock),
        Kind::Fair => (options.fair(), Held::Lock),
        Kind::Permits(n) => (ObtainOptions::new().permits(n), Held::Permit(n)),
        Kind::ReadWrite if rng.random_bool(0.7) => (ObtainOptions::new().read(), Held::Read),
        Kind::ReadWrite => (ObtainOptions::new().write(), Held::Write),
        Kind::Any => unreachable!("chosen above"),
    }
}

/// Holds `lock` for a while: refreshes it, maybe with a ttl of its own,
/// and writes to the resource with its fence when it has one. Returns
/// when the client stopped believing it held the lock.
async fn hold(
    id: usize,
    key: &str,
    lock: &Holding,
    ttl: Duration,
    rng: &mut StdRng,
    store: &FencedStore,
    recorder: &Recorder,
) -> Duration {
    let steps = rng.random_range(1..4);
    for _ in 0..steps {
        let work = Duration::from_millis(rng.random_range(0..ttl.as_millis() as u64));
        tokio::time::sleep(work).await;
        if Instant::now() >= lock.deadline() || lock.is_lost() {
            return now();
        }
        if let Some(token) = lock.fence_token() {
            // Held up on its way, as by a slow network or a paused sender.
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..30))).await;
            let sent = now();
            let accepted = store.set(key, &format!("{id}"), token).await.ok();
            recorder.write(FencedWrite {
                client: id,
                resource: key.to_owned(),
                token,
                sent,
                accepted,
                answered: now(),
            });
        }
        if rng.random_bool(0.5) {
            let again = Duration::from_millis(TTLS_MS[rng.random_range(0..TTLS_MS.len())]);
            match lock.refresh(again).await {
                Ok(()) => {}
                Err(LockError::Lost { .. } | LockError::NotHeld { .. }) => return now(),
                Err(_) => {}
            }
        }
    }
    now()
}

/// A lock as the client holds it: by hand, or kept alive by the watchdog.
enum Holding {
    Plain(Lock),
    Guarded(LockGuard),
}

impl Holding {
    fn deadline(&self) -> Instant {
        match self {
            Holding::Plain(lock) => lock.deadline(),
            Holding::Guarded(guard) => guard.deadline(),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Holding::Plain(_) => false,
            Holding::Guarded(guard) => guard.is_lost(),
        }
    }

    fn fence_token(&self) -> Option<u64> {
        match self {
            Holding::Plain(lock) => lock.fence_token(),
            Holding::Guarded(guard) => guard.fence_token(),
        }
    }

    async fn refresh(&self, ttl: Duration) -> Result<(), LockError> {
        match self {
            Holding::Plain(lock) => lock.refresh(ttl).await,
            Holding::Guarded(guard) => guard.refresh(ttl).await,
        }
    }

    async fn release(self) -> Result<(), LockError> {
        match self {
            Holding::Plain(lock) => lock.release().await,
            Holding::Guarded(guard) => guard.release().await,
        }
    }

    /// Never released: the lease runs out (a guard's watchdog goes on
    /// refreshing it, as the holder still runs, until it is lost).
    fn forget(self) {
        match self {
            Holding::Plain(lock) => std::mem::forget(lock),
            Holding::Guarded(guard) => std::mem::forget(guard),
        }
    }
}
