//! PostgreSQL next to its floor and to Redis: S1 (uncontended obtain +
//! release, one task and 64) and S2 (hand-offs between workers).
//!
//! The floor is a session-level advisory lock: `SELECT
//! pg_try_advisory_lock($1)` then `SELECT pg_advisory_unlock($1)` on one
//! connection, once as prepared statements (sqlx's cache: parse once, then
//! bind and execute) and once as simple queries (the value written into the
//! text, as the runtime sends its statements). It keeps nothing: the lock
//! lives in the session, and dies with it. sqlx's own `PgAdvisoryLock`
//! is the same lock through its API.
//!
//! Between the floor and the runtime: a minimal lease table, what a lock
//! that outlives its session needs at the least, one upsert that takes a
//! free or expired row and one delete by token, prepared and as simple
//! queries (what works through PgBouncer in transaction mode).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockmacro_runtime::{LockError, Locker, ObtainOptions, distributed_lock};
use lockmacro_testkit::pgdb::PostgresDb;
use lockmacro_testkit::postgres::PostgresServer;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Row};

use crate::floor::TTL;
use crate::place::View;
use crate::s2::{Contender, Target, contend};
use crate::stats::{median, micros, percentile, us};
use crate::table::{Cycles, measure, print};
use crate::{Args, BoxError, Servers};

/// The connections of the runtime's pool, by default: the 64-task floor
/// gets as many.
const POOL: u32 = 10;

#[distributed_lock(key = key, ttl = "30s", locker = locker)]
async fn attribute(locker: &Locker, key: &str) -> Result<(), LockError> {
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// `pg_try_advisory_lock` + `pg_advisory_unlock`, prepared.
    FloorPrepared,
    /// The same as simple queries.
    FloorSimple,
    /// sqlx's `PgAdvisoryLock`: `try_acquire` and `release_now`.
    SqlxAdvisory,
    /// The minimal lease table, prepared.
    LeasePrepared,
    /// The same as simple queries.
    LeaseSimple,
    /// The same, each statement on a connection of its own from a pool,
    /// as sqlx's `fetch_all(&pool)` does: what the pool's tests of the
    /// connections it hands out and takes back cost.
    LeasePerStatement,
    /// `Locker::obtain` + `Lock::release` on PostgreSQL.
    Runtime,
    /// `#[distributed_lock]` on PostgreSQL.
    Attribute,
    /// `Locker::obtain` + `Lock::release` on the single Redis server.
    Redis,
}

#[derive(Clone)]
struct Clients {
    /// One connection (sequential) or [`POOL`] (tasks); a cycle keeps its
    /// connection from the lock to the unlock, which a session lock needs.
    floor: PgPool,
    /// A pool of [`POOL`] connections, with sqlx's default tests.
    pooled: PgPool,
    locker: Locker,
    redis: Locker,
    server: Arc<PostgresServer>,
    redis_pid: u32,
}

/// The minimal lease table's take: a free or expired row becomes the
/// caller's, on the server's clock.
const LEASE_TAKE: &str = "INSERT INTO bench_leases AS l (key, token, expires_at) \
    VALUES ($1, $2, clock_timestamp() + $3 * interval '1 millisecond') \
    ON CONFLICT (key) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at \
    WHERE l.expires_at < clock_timestamp() RETURNING l.token";

/// Its release: a delete by token.
const LEASE_GIVE: &str = "DELETE FROM bench_leases WHERE key = $1 AND token = $2";

const LEASE_TABLE: &str = "CREATE TABLE bench_leases \
    (key text PRIMARY KEY, token text NOT NULL, expires_at timestamptz NOT NULL)";

const LEASE_TOKEN: &str = "0123456789abcdef0123456789abcdef";

const TTL_MS: i64 = TTL.as_millis() as i64;

/// The lease table's take and give for `key`, as simple queries: the
/// values written into the text.
fn lease_simple(key: &str) -> (String, String) {
    let key = format!("'{}'", key.replace('\'', "''"));
    let token = format!("'{LEASE_TOKEN}'");
    let take = LEASE_TAKE
        .replace("$1", &key)
        .replace("$2", &token)
        .replace("$3", &TTL_MS.to_string());
    let give = LEASE_GIVE.replace("$1", &key).replace("$2", &token);
    (take, give)
}

/// The advisory lock's number for `key`.
fn lock_id(key: &str) -> i64 {
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    hasher.finish() as i64
}

impl Cycles for Clients {
    type Variant = Variant;

