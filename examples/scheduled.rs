//! Scheduled jobs done right: every instance runs the same cron schedule
//! (through `tokio-cron-scheduler`), and exactly one of them runs each fire,
//! even when their clocks disagree.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379/ SCHEDULED_SKEW_MS=0   cargo run --example scheduled &
//! REDIS_URL=redis://127.0.0.1:6379/ SCHEDULED_SKEW_MS=700 cargo run --example scheduled
//! ```
//!
//! The job fires every two seconds on every instance. Each fire takes a key
//! of its own, `report:<fire time>`: the fire time is the schedule's tick,
//! which every instance names alike however late its clock made it fire.
//! The instance that gets the key runs the job; the others find it held
//! and skip that fire. A lock on one key for every fire (`report`) would
//! not do: the first instance, done in a few milliseconds, would release it
//! before an instance whose clock is behind fires, and that one would run
//! the same fire again. So the key is also held for at least the fire
//! interval (`hold_at_least`), however soon the job ends: it then expires by
//! itself, after every instance whose clock is less than an interval behind
//! has come and found it held.
//!
//! The instances of a test share a clock, so `SCHEDULED_SKEW_MS` makes this
//! one's clock that much behind: it runs each fire that much later.
//! `SCHEDULED_RUNS` names a file each run appends `<fire time> <pid>` to,
//! and the program stops after `SCHEDULED_FOR_SECS` seconds (10 by default).
//! Without `REDIS_URL` the locks are in memory, for one instance.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockmacro_runtime::{HoldOptions, Locker};
use tokio_cron_scheduler::{Job, JobScheduler};

/// How often the job fires: the schedule below, as a duration.
const INTERVAL: Duration = Duration::from_secs(2);
const SCHEDULE: &str = "*/2 * * * * *";

/// What one instance needs to run a fire.
#[derive(Clone)]
struct Instance {
    locker: Locker,
    skew: Duration,
    runs: Option<PathBuf>,
}

impl Instance {
    async fn fire(self) {
        let fire = fire_time(SystemTime::now());
        tokio::time::sleep(self.skew).await;
        // The lease outlives the hold, so the key expires on its own at the
        // end of the interval rather than when the job ends.
        let options = HoldOptions::new(INTERVAL * 2).hold_at_least(INTERVAL);
        let held = self
            .locker
            .hold([format!("report:{fire}")], options, |_| self.run(fire))
            .await;
        match held {
            Ok(()) => println!("fire {fire}: ran here"),
            Err(err) if err.is_not_obtained() => println!("fire {fire}: run elsewhere"),
            Err(err) => eprintln!("fire {fire}: not run: {err}"),
        }
    }

    /// The job itself: here, a line in the file of runs.
    async fn run(&self, fire: u64) {
        let Some(path) = &self.runs else { return };
        let line = format!("{fire} {}\n", std::process::id());
        // One write of one short line to a file opened to append: the lines
        // of several processes do not mix.
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(err) = written {
            eprintln!("cannot record the run in {}: {err}", path.display());
        }
    }
}

/// The tick this fire belongs to, in seconds since the epoch: the nearest
/// multiple of the interval, since a scheduler wakes a little after its
/// tick (or a little before).
fn fire_time(now: SystemTime) -> u64 {
    let now = now
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    let interval = INTERVAL.as_millis();
    let tick = (now + interval / 2) / interval * interval;
    u64::try_from(tick / 1000).expect("seconds fit in u64")
}

fn env_number(name: &str, default: u64) -> u64 {
    let value = std::env::var(name).map_or(Ok(default), |value| value.parse());
    value.unwrap_or_else(|_| panic!("{name} takes a whole number"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let locker = match std::env::var("REDIS_URL") {
        Ok(url) => Locker::connect(&url).await?,
        Err(_) => Locker::memory(),
    };
    let instance = Instance {
        locker,
        skew: Duration::from_millis(env_number("SCHEDULED_SKEW_MS", 0)),
        runs: std::env::var_os("SCHEDULED_RUNS").map(PathBuf::from),
    };
    let run_for = Duration::from_secs(env_number("SCHEDULED_FOR_SECS", 10));

    let mut scheduler = JobScheduler::new().await?;
    scheduler
        .add(Job::new_async(SCHEDULE, move |_, _| {
            Box::pin(instance.clone().fire())
        })?)
        .await?;
    scheduler.start().await?;
    tokio::time::sleep(run_for).await;
    scheduler.shutdown().await?;
    Ok(())
}
