//! The command line, as clap reads it.

use std::time::Duration;

use clap::{Parser, Subcommand};

/// What each exit code means, for `--help`.
const EXIT_CODES: &str = "\
Exit codes:
  0  done (inspect: the key is held; force-release: something was released)
  1  inspect: the key is free; force-release: nothing was held, or not confirmed
  2  usage: a bad argument or URL, no URL, force-release without --yes off a terminal
  3  the backend failed: unreachable, refused, timed out, or cannot do this
     (force-release: the key is held by a PostgreSQL transaction)
  4  PostgreSQL: no lockmacro tables in the database (nothing is locked there, or
     it is the wrong database); none are created";

/// See and clear the keys of lockmacro's distributed locks.
#[derive(Debug, Parser)]
#[command(name = "lockmacro", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// The backend, as `Locker::from_url` takes it: redis://, rediss://,
    /// redis+cluster://, redis+sentinel://, redis+redlock://, etcd://,
    /// postgres://.
    ///
    /// Nothing is created there: a PostgreSQL database without lockmacro's
    /// tables is left without them (exit code 4).
    #[arg(long, env = "LOCKMACRO_URL", global = true, hide_env_values = true)]
    pub url: Option<String>,

    /// The locker's namespace: keys are named as the application's
    /// `Locker::with_namespace(…)` names them.
    #[arg(long, short, global = true, default_value = "")]
    pub namespace: String,

    /// Print JSON (one document; for `watch`, one per line) instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the keys held, with their holders, remaining leases, fence and
    /// waiters.
    ///
    /// On PostgreSQL, a lock held by a transaction (`Locker::obtain_in`)
    /// leaves only a hash of its key: it is not listed, `inspect` shows it.
    List {
        /// Only keys whose name starts with this.
        #[arg(long, short, default_value = "")]
        prefix: String,
    },
    /// Show what holds one key and who waits for it.
    ///
    /// On PostgreSQL, a lock held by a transaction (`Locker::obtain_in`) is
    /// shown with the session that holds it, and what ends it.
    Inspect {
        /// The key, as the application names it (without the namespace).
        key: String,
    },
    /// Delete every lease on a key, whoever holds it: its holders lose
    /// their leases at their next refresh, and a waiter can take it.
    ///
    /// A key held by a PostgreSQL transaction (`Locker::obtain_in`) has no
    /// lease: it is freed when that transaction or its session ends (exit
    /// code 3).
    ForceRelease {
        /// The key, as the application names it (without the namespace).
        key: String,
        /// Do not ask. Required when standard input is not a terminal.
        #[arg(long, short)]
        yes: bool,
    },
    /// Print each change of a key (acquired, released, expired) until
    /// interrupted.
    Watch {
        /// The key, as the application names it (without the namespace).
        key: String,
        /// How often the key is read while no release is heard: an acquire
        /// is seen at the next read.
        #[arg(long, default_value = "250ms", value_parser = humantime::parse_duration)]
        interval: Duration,
    },
}
