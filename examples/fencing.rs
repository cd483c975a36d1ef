//! A lock holder that pauses past its ttl is fenced out: the resource refuses
//! its stale write.
//!
//! ```text
//! cargo run --example fencing
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example fencing
//! ```
//!
//! Two instances, A and B, write the same report under
//! `#[distributed_lock(key = "report", fence, …)]`. A takes the lock (fencing
//! token n) and then stops dead, the way a process does in a long GC pause, a
//! stopped VM or a swap storm: here a blocking wait freezes A's whole runtime,
//! its lock watchdog included, so nothing refreshes A's lease. The lease
//! expires, B takes the lock (token n + 1) and writes. Then A wakes up and
//! writes too, still believing it holds the lock.
//!
//! Nothing on A's side can prevent that write reliably: a pause can strike
//! between any check and the write itself. (A runs with `on_lost = "continue"`
//! to make the write certain; under the default `"abort"` the watchdog stops
//! the body when it notices the loss, which narrows the window but cannot
//! close it.) So the resource checks instead: it is a
//! [`FencedStore`](lockmacro_runtime::FencedStore), which applies a write only
//! if its token is not older than the newest one it has applied, and A's
//! write is rejected.
//!
//! Without `REDIS_URL`, A and B are threads with their own runtimes and
//! lockers on one in-memory backend, writing to an in-memory store. With it,
//! they lock through Redis and write to a Redis hash through a Lua script.
//! The program exits with an error if the stale write is applied.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use lockmacro_runtime::{FencedStore, LockError, Locker, MemoryBackend, distributed_lock};

/// Short, so that A's lease runs out soon after it freezes.
const TTL: Duration = Duration::from_millis(300);
/// The fenced resource: not the lock key, which lives under the `demo`
/// namespace as `demo:report`.
const RESOURCE: &str = "demo:report:contents";

/// Where an instance takes its locks and writes its report.
#[derive(Clone)]
enum Setup {
    Memory {
        locks: Arc<MemoryBackend>,
        store: FencedStore,
    },
    Redis(String),
}

impl Setup {
    /// A locker and a store of one instance's own, as a separate process
    /// would have: made inside the instance's runtime, so that freezing that
    /// runtime freezes them too.
    async fn instance(&self) -> Result<(Locker, FencedStore), LockError> {
        Ok(match self {
            Setup::Memory { locks, store } => (
                Locker::new(locks.clone()).with_namespace("demo"),
                store.clone(),
            ),
            Setup::Redis(url) => (
                Locker::connect(url).await?.with_namespace("demo"),
                FencedStore::connect(url).await?,
            ),
        })
    }
}

/// Prints a line stamped with the time since the start.
#[derive(Clone, Copy)]
struct Log(Instant);

impl Log {
    fn say(&self, who: &str, what: impl std::fmt::Display) {
        println!("t+{:>4}ms  {who}  {what}", self.0.elapsed().as_millis());
    }
}

/// A stop-the-world pause: signal that the lock is held, then block the
/// thread until told to go on.
struct Pause {
    holding: Sender<()>,
    resume: Receiver<()>,
}

/// What one instance's write came to.
#[derive(Debug)]
struct Write {
    token: u64,
    lost_before_writing: bool,
    applied: bool,
}

#[distributed_lock(
    key = "report",
    ttl = TTL,
    wait = "10s",
    fence,
    guard = lock,
    on_lost = "continue",
    locker = locker
)]
async fn write_report(
    locker: &Locker,
    store: &FencedStore,
    who: &str,
    pause: Option<Pause>,
    log: Log,
) -> Result<Write, LockError> {
    let token = lock.fence_token().expect("`fence` mints a token");
    log.say(who, format!("took the lock, fencing token {token}"));
    if let Some(pause) = pause {
        log.say(
            who,
            "freezes (stop-the-world: its watchdog cannot refresh the lease)",
        );
        // Blocking on purpose: the whole runtime stops, as in a GC pause.
        let _ = pause.holding.send(());
        let _ = pause.resume.recv();
        log.say(
            who,
            "wakes up and writes, believing it still holds the lock",
        );
    }
    let lost_before_writing = lock.is_lost();
    let applied = store
        .set(RESOURCE, &format!("written by {who}"), token)
        .await?;
    log.say(
        who,
        if applied {
            format!("write with token {token}: applied")
        } else {
            format!(
                "write with token {token}: REJECTED by the resource (it has applied a newer token)"
            )
        },
    );
    Ok(Write {
        token,
        lost_before_writing,
        applied,
    })
}

