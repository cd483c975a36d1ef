//! Several services start at the same moment and each would run the database
//! migrations at start-up; exactly one does, the others wait and find them
//! applied.
//!
//! ```text
//! cargo run --example migrations
//! cargo run --example migrations -- --crash
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example migrations -- --services 4 --crash
//! DATABASE_URL=postgres://app:secret@127.0.0.1:5432/app cargo run --features postgres --example migrations -- --crash
//! ```
//!
//! Every service calls `migrate` under
//! `#[distributed_lock(key = "migrations", ttl = "1s", wait = "15s")]`. The
//! first to get the lock applies the migrations one by one, recording each in
//! the migration table in the same step, and sets a "done" marker at the end.
//! The others wait for the lock, then see the marker and return without
//! running anything.
//!
//! With `--crash`, the first service to migrate dies after two of the four
//! migrations, without releasing the lock. Nothing refreshes its lease any
//! more, so it expires within the ttl; a waiting service then gets the lock,
//! finds two migrations in the table and no marker, applies the other two and
//! sets the marker. (The ttl is short so that the takeover comes quickly; a
//! real one would be longer than any pause you expect.)
//!
//! Without `REDIS_URL` or `DATABASE_URL`, the services are threads, each with
//! its own runtime and locker on one in-memory backend, sharing an in-memory
//! database; the crashing one freezes for good, so that, as with a killed
//! process, nothing of it runs again: it neither refreshes nor releases. With
//! `REDIS_URL`, the services are separate processes (this program starts
//! copies of itself), the database is a Redis list and key, and the crashing
//! process calls `std::process::exit` mid-way. With `DATABASE_URL` instead
//! (and the `postgres` feature), the processes lock in PostgreSQL and the
//! database is the tables `demo_migrations` and `demo_migrations_done` there.
//! When both are set, `REDIS_URL` is used.
//!
//! The table at the end comes from the migration table, not from the
//! services' own reports; the program exits with an error unless each
//! migration was applied exactly once, by one service, and the marker is set.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockmacro_runtime::{
    BackendError, BackendErrorKind, LockError, Locker, MemoryBackend, distributed_lock,
};
use redis::AsyncCommands;

const MIGRATIONS: [&str; 4] = [
    "001_create_users",
    "002_create_invoices",
    "003_index_invoices_by_user",
    "004_backfill_invoice_totals",
];
/// How long applying one migration takes.
const STEP: Duration = Duration::from_millis(150);
/// With `--crash`, the first migrating service dies after this many.
const CRASH_AFTER: usize = 2;
/// Exit status of a service process that crashed on purpose.
const CRASHED: i32 = 70;

const APPLIED_KEY: &str = "demo:migrations:applied";
const DONE_KEY: &str = "demo:migrations:done";

#[path = "common/store.rs"]
mod store;

use store::Store;

/// The shared database, or at least the part of it migrations touch.
#[derive(Clone)]
enum Db {
    Memory(Arc<Mutex<MemoryDb>>),
    Redis(redis::aio::ConnectionManager),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
}

#[derive(Default)]
struct MemoryDb {
    /// The migration table: (migration, service that applied it), in order.
    applied: Vec<(String, usize)>,
    /// The "done" marker: which service finished the migrations.
    done: Option<usize>,
}

impl Db {
    async fn done_by(&self) -> Result<Option<usize>, LockError> {
        match self {
            Db::Memory(db) => Ok(db.lock().unwrap().done),
            Db::Redis(conn) => conn.clone().get(DONE_KEY).await.map_err(backend),
            #[cfg(feature = "postgres")]
            Db::Postgres(pool) => {
                sqlx::query_scalar::<_, i32>("SELECT service FROM demo_migrations_done")
                    .fetch_optional(pool)
                    .await
                    .map(|service| service.map(|service| service as usize))
                    .map_err(backend)
            }
        }
    }

