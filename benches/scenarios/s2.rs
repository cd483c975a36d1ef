//! S2/S3: workers contending for one key, each with its own connection (as
//! another instance would), next to the floor's retry-at-once loop and a
//! plain polling lock.
//!
//! Hand-off = from "release returned" in one worker to "acquire returned" in
//! the next section's worker, only when the two workers differ; sections are
//! ordered by a sequence number taken inside the lock. All workers share one
//! client thread, so the next holder can see its reply before the releaser
//! sees its own: such hand-offs count as 0. S3: the body reads a shared
//! counter, yields, spins for the body time and writes the counter + 1; a
//! lost update means two sections overlapped.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockmacro_runtime::{LockError, Locker, ObtainOptions, RetryStrategy, distributed_lock};
use redis::Script;

use crate::chart::Series;
use crate::floor::{self, CAD, TTL};
use crate::place::{Meter, View};
use crate::stats::{median, micros, percentile, range, us};
use crate::{Args, BoxError, Servers};

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
pub enum Contender {
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
pub enum Target {
    Single(String),
    /// The seed nodes of a cluster.
    Cluster(Vec<String>),
    /// The members of an etcd cluster.
    #[cfg(feature = "etcd")]
    Etcd(Vec<String>),
    /// The URL of a PostgreSQL database.
    #[cfg(feature = "postgres")]
    Postgres(String),
}

impl Target {
    async fn locker(&self) -> Locker {
        match self {
            Target::Single(url) => Locker::connect(url).await.unwrap(),
            Target::Cluster(seeds) => Locker::cluster(seeds).await.unwrap(),
            #[cfg(feature = "etcd")]
            Target::Etcd(endpoints) => Locker::etcd(endpoints).await.unwrap(),
            #[cfg(feature = "postgres")]
            Target::Postgres(url) => Locker::postgres(url).await.unwrap(),
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
        (Target::Single(url), Contender::Spin | Contender::Poll) => {
            Some(floor::connect(url).await.unwrap())
        }
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
                let token = floor::token();
                while !floor::acquire(conn, "bench:s2", &token).await {
                    if contender == Contender::Poll {
                        tokio::time::sleep(poll).await;
                    }
                }
                let acquired = Instant::now();
                let seq = shared.body().await;
                floor::release(conn, &script, "bench:s2", &token).await;
                (seq, acquired)
            }
        };
        shared.record(worker, seq, acquired, sections);
    }
}

/// One S2 run of one variant.
pub struct Contended {
    elapsed: Duration,
    pub per_sec: f64,
    /// Release returned → next acquire returned, between different workers.
    pub handoffs: Vec<Duration>,
    /// Acquire returned → release returned.
    holds: Vec<Duration>,
    /// Fewest and most sections per worker when the first one finished.
    pub fairness: (usize, usize),
    pub lost: u64,
}

