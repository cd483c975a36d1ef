//! Leader election under faults. A leader process stopped (SIGSTOP) past
//! its lease while another instance is elected: once resumed, it does not
//! act in its old term (its body was dropped on the local deadline), a
//! write it sends with the old term is refused by the `FencedStore`, and it
//! is elected again only in a later term. A witness that does not trust the
//! lock records every act as (term, writer) in the order the server
//! received them. And a leader whose Redis freezes gives up on its own
//! deadline, then campaigns through the failed attempts until it is back;
//! a leader loop whose body fails on a Redis blip leads again in a later
//! term; and an observer sees a killed leader's expiry, then the next one.

use std::convert::Infallible;
use std::env;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use lockmacro_runtime::{FencedStore, Locker, RedisBackend, RedisConfig};
use tokio::sync::{mpsc, oneshot};

use lockmacro_testkit::RedisServer;

const ROLE: &str = "scheduler";
const TTL: Duration = Duration::from_secs(1);
/// The list every act is recorded in, as `<term> <writer> <n>`.
const ACTS: &str = "acts";
/// The fenced resource the leaders write.
const RESOURCE: &str = "resource";
/// A limit for a hang, not a measurement.
const BOUND: Duration = Duration::from_secs(20);

/// Set, to the server's URL, for the child process that leads first.
const LEADER_ENV: &str = "LOCKMACRO_FAULTS_ELECTION_LEADER";

/// Kills the child on drop, so that a failing test leaves no process behind.
struct Leader(Child);