    /// The migration table, in the order the migrations were applied.
    async fn applied(&self) -> Result<Vec<(String, usize)>, LockError> {
        match self {
            Db::Memory(db) => Ok(db.lock().unwrap().applied.clone()),
            Db::Redis(conn) => {
                let rows: Vec<String> = conn
                    .clone()
                    .lrange(APPLIED_KEY, 0, -1)
                    .await
                    .map_err(backend)?;
                Ok(rows
                    .iter()
                    .filter_map(|row| {
                        let (name, service) = row.split_once(' ')?;
                        Some((name.to_owned(), service.parse().ok()?))
                    })
                    .collect())
            }
            #[cfg(feature = "postgres")]
            Db::Postgres(pool) => {
                let rows: Vec<(String, i32)> =
                    sqlx::query_as("SELECT name, service FROM demo_migrations ORDER BY position")
                        .fetch_all(pool)
                        .await
                        .map_err(backend)?;
                Ok(rows
                    .into_iter()
                    .map(|(name, service)| (name, service as usize))
                    .collect())
            }
        }
    }

    /// Applies a migration and records it in the migration table, as one
    /// step (in SQL, one transaction): a crash leaves both or neither.
    async fn apply(&self, name: &str, service: usize) -> Result<(), LockError> {
        match self {
            Db::Memory(db) => db.lock().unwrap().applied.push((name.to_owned(), service)),
            Db::Redis(conn) => {
                let () = conn
                    .clone()
                    .rpush(APPLIED_KEY, format!("{name} {service}"))
                    .await
                    .map_err(backend)?;
            }
            #[cfg(feature = "postgres")]
            Db::Postgres(pool) => {
                sqlx::query("INSERT INTO demo_migrations (name, service) VALUES ($1, $2)")
                    .bind(name)
                    .bind(service as i32)
                    .execute(pool)
                    .await
                    .map_err(backend)?;
            }
        }
        Ok(())
    }

    async fn mark_done(&self, service: usize) -> Result<(), LockError> {
        match self {
            Db::Memory(db) => db.lock().unwrap().done = Some(service),
            Db::Redis(conn) => {
                let () = conn.clone().set(DONE_KEY, service).await.map_err(backend)?;
            }
            #[cfg(feature = "postgres")]
            Db::Postgres(pool) => {
                sqlx::query("INSERT INTO demo_migrations_done (service) VALUES ($1)")
                    .bind(service as i32)
                    .execute(pool)
                    .await
                    .map_err(backend)?;
            }
        }
        Ok(())
    }
}

fn backend(err: impl std::fmt::Display) -> LockError {
    BackendError::new(BackendErrorKind::Other, "database", err.to_string()).into()
}

/// What a service did at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Applied `applied` migrations, after `found` were already in the table.
    Migrated { applied: usize, found: usize },
    /// Found the done marker and ran nothing.
    FoundDone,
    /// Died mid-way.
    Crashed,
}

/// Where a service reports to and how it dies.
#[derive(Clone)]
enum Sink {
    /// A service process: its outcome is printed for the parent, and a crash
    /// ends the process.
    Process,
    /// A service thread: its outcome goes down the channel, and a crash
    /// freezes the thread for good.
    Thread(Sender<(usize, Result<Outcome, String>)>),
}

impl Sink {
    fn report(&self, service: usize, outcome: Outcome) {
        match self {
            Sink::Process => match outcome {
                Outcome::Migrated { applied, found } => {
                    println!("outcome migrated {applied} {found}")
                }
                Outcome::FoundDone => println!("outcome found-done"),
                Outcome::Crashed => unreachable!("a crashed process reports nothing"),
            },
            Sink::Thread(results) => {
                let _ = results.send((service, Ok(outcome)));
            }
        }
    }

    /// Dies without releasing anything: no destructor, no further await.
    fn crash(&self, service: usize) -> ! {
        match self {
            Sink::Process => std::process::exit(CRASHED),
            Sink::Thread(_) => {
                self.report(service, Outcome::Crashed);
                // The thread's runtime, its locker's watchdog included, never
                // runs again, like a killed process.
                loop {
                    std::thread::park();
                }
            }
        }
    }
}

/// Milliseconds since the common start, for the timeline.
fn since(epoch_ms: u128) -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_millis()
        .saturating_sub(epoch_ms)
}

fn log(epoch_ms: u128, service: usize, what: impl std::fmt::Display) {
    println!("{:>6}ms  service {service}  {what}", since(epoch_ms));
}

