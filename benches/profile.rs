//! One S1 variant, `--cycles` times, for a profiler: the allocations of
//! each obtain + release (a counting global allocator), and a process that
//! does nothing else, to run under `valgrind --tool=callgrind`, whose
//! instruction counts do not depend on the load of the machine. The
//! instructions of one cycle are the difference between two runs of
//! different lengths, divided by the difference in cycles.
//!
//! ```text
//! cargo bench --bench profile -- --variant runtime --cycles 20000
//! valgrind --tool=callgrind target/release/deps/profile-* --variant runtime --cycles 2000
//! ```
//!
//! Without `--url` it starts its own servers (one, or three masters for the
//! Redlock variants) with the tests' kit; with `--url` (once, or three
//! times for Redlock) it uses servers started by hand, for example a
//! `redis-server` under callgrind.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use lockmacro_runtime::{LockError, Locker, ObtainOptions, distributed_lock};
use lockmacro_testkit::RedisServer;
use redis::Script;
use redis::aio::MultiplexedConnection;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const TTL: Duration = Duration::from_secs(30);

/// The compare-and-delete of the scenarios' floor.
const CAD: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                   return redis.call('DEL', KEYS[1]) else return 0 end";

/// Counts the allocations (and reallocations) the process makes.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: as `GlobalAlloc::realloc` requires of its caller.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Variant {
    /// `SET NX PX` + compare-and-delete, on the `redis` crate alone.
    Floor,
    /// rslock's `lock` + `unlock` on one server.
    Rslock,
    /// `Locker::obtain` + `Lock::release`.
    Runtime,
    /// `#[distributed_lock]`.
    Attribute,
    /// `Locker::obtain` + `Lock::release` on 64 tasks sharing one `Locker`.
    Tasks,
    /// The floor on 64 tasks sharing one connection.
    FloorTasks,
    /// rslock on three masters.
    RslockRedlock,
    /// `Locker::redlock` on three masters.
    Redlock,
}

impl Variant {
    fn masters(self) -> usize {
        match self {
            Variant::RslockRedlock | Variant::Redlock => 3,
            _ => 1,
        }
    }
}

/// One S1 variant, repeated, for a profiler.
#[derive(Parser)]
#[command(name = "profile", bin_name = "cargo bench --bench profile --")]
struct Args {
    #[arg(long, value_enum)]
    variant: Variant,
    /// Cycles measured (for `tasks`: in all, spread over the 64 tasks).
    #[arg(long, default_value_t = 10_000)]
    cycles: usize,
    /// A server to use instead of starting one (three for Redlock).
    #[arg(long)]
    url: Vec<String>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

#[distributed_lock(key = key, ttl = "30s", locker = locker)]
async fn attribute(locker: &Locker, key: &str) -> Result<(), LockError> {
    Ok(())
}

/// What a variant talks through.
#[derive(Clone)]
enum Client {
    Floor(MultiplexedConnection, Script),
    Rslock(rslock::LockManager),
    Locker(Locker),
}

impl Client {
    async fn connect(variant: Variant, urls: &[String]) -> Result<Client, BoxError> {
        Ok(match variant {
            Variant::Floor | Variant::FloorTasks => {
                let client = redis::Client::open(urls[0].as_str())?;
                let conn = client.get_multiplexed_async_connection().await?;
                Client::Floor(conn, Script::new(CAD))
            }
            Variant::Rslock | Variant::RslockRedlock => {
                Client::Rslock(rslock::LockManager::new(urls.to_vec()))
            }
            Variant::Redlock => Client::Locker(Locker::redlock(urls.iter()).await?),
            Variant::Runtime | Variant::Attribute | Variant::Tasks => {
                Client::Locker(Locker::connect(&urls[0]).await?)
            }
        })
    }

    async fn cycles(&self, variant: Variant, key: &str, n: usize) -> Result<(), BoxError> {
        for cycle in 0..n {
            match self {
                Client::Floor(conn, script) => {
                    let mut conn = conn.clone();
                    let token = format!("{:016x}{cycle:016x}", std::process::id());
                    let set: Option<String> = redis::cmd("SET")
                        .arg(key)
                        .arg(&token)
                        .arg("NX")
                        .arg("PX")
                        .arg(TTL.as_millis() as u64)
                        .query_async(&mut conn)
                        .await?;
                    assert!(set.is_some(), "the floor's key was free");
                    let _: i64 = script.key(key).arg(&token).invoke_async(&mut conn).await?;
                }
                Client::Rslock(manager) => {
                    let lock = manager.lock(key, TTL).await?;
                    manager.unlock(&lock).await;
                }
                Client::Locker(locker) if variant == Variant::Attribute => {
                    attribute(locker, key).await?;
                }
                Client::Locker(locker) => {
                    let lock = locker.obtain(key, TTL, ObtainOptions::default()).await?;
                    lock.release().await?;
                }
            }
        }
        Ok(())
    }

    /// About `n` cycles: on one task, or for `tasks`, on 64 at once; how
    /// many were made.
    async fn run(&self, variant: Variant, n: usize) -> Result<usize, BoxError> {
        if !matches!(variant, Variant::Tasks | Variant::FloorTasks) {
            self.cycles(variant, "profile:s1", n).await?;
            return Ok(n);
        }
        const TASKS: usize = 64;
        let handles: Vec<_> = (0..TASKS)
            .map(|task| {
                let client = self.clone();
                tokio::spawn(async move {
                    let key = format!("profile:s1c:{task}");
                    client.cycles(variant, &key, n / TASKS).await
                })
            })
            .collect();
        for handle in handles {
            handle.await??;
        }
        Ok(n / TASKS * TASKS)
    }
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let started;
    let urls = if args.url.is_empty() {
        started = RedisServer::start_many(args.variant.masters());
        started.iter().map(RedisServer::url).collect()
    } else {
        args.url.clone()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = Client::connect(args.variant, &urls).await?;
        // Connections, script loads and first-use caches: not per cycle.
        client.run(args.variant, 64).await?;
        let (allocations, bytes) = (
            ALLOCATIONS.load(Ordering::Relaxed),
            BYTES.load(Ordering::Relaxed),
        );
        let cycles = client.run(args.variant, args.cycles).await?;
        println!(
            "{cycles} cycles: {:.1} allocations and {:.0} bytes allocated per cycle",
            (ALLOCATIONS.load(Ordering::Relaxed) - allocations) as f64 / cycles as f64,
            (BYTES.load(Ordering::Relaxed) - bytes) as f64 / cycles as f64,
        );
        Ok(())
    })
}
