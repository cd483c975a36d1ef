//! Semaphores on etcd under faults: a permit holder frozen (SIGSTOP) past its
//! ttl, whose permit another takes and whose late write the resource refuses
//! by its fencing token; and the leader of three members killed while
//! workers contend for the permits.
//!
//! The resource is a semaphore's: it keeps the tokens of the writes it
//! accepted, in etcd, and refuses a write whose token is older than the
//! newest `PERMITS` it has seen. Tokens are revisions, and at most
//! `PERMITS` holders are live at once, so a holder with `PERMITS` newer
//! holders after it has lost its permit.

use std::env;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, SortOrder, SortTarget, Txn, TxnOp,
};
use lockmacro_runtime::{EtcdBackend, EtcdConfig, LockError, Locker, ObtainOptions, RetryStrategy};
use tokio::time::Instant;

use crate::etcd::{Holder, padded};
use lockmacro_testkit::etcd::EtcdCluster;

const PERMITS: u32 = 2;
/// The tokens the resource accepted writes with, one key each.
const ACCEPTED: &str = "resource/accepted/";

fn permits() -> ObtainOptions {
    ObtainOptions::new().permits(PERMITS).fence()
}

/// Writes to the semaphore's resource with `token`: accepted unless
/// `PERMITS` newer tokens were accepted before. The decision and the record
/// are one transaction, compared against the read they were made from.
async fn fenced_write(client: &mut Client, token: u64) -> Result<bool, etcd_client::Error> {
    loop {
        let newest = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Key, SortOrder::Descend)
            .with_limit(i64::from(PERMITS));
        let read = client.get(ACCEPTED, Some(newest)).await?;
        let revision = read.header().map_or(0, |header| header.revision());
        let mine = format!("{ACCEPTED}{}", padded(token));
        let full = read.kvs().len() == PERMITS as usize;
        if full && read.kvs().iter().all(|kv| kv.key() > mine.as_bytes()) {
            return Ok(false);
        }
        let txn = Txn::new()
            .when([Compare::mod_revision(ACCEPTED, CompareOp::Less, revision + 1).with_prefix()])
            .and_then([TxnOp::put(mine, "", None)]);
        if client.txn(txn).await?.succeeded() {
            return Ok(true);
        }
    }
}

/// Set, to the member's URL, for the child process that holds a permit.
const FROZEN_ENV: &str = "LOCKMACRO_FAULTS_ETCD_FROZEN_PERMIT";

/// One worker's time holding a permit, with its token.
#[derive(Debug, Clone, Copy)]
struct Section {
    token: u64,
    start: Instant,
    end: Instant,
}