/// Every service runs this at start-up.
#[distributed_lock(key = "migrations", ttl = "1s", wait = "15s", locker = locker)]
async fn migrate(
    locker: &Locker,
    db: &Db,
    service: usize,
    crash: bool,
    sink: &Sink,
    epoch_ms: u128,
) -> Result<Outcome, LockError> {
    log(epoch_ms, service, "got the migration lock");
    if let Some(by) = db.done_by().await? {
        log(
            epoch_ms,
            service,
            format!("done marker set by service {by}: nothing to run"),
        );
        return Ok(Outcome::FoundDone);
    }
    let table = db.applied().await?;
    if !table.is_empty() {
        log(
            epoch_ms,
            service,
            format!(
                "no done marker, but {} migration(s) in the table: a migration was interrupted, resuming",
                table.len()
            ),
        );
    }
    let mut applied = 0;
    for name in MIGRATIONS {
        if table.iter().any(|(done, _)| done == name) {
            continue;
        }
        tokio::time::sleep(STEP).await;
        db.apply(name, service).await?;
        applied += 1;
        log(epoch_ms, service, format!("applied {name}"));
        if crash && table.is_empty() && applied == CRASH_AFTER {
            log(
                epoch_ms,
                service,
                "CRASHES mid-way, without releasing the lock; its lease runs out within the ttl (1s)",
            );
            sink.crash(service);
        }
    }
    db.mark_done(service).await?;
    log(epoch_ms, service, "all migrations applied, done marker set");
    Ok(Outcome::Migrated {
        applied,
        found: table.len(),
    })
}

/// One service's start-up.
async fn service(
    locker: &Locker,
    db: &Db,
    service: usize,
    crash: bool,
    sink: &Sink,
    epoch_ms: u128,
) -> Result<(), LockError> {
    log(epoch_ms, service, "starts, waits for the migration lock");
    let outcome = migrate(locker, db, service, crash, sink, epoch_ms).await?;
    sink.report(service, outcome);
    Ok(())
}

struct Args {
    services: usize,
    crash: bool,
    /// Set in a service process: its number, and the common start time.
    worker: Option<(usize, u128)>,
}

fn parse_args() -> Args {
    let mut args = Args {
        services: 3,
        crash: false,
        worker: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .and_then(|v| v.parse::<u128>().ok())
                .unwrap_or_else(|| usage(&format!("{name} needs a number")))
        };
        match flag.as_str() {
            "--services" => args.services = value("--services").max(2) as usize,
            "--crash" => args.crash = true,
            "--worker" => {
                let service = value("--worker") as usize;
                args.worker = Some((service, value("--worker")));
            }
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    args
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "{problem}\nusage: migrations [--services N] [--crash]   (REDIS_URL=redis://… to run as processes on Redis, \
         DATABASE_URL=postgres://… on PostgreSQL)"
    );
    std::process::exit(2);
}

fn now_ms() -> u128 {
    since(0)
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
    let args = parse_args();
    let store = Store::from_env(args.worker.is_none());
    if let Some((service, epoch_ms)) = args.worker {
        return worker(&store, service, args.crash, epoch_ms);
    }
    let scenario = if args.crash {
        "the first to migrate crashes mid-way"
    } else {
        "no failures"
    };
    let (outcomes, table, done) = match &store {
        Store::Memory => {
            println!(
                "{} services as threads on the in-memory backend; {scenario}.\n",
                args.services
            );
            with_threads(&args)?
        }
        Store::Redis(url) => {
            println!(
                "{} services as separate processes against {url}; {scenario}.\n",
                args.services
            );
            with_processes(&store, &args)?
        }
        #[cfg(feature = "postgres")]
        Store::Postgres(_) => {
            println!(
                "{} services as separate processes on PostgreSQL (DATABASE_URL); {scenario}.\n",
                args.services
            );
            with_processes(&store, &args)?
        }
    };
    report(&args, &outcomes, &table, done)
}

type Results = (Vec<Outcome>, Vec<(String, usize)>, Option<usize>);

