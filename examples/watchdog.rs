//! The watchdog keeps a lock for as long as the function runs, however short
//! the ttl, and `on_lost = "abort"` stops the function when the lease is
//! taken away.
//!
//! ```text
//! cargo run --example watchdog
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example watchdog
//! ```
//!
//! Part 1: `long_job` holds `report` with a 400 ms ttl and works for 2 s.
//! The lease is refreshed every third of the ttl while it runs, so its
//! remaining ttl, read back from the backend, stays near 400 ms, and a
//! contender on another locker (another instance) that tries the key every
//! 250 ms is refused every time until the job returns and releases it.
//!
//! Part 2: `export` holds `export` under the default `on_lost = "abort"` and
//! has 20 steps to do. Mid-way, the key is deleted behind its back and a
//! contender takes it. The next refresh is refused, the lease is lost, and
//! the body is dropped at its next `.await`: `export` returns
//! `Err(LockError::Lost)` without finishing, and leaves the contender's key
//! alone. Between the deletion and the refused refresh (at most a third of
//! the ttl) the body runs on: that window is what fencing tokens are for
//! (`examples/fencing.rs`). On Redis the deletion is a plain `DEL`, as an operator or another
//! program would do. The in-memory store has no way to delete a key but its
//! owner's release, so there the key is released with the export's own token,
//! which is the same thing from the export's point of view.
//!
//! The program exits with an error if the contender gets in while the job
//! runs, or if `export` runs to the end.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockmacro_runtime::{LockError, Locker, MemoryBackend, ObtainOptions, distributed_lock};
use tokio::sync::{oneshot, watch};

const TTL: Duration = Duration::from_millis(400);
/// Five times the ttl.
const JOB: Duration = Duration::from_secs(2);
const ATTEMPT_EVERY: Duration = Duration::from_millis(250);
const EXPORT_STEPS: usize = 20;
const EXPORT_STEP: Duration = Duration::from_millis(100);

#[derive(Clone, Copy)]
struct Log(Instant);

impl Log {
    fn say(&self, who: &str, what: impl std::fmt::Display) {
        println!("t+{:>4}ms  {who:<10}  {what}", self.0.elapsed().as_millis());
    }
}

/// The lock store, as each instance connects to it.
enum Setup {
    Memory(Arc<MemoryBackend>),
    Redis(String),
}

impl Setup {
    /// A locker of its own, as another instance would have.
    async fn locker(&self) -> Result<Locker, LockError> {
        Ok(match self {
            Setup::Memory(backend) => Locker::new(backend.clone()),
            Setup::Redis(url) => Locker::connect(url).await?,
        }
        .with_namespace("demo"))
    }

    /// Deletes `key` behind its owner's back.
    async fn delete(
        &self,
        locker: &Locker,
        key: &str,
        owner_token: &str,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let key = locker.wire_key(key);
        match self {
            Setup::Memory(backend) => {
                use lockmacro_runtime::backend::Backend;
                if !backend.release(&[key], owner_token).await? {
                    return Err("the export no longer held `export`".into());
                }
            }
            Setup::Redis(url) => {
                let mut conn = redis::Client::open(url.as_str())?
                    .get_multiplexed_async_connection()
                    .await?;
                let () = redis::cmd("DEL").arg(&key).query_async(&mut conn).await?;
            }
        }
        Ok(())
    }
}

/// Works for five ttls; `running` is the independent witness of when.
#[distributed_lock(key = "report", ttl = TTL, guard = lease, locker = locker)]
async fn long_job(
    locker: &Locker,
    running: &watch::Sender<bool>,
    log: Log,
) -> Result<(), LockError> {
    running.send_replace(true);
    log.say(
        "job",
        format!("took `report` (ttl {TTL:?}), works for {JOB:?}"),
    );
    let start = Instant::now();
    while start.elapsed() < JOB {
        tokio::time::sleep(Duration::from_millis(500)).await;
        log.say(
            "job",
            format!(
                "still working; remaining ttl on the backend: {}ms",
                lease.ttl().await?.as_millis()
            ),
        );
    }
    running.send_replace(false);
    log.say("job", "done, releases `report`");
    Ok(())
}

/// Takes `report` if it is free, and lets it go at once.
#[distributed_lock(key = "report", ttl = TTL, on_busy = "skip", locker = locker)]
async fn contend(locker: &Locker) -> Option<()> {
    Some(())
}

