//! Runs simulation seeds and stops at the first that fails, printing the
//! seed, its faults and the part of its history that shows the violation.
//! `SEED` (or `--seed`) gives the first seed; without it the first is drawn
//! from the clock and printed. Each seed runs in a process of its own (this
//! program again, with `--alone`), so that it replays exactly; `--jobs` of
//! them at a time.

use std::collections::VecDeque;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Instant;

use clap::Parser;
use lockmacro_simulation::{Config, Outcome, run_alone};

#[derive(Parser)]
#[command(about = "Runs lockmacro's deterministic simulation")]
struct Args {
    /// How many seeds to run.
    #[arg(default_value_t = 1)]
    seeds: u64,
    /// The first seed; the others follow it.
    #[arg(long, env = "SEED")]
    seed: Option<u64>,
    /// Seeds run at a time (default: one per CPU).
    #[arg(long)]
    jobs: Option<usize>,
    /// Clients per run.
    #[arg(long, default_value_t = Config::default().clients)]
    clients: usize,
    /// Operations per client.
    #[arg(long, default_value_t = Config::default().operations)]
    operations: usize,
    /// Run without faults.
    #[arg(long)]
    no_faults: bool,
    /// Print each run's faults and history, passed or not.
    #[arg(long)]
    verbose: bool,
    /// Run the one seed `--seed` in this process.
    #[arg(long, hide = true)]
    alone: bool,
}

impl Args {
    fn config(&self) -> Config {
        Config {
            clients: self.clients,
            operations: self.operations,
            faults: !self.no_faults,
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.alone {
        let seed = args.seed.expect("--alone runs the seed given by --seed");
        let outcome = run_alone(seed, &args.config());
        report(&outcome, args.verbose);
        return if outcome.passed() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let first = args.seed.unwrap_or_else(seed_from_clock);
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    println!(
        "simulate: {} seeds from {first}, {jobs} at a time",
        args.seeds
    );
    let started = Instant::now();
    let mut seeds = first..first.saturating_add(args.seeds);
    let mut running: VecDeque<(u64, Child)> = VecDeque::new();
    loop {
        while running.len() < jobs
            && let Some(seed) = seeds.next()
        {
            running.push_back((seed, spawn(&args, seed)));
        }
        let Some((seed, child)) = running.pop_front() else {
            break;
        };
        let output = child
            .wait_with_output()
            .expect("waiting for a seed's process");
        print!("{}", String::from_utf8_lossy(&output.stdout));
        if !output.status.success() {
            eprint!("{}", String::from_utf8_lossy(&output.stderr));
            for (_, mut child) in running {
                let _ = child.kill();
                let _ = child.wait();
            }
            println!("seed {seed} FAILED; replay it with: SEED={seed} scripts/simulate 1");
            return ExitCode::FAILURE;
        }
    }
    println!(
        "simulate: {} seeds passed in {:.1?}",
        args.seeds,
        started.elapsed()
    );
    ExitCode::SUCCESS
}

/// This program again, running `seed` alone.
fn spawn(args: &Args, seed: u64) -> Child {
    let program = std::env::current_exe().expect("this program's path");
    let mut command = Command::new(program);
    command
        .args(["--alone", "--seed", &seed.to_string()])
        .args(["--clients", &args.clients.to_string()])
        .args(["--operations", &args.operations.to_string()])
        .env_remove("SEED")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if args.no_faults {
        command.arg("--no-faults");
    }
    if args.verbose {
        command.arg("--verbose");
    }
    command.spawn().expect("starting a seed's process")
}

fn report(outcome: &Outcome, verbose: bool) {
    let seed = outcome.seed;
    if verbose {
        for (at, fault) in &outcome.faults {
            println!("fault at {at:.3?}: {fault}");
        }
        print!("{}", outcome.history);
        println!(
            "seed {seed}: {} holds, {} fenced writes, {} faults",
            outcome.history.holds.len(),
            outcome.history.writes.len(),
            outcome.faults.len()
        );
    }
    if outcome.passed() {
        return;
    }
    println!("seed {seed} failed");
    if let Some(error) = &outcome.error {
        println!("the run failed: {error}");
    }
    if !verbose {
        for (at, fault) in &outcome.faults {
            println!("fault at {at:.3?}: {fault}");
        }
    }
    for violation in &outcome.violations {
        println!("violation: {violation}");
        print!("{}", outcome.history.around(violation));
    }
}

/// A first seed from the clock: runs differ unless a seed is given.
fn seed_from_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64)
        % 1_000_000_000
}