    fn name(variant: Variant) -> &'static str {
        match variant {
            Variant::FloorPrepared => "floor: advisory lock, prepared",
            Variant::FloorSimple => "floor: advisory lock, simple",
            Variant::SqlxAdvisory => "sqlx PgAdvisoryLock",
            Variant::LeasePrepared => "lease table, prepared",
            Variant::LeaseSimple => "lease table, simple",
            Variant::LeasePerStatement => "lease table, simple, pooled",
            Variant::Runtime => "runtime obtain+release",
            Variant::Attribute => "attribute",
            Variant::Redis => "Redis: runtime obtain+release",
        }
    }

    fn pids(&self, variant: Variant) -> Vec<u32> {
        match variant {
            Variant::Redis => vec![self.redis_pid],
            _ => self.server.pids(),
        }
    }

    async fn cycles(
        &self,
        variant: Variant,
        key: &str,
        n: usize,
    ) -> Result<Vec<Duration>, BoxError> {
        let id = lock_id(key);
        let mut latencies = Vec::with_capacity(n);
        for _ in 0..n {
            let cycle = Instant::now();
            match variant {
                Variant::FloorPrepared => {
                    let mut conn = self.floor.acquire().await?;
                    let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                        .bind(id)
                        .fetch_one(&mut *conn)
                        .await?;
                    assert!(taken, "the floor's key was taken");
                    let _: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
                        .bind(id)
                        .fetch_one(&mut *conn)
                        .await?;
                }
                Variant::FloorSimple => {
                    let mut conn = self.floor.acquire().await?;
                    let lock = format!("SELECT pg_try_advisory_lock({id})");
                    let row = sqlx::raw_sql(AssertSqlSafe(lock))
                        .fetch_one(&mut *conn)
                        .await?;
                    assert!(row.try_get::<bool, _>(0)?, "the floor's key was taken");
                    let unlock = format!("SELECT pg_advisory_unlock({id})");
                    sqlx::raw_sql(AssertSqlSafe(unlock))
                        .fetch_one(&mut *conn)
                        .await?;
                }
                Variant::SqlxAdvisory => {
                    let lock = sqlx::postgres::PgAdvisoryLock::with_key(
                        sqlx::postgres::PgAdvisoryLockKey::BigInt(id),
                    );
                    let conn = self.floor.acquire().await?;
                    let guard = match lock.try_acquire(conn).await? {
                        sqlx::Either::Left(guard) => guard,
                        sqlx::Either::Right(_) => panic!("the floor's key was taken"),
                    };
                    guard.release_now().await?;
                }
                Variant::LeasePrepared => {
                    let mut conn = self.floor.acquire().await?;
                    let taken = sqlx::query(LEASE_TAKE)
                        .bind(key)
                        .bind(LEASE_TOKEN)
                        .bind(TTL_MS)
                        .fetch_optional(&mut *conn)
                        .await?;
                    assert!(taken.is_some(), "the lease table's key was taken");
                    sqlx::query(LEASE_GIVE)
                        .bind(key)
                        .bind(LEASE_TOKEN)
                        .execute(&mut *conn)
                        .await?;
                }
                Variant::LeaseSimple => {
                    let mut conn = self.floor.acquire().await?;
                    let (take, give) = lease_simple(key);
                    let taken = sqlx::raw_sql(AssertSqlSafe(take))
                        .fetch_optional(&mut *conn)
                        .await?;
                    assert!(taken.is_some(), "the lease table's key was taken");
                    sqlx::raw_sql(AssertSqlSafe(give))
                        .execute(&mut *conn)
                        .await?;
                }
                Variant::LeasePerStatement => {
                    let (take, give) = lease_simple(key);
                    let taken = sqlx::raw_sql(AssertSqlSafe(take))
                        .fetch_optional(&self.pooled)
                        .await?;
                    assert!(taken.is_some(), "the lease table's key was taken");
                    sqlx::raw_sql(AssertSqlSafe(give))
                        .execute(&self.pooled)
                        .await?;
                }
                Variant::Runtime | Variant::Redis => {
                    let locker = match variant {
                        Variant::Runtime => &self.locker,
                        _ => &self.redis,
                    };
                    let lock = locker.obtain(key, TTL, ObtainOptions::default());
                    lock.await?.release().await?;
                }
                Variant::Attribute => attribute(&self.locker, key).await?,
            }
            latencies.push(cycle.elapsed());
        }
        Ok(latencies)
    }
}

