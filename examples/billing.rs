//! Several billing instances charge the same list of users; each user must be
//! charged exactly once.
//!
//! Without `REDIS_URL` the instances run as tasks in this process on the
//! in-memory backend. With `REDIS_URL` set they run as separate OS processes
//! (this program starts copies of itself) that coordinate through Redis.
//!
//! ```text
//! cargo run --example billing
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example billing -- --instances 4 --users 200
//! ```
//!
//! Charging is deliberately racy without the lock: an instance reads whether
//! the user was charged today, calls the (slow) payment provider, then writes
//! the result. Every charge is also appended to an audit log that does not
//! rely on the lock; the table's "double charges" column comes from it.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockmacro_runtime::{LockError, Locker, distributed_lock};
use redis::AsyncCommands;

#[derive(Clone)]
enum Ledger {
    Memory(Arc<Mutex<MemoryLedger>>),
    Redis(redis::aio::ConnectionManager),
}

#[derive(Default)]
struct MemoryLedger {
    billed: HashMap<u32, bool>,
    audit: Vec<(u32, usize)>,
}

impl Ledger {
    async fn is_billed(&self, user: u32) -> Result<bool, LockError> {
        match self {
            Ledger::Memory(ledger) => Ok(ledger.lock().unwrap().billed.contains_key(&user)),
            Ledger::Redis(conn) => Ok(conn
                .clone()
                .exists(format!("demo:billed:{user}"))
                .await
                .map_err(backend)?),
        }
    }

    async fn charge(&self, user: u32, instance: usize) -> Result<(), LockError> {
        match self {
            Ledger::Memory(ledger) => {
                let mut ledger = ledger.lock().unwrap();
                ledger.audit.push((user, instance));
                ledger.billed.insert(user, true);
            }
            Ledger::Redis(conn) => {
                let mut conn = conn.clone();
                let () = conn
                    .rpush("demo:audit", format!("{user}:{instance}"))
                    .await
                    .map_err(backend)?;
                let () = conn
                    .set(format!("demo:billed:{user}"), instance)
                    .await
                    .map_err(backend)?;
            }
        }
        Ok(())
    }

    /// Charges per user, from the audit log alone.
    async fn audit(&self) -> Result<HashMap<u32, usize>, LockError> {
        let entries: Vec<u32> = match self {
            Ledger::Memory(ledger) => ledger
                .lock()
                .unwrap()
                .audit
                .iter()
                .map(|(user, _)| *user)
                .collect(),
            Ledger::Redis(conn) => {
                let raw: Vec<String> = conn
                    .clone()
                    .lrange("demo:audit", 0, -1)
                    .await
                    .map_err(backend)?;
                raw.iter()
                    .filter_map(|entry| entry.split(':').next()?.parse().ok())
                    .collect()
            }
        };
        let mut charges = HashMap::new();
        for user in entries {
            *charges.entry(user).or_default() += 1;
        }
        Ok(charges)
    }
}

fn backend(err: redis::RedisError) -> LockError {
    lockmacro_runtime::BackendError::new(
        lockmacro_runtime::BackendErrorKind::Other,
        "ledger",
        err.to_string(),
    )
    .into()
}

/// What one instance did.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    charged: usize,
    already_billed: usize,
    skipped_busy: usize,
}

#[distributed_lock(key = "billing:user:{user}", ttl = "10s", locker = locker)]
async fn bill(
    locker: &Locker,
    ledger: &Ledger,
    user: u32,
    instance: usize,
) -> Result<Option<bool>, LockError> {
    if ledger.is_billed(user).await? {
        return Ok(Some(false));
    }
    // The payment provider takes a moment: the window in which another
    // instance would charge the same user again, were it not for the lock.
    tokio::time::sleep(Duration::from_millis(2)).await;
    ledger.charge(user, instance).await?;
    Ok(Some(true))
}

async fn run_instance(
    locker: &Locker,
    ledger: &Ledger,
    instance: usize,
    users: u32,
) -> Result<Tally, LockError> {
    let mut tally = Tally::default();
    // Every instance walks the whole list: even ones from the front, odd ones
    // from the back, so that instances collide on the same users all along.
    for offset in 0..users {
        let user = if instance.is_multiple_of(2) {
            offset
        } else {
            users - 1 - offset
        };
        match bill_or_skip(locker, ledger, user, instance).await? {
            Some(true) => tally.charged += 1,
            Some(false) => tally.already_billed += 1,
            None => tally.skipped_busy += 1,
        }
    }
    Ok(tally)
}

/// `bill`, with "someone else holds this user" turned into `None`.
async fn bill_or_skip(
    locker: &Locker,
    ledger: &Ledger,
    user: u32,
    instance: usize,
) -> Result<Option<bool>, LockError> {
    match bill(locker, ledger, user, instance).await {
        Err(err) if err.is_not_obtained() => Ok(None),
        other => other,
    }
}