/// Runs `args.workers` workers of `contender` on `target` to the end.
pub async fn contend(
    args: &Args,
    contender: Contender,
    target: &Arc<Target>,
) -> Result<Contended, BoxError> {
    let body = Duration::from_micros(args.body_us);
    let poll = Duration::from_millis(args.poll_ms);
    let shared = Arc::new(Contention::new(args.workers, body));
    let started = Instant::now();
    let workers: Vec<_> = (0..args.workers)
        .map(|worker| {
            tokio::spawn(s2_worker(
                contender,
                target.clone(),
                worker,
                args.sections,
                poll,
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

/// One variant's run, with what the server and the processes' clocks saw.
struct Run {
    contended: Contended,
    /// Commands waiters sent.
    waiter_commands: u64,
    client_cpu: Duration,
    server_cpu: Duration,
    server_saw: String,
}

const VARIANTS: [(Contender, &str); 6] = [
    (Contender::Spin, "floor: retry at once"),
    (Contender::Poll, "polling lock (sleep)"),
    (Contender::Attribute, "attribute wait = \"60s\""),
    (Contender::Runtime, "obtain, linear 1 s backoff"),
    (Contender::FairAttribute, "attribute, fair = true"),
    (Contender::FairRuntime, "obtain, fair, linear 1 s"),
];

/// S2/S3 on the single server, `--runs` runs of every variant in turn; returns
/// the hand-offs the chart shows (floor, non-fair and fair attribute, every
/// run's).
pub async fn s2(args: &Args, servers: &Servers, view: View) -> Result<Vec<Series>, BoxError> {
    let url = servers.single.url();
    let server_pid = [servers.single.pid()];
    let target = Arc::new(Target::Single(url.clone()));
    let mut admin = floor::admin(&url).await?;
    let sections = args.workers * args.sections;
    let mut runs: Vec<Vec<Run>> = VARIANTS.iter().map(|_| Vec::new()).collect();
    for _ in 0..args.runs {
        for (index, &(contender, _)) in VARIANTS.iter().enumerate() {
            floor::reset_stats(&mut admin).await;
            let meter = Meter::start(&server_pid);
            let contended = contend(args, contender, &target).await?;
            let used = meter.stop();
            let calls = floor::command_calls(&mut admin).await;
            // Each section costs its holder one acquire and one release; every
            // other command was sent by a waiter.
            let raw_set = matches!(contender, Contender::Spin | Contender::Poll);
            let waiter_commands = floor::sent(&calls, raw_set).saturating_sub(2 * sections as u64);
            let mut by_command: Vec<_> = calls.iter().filter(|(_, calls)| **calls > 0).collect();
            by_command.sort_by_key(|(_, calls)| std::cmp::Reverse(**calls));
            let server_saw: Vec<String> = by_command
                .iter()
                .map(|(name, calls)| format!("{name} {calls}"))
                .collect();
            runs[index].push(Run {
                contended,
                waiter_commands,
                client_cpu: used.client,
                server_cpu: used.server,
                server_saw: server_saw.join(", "),
            });
        }
    }

    println!(
        "\nS2/S3 contended: {} workers (a connection each), one key, {} sections each, {} µs \
         body; {}, variants in turn; {}",
        args.workers,
        args.sections,
        args.body_us,
        args.runs_text(),
        view.short()
    );
    println!(
        "  {:<28} {:>10} {:>18} {:>9} {:>9} {:>13} {:>14} {:>6}",
        "variant",
        "sections/s",
        "vs floor (runs)",
        "hand-off",
        "hand-off",
        "fairness",
        "waiter cmds",
        "lost"
    );
    println!(
        "  {:<28} {:>10} {:>18} {:>9} {:>9} {:>13} {:>14} {:>6}",
        "", "", "", "p50 µs", "p99 µs", "worst run", "total (/sect)", "upd."
    );
    let floor_runs: Vec<f64> = runs[0].iter().map(|run| run.contended.per_sec).collect();
    let median_of = |runs: &[Run], f: &dyn Fn(&Run) -> f64| median(runs.iter().map(f));
    for ((contender, name), runs) in VARIANTS.iter().zip(&runs) {
        let ratios: Vec<f64> = runs
            .iter()
            .zip(&floor_runs)
            .map(|(run, floor)| run.contended.per_sec / floor)
            .collect();
        let vs_floor = if *contender == Contender::Spin {
            String::new()
        } else {
            crate::stats::ratio(&ratios)
        };
        let worst = runs
            .iter()
            .map(|run| run.contended.fairness)
            .min_by_key(|fairness| fairness.0)
            .unwrap_or_default();
        let waiters = median_of(runs, &|run| run.waiter_commands as f64);
        let name = if *contender == Contender::Poll {
            format!("polling lock ({} ms sleep)", args.poll_ms)
        } else {
            (*name).to_owned()
        };
        println!(
            "  {:<28} {:>10.0} {:>18} {:>9.1} {:>9.1} {:>13} {:>14} {:>6}",
            name,
            median_of(runs, &|run| run.contended.per_sec),
            vs_floor,
            median_of(runs, &|run| us(percentile(&run.contended.handoffs, 0.5))),
            median_of(runs, &|run| us(percentile(&run.contended.handoffs, 0.99))),
            format!("{}/{}", worst.0, worst.1),
            format!("{waiters:.0} ({:.1})", waiters / sections as f64),
            runs.iter().map(|run| run.contended.lost).sum::<u64>(),
        );
        let per_section =
            |f: &dyn Fn(&Run) -> Duration| median_of(runs, &|run| us(f(run)) / sections as f64);
        let (fewest, most) = range(runs.iter().map(|run| run.contended.handoffs.len() as f64));
        println!(
            "    {fewest:.0}–{most:.0} hand-offs between workers; held p50 {} µs; per section: \
             {:.1} µs wall, client CPU {:.1} µs, server CPU {:.1} µs",
            micros(Duration::from_secs_f64(
                median_of(runs, &|run| us(percentile(&run.contended.holds, 0.5))) / 1e6
            )),
            per_section(&|run| run.contended.elapsed),
            per_section(&|run| run.client_cpu),
            per_section(&|run| run.server_cpu),
        );
        if let Some(last) = runs.last() {
            println!("    server saw (last run): {}", last.server_saw);
        }
    }

    let pooled = |index: usize| {
        let mut all: Vec<Duration> = runs[index]
            .iter()
            .flat_map(|run| run.contended.handoffs.iter().copied())
            .collect();
        all.sort_unstable();
        all
    };
    Ok(vec![
        Series::new("floor: retry at once", pooled(0)),
        Series::new("lockmacro, not fair (wait = \"60s\")", pooled(2)),
        Series::new("lockmacro, fair = true", pooled(4)),
    ])
}

/// S2's runtime variants on a Redis Cluster, next to the same variants on the
/// single server, taking turns: waits end by wake-ups (a 1 s backoff), which
/// on the cluster come from the locker's first seed node over the cluster bus.
pub async fn s2_scale(args: &Args, servers: &Servers, view: View) -> Result<(), BoxError> {
    let cluster = servers
        .cluster
        .as_ref()
        .expect("the cluster was started for s2-scale");
    println!(
        "\nS2 per backend (cluster: 3 masters; etcd, with its feature: 1 and 3 members; all on \
         the server CPU): {} workers, one key, {} sections each, {} µs body; {}",
        args.workers,
        args.sections,
        args.body_us,
        view.short()
    );
    println!(
        "  {:<40} {:>10} {:>10} {:>10} {:>13} {:>6} {:>10}",
        "variant", "sections/s", "hand-off", "hand-off", "fairness", "lost", "vs single"
    );
    println!(
        "  {:<40} {:>10} {:>10} {:>10} {:>13} {:>6} {:>10}",
        "", "", "p50 µs", "p99 µs", "min/max", "upd.", "server"
    );
    let single = Arc::new(Target::Single(servers.single.url()));
    let cluster = Arc::new(Target::Cluster(cluster.seeds()));
    #[cfg_attr(not(feature = "etcd"), allow(unused_mut))]
    let mut targets = vec![(single, "single server"), (cluster, "cluster")];
    #[cfg(feature = "etcd")]
    for (etcd, place) in servers
        .etcd
        .iter()
        .zip(["etcd, 1 member", "etcd, 3 members"])
    {
        targets.push((Arc::new(Target::Etcd(etcd.endpoints())), place));
    }
    for (contender, name) in [
        (Contender::Runtime, "obtain, linear 1 s backoff"),
        (Contender::FairRuntime, "obtain, fair, linear 1 s"),
    ] {
        let mut base = 0.0;
        for (target, place) in &targets {
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
