//! A semaphore under contention: `--workers` workers (a connection each)
//! share 3 permits of one key, `--sections` sections each with a
//! `--body-us` body, waiting by wake-ups (a 1 s backoff that no wait should
//! reach), without and with `fair`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockmacro_runtime::{Locker, ObtainOptions, RetryStrategy};

use crate::floor::TTL;
use crate::place::{Meter, View};
use crate::stats::{micros, percentile, us};
use crate::{Args, BoxError, Servers};

const PERMITS: u32 = 3;
const KEY: &str = "bench:permits";

/// What one variant's run saw.
struct Contended {
    per_sec: f64,
    /// From calling obtain to holding a permit, for the calls that waited.
    waits: Vec<Duration>,
    /// The most bodies running at once.
    most: usize,
    /// Fewest and most sections per worker when the first one finished.
    fairness: (usize, usize),
}

async fn contend(args: &Args, url: &str, fair: bool) -> Result<Contended, BoxError> {
    let body = Duration::from_micros(args.body_us);
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let done: Arc<Vec<AtomicUsize>> =
        Arc::new((0..args.workers).map(|_| AtomicUsize::new(0)).collect());
    let first_finish = Arc::new(std::sync::Mutex::new(None::<Vec<usize>>));
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..args.workers {
        let locker = Locker::connect(url).await?;
        let (inside, most, done, first_finish) = (
            inside.clone(),
            most.clone(),
            done.clone(),
            first_finish.clone(),
        );
        let sections = args.sections;
        workers.push(tokio::spawn(async move {
            let mut waits = Vec::new();
            for _ in 0..sections {
                let retry =
                    RetryStrategy::linear(Duration::from_secs(1)).deadline(Duration::from_secs(60));
                let mut opts = ObtainOptions::new().permits(PERMITS).retry(retry);
                if fair {
                    opts = opts.fair();
                }
                let asked = Instant::now();
                let lock = locker.obtain(KEY, TTL, opts).await.expect("obtain");
                let waited = asked.elapsed();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // Yield once, as a body that awaits would, then spin.
                tokio::task::yield_now().await;
                let spun = Instant::now();
                while spun.elapsed() < body {
                    std::hint::spin_loop();
                }
                inside.fetch_sub(1, Ordering::SeqCst);
                lock.release().await.expect("release");
                waits.push(waited);
                let finished = done[worker].fetch_add(1, Ordering::Relaxed) + 1;
                if finished == sections {
                    let mut first = first_finish.lock().unwrap();
                    if first.is_none() {
                        *first = Some(done.iter().map(|d| d.load(Ordering::Relaxed)).collect());
                    }
                }
            }
            waits
        }));
    }
    let mut waits = Vec::new();
    for worker in workers {
        waits.extend(worker.await?);
    }
    let elapsed = started.elapsed();
    // An uncontended obtain is one round trip; count the ones that waited
    // for a permit, which took longer than the body.
    waits.retain(|wait| *wait > body);
    waits.sort_unstable();
    let first = first_finish.lock().unwrap().clone().unwrap_or_default();
    Ok(Contended {
        per_sec: (args.workers * args.sections) as f64 / elapsed.as_secs_f64(),
        waits,
        most: most.load(Ordering::SeqCst),
        fairness: (
            first.iter().copied().min().unwrap_or(0),
            first.iter().copied().max().unwrap_or(0),
        ),
    })
}

/// The semaphore scenario on the single server, each variant once per run.
pub async fn permits(args: &Args, servers: &Servers, view: View) -> Result<(), BoxError> {
    let url = servers.single.url();
    let server_pid = [servers.single.pid()];
    println!(
        "\nSemaphore: {} workers (a connection each), {PERMITS} permits of one key, {} sections each, {} µs body; {}; {}",
        args.workers,
        args.sections,
        args.body_us,
        args.runs_text(),
        view.short()
    );
    println!(
        "  {:<24} {:>10} {:>12} {:>12} {:>10} {:>12} {:>11} {:>11}",
        "variant",
        "sections/s",
        "wait p50 µs",
        "wait p99 µs",
        "waited",
        "most at once",
        "client µs",
        "server µs"
    );
    for (fair, name) in [
        (false, "obtain, 3 permits"),
        (true, "obtain, 3 permits, fair"),
    ] {
        let mut runs = Vec::new();
        for _ in 0..args.runs {
            let meter = Meter::start(&server_pid);
            let contended = contend(args, &url, fair).await?;
            runs.push((contended, meter.stop()));
        }
        // The run with the median rate.
        runs.sort_by(|a, b| a.0.per_sec.total_cmp(&b.0.per_sec));
        let (contended, used) = &runs[runs.len() / 2];
        let sections = (args.workers * args.sections) as f64;
        println!(
            "  {:<24} {:>10.0} {:>12} {:>12} {:>10} {:>12} {:>11.1} {:>11.1}",
            name,
            contended.per_sec,
            micros(percentile(&contended.waits, 0.5)),
            micros(percentile(&contended.waits, 0.99)),
            contended.waits.len(),
            contended.most,
            us(used.client) / sections,
            us(used.server) / sections,
        );
        println!(
            "    fairness {}/{} (fewest/most sections per worker when the first finished)",
            contended.fairness.0, contended.fairness.1
        );
    }
    Ok(())
}
