//! The S1 tables: variants that take turns within a run, measured by wall
//! time, latency and the CPU time of client and servers, printed against
//! the first variant (the floor) of the same run.

use std::future::Future;
use std::time::Duration;

use crate::BoxError;
use crate::place::{Meter, Used};
use crate::stats::{median, micros, percentile, ratio, us};

/// How many turns the variants of a run take.
const TURNS: usize = 10;

/// What a table measures: cheap to clone, so that each task gets its own
/// handles onto the same connections.
pub trait Cycles: Clone + Send + Sync + 'static {
    type Variant: Copy + Send + Sync + 'static;

    fn name(variant: Self::Variant) -> &'static str;

    /// The servers whose CPU time a variant's cycles cost.
    fn pids(&self, variant: Self::Variant) -> Vec<u32>;

    /// `n` cycles of `variant` on `key`; the latency of each.
    fn cycles(
        &self,
        variant: Self::Variant,
        key: &str,
        n: usize,
    ) -> impl Future<Output = Result<Vec<Duration>, BoxError>> + Send;
}

/// `n` cycles of `variant`, on one task (`tasks` = `None`) or on `tasks`
/// tasks at once, each on a key of its own.
async fn chunk<C: Cycles>(
    clients: &C,
    index: usize,
    variant: C::Variant,
    tasks: Option<usize>,
    n: usize,
) -> Result<Vec<Duration>, BoxError> {
    let Some(tasks) = tasks else {
        return clients
            .cycles(variant, &format!("bench:s1:{index}"), n)
            .await;
    };
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let clients = clients.clone();
            tokio::spawn(async move {
                let key = format!("bench:s1c:{index}:{task}");
                clients.cycles(variant, &key, n).await
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(tasks * n);
    for handle in handles {
        latencies.extend(handle.await??);
    }
    Ok(latencies)
}

/// One variant over one run.
#[derive(Default)]
pub struct Sample {
    used: Used,
    latencies: Vec<Duration>,
}

impl Sample {
    fn cycles(&self) -> f64 {
        self.latencies.len() as f64
    }

    fn per_sec(&self) -> f64 {
        self.cycles() / self.used.wall.as_secs_f64()
    }

    /// Client and server CPU µs per cycle.
    fn cpu(&self) -> (f64, f64) {
        (
            us(self.used.client) / self.cycles(),
            us(self.used.server) / self.cycles(),
        )
    }
}

/// Runs `variants` `runs` times, interleaved; returns `[variant][run]`.
pub async fn measure<C: Cycles>(
    clients: &C,
    variants: &[C::Variant],
    tasks: Option<usize>,
    cycles: usize,
    runs: usize,
) -> Result<Vec<Vec<Sample>>, BoxError> {
    // Warm-up: scripts loaded, statements prepared, connections and
    // allocator warm.
    for (index, &variant) in variants.iter().enumerate() {
        chunk(clients, index, variant, tasks, cycles.clamp(1, 50)).await?;
    }
    let mut samples: Vec<Vec<Sample>> = variants.iter().map(|_| Vec::new()).collect();
    for _ in 0..runs {
        let mut run: Vec<Sample> = variants.iter().map(|_| Sample::default()).collect();
        for turn in 0..TURNS {
            let n = cycles * (turn + 1) / TURNS - cycles * turn / TURNS;
            if n == 0 {
                continue;
            }
            for (index, &variant) in variants.iter().enumerate() {
                let pids = clients.pids(variant);
                let meter = Meter::start(&pids);
                let latencies = chunk(clients, index, variant, tasks, n).await?;
                run[index].used += meter.stop();
                run[index].latencies.extend(latencies);
            }
        }
        for (samples, mut sample) in samples.iter_mut().zip(run) {
            sample.latencies.sort_unstable();
            samples.push(sample);
        }
    }
    Ok(samples)
}

/// Prints one table: medians over the runs, each variant against the first
/// one (the floor) of the same run.
pub fn print<C: Cycles>(title: &str, variants: &[C::Variant], samples: &[Vec<Sample>]) {
    println!("\n{title}");
    println!(
        "  {:<34} {:>9} {:>20} {:>9} {:>9} {:>10} {:>10} {:>20}",
        "variant",
        "cycles/s",
        "vs floor (runs)",
        "p50 µs",
        "p99 µs",
        "client µs",
        "server µs",
        "CPU: floor / this"
    );
    println!(
        "  {:<34} {:>9} {:>20} {:>9} {:>9} {:>10} {:>10} {:>20}",
        "", "", "", "", "", "per cycle", "per cycle", "(runs)"
    );
    let floor = &samples[0];
    for (&variant, runs) in variants.iter().zip(samples) {
        let ratios: Vec<f64> = runs
            .iter()
            .zip(floor)
            .map(|(run, floor)| run.per_sec() / floor.per_sec())
            .collect();
        let p = |q: f64| {
            let median = median(runs.iter().map(|run| us(percentile(&run.latencies, q))));
            micros(Duration::from_secs_f64(median / 1e6))
        };
        // Client + server CPU per cycle of the floor over this variant's, run
        // by run: unlike cycles/s, it does not move when another process
        // takes the CPU for a while.
        let cpu_ratios: Vec<f64> = runs
            .iter()
            .zip(floor)
            .map(|(run, floor)| {
                let total = |sample: &Sample| sample.cpu().0 + sample.cpu().1;
                total(floor) / total(run)
            })
            .collect();
        println!(
            "  {:<34} {:>9.0} {:>20} {:>9} {:>9} {:>10.1} {:>10.1} {:>20}",
            C::name(variant),
            median(runs.iter().map(Sample::per_sec)),
            ratio(&ratios),
            p(0.5),
            p(0.99),
            median(runs.iter().map(|run| run.cpu().0)),
            median(runs.iter().map(|run| run.cpu().1)),
            ratio(&cpu_ratios),
        );
    }
}
