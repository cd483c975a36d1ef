//! Leader election: several scheduler instances, one of which runs the jobs.
//! Kill the leader and another takes over within the ttl, in a later term.
//!
//! ```text
//! cargo run --example scheduler
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example scheduler -- --instances 4 --kills 3
//! ```
//!
//! Every instance calls `locker.election("scheduler", 1s).run(…)`: it
//! campaigns for the role `scheduler`, and while it leads, runs the jobs one
//! after the other. A job's result is written to a
//! [`FencedStore`](lockmacro_runtime::FencedStore) with the leader's term,
//! so that a leader that lost the role without knowing it cannot overwrite
//! the work of a later term; the next job is the one after the last result
//! written, by whichever leader wrote it.
//!
//! Once the leader has started three jobs, the program kills it mid-job, as
//! a crash would, up to `--kills` times (2 by default). Nothing refreshes its
//! lease any more, so the role is free within the ttl; a waiting instance,
//! which sends nothing while it waits, takes it over then, in a later term,
//! and runs the interrupted job again (its result was never written). In
//! the end every instance stops: the leader resigns, the others give up
//! their campaigns.
//!
//! With `REDIS_URL`, the instances are separate processes (this program
//! starts copies of itself) and a kill is SIGKILL. Without it, they are
//! threads, each with its own runtime and locker on one in-memory backend;
//! a killed one freezes its thread for good, so that, as with a killed
//! process, neither its jobs nor its lease's watchdog run again.
//!
//! The program exits with an error unless each kill was followed by a
//! takeover, the terms increased, and every job of a term was run by the
//! instance elected in it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use lockmacro_runtime::{FencedStore, LockError, Locker, MemoryBackend, Term};
use tokio::sync::watch;

const ROLE: &str = "scheduler";
const TTL: Duration = Duration::from_secs(1);
/// How long one job runs.
const JOB: Duration = Duration::from_millis(250);
/// Jobs a leader starts before the program kills it.
const JOBS_PER_TERM: usize = 3;
/// The fenced key the jobs' results go to (the role's lock key lives under
/// the `demo` namespace, as `demo:scheduler`).
const RESULTS: &str = "demo:scheduler:last-job";
/// The longest the program waits for anything to happen.
const STALL: Duration = Duration::from_secs(10);

struct Args {
    instances: usize,
    kills: usize,
    /// Set in an instance process: its number.
    instance: Option<usize>,
}

fn parse_args() -> Args {
    let mut args = Args {
        instances: 3,
        kills: 2,
        instance: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or_else(|| usage(&format!("{name} needs a number")))
        };
        match flag.as_str() {
            "--instances" => args.instances = value("--instances").max(2),
            "--kills" => args.kills = value("--kills"),
            "--instance" => args.instance = Some(value("--instance")),
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    args.kills = args.kills.min(args.instances - 1);
    args
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "{problem}\nusage: scheduler [--instances N] [--kills K]   (REDIS_URL=redis://… to run as processes on Redis)"
    );
    std::process::exit(2);
}

/// Runs one instance until `stop` turns true: campaigns, and runs the jobs
/// while it leads; a term whose jobs fail ends, and the instance campaigns
/// again. `say` prints a line for the controller; `crash` is checked mid-job
/// (threads only: a process is killed from outside).
async fn instance(
    n: usize,
    locker: Locker,
    results: FencedStore,
    stop: watch::Receiver<bool>,
    say: impl Fn(String) + Clone,
    crash: impl Fn() + Clone,
) -> Result<(), LockError> {
    let election = locker.election(ROLE, TTL).metadata(format!("instance {n}"));
    say(format!("instance {n}: campaigning for `{ROLE}`"));
    let mut stopping = stop.clone();
    // Stopping drops a leader's jobs and gives the role back before
    // `run_until` returns; a follower gives up its campaign.
    election
        .run_until(stopping.wait_for(|stop| *stop), |term| {
            lead(n, term, results.clone(), say.clone(), crash.clone())
        })
        .await?;
    say(format!("instance {n}: stopped"));
    Ok(())
}