/// Twenty steps under the lock; on_lost = "abort" is the default.
#[distributed_lock(key = "export", ttl = TTL, guard = lease, locker = locker)]
async fn export(
    locker: &Locker,
    started: oneshot::Sender<String>,
    steps_done: &AtomicUsize,
    log: Log,
) -> Result<(), LockError> {
    log.say(
        "export",
        format!("took `export`, {EXPORT_STEPS} steps to do"),
    );
    let _ = started.send(lease.token().to_owned());
    for step in 1..=EXPORT_STEPS {
        tokio::time::sleep(EXPORT_STEP).await;
        steps_done.store(step, Ordering::SeqCst);
        log.say("export", format!("step {step} done"));
    }
    Ok(())
}

/// Runs the example; a failure is printed as its message (`main` returning
/// the error would print its `Debug` form).
#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("Error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    if let Some(arg) = std::env::args().nth(1) {
        eprintln!(
            "unknown argument `{arg}`\nusage: watchdog   (REDIS_URL=redis://… to run against Redis)"
        );
        std::process::exit(2);
    }
    let setup = match std::env::var("REDIS_URL")
        .ok()
        .filter(|url| !url.is_empty())
    {
        None => {
            println!("REDIS_URL is not set: locks on the in-memory backend.");
            Setup::Memory(Arc::default())
        }
        Some(url) => {
            println!("Locks on Redis at {url}.");
            Setup::Redis(url)
        }
    };
    let log = Log(Instant::now());

    println!("\nPart 1: a job that runs five times its ttl keeps its lock.\n");
    let (job_locker, other) = (setup.locker().await?, setup.locker().await?);
    let (running, mut witness) = watch::channel(false);
    let job = tokio::spawn(async move { long_job(&job_locker, &running, log).await });
    witness.wait_for(|running| *running).await?;
    let (mut refused, mut got_in) = (0, 0);
    while !job.is_finished() {
        tokio::time::sleep(ATTEMPT_EVERY).await;
        let obtained = contend(&other).await.is_some();
        // Read after the attempt: a success while the job still says it is
        // running means two holders at once.
        let during = *witness.borrow();
        match (obtained, during) {
            (false, _) => {
                refused += 1;
                log.say("contender", "refused: `report` is held");
            }
            (true, true) => {
                got_in += 1;
                log.say("contender", "GOT `report` WHILE THE JOB RUNS");
            }
            (true, false) => log.say("contender", "took `report`: the job has released it"),
        }
    }
    job.await??;
    let after = contend(&other).await.is_some();
    log.say(
        "contender",
        if after {
            "took `report` after the job returned"
        } else {
            "STILL REFUSED after the job returned"
        },
    );

    println!("\nPart 2: the lease is taken away; on_lost = \"abort\" stops the body.\n");
    let export_locker = setup.locker().await?;
    let steps_done = Arc::new(AtomicUsize::new(0));
    let (started, token) = oneshot::channel();
    let export = tokio::spawn({
        let steps_done = steps_done.clone();
        async move { export(&export_locker, started, &steps_done, log).await }
    });
    let token = token.await?;
    tokio::time::sleep(3 * EXPORT_STEP + EXPORT_STEP / 2).await;
    setup.delete(&other, "export", &token).await?;
    log.say(
        "operator",
        match setup {
            Setup::Memory(_) => {
                "deleted `export` (in memory, the only way is a release with the owner's token)"
            }
            Setup::Redis(_) => "deleted `export` (DEL demo:export)",
        },
    );
    let taken = other
        .obtain("export", Duration::from_secs(10), ObtainOptions::default())
        .await?;
    log.say("contender", "took `export`");
    let result = export.await?;
    let steps = steps_done.load(Ordering::SeqCst);
    log.say(
        "export",
        format!("returned {result:?} after step {steps} of {EXPORT_STEPS}"),
    );
    let untouched = taken.ttl().await;
    log.say(
        "contender",
        match &untouched {
            Ok(ttl) => format!("still holds `export` (remaining ttl {}ms)", ttl.as_millis()),
            Err(err) => format!("LOST `export`: {err}"),
        },
    );
    taken.release().await?;

    let lost = matches!(result, Err(LockError::Lost { .. }));
    println!();
    println!("contender refused while the job ran   {refused}");
    println!("contender got in while the job ran    {got_in}");
    println!(
        "contender got in after the job        {}",
        if after { "yes" } else { "no" }
    );
    println!("export stopped after step             {steps} of {EXPORT_STEPS}");
    println!(
        "export returned Err(Lost)             {}",
        if lost { "yes" } else { "no" }
    );
    if refused == 0 || got_in > 0 || !after {
        return Err("the job must keep its lock for as long as it runs, and only that long".into());
    }
    if !lost || steps >= EXPORT_STEPS || untouched.is_err() {
        return Err(
            "the export must stop with LockError::Lost, leaving the new owner's key alone".into(),
        );
    }
    Ok(())
}