/// The most sections that overlap at any instant.
fn most_at_once(sections: &[&Section]) -> usize {
    let mut events: Vec<(Instant, i32)> = Vec::new();
    for section in sections {
        events.push((section.start, 1));
        events.push((section.end, -1));
    }
    // Ends before starts at the same instant.
    events.sort_by_key(|&(at, change)| (at, change));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, change) in events {
        now += change;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// A holder of one of two permits, frozen (SIGSTOP) past its ttl while three
/// workers in this process take the permits in turn: until the frozen
/// holder's permit is deleted on the server (its lease ran out), the workers
/// never hold more than the one other permit at once, and after, never more
/// than two; continued, the frozen holder's write with its old token is
/// refused by the resource, while every worker's was accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_permit_holder_loses_its_permit_and_its_late_write_is_refused() {
    if let Ok(url) = env::var(FROZEN_ENV) {
        return frozen_permit_holder(&url).await;
    }
    let cluster = tokio::task::spawn_blocking(EtcdCluster::single)
        .await
        .unwrap();
    let mut admin = match Client::connect(cluster.endpoints(), None).await {
        Ok(client) => client,
        Err(err) => cluster.fail(format_args!("connect: {err}")),
    };
    let mut holder = Holder(
        Command::new(env::current_exe().unwrap())
            .args([
                "etcd_permits::frozen_permit_holder_loses_its_permit_and_its_late_write_is_refused",
                "--exact",
                "--nocapture",
            ])
            .env(FROZEN_ENV, cluster.endpoints()[0].clone())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stdin = holder.0.stdin.take().unwrap();
    let mut lines = BufReader::new(holder.0.stdout.take().unwrap()).lines();
    let inside = tokio::task::spawn_blocking(move || {
        let inside = lines.by_ref().find_map(|line| {
            let line = line.ok()?;
            let (fence, token) = line
                .strip_prefix("inside, fence ")?
                .split_once(", token ")?;
            Some((fence.parse::<u64>().ok()?, token.to_owned()))
        });
        (inside, lines)
    });
    let (inside, mut lines) = tokio::time::timeout(Duration::from_secs(30), inside)
        .await
        .unwrap_or_else(|_| cluster.fail("the holder did not get inside within 30 s"))
        .unwrap();
    let (frozen_fence, frozen_token) =
        inside.unwrap_or_else(|| cluster.fail("the holder exited without getting inside"));

    // Heard from the server: the revision at which the frozen holder's
    // permit was deleted.
    let permit_key = format!("job/shares/permits-{PERMITS}/{frozen_token}");
    let (_watcher, mut stream) = match admin.watch(permit_key.as_str(), None).await {
        Ok(watch) => watch,
        Err(err) => cluster.fail(format_args!("watch: {err}")),
    };
    let deleted = tokio::spawn(async move {
        while let Ok(Some(response)) = stream.message().await {
            if let Some(event) = response
                .events()
                .iter()
                .find(|event| event.event_type() == EventType::Delete)
            {
                return event.kv().map_or(0, |kv| kv.mod_revision());
            }
        }
        0
    });
    // SAFETY: the pid is our unreaped child.
    unsafe { libc::kill(holder.0.id() as libc::pid_t, libc::SIGSTOP) };

    let sections = Arc::new(Mutex::new(Vec::new()));
    let refused = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for worker in 0..3 {
        let locker = match Locker::etcd(cluster.endpoints()).await {
            Ok(locker) => locker,
            Err(err) => cluster.fail(format_args!("connect: {err:?}")),
        };
        let mut resource = match Client::connect(cluster.endpoints(), None).await {
            Ok(client) => client,
            Err(err) => cluster.fail(format_args!("connect: {err}")),
        };
        let (sections, refused) = (sections.clone(), refused.clone());
        workers.push(tokio::spawn(async move {
            let waiting = permits().retry(
                RetryStrategy::linear(Duration::from_millis(20)).deadline(Duration::from_secs(30)),
            );
            for round in 0..20 {
                let lock = locker
                    .obtain("job", Duration::from_secs(30), waiting.clone())
                    .await
                    .unwrap_or_else(|err| panic!("worker {worker} round {round}: {err:?}"));
                let start = Instant::now();
                let token = lock.fence_token().expect("fenced");
                if !fenced_write(&mut resource, token).await.expect("write") {
                    refused.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                let end = Instant::now();
                sections.lock().unwrap().push(Section { token, start, end });
                lock.release().await.expect("release");
            }
        }));
    }
    for worker in workers {
        tokio::time::timeout(Duration::from_secs(120), worker)
            .await
            .unwrap_or_else(|_| cluster.fail("the workers did not finish within 120 s"))
            .unwrap();
    }
    let deleted_at = tokio::time::timeout(Duration::from_secs(30), deleted)
        .await
        .unwrap_or_else(|_| cluster.fail("the frozen holder's permit was never deleted"))
        .unwrap();
    assert!(
        deleted_at > i64::try_from(frozen_fence).unwrap(),
        "deleted at revision {deleted_at}, taken at {frozen_fence}"
    );
    let sections = sections.lock().unwrap().clone();
    let deleted_at = u64::try_from(deleted_at).unwrap();
    let (before, after): (Vec<&Section>, Vec<&Section>) = sections
        .iter()
        .partition(|section| section.token < deleted_at);
    assert!(
        !before.is_empty() && !after.is_empty(),
        "the workers did not hold permits both while the frozen holder had its own and after: \
         {} and {}",
        before.len(),
        after.len()
    );
    assert_eq!(
        most_at_once(&before),
        1,
        "workers held both permits while the frozen holder had one"
    );
    let most = most_at_once(&sections.iter().collect::<Vec<_>>());
    assert!(most <= PERMITS as usize, "{most} holders at once");
    assert_eq!(
        refused.load(Ordering::SeqCst),
        0,
        "a live holder's write was refused"
    );

    // The frozen holder wakes up and writes on its stale permit.
    // SAFETY: as above.
    unsafe { libc::kill(holder.0.id() as libc::pid_t, libc::SIGCONT) };
    writeln!(stdin, "write").unwrap();
    let outcome = tokio::task::spawn_blocking(move || {
        lines.find_map(|line| line.ok()?.strip_prefix("write ").map(str::to_owned))
    });
    let outcome = tokio::time::timeout(Duration::from_secs(30), outcome)
        .await
        .unwrap_or_else(|_| cluster.fail("the holder did not report its write within 30 s"))
        .unwrap();
    assert_eq!(
        outcome.as_deref(),
        Some("refused"),
        "the stale holder's write"
    );
}

/// The child's part: takes a permit, writes with its token, says so, waits
/// for the word (frozen in between), then writes again regardless of its
/// lease, and says how it went.
async fn frozen_permit_holder(url: &str) {
    let locker = Locker::etcd([url]).await.unwrap();
    // Kept alive by the watchdog until the process is frozen.
    let guard = locker
        .obtain("job", Duration::from_secs(1), permits())
        .await
        .unwrap()
        .keep_alive();
    let fence = guard.fence_token().unwrap();
    let mut client = Client::connect([url], None).await.unwrap();
    assert!(fenced_write(&mut client, fence).await.unwrap());
    println!("inside, fence {fence}, token {}", guard.token());
    tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new()))
        .await
        .unwrap()
        .unwrap();
    let accepted = fenced_write(&mut client, fence).await.unwrap();
    println!("write {}", if accepted { "accepted" } else { "refused" });
}

