//! Several billing instances charge the same list of users; each user must be
//! charged exactly once.
//!
//! Without `REDIS_URL` or `DATABASE_URL` the instances run as tasks in this
//! process on the in-memory backend. With `REDIS_URL` set they run as
//! separate OS processes (this program starts copies of itself) that
//! coordinate through Redis; with `DATABASE_URL` set instead, through
//! PostgreSQL, which also holds the ledger (the tables `demo_billed` and
//! `demo_audit`). PostgreSQL needs the `postgres` feature. When both are
//! set, `REDIS_URL` is used.
//!
//! ```text
//! cargo run --example billing
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example billing -- --instances 4 --users 200
//! DATABASE_URL=postgres://app:secret@127.0.0.1:5432/app cargo run --features postgres --example billing
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

#[path = "common/store.rs"]
mod store;

use store::Store;

#[derive(Clone)]
enum Ledger {
    Memory(Arc<Mutex<MemoryLedger>>),
    Redis(redis::aio::ConnectionManager),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
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
            #[cfg(feature = "postgres")]
            Ledger::Postgres(pool) => sqlx::query_scalar::<_, bool>(
                "SELECT EXISTS (SELECT 1 FROM demo_billed WHERE user_id = $1)",
            )
            .bind(user as i32)
            .fetch_one(pool)
            .await
            .map_err(backend),
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
            #[cfg(feature = "postgres")]
            Ledger::Postgres(pool) => {
                for table in ["demo_audit", "demo_billed"] {
                    let insert = format!("INSERT INTO {table} (user_id, instance) VALUES ($1, $2)");
                    sqlx::query(sqlx::AssertSqlSafe(insert))
                        .bind(user as i32)
                        .bind(instance as i32)
                        .execute(pool)
                        .await
                        .map_err(backend)?;
                }
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
            #[cfg(feature = "postgres")]
            Ledger::Postgres(pool) => {
                sqlx::query_scalar::<_, i32>("SELECT user_id FROM demo_audit")
                    .fetch_all(pool)
                    .await
                    .map_err(backend)?
                    .into_iter()
                    .map(|user| user as u32)
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

fn backend(err: impl std::fmt::Display) -> LockError {
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
        "{problem}\nusage: billing [--instances N] [--users M]   (REDIS_URL=redis://… to run as processes on Redis, \
         DATABASE_URL=postgres://… on PostgreSQL)"
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
    let store = Store::from_env(args.worker.is_none());
    if matches!(store, Store::Memory) {
        return in_memory(&args).await;
    }
    match args.worker {
        Some(instance) => worker(&store, instance, args.users).await,
        None => with_processes(&store, &args).await,
    }
}

async fn in_memory(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "Running {} instances as tasks on the in-memory backend.",
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

async fn with_processes(store: &Store, args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let ledger = match store {
        Store::Memory => unreachable!("the in-memory backend runs no processes"),
        Store::Redis(url) => {
            println!(
                "Running {} instances as separate processes against {url}.",
                args.instances
            );
            fresh_redis_ledger(url).await?
        }
        #[cfg(feature = "postgres")]
        Store::Postgres(url) => {
            println!(
                "Running {} instances as separate processes on PostgreSQL (DATABASE_URL).",
                args.instances
            );
            fresh_postgres_ledger(url).await?
        }
    };
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

/// The ledger on Redis, emptied.
async fn fresh_redis_ledger(url: &str) -> Result<Ledger, Box<dyn std::error::Error>> {
    // Nothing listening at `url` fails here at once, with the address; redis's
    // own `ConnectionManager::new` below would retry for about ten seconds and
    // not say where it tried.
    Locker::connect(url).await?;
    let mut conn = redis::aio::ConnectionManager::new(redis::Client::open(url)?).await?;
    let stale: Vec<String> = conn.keys("demo:billed:*").await?;
    let () = conn
        .del([stale, vec!["demo:audit".to_owned()]].concat())
        .await?;
    Ok(Ledger::Redis(conn))
}

/// The ledger's tables in PostgreSQL, created or emptied.
#[cfg(feature = "postgres")]
async fn fresh_postgres_ledger(url: &str) -> Result<Ledger, Box<dyn std::error::Error>> {
    // Fails at once, naming the server, when it cannot be reached; creates
    // the locks' tables before the instances start.
    Locker::postgres(url).await?;
    let pool = sqlx::PgPool::connect(url).await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS demo_billed (user_id integer NOT NULL, instance integer NOT NULL);
         CREATE TABLE IF NOT EXISTS demo_audit (user_id integer NOT NULL, instance integer NOT NULL);
         TRUNCATE demo_billed, demo_audit",
    )
    .execute(&pool)
    .await?;
    Ok(Ledger::Postgres(pool))
}

async fn worker(
    store: &Store,
    instance: usize,
    users: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    let (locker, ledger) = match store {
        Store::Memory => unreachable!("the in-memory backend runs no processes"),
        Store::Redis(url) => {
            let conn = redis::aio::ConnectionManager::new(redis::Client::open(url.as_str())?);
            (Locker::connect(url).await?, Ledger::Redis(conn.await?))
        }
        // One pool for the service's own queries and its locks.
        #[cfg(feature = "postgres")]
        Store::Postgres(url) => {
            let pool = sqlx::PgPool::connect(url).await?;
            (
                Locker::postgres_pool(pool.clone()).await?,
                Ledger::Postgres(pool),
            )
        }
    };
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