fn with_threads(args: &Args) -> Result<Results, Box<dyn std::error::Error>> {
    let locks = Arc::new(MemoryBackend::new());
    let db = Db::Memory(Arc::default());
    let (results, received) = mpsc::channel();
    let start = Arc::new(Barrier::new(args.services));
    let epoch_ms = now_ms();
    for service in 0..args.services {
        let (locks, db, start, crash) = (locks.clone(), db.clone(), start.clone(), args.crash);
        let results = results.clone();
        // Not joined: a crashed service never ends, and the others have
        // nothing left to do once they have reported.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cannot start a tokio runtime");
            let locker = Locker::new(locks).with_namespace("demo");
            let sink = Sink::Thread(results.clone());
            start.wait();
            let run = self::service(&locker, &db, service, crash, &sink, epoch_ms);
            if let Err(err) = runtime.block_on(run) {
                let _ = results.send((service, Err(err.to_string())));
            }
        });
    }
    let mut outcomes = vec![None; args.services];
    for _ in 0..args.services {
        // The bound only keeps a broken run from hanging: the crashed
        // service holds a sender forever, so the channel never closes.
        let (service, outcome) = received
            .recv_timeout(Duration::from_secs(60))
            .map_err(|_| "a service did not report")?;
        outcomes[service] =
            Some(outcome.map_err(|err| format!("service {service} failed: {err}"))?);
    }
    let outcomes = outcomes
        .into_iter()
        .collect::<Option<_>>()
        .ok_or("a service reported twice")?;
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let table = runtime.block_on(db.applied())?;
    let done = runtime.block_on(db.done_by())?;
    Ok((outcomes, table, done))
}

/// A fresh database for every run.
async fn fresh_db(store: &Store) -> Result<Db, Box<dyn std::error::Error>> {
    match store {
        Store::Memory => unreachable!("the in-memory database is made by `with_threads`"),
        Store::Redis(url) => {
            // Nothing listening at `url` fails here at once, with the address;
            // redis's own `ConnectionManager::new` below would retry for about
            // ten seconds and not say where it tried.
            Locker::connect(url).await?;
            let mut conn =
                redis::aio::ConnectionManager::new(redis::Client::open(url.as_str())?).await?;
            let () = conn.del(&[APPLIED_KEY, DONE_KEY]).await?;
            Ok(Db::Redis(conn))
        }
        #[cfg(feature = "postgres")]
        Store::Postgres(url) => {
            // Fails at once, naming the server, when it cannot be reached;
            // creates the locks' tables before the services start.
            Locker::postgres(url).await?;
            let pool = sqlx::PgPool::connect(url).await?;
            sqlx::raw_sql(
                "CREATE TABLE IF NOT EXISTS demo_migrations \
                   (position bigserial PRIMARY KEY, name text NOT NULL, service integer NOT NULL);
                 CREATE TABLE IF NOT EXISTS demo_migrations_done (service integer NOT NULL);
                 TRUNCATE demo_migrations, demo_migrations_done",
            )
            .execute(&pool)
            .await?;
            Ok(Db::Postgres(pool))
        }
    }
}

