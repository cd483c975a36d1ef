//! lockmacro-bench: the scenarios of issue 6, each printed next to the floor
//! (raw `SET key token NX PX ttl` + compare-and-delete on one connection) and
//! a plain polling lock (`SET NX` + sleep and retry).
//!
//! ```text
//! cargo run --release --example bench                 # default run, under a minute
//! cargo run --release --example bench -- --leases 20000 --window-s 12 --sections 100
//! cargo run --release --example bench -- --no-pin     # let the scheduler place things
//! ```
//!
//! The program starts its own `redis-server` (from `PATH`, or
//! `LOCKMACRO_REDIS_SERVER`) on a free 127.0.0.1 port and stops it at the end.
//! On a machine with two or more CPUs it pins itself to CPU 0 and the server to
//! CPU 1 with `sched_setaffinity`, the call behind `taskset -c`, so that the
//! client and the server never fight over one core. Everything in the client
//! runs on one tokio thread: the figures compare code paths, not schedulers.
//!
//! Flags: `--cycles N` (S1 sequential cycles), `--tasks N` and `--task-cycles N`
//! (S1 concurrent), `--workers N`, `--sections N`, `--body-us N`, `--poll-ms N`
//! (S2/S3), `--leases N` and `--window-s N` (S4), `--macro-calls N`,
//! `--only s1,s1-scale,s2,s2-scale,s4,queue,macro`, `--no-pin`.
//!
//! `s1-scale` repeats S1 sequential on a 3-master Redis Cluster and on 3
//! Redlock masters, which it starts too (the cluster needs `redis-cli`, or
//! `LOCKMACRO_REDIS_CLI`); every server shares CPU 1. `s2-scale` runs S2's
//! `obtain` variants on such a cluster, next to the single server. `queue`
//! times a release with 1 and with 1,000 fair waiters queued (`--cycles`
//! releases each, at most 2,000).

use std::collections::HashMap;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use lockmacro_runtime::{Lock, LockError, Locker, ObtainOptions, RetryStrategy, distributed_lock};
use redis::Script;
use redis::aio::MultiplexedConnection;

const TTL: Duration = Duration::from_secs(30);

/// The compare-and-delete every article on Redis locks shows.
const CAD: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                   return redis.call('DEL', KEYS[1]) else return 0 end";

struct Args {
    cycles: usize,
    tasks: usize,
    task_cycles: usize,
    workers: usize,
    sections: usize,
    body: Duration,
    poll: Duration,
    leases: usize,
    window: Duration,
    macro_calls: usize,
    only: Vec<String>,
    pin: bool,
}

impl Args {
    fn parse() -> Args {
        let mut args = Args {
            cycles: 5000,
            tasks: 64,
            task_cycles: 200,
            workers: 8,
            sections: 300,
            body: Duration::from_micros(200),
            poll: Duration::from_millis(10),
            leases: 100_000,
            window: Duration::from_secs(15),
            macro_calls: 100_000,
            only: Vec::new(),
            pin: true,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            if flag == "--no-pin" {
                args.pin = false;
                continue;
            }
            let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
            let number = || -> u64 {
                value
                    .parse()
                    .unwrap_or_else(|_| panic!("{flag} needs a number, got {value:?}"))
            };
            match flag.as_str() {
                "--cycles" => args.cycles = number() as usize,
                "--tasks" => args.tasks = number() as usize,
                "--task-cycles" => args.task_cycles = number() as usize,
                "--workers" => args.workers = number() as usize,
                "--sections" => args.sections = number() as usize,
                "--body-us" => args.body = Duration::from_micros(number()),
                "--poll-ms" => args.poll = Duration::from_millis(number()),
                "--leases" => args.leases = number() as usize,
                "--window-s" => args.window = Duration::from_secs(number()),
                "--macro-calls" => args.macro_calls = number() as usize,
                "--only" => args.only = value.split(',').map(str::to_owned).collect(),
                _ => panic!("unknown flag {flag}; see the header of examples/bench.rs"),
            }
        }
        args
    }

    fn runs(&self, scenario: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|only| only == scenario)
    }
}