/// What the leader does in one term: run the jobs, one after the other,
/// until an error ends the term.
async fn lead(
    n: usize,
    term: Term,
    results: FencedStore,
    say: impl Fn(String),
    crash: impl Fn(),
) -> Result<(), LockError> {
    let t = term.number();
    say(format!("instance {n}: elected, term {t}"));
    loop {
        let last = results.get(RESULTS).await?;
        let job = last.map_or(0, |last| {
            last.value
                .split_whitespace()
                .nth(1)
                .and_then(|job| job.parse::<u64>().ok())
                .unwrap_or(0)
        }) + 1;
        say(format!("instance {n}: term {t}: running job {job}"));
        tokio::time::sleep(JOB).await;
        crash();
        let result = format!("job {job} by instance {n}");
        if !results.set(RESULTS, &result, t).await? {
            say(format!(
                "instance {n}: term {t}: result of job {job} REFUSED: a later term has written"
            ));
            // This term is over: a later one has begun elsewhere.
            return Err(LockError::Lost {
                key: ROLE.to_owned(),
                namespace: String::new(),
            });
        }
    }
}

/// Runs the example; a failure is printed as its message.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("Error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args();
    let url = std::env::var("REDIS_URL")
        .ok()
        .filter(|url| !url.is_empty());
    if let (Some(url), Some(n)) = (&url, args.instance) {
        return instance_process(url, n);
    }
    let (lines, events) = mpsc::channel();
    let mut instances: Box<dyn Instances> = match &url {
        None => {
            println!(
                "REDIS_URL is not set: {} instances as threads on the in-memory backend.",
                args.instances
            );
            Box::new(Threads::start(args.instances, lines))
        }
        Some(url) => {
            println!(
                "{} instances as separate processes against {url}.",
                args.instances
            );
            Box::new(Processes::start(url, args.instances, lines)?)
        }
    };
    println!(
        "Role `{ROLE}`, ttl {TTL:?}; the leader is killed mid-job once it has started {JOBS_PER_TERM} jobs, {} times.\n",
        args.kills
    );
    let clock = Clock(Instant::now());
    let outcome = control(&args, &events, &mut *instances, clock);
    instances.stop(&events, clock);
    report(&args, &outcome?, &*instances)
}

/// Instances as the controller sees them: threads or processes.
trait Instances {
    /// Kills instance `n` as a crash would; true when it is dead on return,
    /// false when it says `CRASHES` once it is.
    fn kill(&mut self, n: usize) -> bool;
    /// Tells every live instance to stop, and waits (a while) until they have.
    fn stop(&mut self, events: &Receiver<(usize, String)>, clock: Clock);
    /// The last job result written, and its term.
    fn last_result(&self) -> Result<Option<(String, u64)>, Box<dyn std::error::Error>>;
}

/// What the controller saw.
#[derive(Default)]
struct Outcome {
    /// Each term: its number, the instance elected, and how long after the
    /// previous leader was killed it was elected (none for the first).
    terms: Vec<(u64, usize, Option<Duration>)>,
    /// The instances whose jobs were seen, per term.
    runners: HashMap<u64, Vec<usize>>,
    refused: usize,
}

/// Prints what the instances say, stamped with the time, and kills each
/// leader once it has started its jobs.
fn control(
    args: &Args,
    events: &Receiver<(usize, String)>,
    instances: &mut dyn Instances,
    clock: Clock,
) -> Result<Outcome, Box<dyn std::error::Error>> {
    let stamp = |what: &str| clock.stamp(what);
    let mut outcome = Outcome::default();
    let mut killed: Option<Instant> = None;
    let mut kills = 0;
    loop {
        let (from, line) = match events.recv_timeout(STALL) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => return Err("nothing happened for 10 s".into()),
            Err(RecvTimeoutError::Disconnected) => return Err("every instance exited".into()),
        };
        stamp(&line);
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.get(2..).unwrap_or_default() {
            ["elected,", "term", term] => {
                let after = killed.take().map(|at| at.elapsed());
                if let Some(after) = after {
                    stamp(&format!(
                        "** instance {from} took over {} ms after the kill (ttl {} ms)",
                        after.as_millis(),
                        TTL.as_millis()
                    ));
                }
                outcome.terms.push((term.parse()?, from, after));
            }
            ["term", term, "running", "job", _] => {
                let term: u64 = term.trim_end_matches(':').parse()?;
                let runners = outcome.runners.entry(term).or_default();
                runners.push(from);
                let leader = outcome.terms.last().map(|&(_, n, _)| n);
                if runners.len() == JOBS_PER_TERM && leader == Some(from) {
                    if kills == args.kills {
                        return Ok(outcome);
                    }
                    kills += 1;
                    stamp(&format!("** killing instance {from}, the leader, mid-job"));
                    if instances.kill(from) {
                        killed = Some(Instant::now());
                    }
                }
            }
            ["term", _, "result", ..] => outcome.refused += 1,
            // A thread's crash: it froze just now.
            ["CRASHES"] => killed = Some(Instant::now()),
            _ => {}
        }
    }
}

