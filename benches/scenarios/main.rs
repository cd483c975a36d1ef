//! The scenarios of issues 6 and 13, each printed next to the floor (raw
//! `SET key token NX PX ttl` + compare-and-delete on the same connection, with
//! the `redis` crate alone) and a plain polling lock (`SET NX` + sleep and
//! retry).
//!
//! ```text
//! cargo bench --bench scenarios                              # everything, both views
//! cargo bench --bench scenarios -- --only s1 --view same     # S1 and Redlock S1, one CPU
//! cargo bench --bench scenarios -- --only s1,s2 --cycles 500 --sections 50 --runs 1
//! cargo bench --bench scenarios -- --help                    # every flag
//! ```
//!
//! The bench starts its own `redis-server` processes on free 127.0.0.1
//! ports (from `PATH`, or `LOCKMACRO_REDIS_SERVER`; the cluster needs
//! `redis-cli`, or `LOCKMACRO_REDIS_CLI`) with the integration tests' kit
//! (`testkit/`), and stops them at the end. Everything in the client runs on
//! one tokio thread: the figures compare code paths, not schedulers.
//!
//! Two views, chosen with `--view` (both by default):
//!
//! - **split**: the bench on CPU 0, every server on CPU 1: latency, with the
//!   wake-up from one CPU to the other in every round trip.
//! - **same**: the bench and every server on CPU 0: nothing runs while
//!   another part waits, so cycles/s and the CPU per cycle show what each
//!   variant costs.
//!
//! Each view runs S1 (sequential, Redlock, 64 tasks), `s1-scale`, S2,
//! `s2-scale`, `queue` and `permits`; S4 and `macro` run once, in the first
//! view.

mod chart;
mod floor;
mod overhead;
mod permits;
#[cfg(feature = "postgres")]
mod pg;
mod place;
mod queue;
mod s1;
mod s2;
mod s4;
mod stats;
mod table;

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use lockmacro_testkit::RedisServer;
use lockmacro_testkit::cluster::RedisCluster;

use crate::place::View;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// lockmacro's benchmark scenarios, next to the floor (raw SET NX PX +
/// compare-and-delete).
#[derive(Parser)]
#[command(
    name = "scenarios",
    bin_name = "cargo bench --bench scenarios --",
    version,
    about,
    long_about = None
)]
pub struct Args {
    /// S1 sequential: cycles per variant and run (also the releases of `queue`,
    /// at most 2,000).
    #[arg(long, default_value_t = 5000)]
    cycles: usize,
    /// S1 concurrent: tasks on distinct keys over one connection.
    #[arg(long, default_value_t = 64)]
    tasks: usize,
    /// S1 concurrent: cycles per task and run.
    #[arg(long, default_value_t = 200)]
    task_cycles: usize,
    /// PostgreSQL with durable commits (`fsync=on`, as on a default
    /// server) instead of the test kit's `fsync=off`, which measures CPU
    /// rather than the disk.
    #[arg(long)]
    pg_durable: bool,
    /// Runs per variant, interleaved, for S1 and S2; the tables print the median.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    runs: u16,
    /// S2/S3: workers contending for one key.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// S2/S3: sections per worker.
    #[arg(long, default_value_t = 300)]
    sections: usize,
    /// S2/S3: length of the critical section, in µs (spun on the client thread).
    #[arg(long, default_value_t = 200)]
    body_us: u64,
    /// S2: sleep of the polling lock between attempts, in ms.
    #[arg(long, default_value_t = 10)]
    poll_ms: u64,
    /// S4: leases kept alive by one Locker.
    #[arg(long, default_value_t = 100_000)]
    leases: usize,
    /// S4: how long the watchdog is watched, in seconds.
    #[arg(long, default_value_t = 15)]
    window_s: u64,
    /// Macro overhead: calls per variant.
    #[arg(long, default_value_t = 100_000)]
    macro_calls: usize,
    /// Run only these scenarios (comma-separated); all by default.
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Scenario>,
    /// Which placement(s) of client and servers to measure.
    #[arg(long, value_enum, default_value_t = ViewArg::Both)]
    view: ViewArg,
    /// Pin nothing: let the scheduler place client and servers (one run, no views).
    #[arg(long)]
    no_pin: bool,
    /// Where S2 writes its hand-off latency chart (SVG).
    #[arg(long, default_value = "target/s2-handoffs.svg")]
    chart: PathBuf,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// S1 uncontended: sequential (floor, runtime, attribute, Redlock) and 64 tasks.
    S1,
    /// S1 sequential on one server, a 3-master cluster and 3 Redlock masters.
    S1Scale,
    /// S2/S3 contended, one key, with the hand-off chart.
    S2,
    /// S2's runtime variants on a 3-master cluster.
    S2Scale,
    /// S4: 100,000 leases under the watchdog.
    S4,
    /// A release with 1 and with 1,000 fair waiters queued.
    Queue,
    /// A semaphore of 3 permits under contention, without and with `fair`.
    Permits,
    /// The attribute against the runtime calls it makes, memory backend.
    Macro,
    /// PostgreSQL (feature `postgres`): S1 next to an advisory lock and to
    /// Redis, and S2's hand-offs.
    Postgres,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ViewArg {
    /// Client on CPU 0, servers on CPU 1: latency.
    Split,
    /// Client and servers on CPU 0: CPU per operation.
    Same,
    /// Split, then same.
    Both,
}

impl Args {
    /// "median of 3 runs", or "1 run".
    pub fn runs_text(&self) -> String {
        match self.runs {
            1 => "1 run".to_owned(),
            n => format!("median of {n} runs"),
        }
    }