fn with_processes(store: &Store, args: &Args) -> Result<Results, Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Runtime::new()?;
    let db = runtime.block_on(fresh_db(store))?;
    let exe = std::env::current_exe()?;
    let epoch_ms = now_ms();
    let children: Vec<_> = (0..args.services)
        .map(|service| {
            let mut command = Command::new(&exe);
            command
                .args(["--worker", &service.to_string(), &epoch_ms.to_string()])
                .stdout(Stdio::piped());
            if args.crash {
                command.arg("--crash");
            }
            command.spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut timeline = Vec::new();
    let mut outcomes = Vec::new();
    for (service, child) in children.into_iter().enumerate() {
        let output = child.wait_with_output()?;
        let stdout = String::from_utf8(output.stdout)?;
        let mut outcome = None;
        for line in stdout.lines() {
            match line.strip_prefix("outcome ") {
                Some(reported) => outcome = parse_outcome(reported),
                None => timeline.push(line.to_owned()),
            }
        }
        outcomes.push(match (output.status.code(), outcome) {
            (Some(CRASHED), _) => Outcome::Crashed,
            (Some(0), Some(outcome)) => outcome,
            _ => return Err(format!("service {service} failed: {}", output.status).into()),
        });
    }
    // One timeline out of the processes' own, by time stamp.
    timeline.sort_by_key(|line| {
        line.trim_start()
            .split("ms")
            .next()
            .and_then(|ms| ms.parse::<u128>().ok())
    });
    for line in timeline {
        println!("{line}");
    }
    let table = runtime.block_on(db.applied())?;
    let done = runtime.block_on(db.done_by())?;
    Ok((outcomes, table, done))
}

fn parse_outcome(reported: &str) -> Option<Outcome> {
    let words: Vec<&str> = reported.split_whitespace().collect();
    match words[..] {
        ["migrated", applied, found] => Some(Outcome::Migrated {
            applied: applied.parse().ok()?,
            found: found.parse().ok()?,
        }),
        ["found-done"] => Some(Outcome::FoundDone),
        _ => None,
    }
}

fn worker(
    store: &Store,
    service: usize,
    crash: bool,
    epoch_ms: u128,
) -> Result<(), Box<dyn std::error::Error>> {
    tokio::runtime::Runtime::new()?.block_on(async {
        let (locker, db) = match store {
            Store::Memory => return Err("a service process needs REDIS_URL or DATABASE_URL".into()),
            Store::Redis(url) => {
                let conn = redis::aio::ConnectionManager::new(redis::Client::open(url.as_str())?);
                (Locker::connect(url).await?, Db::Redis(conn.await?))
            }
            // One pool for the service's own queries and its locks.
            #[cfg(feature = "postgres")]
            Store::Postgres(url) => {
                let pool = sqlx::PgPool::connect(url).await?;
                (
                    Locker::postgres_pool(pool.clone()).await?,
                    Db::Postgres(pool),
                )
            }
        };
        let locker = locker.with_namespace("demo");
        self::service(&locker, &db, service, crash, &Sink::Process, epoch_ms).await?;
        Ok(())
    })
}

fn report(
    args: &Args,
    outcomes: &[Outcome],
    table: &[(String, usize)],
    done: Option<usize>,
) -> Result<(), Box<dyn std::error::Error>> {
    println!();
    println!("| service | outcome                                        |");
    println!("|--------:|------------------------------------------------|");
    for (service, outcome) in outcomes.iter().enumerate() {
        let outcome = match outcome {
            Outcome::Migrated { applied, found: 0 } => {
                format!("ran the migrations ({applied} applied)")
            }
            Outcome::Migrated { applied, found } => {
                format!("took over: {found} found applied, {applied} applied")
            }
            Outcome::FoundDone => "found them applied (done marker)".to_owned(),
            Outcome::Crashed => "crashed mid-way".to_owned(),
        };
        println!("| {service:>7} | {outcome:<46} |");
    }
    println!();
    println!("| migration                     | applied by service |");
    println!("|-------------------------------|-------------------:|");
    for (name, service) in table {
        println!("| {name:<29} | {service:>18} |");
    }

    let count = |wanted: fn(&Outcome) -> bool| outcomes.iter().filter(|o| wanted(o)).count();
    let ran = count(|o| matches!(o, Outcome::Migrated { .. }));
    let found_done = count(|o| *o == Outcome::FoundDone);
    let crashed = count(|o| *o == Outcome::Crashed);
    let mut runs: HashMap<&str, usize> = HashMap::new();
    for (name, _) in table {
        *runs.entry(name.as_str()).or_default() += 1;
    }
    let twice = runs.values().filter(|&&n| n > 1).count();
    let missing = MIGRATIONS
        .iter()
        .filter(|name| !runs.contains_key(*name))
        .count();
    println!();
    println!("services              {}", args.services);
    println!("finished migrating    {ran}");
    println!("found them applied    {found_done}");
    println!("crashed mid-way       {crashed}");
    println!(
        "migrations in table   {} of {}",
        table.len(),
        MIGRATIONS.len()
    );
    println!("applied twice         {twice}   (from the migration table, not from the lock)");
    println!(
        "done marker           {}",
        done.map_or("missing".to_owned(), |by| format!("set by service {by}"))
    );
    let expected_crashes = usize::from(args.crash);
    if ran != 1
        || crashed != expected_crashes
        || found_done != args.services - 1 - crashed
        || twice > 0
        || missing > 0
        || done.is_none()
    {
        return Err("the migrations must run to completion exactly once".into());
    }
    Ok(())
}