fn report(
    args: &Args,
    outcome: &Outcome,
    instances: &dyn Instances,
) -> Result<(), Box<dyn std::error::Error>> {
    println!("\n| term                 | leader     | elected                      |");
    println!("|----------------------|------------|------------------------------|");
    for &(term, n, after) in &outcome.terms {
        let elected = match after {
            None => "first".to_owned(),
            Some(after) => format!("{} ms after the kill", after.as_millis()),
        };
        println!("| {term:<20} | instance {n} | {elected:<28} |");
    }
    let increasing = outcome.terms.windows(2).all(|pair| pair[1].0 > pair[0].0);
    let takeovers = outcome.terms.iter().filter(|t| t.2.is_some()).count();
    let longest = outcome.terms.iter().filter_map(|t| t.2).max();
    let one_leader = outcome.runners.iter().all(|(term, runners)| {
        let elected = outcome.terms.iter().find(|t| t.0 == *term).map(|t| t.1);
        runners.iter().all(|&n| Some(n) == elected)
    });
    let yes = |ok: bool| if ok { "yes" } else { "NO" };
    println!();
    println!("leaders killed        {}", args.kills);
    println!("takeovers             {takeovers}");
    if let Some(longest) = longest {
        println!(
            "longest takeover      {} ms after the kill (ttl {} ms)",
            longest.as_millis(),
            TTL.as_millis()
        );
    }
    println!("terms increase        {}", yes(increasing));
    println!("one leader per term   {}", yes(one_leader));
    println!("results refused       {}", outcome.refused);
    if let Some((result, term)) = instances.last_result()? {
        println!("last result           {result}, term {term}");
    }
    if takeovers != args.kills || !increasing || !one_leader {
        return Err("each kill must be followed by a takeover in a later term".into());
    }
    Ok(())
}

/// The instances as threads on one in-memory backend.
struct Threads {
    stop: watch::Sender<bool>,
    /// Per instance: told to crash.
    crash: Vec<Arc<AtomicBool>>,
    results: FencedStore,
}

impl Threads {
    fn start(count: usize, lines: Sender<(usize, String)>) -> Self {
        let locks = Arc::new(MemoryBackend::new());
        let results = FencedStore::memory();
        let (stop, stopped) = watch::channel(false);
        let crash: Vec<Arc<AtomicBool>> = (0..count).map(|_| Arc::default()).collect();
        for (n, crash) in crash.iter().enumerate() {
            let (locks, results, stopped, lines) = (
                locks.clone(),
                results.clone(),
                stopped.clone(),
                lines.clone(),
            );
            let crash = crash.clone();
            // Not joined: a crashed instance never ends.
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("cannot start a tokio runtime");
                let locker = Locker::new(locks).with_namespace("demo");
                let say = move |line: String| {
                    let _ = lines.send((n, line));
                };
                let crash = {
                    let say = say.clone();
                    move || {
                        if crash.load(Ordering::SeqCst) {
                            say(format!("instance {n}: CRASHES"));
                            // The runtime, its locker's watchdog included,
                            // never runs again, as in a killed process.
                            loop {
                                std::thread::park();
                            }
                        }
                    }
                };
                let run = instance(n, locker, results, stopped, say.clone(), crash);
                if let Err(err) = runtime.block_on(run) {
                    say(format!("instance {n}: failed: {err}"));
                }
            });
        }
        Threads {
            stop,
            crash,
            results,
        }
    }
}