    fn wants(&self, scenario: Scenario) -> bool {
        self.only.is_empty() || self.only.contains(&scenario)
    }

    /// The views to measure on a machine with `cpus` CPUs.
    fn views(&self, cpus: usize) -> Vec<View> {
        if self.no_pin {
            return vec![View::Unpinned];
        }
        let split = View::Split {
            client: 0,
            server: 1,
        };
        let same = View::Same { cpu: 0 };
        let wanted = match self.view {
            ViewArg::Split => vec![split],
            ViewArg::Same => vec![same],
            ViewArg::Both => vec![split, same],
        };
        if cpus < 2 && wanted.contains(&split) {
            println!("one CPU only: no split view");
            return vec![same];
        }
        wanted
    }
}

/// The servers of a run, started before the client runtime and placed for
/// each view.
pub struct Servers {
    pub single: RedisServer,
    /// Independent masters for Redlock (empty when no scenario needs them).
    pub masters: Vec<RedisServer>,
    pub cluster: Option<RedisCluster>,
    /// One etcd member and a 3-member cluster, for the per-backend tables.
    #[cfg(feature = "etcd")]
    pub etcd: Vec<lockmacro_testkit::etcd::EtcdCluster>,
    /// A PostgreSQL server, when its programs are installed.
    #[cfg(feature = "postgres")]
    pub postgres: Option<std::sync::Arc<lockmacro_testkit::postgres::PostgresServer>>,
}

impl Servers {
    fn start(args: &Args) -> Servers {
        let masters = if args.wants(Scenario::S1) || args.wants(Scenario::S1Scale) {
            RedisServer::start_many(3)
        } else {
            Vec::new()
        };
        let cluster = (args.wants(Scenario::S1Scale) || args.wants(Scenario::S2Scale))
            .then(|| RedisCluster::start_with(3, 0));
        #[cfg(feature = "etcd")]
        let etcd = if args.wants(Scenario::S1Scale) || args.wants(Scenario::S2Scale) {
            vec![
                lockmacro_testkit::etcd::EtcdCluster::single(),
                lockmacro_testkit::etcd::EtcdCluster::start(3),
            ]
        } else {
            Vec::new()
        };
        #[cfg(feature = "postgres")]
        let postgres = (args.wants(Scenario::Postgres) && lockmacro_testkit::postgres::available())
            .then(|| {
                let durable: &[&str] = if args.pg_durable {
                    &["fsync=on", "full_page_writes=on"]
                } else {
                    &[]
                };
                std::sync::Arc::new(lockmacro_testkit::postgres::PostgresServer::start_with(
                    durable,
                ))
            });
        Servers {
            single: RedisServer::start(),
            masters,
            cluster,
            #[cfg(feature = "etcd")]
            etcd,
            #[cfg(feature = "postgres")]
            postgres,
        }
    }

    fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.single.pid()];
        pids.extend(self.masters.iter().map(RedisServer::pid));
        if let Some(cluster) = &self.cluster {
            pids.extend(cluster.nodes().iter().map(RedisServer::pid));
        }
        #[cfg(feature = "etcd")]
        for etcd in &self.etcd {
            pids.extend(etcd.members().iter().filter_map(|member| member.pid()));
        }
        // Its backends are forked from the postmaster, and inherit where it
        // is pinned.
        #[cfg(feature = "postgres")]
        if let Some(postgres) = &self.postgres {
            pids.extend(postgres.pids());
        }
        pids
    }

    /// Pins this thread (the client) and every server as `view` says.
    fn place(&self, view: View) -> std::io::Result<()> {
        if let Some(cpu) = view.client_cpu() {
            place::pin_this_thread(cpu)?;
        }
        if let Some(cpu) = view.server_cpu() {
            for pid in self.pids() {
                match place::pin_process(pid, cpu) {
                    // A PostgreSQL backend whose connection closed meanwhile.
                    Err(err)
                        if err.kind() == std::io::ErrorKind::NotFound
                            || err.raw_os_error() == Some(libc::ESRCH) => {}
                    other => other?,
                }
            }
        }
        Ok(())
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("model name")?.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let views = args.views(cpus);
    let servers = Servers::start(&args);
    let version: String = servers.single.cmd(&["INFO", "server"]);
    let version = version
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    println!(
        "lockmacro bench: {cpus} CPUs ({}), load average {} at start; redis-server {version} \
         on port {}",
        cpu_model(),
        place::load_average(),
        servers.single.port(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let url = servers.single.url();
        let mut handoffs = Vec::new();
        for &view in &views {
            servers.place(view)?;
            println!("\n=== {view} ===");
            if args.wants(Scenario::S1) {
                s1::s1(&args, &servers, view).await?;
            }
            if args.wants(Scenario::S1Scale) {
                s1::s1_scale(&args, &servers, view).await?;
            }
            if args.wants(Scenario::S2) {
                let series = s2::s2(&args, &servers, view).await?;
                handoffs.push((view.panel(), series));
            }
            if args.wants(Scenario::S2Scale) {
                s2::s2_scale(&args, &servers, view).await?;
            }
            if args.wants(Scenario::Queue) {
                queue::queue_release(&args, &url, view).await?;
            }
            if args.wants(Scenario::Permits) {
                permits::permits(&args, &servers, view).await?;
            }
            #[cfg(feature = "postgres")]
            if args.wants(Scenario::Postgres) {
                pg::postgres(&args, &servers, view).await?;
            }
        }
        if !handoffs.is_empty() {
            chart::write(
                &args.chart,
                &format!(
                    "S2 hand-offs: {} workers, one key, {} µs body, {}",
                    args.workers,
                    args.body_us,
                    match args.runs {
                        1 => "1 run".to_owned(),
                        n => format!("{n} runs pooled"),
                    }
                ),
                &handoffs,
            )?;
            println!("\nS2 hand-off chart written to {}", args.chart.display());
        }
        if args.wants(Scenario::S4) || args.wants(Scenario::Macro) {
            let view = views[0];
            servers.place(view)?;
            println!("\n=== {view} ===");
            if args.wants(Scenario::S4) {
                s4::s4(&args, &url).await?;
            }
            if args.wants(Scenario::Macro) {
                overhead::macro_overhead(&args).await?;
            }
        }
        println!("\nload average {} at the end", place::load_average());
        Ok(())
    })
}
