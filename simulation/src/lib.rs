//! Deterministic simulation of lockmacro.
//!
//! The unmodified runtime ([`Locker`](lockmacro_runtime::Locker), its
//! waits, leases and watchdog, the Redis backend with its scripts and its
//! script-free engine) runs on turmoil's simulated network and clock
//! against [`lockmacro_sim::Server`], a simulated Redis that runs the
//! runtime's own Lua scripts. Everything a run does comes from one seed:
//! latencies, the server's clock rate and steps, each client's operations,
//! and the faults (server pauses and restarts that lose all or part of the
//! data, connection resets, partitions, held messages). Each run's history
//! is judged by [`lockmacro_history::check`], the checker the
//! real-server fault suites use.
//!
//! `scripts/simulate N` runs N seeds, each in a process of its own (see
//! [`run_alone`]); a failing seed prints itself and replays with
//! `SEED=<seed> scripts/simulate 1`.

mod clock;
mod dial;
mod entropy;
mod faults;
mod run;
mod workload;

use self::run::run;
pub use self::run::{Config, Outcome};

/// Runs `seed`, drawing every random byte of the process from it: the
/// runtime's tokens, std's hash maps, tokio's choices. Call it once per
/// process, before anything else draws: the same seed then replays the
/// same run, step for step.
pub fn run_alone(seed: u64, config: &Config) -> Outcome {
    entropy::seed_process(seed);
    run(seed, config)
}