impl Instances for Threads {
    fn kill(&mut self, n: usize) -> bool {
        // It crashes mid-job, where it looks.
        self.crash[n].store(true, Ordering::SeqCst);
        false
    }

    fn stop(&mut self, events: &Receiver<(usize, String)>, clock: Clock) {
        let _ = self.stop.send(true);
        let live = self
            .crash
            .iter()
            .filter(|c| !c.load(Ordering::SeqCst))
            .count();
        print_until_stopped(events, live, clock);
    }

    fn last_result(&self) -> Result<Option<(String, u64)>, Box<dyn std::error::Error>> {
        let runtime = tokio::runtime::Builder::new_current_thread().build()?;
        let last = runtime.block_on(self.results.get(RESULTS))?;
        Ok(last.map(|last| (last.value, last.token)))
    }
}

/// Prints what the instances say until `live` of them said they stopped.
fn print_until_stopped(events: &Receiver<(usize, String)>, live: usize, clock: Clock) {
    let mut stopped = 0;
    while stopped < live {
        let Ok((_, line)) = events.recv_timeout(STALL) else {
            break;
        };
        clock.stamp(&line);
        stopped += usize::from(line.ends_with(": stopped"));
    }
}

/// Stamps lines with the time since the start.
#[derive(Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn stamp(&self, what: &str) {
        println!("{:>6} ms  {what}", self.0.elapsed().as_millis());
    }
}

/// The instances as processes on Redis.
struct Processes {
    children: Vec<Option<Child>>,
    url: String,
}

impl Processes {
    fn start(
        url: &str,
        count: usize,
        lines: Sender<(usize, String)>,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        // Nothing listening at `url` fails here at once, with the address,
        // and every run starts from job 1.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            Locker::connect(url).await?;
            let mut conn = redis::Client::open(url)?
                .get_multiplexed_async_connection()
                .await?;
            let () = redis::cmd("DEL")
                .arg(RESULTS)
                .query_async(&mut conn)
                .await?;
            Ok::<_, Box<dyn std::error::Error>>(())
        })?;
        let exe = std::env::current_exe()?;
        let mut children = Vec::new();
        for n in 0..count {
            let mut child = Command::new(&exe)
                .args(["--instance", &n.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()?;
            let stdout = child.stdout.take().expect("piped");
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if lines.send((n, line)).is_err() {
                        break;
                    }
                }
            });
            children.push(Some(child));
        }
        Ok(Processes {
            children,
            url: url.to_owned(),
        })
    }
}

impl Instances for Processes {
    fn kill(&mut self, n: usize) -> bool {
        if let Some(mut child) = self.children[n].take() {
            // SIGKILL: no destructor, no release.
            let _ = child.kill();
            let _ = child.wait();
        }
        true
    }

    fn stop(&mut self, events: &Receiver<(usize, String)>, clock: Clock) {
        // An instance stops when its standard input closes.
        let live = self.children.iter().flatten().count();
        for child in self.children.iter_mut().flatten() {
            drop(child.stdin.take());
        }
        print_until_stopped(events, live, clock);
        for mut child in self.children.iter_mut().filter_map(Option::take) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn last_result(&self) -> Result<Option<(String, u64)>, Box<dyn std::error::Error>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let last = runtime
            .block_on(async { FencedStore::connect(&self.url).await?.get(RESULTS).await })?;
        Ok(last.map(|last| (last.value, last.token)))
    }
}

/// An instance process: runs until its standard input closes (the program
/// that started it stops it, or is gone).
fn instance_process(url: &str, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let (stop, stopped) = watch::channel(false);
    std::thread::spawn(move || {
        let _ = std::io::stdin().lock().lines().count();
        let _ = stop.send(true);
    });
    tokio::runtime::Runtime::new()?.block_on(async {
        let locker = Locker::connect(url).await?.with_namespace("demo");
        let results = FencedStore::connect(url).await?;
        let say = |line: String| println!("{line}");
        instance(n, locker, results, stopped, say, || {}).await?;
        Ok(())
    })
}