struct Args {
    instances: usize,
    users: u32,
    worker: Option<usize>,
}

fn parse_args() -> Args {
    let mut args = Args {
        instances: 4,
        users: 200,
        worker: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or_else(|| usage(&format!("{name} needs a number")))
        };
        match flag.as_str() {
            "--instances" => args.instances = value("--instances").max(1),
            "--users" => args.users = value("--users") as u32,
            "--worker" => args.worker = Some(value("--worker")),
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    args
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "{problem}\nusage: billing [--instances N] [--users M]   (REDIS_URL=redis://… to run as processes on Redis)"
    );
    std::process::exit(2);
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
    let args = parse_args();
    match std::env::var("REDIS_URL")
        .ok()
        .filter(|url| !url.is_empty())
    {
        None => in_memory(&args).await,
        Some(url) => match args.worker {
            Some(instance) => worker(&url, instance, args.users).await,
            None => with_processes(&url, &args).await,
        },
    }
}

async fn in_memory(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "REDIS_URL is not set: running {} instances as tasks on the in-memory backend.",
        args.instances
    );
    let locker = Locker::memory();
    let ledger = Ledger::Memory(Arc::default());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for instance in 0..args.instances {
        let (locker, ledger, users) = (locker.clone(), ledger.clone(), args.users);
        tasks.push(tokio::spawn(async move {
            run_instance(&locker, &ledger, instance, users).await
        }));
    }
    let mut tallies = Vec::new();
    for task in tasks {
        tallies.push(task.await??);
    }
    report(args, &tallies, &ledger.audit().await?, started.elapsed())
}

async fn with_processes(url: &str, args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "Running {} instances as separate processes against {url}.",
        args.instances
    );
    // Nothing listening at `url` fails here at once, with the address; redis's
    // own `ConnectionManager::new` below would retry for about ten seconds and
    // not say where it tried.
    Locker::connect(url).await?;
    let client = redis::Client::open(url)?;
    let ledger = Ledger::Redis(redis::aio::ConnectionManager::new(client).await?);
    if let Ledger::Redis(conn) = &ledger {
        let mut conn = conn.clone();
        let stale: Vec<String> = conn.keys("demo:billed:*").await?;
        let () = conn
            .del([stale, vec!["demo:audit".to_owned()]].concat())
            .await?;
    }
    let started = Instant::now();
    let exe = std::env::current_exe()?;
    let children: Vec<_> = (0..args.instances)
        .map(|instance| {
            Command::new(&exe)
                .args([
                    "--worker",
                    &instance.to_string(),
                    "--users",
                    &args.users.to_string(),
                ])
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut tallies = Vec::new();
    for child in children {
        let output = child.wait_with_output()?;
        if !output.status.success() {
            return Err(format!("an instance failed: {}", output.status).into());
        }
        let line = String::from_utf8(output.stdout)?;
        let fields: Vec<usize> = line
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        let [charged, already_billed, skipped_busy] = fields[..] else {
            return Err(format!("unexpected worker output {line:?}").into());
        };
        tallies.push(Tally {
            charged,
            already_billed,
            skipped_busy,
        });
    }
    report(args, &tallies, &ledger.audit().await?, started.elapsed())
}

async fn worker(url: &str, instance: usize, users: u32) -> Result<(), Box<dyn std::error::Error>> {
    let locker = Locker::connect(url).await?;
    let ledger =
        Ledger::Redis(redis::aio::ConnectionManager::new(redis::Client::open(url)?).await?);
    let tally = run_instance(&locker, &ledger, instance, users).await?;
    println!(
        "{} {} {}",
        tally.charged, tally.already_billed, tally.skipped_busy
    );
    Ok(())
}

fn report(
    args: &Args,
    tallies: &[Tally],
    audit: &HashMap<u32, usize>,
    elapsed: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    let charged: usize = tallies.iter().map(|t| t.charged).sum();
    let busy: usize = tallies.iter().map(|t| t.skipped_busy).sum();
    let double = audit.values().filter(|&&n| n > 1).count();
    let missed = (0..args.users)
        .filter(|user| !audit.contains_key(user))
        .count();
    println!();
    println!("| instance | charged | already billed | skipped (held elsewhere) |");
    println!("|---------:|--------:|---------------:|-------------------------:|");
    for (instance, t) in tallies.iter().enumerate() {
        println!(
            "| {instance:>8} | {:>7} | {:>14} | {:>24} |",
            t.charged, t.already_billed, t.skipped_busy
        );
    }
    println!();
    println!("instances            {}", args.instances);
    println!("users                {}", args.users);
    println!("charges made         {charged}");
    println!("skipped (held)       {busy}");
    println!("users never charged  {missed}");
    println!("double charges       {double}   (from the audit log, not from the lock)");
    println!("elapsed              {elapsed:.2?}");
    if double > 0 || missed > 0 || charged != args.users as usize {
        return Err("every user must be charged exactly once".into());
    }
    Ok(())
}