/// S1 and S2 on PostgreSQL, in a database of their own; skipped when the
/// bench did not start a server.
pub async fn postgres(args: &Args, servers: &Servers, view: View) -> Result<(), BoxError> {
    let Some(server) = &servers.postgres else {
        println!("\nPostgreSQL: skipped (its programs are not installed)");
        return Ok(());
    };
    let db = PostgresDb::create(server.clone()).await;
    let url = db.url();
    let connect = |connections: u32| {
        PgPoolOptions::new()
            .max_connections(connections)
            .connect(&url)
    };
    sqlx::raw_sql(LEASE_TABLE)
        .execute(&connect(1).await?)
        .await?;
    let mut clients = Clients {
        floor: connect(1).await?,
        pooled: connect(POOL).await?,
        locker: Locker::postgres(&url).await?,
        redis: Locker::connect(&servers.single.url()).await?,
        server: server.clone(),
        redis_pid: servers.single.pid(),
    };
    let runs = usize::from(args.runs);
    let variants = [
        Variant::FloorPrepared,
        Variant::FloorSimple,
        Variant::SqlxAdvisory,
        Variant::LeasePrepared,
        Variant::LeaseSimple,
        Variant::LeasePerStatement,
        Variant::Runtime,
        Variant::Attribute,
        Variant::Redis,
    ];
    let samples = measure(&clients, &variants, None, args.cycles, runs).await?;
    print::<Clients>(
        &format!(
            "PostgreSQL S1 uncontended, sequential ({} cycles per variant and run, {}; {}; \
             floor on one connection)",
            args.cycles,
            args.runs_text(),
            view.short()
        ),
        &variants,
        &samples,
    );
    clients.floor = connect(POOL).await?;
    let variants = [
        Variant::FloorPrepared,
        Variant::LeasePrepared,
        Variant::LeaseSimple,
        Variant::Runtime,
        Variant::Attribute,
        Variant::Redis,
    ];
    let samples = measure(
        &clients,
        &variants,
        Some(args.tasks),
        args.task_cycles,
        runs,
    )
    .await?;
    print::<Clients>(
        &format!(
            "PostgreSQL S1 uncontended, {} tasks on distinct keys, floor on a pool of {POOL} \
             connections / one Locker ({} cycles each per run, {}; {})",
            args.tasks,
            args.task_cycles,
            args.runs_text(),
            view.short()
        ),
        &variants,
        &samples,
    );
    handoffs(args, servers, &db, view).await
}

/// S2's lockmacro variants on PostgreSQL and on the single Redis server,
/// taking turns.
async fn handoffs(
    args: &Args,
    servers: &Servers,
    db: &PostgresDb,
    view: View,
) -> Result<(), BoxError> {
    println!(
        "\nPostgreSQL S2: {} workers (a Locker each), one key, {} sections each, {} µs body; {}, \
         variants in turn; {}",
        args.workers,
        args.sections,
        args.body_us,
        args.runs_text(),
        view.short()
    );
    println!(
        "  {:<44} {:>10} {:>10} {:>10} {:>13} {:>6}",
        "variant", "sections/s", "hand-off", "hand-off", "fairness", "lost"
    );
    println!(
        "  {:<44} {:>10} {:>10} {:>10} {:>13} {:>6}",
        "", "", "p50 µs", "p99 µs", "worst run", "upd."
    );
    let targets = [
        (Arc::new(Target::Single(servers.single.url())), "Redis"),
        (Arc::new(Target::Postgres(db.url())), "PostgreSQL"),
    ];
    for (contender, name) in [
        (Contender::Attribute, "attribute wait = \"60s\""),
        (Contender::Runtime, "obtain, linear 1 s backoff"),
        (Contender::FairAttribute, "attribute, fair = true"),
        (Contender::FairRuntime, "obtain, fair, linear 1 s"),
    ] {
        let mut results: Vec<Vec<_>> = targets.iter().map(|_| Vec::new()).collect();
        for _ in 0..args.runs {
            for ((target, _), results) in targets.iter().zip(&mut results) {
                results.push(contend(args, contender, target).await?);
            }
        }
        for ((_, place), runs) in targets.iter().zip(&results) {
            let of = |f: &dyn Fn(&crate::s2::Contended) -> f64| median(runs.iter().map(f));
            let worst = runs
                .iter()
                .map(|run| run.fairness)
                .min_by_key(|fairness| fairness.0)
                .unwrap_or_default();
            println!(
                "  {:<44} {:>10.0} {:>10} {:>10} {:>13} {:>6}",
                format!("{name}, {place}"),
                of(&|run| run.per_sec),
                micros(Duration::from_secs_f64(
                    of(&|run| us(percentile(&run.handoffs, 0.5))) / 1e6
                )),
                micros(Duration::from_secs_f64(
                    of(&|run| us(percentile(&run.handoffs, 0.99))) / 1e6
                )),
                format!("{}/{}", worst.0, worst.1),
                runs.iter().map(|run| run.lost).sum::<u64>(),
            );
        }
    }
    Ok(())
}