/// Restricts the calling thread (and the threads and processes it starts
/// later) to `cpu`, as `taskset -c cpu` does.
fn pin_to(cpu: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed `cpu_set_t` is a valid empty set; CPU_SET only sets a
    // bit in it, and sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A `redis-server` of our own, killed on drop.
struct Server {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(cpu: Option<usize>) -> Server {
        Server::start_with(cpu, false)
    }

    /// With `cluster`, a node in cluster mode, whose bus gets a port of its
    /// own: the default, port + 10000, does not exist above port 55535.
    fn start_with(cpu: Option<usize>, cluster: bool) -> Server {
        let dir = tempfile::tempdir().expect("cannot create a temporary directory");
        // A port found free can be taken before the server binds it: try again.
        for _ in 0..5 {
            // Both bound at once, so that they differ.
            let listeners: Vec<TcpListener> = (0..2)
                .map(|_| TcpListener::bind("127.0.0.1:0").expect("no free port"))
                .collect();
            let [port, bus_port] = [0, 1].map(|i| listeners[i].local_addr().unwrap().port());
            drop(listeners);
            let binary =
                std::env::var_os("LOCKMACRO_REDIS_SERVER").unwrap_or_else(|| "redis-server".into());
            let mut command = Command::new(binary);
            command
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(dir.path())
                .arg("--logfile")
                .arg(dir.path().join("redis.log"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            if cluster {
                command.args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    &bus_port.to_string(),
                ]);
            }
            if let Some(cpu) = cpu {
                // SAFETY: `pin_to` only makes a system call, which is
                // async-signal-safe, and does not allocate.
                unsafe { command.pre_exec(move || pin_to(cpu)) };
            }
            let mut child = command
                .spawn()
                .expect("cannot start redis-server: install it or set LOCKMACRO_REDIS_SERVER");
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if let Ok(mut conn) = client.get_connection()
                    && redis::cmd("PING").query::<String>(&mut conn).is_ok()
                {
                    return Server {
                        child,
                        port,
                        _dir: dir,
                    };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("redis-server did not start");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

/// Three masters without replicas, joined by `redis-cli --cluster create`;
/// returns once every node reports `cluster_state:ok`.
fn start_cluster(cpu: Option<usize>) -> Vec<Server> {
    let nodes: Vec<Server> = (0..3).map(|_| Server::start_with(cpu, true)).collect();
    let cli = std::env::var_os("LOCKMACRO_REDIS_CLI").unwrap_or_else(|| "redis-cli".into());
    let output = Command::new(cli)
        .args(["--cluster", "create"])
        .args(nodes.iter().map(|node| format!("127.0.0.1:{}", node.port)))
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdin(Stdio::null())
        .output()
        .expect("cannot run redis-cli: install it or set LOCKMACRO_REDIS_CLI");
    assert!(
        output.status.success(),
        "redis-cli --cluster create failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let started = Instant::now();
    let ready = |node: &Server| {
        let client = redis::Client::open(node.url()).unwrap();
        client.get_connection().is_ok_and(|mut conn| {
            redis::cmd("CLUSTER")
                .arg("INFO")
                .query::<String>(&mut conn)
                .is_ok_and(|info| info.contains("cluster_state:ok"))
        })
    };
    while !nodes.iter().all(ready) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the cluster did not come up within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    nodes
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A connection for `INFO` and `CONFIG`, with no response timeout: its
/// replies wait while this busy client thread works through a burst.
async fn admin(url: &str) -> redis::RedisResult<MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// Calls per command since the last `CONFIG RESETSTAT`, `INFO` excluded.
async fn command_calls(admin: &mut MultiplexedConnection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            (name != "info" && name != "config").then(|| (name.to_owned(), calls))
        })
        .collect()
}

async fn reset_stats(admin: &mut MultiplexedConnection) {
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(admin)
        .await
        .unwrap();
}

/// Commands that clients sent. `INFO commandstats` also counts the calls
/// scripts make (the `GET`, `SET`, `PTTL`, `DEL`, `PUBLISH` inside them), so
/// only the commands no script here makes are counted, plus `SET` when the
/// variant sends it itself (`raw_set`).
fn sent(calls: &HashMap<String, u64>, raw_set: bool) -> u64 {
    calls
        .iter()
        .filter(|(name, _)| {
            matches!(
                name.as_str(),
                "evalsha" | "eval" | "subscribe" | "unsubscribe"
            ) || name.starts_with("script")
                || (raw_set && name.as_str() == "set")
        })
        .map(|(_, calls)| calls)
        .sum()
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn micros(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

/// A token unique in this run, 32 hex digits like the runtime's.
fn token() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{:016x}{:016x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The floor: one `SET NX PX`, one compare-and-delete.
async fn floor_acquire(conn: &mut MultiplexedConnection, key: &str, token: &str) -> bool {
    let reply: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(TTL.as_millis() as u64)
        .query_async(conn)
        .await
        .unwrap();
    reply.is_some()
}

async fn floor_release(conn: &mut MultiplexedConnection, script: &Script, key: &str, token: &str) {
    let _: i64 = script.key(key).arg(token).invoke_async(conn).await.unwrap();
}

#[distributed_lock(key = "bench:s1:attr", ttl = "30s", locker = locker)]
async fn s1_attribute(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = key, ttl = "30s", locker = locker)]
async fn s1_attribute_key(locker: &Locker, key: &str) -> Result<(), LockError> {
    Ok(())
}

/// One line of S1.
struct Cycles {
    name: &'static str,
    per_sec: f64,
    latencies: Vec<Duration>,
    /// Client and server CPU, in % of one core, when measured.
    cpu: Option<(f64, f64)>,
}

async fn s1_sequential(args: &Args, url: &str) -> Result<Vec<Cycles>, Box<dyn std::error::Error>> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let script = Script::new(CAD);
    let locker = Locker::connect(url).await?;
    let mut results = Vec::new();
    for name in [
        "floor (SET NX PX + CAD)",
        "runtime obtain+release",
        "attribute",
    ] {
        let mut latencies = Vec::with_capacity(args.cycles);
        let started = Instant::now();
        for _ in 0..args.cycles {
            let cycle = Instant::now();
            match name {
                "floor (SET NX PX + CAD)" => {
                    let token = token();
                    assert!(floor_acquire(&mut conn, "bench:s1:floor", &token).await);
                    floor_release(&mut conn, &script, "bench:s1:floor", &token).await;
                }
                "runtime obtain+release" => {
                    locker
                        .obtain("bench:s1:runtime", TTL, ObtainOptions::default())
                        .await?
                        .release()
                        .await?;
                }
                _ => s1_attribute(&locker).await?,
            }
            latencies.push(cycle.elapsed());
        }
        let elapsed = started.elapsed();
        latencies.sort_unstable();
        results.push(Cycles {
            name,
            per_sec: args.cycles as f64 / elapsed.as_secs_f64(),
            latencies,
            cpu: None,
        });
    }
    Ok(results)
}

async fn s1_concurrent(
    args: &Args,
    server: &Server,
) -> Result<Vec<Cycles>, Box<dyn std::error::Error>> {
    let url = server.url();
    let url = url.as_str();
    let server_pid = server.child.id().to_string();
    let client = redis::Client::open(url)?;
    let conn = client.get_multiplexed_async_connection().await?;
    let locker = Locker::connect(url).await?;
    let mut results = Vec::new();
    for name in [
        "floor (SET NX PX + CAD)",
        "runtime obtain+release",
        "attribute",
    ] {
        let started = Instant::now();
        let cpu = (cpu_time(), cpu_time_of(&server_pid));
        let tasks: Vec<_> = (0..args.tasks)
            .map(|task| {
                let mut conn = conn.clone();
                let locker = locker.clone();
                let cycles = args.task_cycles;
                tokio::spawn(async move {
                    let script = Script::new(CAD);
                    let key = format!("bench:s1c:{task}");
                    let mut latencies = Vec::with_capacity(cycles);
                    for _ in 0..cycles {
                        let cycle = Instant::now();
                        match name {
                            "floor (SET NX PX + CAD)" => {
                                let token = token();
                                assert!(floor_acquire(&mut conn, &key, &token).await);
                                floor_release(&mut conn, &script, &key, &token).await;
                            }
                            "runtime obtain+release" => {
                                locker
                                    .obtain(&key, TTL, ObtainOptions::default())
                                    .await
                                    .unwrap()
                                    .release()
                                    .await
                                    .unwrap();
                            }
                            _ => s1_attribute_key(&locker, &key).await.unwrap(),
                        }
                        latencies.push(cycle.elapsed());
                    }
                    latencies
                })
            })
            .collect();
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.extend(task.await?);
        }
        let elapsed = started.elapsed();
        let busy = |used: Duration| 100.0 * used.as_secs_f64() / elapsed.as_secs_f64();
        let cpu = Some((
            busy(cpu_time() - cpu.0),
            busy(cpu_time_of(&server_pid) - cpu.1),
        ));
        latencies.sort_unstable();
        results.push(Cycles {
            name,
            per_sec: latencies.len() as f64 / elapsed.as_secs_f64(),
            latencies,
            cpu,
        });
    }
    Ok(results)
}

/// S1 sequential through the runtime on each backend, after the floor and
/// the runtime on the single server. The variants take turns, a tenth of the
/// cycles at a time, so that a burst of load on the machine hits them alike.
async fn s1_scale(
    args: &Args,
    url: &str,
    cluster: &[Server],
    masters: &[Server],
) -> Result<Vec<Cycles>, Box<dyn std::error::Error>> {
    const TURNS: usize = 10;
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let script = Script::new(CAD);
    let lockers = [
        Locker::connect(url).await?,
        Locker::cluster(cluster.iter().map(Server::url)).await?,
        Locker::redlock(masters.iter().map(Server::url)).await?,
    ];
    let names = [
        "floor (SET NX PX + CAD)",
        "runtime, single server",
        "runtime, cluster (3)",
        "runtime, redlock (3)",
    ];
    let mut latencies = vec![Vec::with_capacity(args.cycles); names.len()];
    let mut elapsed = vec![Duration::ZERO; names.len()];
    for turn in 0..TURNS {
        let cycles = args.cycles * (turn + 1) / TURNS - args.cycles * turn / TURNS;
        for (variant, latencies) in latencies.iter_mut().enumerate() {
            let started = Instant::now();
            for _ in 0..cycles {
                let cycle = Instant::now();
                match variant.checked_sub(1) {
                    None => {
                        let token = token();
                        assert!(floor_acquire(&mut conn, "bench:s1s:floor", &token).await);
                        floor_release(&mut conn, &script, "bench:s1s:floor", &token).await;
                    }
                    Some(locker) => {
                        lockers[locker]
                            .obtain("bench:s1s:runtime", TTL, ObtainOptions::default())
                            .await?
                            .release()
                            .await?;
                    }
                }
                latencies.push(cycle.elapsed());
            }
            elapsed[variant] += started.elapsed();
        }
    }
    Ok(names
        .into_iter()
        .zip(latencies)
        .zip(elapsed)
        .map(|((name, mut latencies), elapsed)| {
            latencies.sort_unstable();
            Cycles {
                name,
                per_sec: latencies.len() as f64 / elapsed.as_secs_f64(),
                latencies,
                cpu: None,
            }
        })
        .collect())
}

fn print_cycles(title: &str, results: &[Cycles]) {
    println!("\n{title}");
    println!(
        "  {:<26} {:>10} {:>9} {:>9} {:>9} {:>16}",
        "variant", "cycles/s", "p50 µs", "p99 µs", "vs floor", "CPU client/server"
    );
    let floor = results[0].per_sec;
    for result in results {
        let cpu = result.cpu.map_or_else(String::new, |(client, server)| {
            format!("{client:.0} % / {server:.0} %")
        });
        println!(
            "  {:<26} {:>10.0} {:>9} {:>9} {:>8.2}x {:>16}",
            result.name,
            result.per_sec,
            micros(percentile(&result.latencies, 0.5)),
            micros(percentile(&result.latencies, 0.99)),
            result.per_sec / floor,
            cpu
        );
    }
}

/// What the S2 workers share: the witness of S3 and the section log.
struct Contention {
    body: Duration,
    /// Incremented without atomicity across the body: a lost update means two
    /// sections overlapped.
    counter: AtomicU64,
    seq: AtomicUsize,
    done: Vec<AtomicUsize>,
    first_finish: Mutex<Option<Vec<usize>>>,
    log: Mutex<Vec<Section>>,
}

struct Section {
    seq: usize,
    worker: usize,
    acquired: Instant,
    released: Instant,
}

impl Contention {
    fn new(workers: usize, body: Duration) -> Self {
        Contention {
            body,
            counter: AtomicU64::new(0),
            seq: AtomicUsize::new(0),
            done: (0..workers).map(|_| AtomicUsize::new(0)).collect(),
            first_finish: Mutex::new(None),
            log: Mutex::new(Vec::new()),
        }
    }

    /// The critical section; returns its sequence number.
    async fn body(&self) -> usize {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let value = self.counter.load(Ordering::Relaxed);
        // An await point between the read and the write: without mutual
        // exclusion another worker's section could run here.
        tokio::task::yield_now().await;
        let started = Instant::now();
        while started.elapsed() < self.body {
            std::hint::spin_loop();
        }
        self.counter.store(value + 1, Ordering::Relaxed);
        seq
    }

    fn record(&self, worker: usize, seq: usize, acquired: Instant, sections: usize) {
        let released = Instant::now();
        self.log.lock().unwrap().push(Section {
            seq,
            worker,
            acquired,
            released,
        });
        let done = self.done[worker].fetch_add(1, Ordering::Relaxed) + 1;
        if done == sections {
            let mut first = self.first_finish.lock().unwrap();
            if first.is_none() {
                *first = Some(
                    self.done
                        .iter()
                        .map(|done| done.load(Ordering::Relaxed))
                        .collect(),
                );
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Contender {
    /// The floor's retry-at-once loop: `SET NX PX` again as soon as it fails.
    Spin,
    /// `SET NX PX`, sleep `--poll-ms`, again.
    Poll,
    /// `#[distributed_lock(wait = …)]`: waits end by wake-ups (its 2–200 ms
    /// backoff applies only where there are none).
    Attribute,
    /// `Locker::obtain` with a 1 s linear backoff: waits end by wake-ups
    /// alone.
    Runtime,
    /// `#[distributed_lock(wait = …, fair = true)]`: queued, handed the key.
    FairAttribute,
    /// `Locker::obtain` with `fair()` and the 1 s linear backoff.
    FairRuntime,
}

#[distributed_lock(key = "bench:s2", ttl = "30s", wait = "60s", locker = locker)]
async fn s2_attribute(locker: &Locker, shared: &Contention) -> Result<(usize, Instant), LockError> {
    let acquired = Instant::now();
    Ok((shared.body().await, acquired))
}

#[distributed_lock(key = "bench:s2", ttl = "30s", wait = "60s", fair = true, locker = locker)]
async fn s2_fair_attribute(
    locker: &Locker,
    shared: &Contention,
) -> Result<(usize, Instant), LockError> {
    let acquired = Instant::now();
    Ok((shared.body().await, acquired))
}

/// Where the S2 workers lock.
enum Target {
    Single(String),
    /// The seed nodes of a cluster.
    Cluster(Vec<String>),
}

impl Target {
    async fn locker(&self) -> Locker {
        match self {
            Target::Single(url) => Locker::connect(url).await.unwrap(),
            Target::Cluster(seeds) => Locker::cluster(seeds).await.unwrap(),
        }
    }
}

async fn s2_worker(
    contender: Contender,
    target: Arc<Target>,
    worker: usize,
    sections: usize,
    poll: Duration,
    shared: Arc<Contention>,
) {
    // A connection per worker, as if each were another instance; the raw
    // variants run on one server only.
    let locker = target.locker().await;
    let mut conn = match (&*target, contender) {
        (Target::Single(url), Contender::Spin | Contender::Poll) => Some(
            redis::Client::open(url.as_str())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap(),
        ),
        _ => None,
    };
    let script = Script::new(CAD);
    for _ in 0..sections {
        let (seq, acquired) = match contender {
            Contender::Attribute => s2_attribute(&locker, &shared).await.unwrap(),
            Contender::FairAttribute => s2_fair_attribute(&locker, &shared).await.unwrap(),
            Contender::Runtime | Contender::FairRuntime => {
                let retry =
                    RetryStrategy::linear(Duration::from_secs(1)).deadline(Duration::from_secs(60));
                let mut opts = ObtainOptions::new().retry(retry);
                if contender == Contender::FairRuntime {
                    opts = opts.fair();
                }
                let lock = locker.obtain("bench:s2", TTL, opts).await.unwrap();
                let acquired = Instant::now();
                let seq = shared.body().await;
                lock.release().await.unwrap();
                (seq, acquired)
            }
            Contender::Spin | Contender::Poll => {
                let conn = conn.as_mut().expect("the raw variants run on one server");
                let token = token();
                while !floor_acquire(conn, "bench:s2", &token).await {
                    if contender == Contender::Poll {
                        tokio::time::sleep(poll).await;
                    }
                }
                let acquired = Instant::now();
                let seq = shared.body().await;
                floor_release(conn, &script, "bench:s2", &token).await;
                (seq, acquired)
            }
        };
        shared.record(worker, seq, acquired, sections);
    }
}

/// One S2 run: the figures every variant prints.
struct Contended {
    elapsed: Duration,
    per_sec: f64,
    /// Release returned → next acquire returned, between different workers.
    handoffs: Vec<Duration>,
    /// Acquire returned → release returned.
    holds: Vec<Duration>,
    /// Fewest and most sections per worker when the first one finished.
    fairness: (usize, usize),
    lost: u64,
}

/// Runs `args.workers` workers of `contender` on `target` to the end.
async fn contend(
    args: &Args,
    contender: Contender,
    target: &Arc<Target>,
) -> Result<Contended, Box<dyn std::error::Error>> {
    let shared = Arc::new(Contention::new(args.workers, args.body));
    let started = Instant::now();
    let workers: Vec<_> = (0..args.workers)
        .map(|worker| {
            tokio::spawn(s2_worker(
                contender,
                target.clone(),
                worker,
                args.sections,
                args.poll,
                shared.clone(),
            ))
        })
        .collect();
    for worker in workers {
        worker.await?;
    }
    let elapsed = started.elapsed();
    let sections = args.workers * args.sections;
    let mut log = std::mem::take(&mut *shared.log.lock().unwrap());
    log.sort_by_key(|section| section.seq);
    let mut handoffs: Vec<Duration> = log
        .windows(2)
        .filter(|pair| pair[0].worker != pair[1].worker)
        .map(|pair| pair[1].acquired.saturating_duration_since(pair[0].released))
        .collect();
    handoffs.sort_unstable();
    let mut holds: Vec<Duration> = log
        .iter()
        .map(|section| section.released.saturating_duration_since(section.acquired))
        .collect();
    holds.sort_unstable();
    let first = shared
        .first_finish
        .lock()
        .unwrap()
        .clone()
        .unwrap_or_default();
    Ok(Contended {
        elapsed,
        per_sec: sections as f64 / elapsed.as_secs_f64(),
        handoffs,
        holds,
        fairness: (
            first.iter().copied().min().unwrap_or(0),
            first.iter().copied().max().unwrap_or(0),
        ),
        lost: sections as u64 - shared.counter.load(Ordering::Relaxed),
    })
}

async fn s2(args: &Args, server: &Server) -> Result<(), Box<dyn std::error::Error>> {
    let url = server.url();
    let url = url.as_str();
    let server_pid = server.child.id().to_string();
    let target = Arc::new(Target::Single(url.to_owned()));
    let mut admin = admin(url).await?;
    println!(
        "\nS2/S3 contended: {} workers (a connection each), one key, {} sections each, \
         {} µs body",
        args.workers,
        args.sections,
        args.body.as_micros()
    );
    println!(
        "  {:<28} {:>10} {:>10} {:>10} {:>13} {:>14} {:>6}",
        "variant", "sections/s", "hand-off", "hand-off", "fairness", "waiter cmds", "lost"
    );
    // Hand-offs: how many sections followed one by another worker (the
    // percentiles are over these).
    println!(
        "  {:<28} {:>10} {:>10} {:>10} {:>13} {:>14} {:>6}",
        "", "", "p50 µs", "p99 µs", "min/max", "total (/sect)", "upd."
    );
    let mut floor = 0.0;
    for (contender, name) in [
        (Contender::Spin, "floor: retry at once"),
        (
            Contender::Poll,
            if args.poll == Duration::from_millis(10) {
                "polling lock (10 ms sleep)"
            } else {
                "polling lock (--poll-ms)"
            },
        ),
        (Contender::Attribute, "attribute wait = \"60s\""),
        (Contender::Runtime, "obtain, linear 1 s backoff"),
        (Contender::FairAttribute, "attribute, fair = true"),
        (Contender::FairRuntime, "obtain, fair, linear 1 s"),
    ] {
        reset_stats(&mut admin).await;
        let cpu = (cpu_time(), cpu_time_of(&server_pid));
        let run = contend(args, contender, &target).await?;
        let cpu = (cpu_time() - cpu.0, cpu_time_of(&server_pid) - cpu.1);
        let calls = command_calls(&mut admin).await;
        let sections = args.workers * args.sections;
        // Each section costs its holder one acquire and one release; every
        // other command was sent by a waiter.
        let raw_set = matches!(contender, Contender::Spin | Contender::Poll);
        let waiter = sent(&calls, raw_set).saturating_sub(2 * sections as u64);
        let per_sec = run.per_sec;
        if contender == Contender::Spin {
            floor = per_sec;
        }
        println!(
            "  {:<28} {:>10.0} {:>10} {:>10} {:>13} {:>14} {:>6}",
            name,
            per_sec,
            micros(percentile(&run.handoffs, 0.5)),
            micros(percentile(&run.handoffs, 0.99)),
            format!("{}/{}", run.fairness.0, run.fairness.1),
            format!("{waiter} ({:.1})", waiter as f64 / sections as f64),
            run.lost,
        );
        let mut by_command: Vec<_> = calls.iter().filter(|(_, calls)| **calls > 0).collect();
        by_command.sort_by_key(|(_, calls)| std::cmp::Reverse(**calls));
        let by_command: Vec<String> = by_command
            .iter()
            .map(|(name, calls)| format!("{name} {calls}"))
            .collect();
        // Where a section's time goes: the client thread runs every worker,
        // bodies included, so when it is busy all the time it is the bound.
        let per_section = |time: Duration| micros(time / sections as u32);
        println!(
            "    {} hand-offs between workers; held p50 {} µs; per section: {} µs wall, \
             client CPU {} µs, server CPU {} µs",
            run.handoffs.len(),
            micros(percentile(&run.holds, 0.5)),
            per_section(run.elapsed),
            per_section(cpu.0),
            per_section(cpu.1),
        );
        println!("    server saw: {}", by_command.join(", "));
        if !matches!(contender, Contender::Spin | Contender::Poll) {
            println!("  {name}: sections/s vs floor {:.2}x", per_sec / floor);
        }
    }
    Ok(())
}

/// S2's runtime variants on a Redis Cluster, next to the same variants on the
/// single server, taking turns: waits end by wake-ups (a 1 s backoff), which
/// on the cluster come from the locker's first seed node over the cluster bus.
async fn s2_scale(
    args: &Args,
    url: &str,
    cluster: &[Server],
) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "\nS2 on a Redis Cluster (3 masters, on the server CPU): {} workers, one key, {} \
         sections each, {} µs body",
        args.workers,
        args.sections,
        args.body.as_micros()
    );
    println!(
        "  {:<40} {:>10} {:>10} {:>10} {:>13} {:>6} {:>10}",
        "variant", "sections/s", "hand-off", "hand-off", "fairness", "lost", "vs single"
    );
    println!(
        "  {:<40} {:>10} {:>10} {:>10} {:>13} {:>6} {:>10}",
        "", "", "p50 µs", "p99 µs", "min/max", "upd.", "server"
    );
    let single = Arc::new(Target::Single(url.to_owned()));
    let cluster = Arc::new(Target::Cluster(cluster.iter().map(Server::url).collect()));
    for (contender, name) in [
        (Contender::Runtime, "obtain, linear 1 s backoff"),
        (Contender::FairRuntime, "obtain, fair, linear 1 s"),
    ] {
        let mut base = 0.0;
        for (target, place) in [(&single, "single server"), (&cluster, "cluster")] {
            let run = contend(args, contender, target).await?;
            if matches!(**target, Target::Single(_)) {
                base = run.per_sec;
            }
            println!(
                "  {:<40} {:>10.0} {:>10} {:>10} {:>13} {:>6} {:>9.2}x",
                format!("{name}, {place}"),
                run.per_sec,
                micros(percentile(&run.handoffs, 0.5)),
                micros(percentile(&run.handoffs, 0.99)),
                format!("{}/{}", run.fairness.0, run.fairness.1),
                run.lost,
                run.per_sec / base,
            );
        }
    }
    Ok(())
}

/// User + system CPU time of this process.
fn cpu_time() -> Duration {
    cpu_time_of("self")
}

/// User + system CPU time of process `pid` (`"self"` for this one).
fn cpu_time_of(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let per_sec = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_secs_f64(ticks as f64 / per_sec as f64)
}

/// Resident set size of this process, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split(' ').nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

async fn s4(args: &Args, url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let mut admin = admin(url).await?;
    let locker = Locker::connect(url).await?;
    let before = rss();
    let obtained = Instant::now();
    let locks: Vec<_> = futures::stream::iter(0..args.leases)
        .map(|i| {
            let locker = locker.clone();
            async move {
                locker
                    .obtain(&format!("bench:s4:{i}"), TTL, ObtainOptions::default())
                    .await
            }
        })
        .buffer_unordered(256)
        .try_collect()
        .await?;
    let locks_only = rss().saturating_sub(before) as f64 / args.leases as f64;
    let guards: Vec<_> = locks.into_iter().map(Lock::keep_alive).collect();
    let per_lease = rss().saturating_sub(before) as f64 / args.leases as f64;
    let obtain_time = obtained.elapsed();
    reset_stats(&mut admin).await;
    let cpu = cpu_time();
    let started = Instant::now();
    tokio::time::sleep(args.window).await;
    let window = started.elapsed();
    let cpu = cpu_time() - cpu;
    let calls = command_calls(&mut admin).await;
    // Only the watchdog talks to the server in the window; a script missing
    // from a fresh server costs each refresh in flight a `SCRIPT LOAD` and a
    // second `EVALSHA`.
    let commands = sent(&calls, false);
    let refreshes = calls.get("pexpire").copied().unwrap_or(0);
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    println!(
        "\nS4 watchdog: {} leases on one Locker, ttl 30 s, refresh every 10 s \
         (obtained in {:.1} s), window {:.1} s",
        args.leases,
        obtain_time.as_secs_f64(),
        window.as_secs_f64()
    );
    println!(
        "  client CPU          {:.1} % of one core",
        100.0 * cpu.as_secs_f64() / window.as_secs_f64()
    );
    println!(
        "  commands/s          {:.0} for {:.0} refreshes/s (one period needs {} refreshes)",
        commands as f64 / window.as_secs_f64(),
        refreshes as f64 / window.as_secs_f64(),
        args.leases
    );
    let scripts =
        calls.get("evalsha").copied().unwrap_or(0) + calls.get("eval").copied().unwrap_or(0);
    println!(
        "  refreshes           {refreshes} in the window, {:.0} per script call",
        refreshes as f64 / scripts.max(1) as f64
    );
    println!(
        "  memory per lease    {per_lease:.0} bytes (RSS delta / leases; {locks_only:.0} before keep_alive)"
    );
    println!("  leases lost         {lost}");
    let released = Instant::now();
    futures::stream::iter(guards)
        .map(|guard| async move {
            let _ = guard.release().await;
        })
        .buffer_unordered(256)
        .collect::<()>()
        .await;
    println!("  (released in {:.1} s)", released.elapsed().as_secs_f64());
    Ok(())
}

#[distributed_lock(key = "bench:macro", ttl = "30s", locker = locker)]
async fn macro_attribute(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

/// A release with a long queue of fair waiters ahead: `Locker::obtain`, then
/// `Lock::release`, whose script hands the key to the first queued waiter.
/// The waiters are entries written as the fair acquire writes them, for
/// tokens nobody holds: after each release the bench frees the key and
/// queues one more, so the queue keeps its length.
async fn queue_release(args: &Args, url: &str) -> Result<(), Box<dyn std::error::Error>> {
    const KEY: &str = "bench:queue";
    const QUEUE: &str = "{bench:queue}:queue";
    let cycles = args.cycles.min(2000);
    let locker = Locker::connect(url).await?;
    let mut admin = admin(url).await?;
    println!("\nRelease with fair waiters queued ({cycles} releases each)");
    println!(
        "  {:<20} {:>14} {:>14} {:>22}",
        "waiters queued", "release p50 µs", "release p99 µs", "server µs per script"
    );
    let waiter = |n: usize| format!(r#"{{"v":"{n:032x}","t":30000,"e":99999999999999,"f":""}}"#);
    for queued in [1, 1000] {
        let () = redis::cmd("DEL")
            .arg(KEY)
            .arg(QUEUE)
            .query_async(&mut admin)
            .await?;
        let mut push = redis::cmd("RPUSH");
        push.arg(QUEUE);
        for n in 0..queued {
            push.arg(waiter(n));
        }
        let _: i64 = push.query_async(&mut admin).await?;
        reset_stats(&mut admin).await;
        let mut latencies = Vec::with_capacity(cycles);
        for n in 0..cycles {
            let lock = locker.obtain(KEY, TTL, ObtainOptions::new()).await?;
            let started = Instant::now();
            lock.release().await?;
            latencies.push(started.elapsed());
            let (): () = redis::pipe()
                .cmd("DEL")
                .arg(KEY)
                .ignore()
                .cmd("RPUSH")
                .arg(QUEUE)
                .arg(waiter(queued + n))
                .ignore()
                .query_async(&mut admin)
                .await?;
        }
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut admin)
            .await?;
        // `usec_per_call` of EVALSHA: the acquire and release scripts alike.
        let per_script = info
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_evalsha:"))
            .and_then(|stats| {
                stats
                    .split(',')
                    .find_map(|f| f.strip_prefix("usec_per_call="))
            })
            .unwrap_or("?")
            .to_owned();
        latencies.sort_unstable();
        println!(
            "  {:<20} {:>14} {:>14} {:>22}",
            queued,
            micros(percentile(&latencies, 0.5)),
            micros(percentile(&latencies, 0.99)),
            per_script
        );
    }
    Ok(())
}

async fn macro_overhead(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let locker = Locker::memory();
    let n = args.macro_calls;
    println!("\nMacro overhead on the memory backend ({n} calls each)");
    for name in [
        "attribute",
        "obtain + keep_alive + release",
        "obtain + release",
    ] {
        let started = Instant::now();
        for _ in 0..n {
            match name {
                "attribute" => macro_attribute(&locker).await?,
                "obtain + keep_alive + release" => {
                    locker
                        .obtain("bench:macro", TTL, ObtainOptions::default())
                        .await?
                        .keep_alive()
                        .release()
                        .await?;
                }
                _ => {
                    locker
                        .obtain("bench:macro", TTL, ObtainOptions::default())
                        .await?
                        .release()
                        .await?;
                }
            }
        }
        let ns = started.elapsed().as_nanos() as f64 / n as f64;
        println!("  {name:<32} {ns:>8.0} ns/call");
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let pin = args.pin && cpus >= 2;
    let server = Server::start(pin.then_some(1));
    if pin {
        pin_to(0)?;
    }
    println!(
        "lockmacro-bench: redis-server on port {}, {}",
        server.port,
        if pin {
            "client pinned to CPU 0, server to CPU 1"
        } else {
            "not pinned"
        }
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let url = server.url();
        if args.runs("s1") {
            print_cycles(
                &format!("S1 uncontended, sequential ({} cycles)", args.cycles),
                &s1_sequential(&args, &url).await?,
            );
            print_cycles(
                &format!(
                    "S1 uncontended, {} tasks on distinct keys over one connection ({} cycles each)",
                    args.tasks, args.task_cycles
                ),
                &s1_concurrent(&args, &server).await?,
            );
        }
        if args.runs("s1-scale") {
            let server_cpu = pin.then_some(1);
            let (cluster, masters) = tokio::task::spawn_blocking(move || {
                let masters: Vec<Server> = (0..3).map(|_| Server::start(server_cpu)).collect();
                (start_cluster(server_cpu), masters)
            })
            .await?;
            print_cycles(
                &format!(
                    "S1 uncontended, sequential, per backend ({} cycles; cluster: 3 masters, \
                     redlock: 3 masters, all on the server CPU)",
                    args.cycles
                ),
                &s1_scale(&args, &url, &cluster, &masters).await?,
            );
        }
        if args.runs("s2") {
            s2(&args, &server).await?;
        }
        if args.runs("s2-scale") {
            let server_cpu = pin.then_some(1);
            let cluster = tokio::task::spawn_blocking(move || start_cluster(server_cpu)).await?;
            s2_scale(&args, &url, &cluster).await?;
        }
        if args.runs("s4") {
            s4(&args, &url).await?;
        }
        if args.runs("queue") {
            queue_release(&args, &url).await?;
        }
        if args.runs("macro") {
            macro_overhead(&args).await?;
        }
        Ok(())
    })
}