/// One obtain of a permit: when it was asked for, when it came, its token.
#[derive(Debug, Clone, Copy)]
struct Obtained {
    asked: Instant,
    got: Instant,
    token: u64,
}

/// Three members; four workers (separate lockers, as separate processes
/// would be) contend for two permits, each holding one around its section.
/// The leader is killed once the workload is under way. A witness outside
/// the lock never sees more than two sections at once, and tokens never go
/// backwards: a permit asked for after another was obtained has a larger
/// token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_under_permit_contention_at_most_n_at_once_tokens_never_regress() {
    const WORKERS: usize = 4;
    const ROUNDS: usize = 25;
    // Longer than an election plus the failover of a refresh.
    const TTL: Duration = Duration::from_secs(5);
    let cluster = Arc::new(
        tokio::task::spawn_blocking(|| EtcdCluster::start(3))
            .await
            .unwrap(),
    );
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let obtained = Arc::new(Mutex::new(Vec::new()));
    let progress = Arc::new(tokio::sync::Notify::new());
    let mut tasks = Vec::new();
    for worker in 0..WORKERS {
        let backend =
            match EtcdBackend::connect_with(cluster.endpoints(), EtcdConfig::default()).await {
                Ok(backend) => backend,
                Err(err) => cluster.fail(format_args!("connect: {err:?}")),
            };
        let locker = Locker::new(backend);
        let (inside, most, done, obtained, progress) = (
            inside.clone(),
            most.clone(),
            done.clone(),
            obtained.clone(),
            progress.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let retry =
                RetryStrategy::exponential(Duration::from_millis(1), Duration::from_millis(50))
                    .deadline(Duration::from_secs(60));
            for round in 0..ROUNDS {
                let give_up = Instant::now() + Duration::from_secs(60);
                let (lock, asked) = loop {
                    let asked = Instant::now();
                    match locker
                        .obtain("api", TTL, permits().retry(retry.clone()))
                        .await
                    {
                        Ok(lock) => break (lock, asked),
                        // Refused while the cluster elects a leader: the
                        // witness checks safety, not availability.
                        Err(LockError::Backend(_)) if Instant::now() < give_up => {}
                        Err(err) => panic!("worker {worker} round {round}: obtain: {err}"),
                    }
                };
                let got = Instant::now();
                let token = lock.fence_token().expect("fenced");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // Long enough for holders to overlap, were there too many.
                tokio::time::sleep(Duration::from_millis(50)).await;
                assert!(
                    Instant::now() < lock.deadline(),
                    "worker {worker} round {round}: the lease ran out inside the section"
                );
                inside.fetch_sub(1, Ordering::SeqCst);
                obtained
                    .lock()
                    .unwrap()
                    .push(Obtained { asked, got, token });
                done.fetch_add(1, Ordering::SeqCst);
                progress.notify_one();
                // A release that fails during the election leaves the permit
                // to its lease, which is allowed.
                let _ = lock.release().await;
            }
        }));
    }
    while done.load(Ordering::SeqCst) < WORKERS * ROUNDS / 4 {
        tokio::time::timeout(Duration::from_secs(60), progress.notified())
            .await
            .unwrap_or_else(|_| cluster.fail("no progress before the leader was killed"));
    }
    let leader = tokio::task::spawn_blocking({
        let cluster = cluster.clone();
        move || {
            let leader = cluster.leader();
            cluster.kill(leader);
            leader
        }
    })
    .await
    .unwrap();
    let killed_at = done.load(Ordering::SeqCst);
    let finished = tokio::time::timeout(Duration::from_secs(240), async {
        for task in tasks {
            if let Err(err) = task.await {
                std::panic::resume_unwind(err.into_panic());
            }
        }
    })
    .await;
    if finished.is_err() {
        cluster.fail(format_args!(
            "the workload did not finish after member m{leader} (the leader) was killed: \
             {} of {} sections",
            done.load(Ordering::SeqCst),
            WORKERS * ROUNDS
        ));
    }
    assert!(
        killed_at < WORKERS * ROUNDS,
        "the leader was killed after the workload"
    );
    let most = most.load(Ordering::SeqCst);
    println!("leader m{leader} killed after {killed_at} sections; at most {most} at once");
    assert!(
        most <= PERMITS as usize,
        "{most} holders at once for {PERMITS} permits"
    );
    let obtained = obtained.lock().unwrap().clone();
    for earlier in &obtained {
        for later in obtained.iter().filter(|later| later.asked > earlier.got) {
            assert!(
                later.token > earlier.token,
                "token {} asked for after token {} was obtained",
                later.token,
                earlier.token
            );
        }
    }
}