fn runtime() -> tokio::runtime::Runtime {
    // One thread per instance: blocking it freezes everything the instance
    // runs, the watchdog included.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("cannot start a tokio runtime")
}

/// Runs the example; a failure is printed as its message (`main` returning
/// the error would print its `Debug` form).
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("Error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    if let Some(arg) = std::env::args().nth(1) {
        eprintln!(
            "unknown argument `{arg}`\nusage: fencing   (REDIS_URL=redis://… to run against Redis)"
        );
        std::process::exit(2);
    }
    let setup = match std::env::var("REDIS_URL")
        .ok()
        .filter(|url| !url.is_empty())
    {
        None => {
            println!("REDIS_URL is not set: locks and the fenced resource are in memory.");
            Setup::Memory {
                locks: Arc::default(),
                store: FencedStore::memory(),
            }
        }
        Some(url) => {
            println!("Locks and the fenced resource are on Redis at {url}.");
            Setup::Redis(url)
        }
    };
    println!(
        "Lock `report`, ttl {TTL:?}; the resource accepts a token only if it is not older than the newest applied.\n"
    );
    let log = Log(Instant::now());

    let (holding_tx, holding) = channel();
    let (resume, resume_rx) = channel();
    let a = std::thread::spawn({
        let setup = setup.clone();
        move || {
            runtime().block_on(async {
                let (locker, store) = setup.instance().await?;
                let pause = Pause {
                    holding: holding_tx,
                    resume: resume_rx,
                };
                write_report(&locker, &store, "A", Some(pause), log).await
            })
        }
    });

    // B starts once A holds the lock, and waits for it like any contender.
    let b = if holding.recv().is_ok() {
        let b = runtime().block_on(async {
            let (locker, store) = setup.instance().await?;
            log.say("B", "asks for the lock");
            write_report(&locker, &store, "B", None, log).await
        });
        // Only now does A's pause end: after B has written.
        let _ = resume.send(());
        Some(b)
    } else {
        None
    };
    let a = a.join().expect("instance A panicked")?;
    let Some(b) = b else {
        return Err("instance A ended before it took the lock".into());
    };
    let b = b?;

    let resource = runtime()
        .block_on(async { setup.instance().await?.1.get(RESOURCE).await })?
        .ok_or("the resource was never written")?;

    println!();
    // Tokens start at the lock server's clock in microseconds: 16 digits.
    println!("| writer |    fencing token | lease lost before writing | write    |");
    println!("|--------|-----------------:|---------------------------|----------|");
    for (who, write) in [("A", &a), ("B", &b)] {
        println!(
            "| {who:<6} | {:>16} | {:<25} | {:<8} |",
            write.token,
            if write.lost_before_writing {
                "yes"
            } else {
                "no"
            },
            if write.applied { "applied" } else { "rejected" },
        );
    }
    println!();
    let stale = usize::from(a.applied);
    println!("A's token             {}", a.token);
    println!("B's token             {}", b.token);
    println!("stale writes applied  {stale}");
    println!(
        "resource              {:?} (token {})",
        resource.value, resource.token
    );
    if a.token >= b.token || stale > 0 || !b.applied || resource.token != b.token {
        return Err("the paused holder's stale write must be rejected".into());
    }
    Ok(())
}