impl Drop for Leader {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends `signal` to `child` and waits until the kernel shows it stopped
/// (`T`) or running again.
fn signal(child: &Child, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: `kill` has no memory-safety preconditions; the pid is our own
    // child's, which has not been waited for.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    let stopped = signal == libc::SIGSTOP;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        if (state == Some('T')) == stopped {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the leader process is in state {state:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The child's standard output, line by line, as it comes.
fn lines(child: &mut Child) -> mpsc::UnboundedReceiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        // Read to the end, so that the child never writes to a closed pipe.
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    rx
}

/// Waits for the next line that starts with `prefix`; returns the rest.
async fn line(lines: &mut mpsc::UnboundedReceiver<String>, prefix: &str) -> String {
    let found = tokio::time::timeout(BOUND, async {
        while let Some(line) = lines.recv().await {
            if let Some(rest) = line.strip_prefix(prefix) {
                return Some(rest.trim().to_owned());
            }
        }
        None
    })
    .await
    .unwrap_or_else(|_| panic!("the leader process printed no `{prefix}` within {BOUND:?}"));
    found.unwrap_or_else(|| panic!("the leader process exited without printing `{prefix}`"))
}

/// Waits for a line that starts with each of `prefixes`, in any order,
/// until the process exits; returns the rest of each line found.
async fn lines_starting<const N: usize>(
    lines: &mut mpsc::UnboundedReceiver<String>,
    prefixes: [&str; N],
) -> [Option<String>; N] {
    let mut found: [Option<String>; N] = std::array::from_fn(|_| None);
    let waited = tokio::time::timeout(BOUND, async {
        while found.iter().any(Option::is_none) {
            let Some(line) = lines.recv().await else {
                return;
            };
            for (prefix, found) in prefixes.iter().zip(&mut found) {
                if let Some(rest) = line.strip_prefix(prefix) {
                    *found = Some(rest.trim().to_owned());
                }
            }
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "the leader process printed neither all of {prefixes:?} nor exited within {BOUND:?}"
    );
    found
}

/// Records an act of `writer` in `term`, behind the lock's back.
fn act(server: &RedisServer, term: u64, writer: &str, n: usize) {
    let () = server.cmd(&["RPUSH", ACTS, &format!("{term} {writer} {n}")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_leader_does_not_act_in_its_old_term_and_its_stale_write_is_refused() {
    // The same test, run again in a child process, is the first leader.
    if let Ok(url) = env::var(LEADER_ENV) {
        return lead(&url).await;
    }
    let server = RedisServer::start();
    let mut leader = Leader(
        Command::new(env::current_exe().unwrap())
            .args([
                "election::stopped_leader_does_not_act_in_its_old_term_and_its_stale_write_is_refused",
                "--exact",
                "--nocapture",
            ])
            .env(LEADER_ENV, server.url())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stdin: ChildStdin = leader.0.stdin.take().unwrap();
    let mut lines = lines(&mut leader.0);
    let first: u64 = line(&mut lines, "leader").await.parse().unwrap();
    line(&mut lines, "acted").await;

    // Stopped mid-body, waiting for a timer, with no write in flight: the
    // act due when the timer fires is the first thing it would do once
    // resumed, and its watchdog is stopped too.
    signal(&leader.0, libc::SIGSTOP);
    let stopped = tokio::time::Instant::now();
    let locker = server.locker().await;
    let store = server.expect_ok(FencedStore::connect(&server.url()).await, "store");
    let election = locker.election(ROLE, TTL).metadata("parent");
    let parent = tokio::time::timeout(BOUND, election.campaign())
        .await
        .expect("not elected once the stopped leader's lease ran out");
    let parent = server.expect_ok(parent, "the parent's campaign");
    let second = parent.term();
    println!(
        "elected {:?} after the leader was stopped (ttl {TTL:?})",
        stopped.elapsed()
    );
    act(&server, second, "parent", 0);
    assert!(
        server.expect_ok(store.set(RESOURCE, "parent", second).await, "fenced write"),
        "the new leader's write was refused"
    );

    signal(&leader.0, libc::SIGCONT);
    // Resumed, the old leader sends a write with its old term: one it had
    // made ready before the stop.
    writeln!(stdin, "resumed").unwrap();
    // Until both are printed, or the process exits (as it would if its body
    // ran on in the old term, until a write of it was refused).
    let [stale, dropped] =
        lines_starting(&mut lines, ["stale write accepted:", "body dropped"]).await;
    act(&server, second, "parent", 1);
    assert!(!parent.is_lost(), "the parent lost the role meanwhile");
    server.expect_ok(parent.resign().await, "resign");

    // Elected again, the child acts in a new term, then its `run` returns
    // and the process exits.
    let rest = tokio::time::timeout(BOUND, async {
        let mut rest = Vec::new();
        while let Some(line) = lines.recv().await {
            rest.push(line);
        }
        rest
    })
    .await
    .expect("the leader process did not finish");
    let status = leader.0.wait().unwrap();

    // The witness first: the acts in the order the server received them.
    let acts: Vec<String> = server.cmd(&["LRANGE", ACTS, "0", "-1"]);
    let acts: Vec<(u64, String)> = acts
        .iter()
        .map(|act| {
            let mut words = act.split(' ');
            let term = words.next().unwrap().parse().unwrap();
            (term, words.next().unwrap().to_owned())
        })
        .collect();
    println!("acts: {acts:?}");
    for pair in acts.windows(2) {
        let ((earlier, _), (later, writer)) = (&pair[0], &pair[1]);
        assert!(
            later >= earlier,
            "the {writer} acted in term {later} after an act in term {earlier}: {acts:?}"
        );
    }
    for (term, writer) in &acts {
        assert!(
            acts.iter().all(|(t, w)| t != term || w == writer),
            "two leaders acted in term {term}: {acts:?}"
        );
    }
    assert_eq!(
        stale.as_deref(),
        Some("false"),
        "the stale leader's write was applied (or never sent)"
    );
    assert_eq!(
        dropped.map(|term| term.parse::<u64>().unwrap()),
        Some(first),
        "the old term's body was not dropped: {rest:?}"
    );
    assert!(status.success(), "the leader process failed: {status}");
    let third: u64 = rest
        .iter()
        .find_map(|line| line.strip_prefix("leader "))
        .unwrap_or_else(|| panic!("the child was not elected again: {rest:?}"))
        .parse()
        .unwrap();
    assert!(
        rest.contains(&format!("result: ok {third}")),
        "run did not return the last term's output: {rest:?}"
    );
    let mut terms: Vec<(u64, &str)> = acts.iter().map(|(t, w)| (*t, w.as_str())).collect();
    terms.dedup();
    assert_eq!(
        terms,
        [(first, "child"), (second, "parent"), (third, "child")],
        "{acts:?}"
    );
    let applied = server.expect_ok(store.get(RESOURCE).await, "read the resource");
    assert_eq!(applied.map(|applied| applied.token), Some(third));
}

/// The child process's part: leads, acts every 100 ms (recording each act
/// in the witness list from inside the poll that makes it, so that the list
/// shows every poll of the body, then writing to the fenced resource), and
/// stops acting should a write be refused. In its second term it acts three
/// times and returns.
async fn lead(url: &str) {
    let locker = Locker::connect(url).await.unwrap();
    let store = FencedStore::connect(url).await.unwrap();
    let witness = Arc::new(Mutex::new(
        redis::Client::open(url).unwrap().get_connection().unwrap(),
    ));
    let election = locker.election(ROLE, TTL).metadata("child");
    let mut called = 0;
    let result = election
        .run(|term| {
            called += 1;
            let first = called == 1;
            let (store, witness) = (store.clone(), witness.clone());
            async move {
                let number = term.number();
                let _dropped = ReportDrop(number);
                println!("leader {number}");
                if first {
                    // A write made ready now, sent once the parent says the
                    // process was resumed: it carries this term.
                    let store = store.clone();
                    tokio::spawn(async move {
                        let mut resumed = String::new();
                        tokio::task::spawn_blocking(move || {
                            std::io::stdin().read_line(&mut resumed)
                        })
                        .await
                        .unwrap()
                        .unwrap();
                        let accepted = store.set(RESOURCE, "stale", number).await.unwrap();
                        println!("stale write accepted: {accepted}");
                    });
                }
                // Bounded, in case the parent is gone: 10 s of acts.
                let acts = if first { 100 } else { 3 };
                for n in 0..acts {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let () = redis::cmd("RPUSH")
                        .arg(ACTS)
                        .arg(format!("{number} child {n}"))
                        .query(&mut *witness.lock().unwrap())
                        .unwrap();
                    if !store.set(RESOURCE, "child", number).await.unwrap() {
                        println!("write refused in term {number}");
                        break;
                    }
                    println!("acted {n}");
                }
                std::mem::forget(_dropped);
                Ok::<_, Infallible>(number)
            }
        })
        .await;
    match result {
        Ok(term) => println!("result: ok {term}"),
        Err(err) => println!("result: error {err}"),
    }
}

/// Prints `body dropped <term>` when the body's future is dropped before it
/// completes.
struct ReportDrop(u64);

impl Drop for ReportDrop {
    fn drop(&mut self) {
        println!("body dropped {}", self.0);
    }
}

/// Signals when the body's future is dropped.
struct OnDrop(Option<oneshot::Sender<()>>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        if let Some(dropped) = self.0.take() {
            let _ = dropped.send(());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_gives_up_while_redis_is_frozen_and_campaigns_until_it_is_back() {
    let server = RedisServer::start();
    let config = RedisConfig::default().response_timeout(Duration::from_millis(300));
    let backend = server.expect_ok(
        RedisBackend::connect_with(&server.url(), config).await,
        "connect",
    );
    let locker = Locker::new(backend);
    let (entered_tx, entered) = oneshot::channel();
    let (dropped_tx, dropped) = oneshot::channel();
    let run = tokio::spawn(async move {
        let mut signals = Some((entered_tx, dropped_tx));
        let mut terms = Vec::new();
        let election = locker.election(ROLE, TTL);
        let result = election
            .run(|term| {
                terms.push(term.number());
                let signals = signals.take();
                async move {
                    if let Some((entered, dropped)) = signals {
                        let _dropped = OnDrop(Some(dropped));
                        let _ = entered.send(());
                        std::future::pending::<()>().await;
                    }
                    Ok::<_, Infallible>(term.number())
                }
            })
            .await;
        (result, terms)
    });
    entered.await.expect("the body was not entered");
    server.pause();
    let gave_up = tokio::time::timeout(TTL * 5, dropped).await;
    // The outage goes on past the give-up, so that the campaign's attempts
    // fail: a stretch of the fault, not a synchronisation.
    tokio::time::sleep(TTL).await;
    server.resume();
    gave_up
        .expect("the body ran on while Redis was frozen, past the lease's deadline")
        .unwrap();
    let (result, terms) = tokio::time::timeout(BOUND, run)
        .await
        .expect("not elected again once Redis was back")
        .unwrap();
    let returned = server.expect_ok(result, "run");
    assert_eq!(terms.len(), 2, "the body was called in terms {terms:?}");
    assert!(terms[1] > terms[0], "term {} after {}", terms[1], terms[0]);
    assert_eq!(returned, terms[1]);
}

/// A leader loop whose body writes with `?` (as the guide's does) while
/// Redis freezes: the write times out, the body returns its error, and the
/// term ends; the instance keeps campaigning, and once Redis answers again
/// it leads in a later term, whose write the fenced resource takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_fails_on_a_redis_blip_leads_again_in_a_later_term() {
    let server = RedisServer::start();
    let config = RedisConfig::default().response_timeout(Duration::from_millis(300));
    let backend = server.expect_ok(
        RedisBackend::connect_with(&server.url(), config.clone()).await,
        "connect",
    );
    let store = server.expect_ok(
        FencedStore::connect_with(&server.url(), config).await,
        "store",
    );
    let locker = Locker::new(backend);
    // Long enough that the lease outlives the blip: the body's error, not
    // a lost lease, ends the term.
    let ttl = Duration::from_secs(3);
    let (wrote_tx, mut wrote) = mpsc::unbounded_channel();
    let (failed_tx, failed) = oneshot::channel();
    let run = tokio::spawn(async move {
        let mut failed = Some(failed_tx);
        let mut terms = Vec::new();
        let election = locker.election(ROLE, ttl);
        let result = election
            .run(|term| {
                terms.push(term.number());
                let (store, wrote, failed) = (store.clone(), wrote_tx.clone(), failed.take());
                async move {
                    let number = term.number();
                    let written = async {
                        loop {
                            store.set(RESOURCE, "leader", number).await?;
                            let _ = wrote.send(number);
                            if failed.is_none() {
                                return Ok::<_, lockmacro_runtime::LockError>(number);
                            }
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                    .await;
                    if let (Err(err), Some(failed)) = (&written, failed) {
                        let _ = failed.send(err.to_string());
                    }
                    written
                }
            })
            .await;
        (result, terms)
    });
    let first = tokio::time::timeout(BOUND, wrote.recv())
        .await
        .expect("the leader did not write")
        .unwrap();
    server.pause();
    let failure = tokio::time::timeout(BOUND, failed).await;
    server.resume();
    let failure = failure
        .expect("the body's write did not fail while Redis was frozen")
        .expect("the body ended without failing");
    println!("the body failed in term {first}: {failure}");
    let (result, terms) = tokio::time::timeout(BOUND, run)
        .await
        .expect("not elected again once Redis was back")
        .unwrap();
    let returned = server.expect_ok(result, "run");
    assert_eq!(terms.len(), 2, "the body was called in terms {terms:?}");
    assert_eq!(terms[0], first);
    assert!(terms[1] > terms[0], "term {} after {}", terms[1], terms[0]);
    assert_eq!(returned, terms[1]);
    let store = server.expect_ok(FencedStore::connect(&server.url()).await, "store");
    let applied = server.expect_ok(store.get(RESOURCE).await, "read the resource");
    assert_eq!(applied.map(|applied| applied.token), Some(terms[1]));
}

/// Set, to the server's URL, for the child process that leads until it is
/// killed.
const KILLED_ENV: &str = "LOCKMACRO_FAULTS_ELECTION_KILLED";

/// An observer sees a leader in a child process, then, once the child is
/// killed (SIGKILL: no release is sent, the key expires), that nobody
/// leads, then the next leader in a later term: every change, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_sees_a_killed_leaders_expiry_and_the_next_leader() {
    if let Ok(url) = env::var(KILLED_ENV) {
        let locker = Locker::connect(&url).await.unwrap();
        let leader = locker
            .election(ROLE, TTL)
            .metadata("child")
            .campaign()
            .await
            .unwrap();
        println!("leader {}", leader.term());
        return std::future::pending().await;
    }
    let server = RedisServer::start();
    let locker = server.locker().await;
    let mut changes = locker.election(ROLE, TTL).observe();
    let mut next = async || {
        let item = tokio::time::timeout(BOUND, changes.next())
            .await
            .expect("the observer saw no change")
            .expect("the observer's stream ended");
        server.expect_ok(item, "observe")
    };
    assert_eq!(next().await, None, "a leader before anyone campaigned");

    let mut child = Leader(
        Command::new(env::current_exe().unwrap())
            .args([
                "election::observer_sees_a_killed_leaders_expiry_and_the_next_leader",
                "--exact",
                "--nocapture",
            ])
            .env(KILLED_ENV, server.url())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = lines(&mut child.0);
    let first: u64 = line(&mut lines, "leader").await.parse().unwrap();
    let seen = next().await.expect("the child's leadership was not seen");
    assert_eq!((seen.term, seen.metadata.as_str()), (first, "child"));

    child.0.kill().unwrap();
    child.0.wait().unwrap();
    assert_eq!(
        next().await,
        None,
        "the killed leader's expiry was not seen as nobody leading"
    );

    let leader = tokio::time::timeout(
        BOUND,
        locker.election(ROLE, TTL).metadata("parent").campaign(),
    )
    .await
    .expect("not elected after the child's lease ran out");
    let leader = server.expect_ok(leader, "campaign");
    assert!(leader.term() > first);
    let seen = next().await.expect("the parent's leadership was not seen");
    assert_eq!(
        (seen.term, seen.metadata.as_str()),
        (leader.term(), "parent")
    );
    server.expect_ok(leader.resign().await, "resign");
}
