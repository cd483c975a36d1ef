//! A Redis Cluster master killed (SIGKILL) while workers contend for a key it
//! serves: its replica takes over, and the workers' calls follow the slot to
//! it. No call may come back with the cluster's redirection (`MOVED`, `ASK`)
//! as its error, exclusion holds throughout (checked by the witness, which
//! does not trust the lock), and fencing tokens never go backwards.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockmacro_runtime::{
    BackendErrorKind, ClusterBackend, FencedStore, LockError, Locker, RedisConfig, distributed_lock,
};
use lockmacro_testkit::cluster::RedisCluster;
use tokio::time::Instant;

use lockmacro_testkit::witness::Witness;

const WORKERS: usize = 6;
const TTL: Duration = Duration::from_secs(1);
/// The key every worker contends for; its master is the one killed.
const KEY: &str = "failover";
/// How long a call may keep following the slot: longer than the harness's
/// failover (two 1 s node timeouts and an election), so that a call has no
/// reason to fail at all.
const BUDGET: Duration = Duration::from_secs(10);

struct Worker {
    id: usize,
    witness: Arc<Witness>,
    store: FencedStore,
}

#[distributed_lock(
    key = KEY,
    ttl = "1s",
    locker = locker,
    wait = "2s",
    fence,
    on_lost = "abort",
    guard = lease
)]
async fn section(locker: &Locker, worker: &Worker, called: Instant) -> Result<bool, LockError> {
    let _ = locker;
    let token = lease.fence_token().expect("fenced");
    let open = worker.witness.enter(worker.id, token, called);
    // Long enough that the kill often catches a holder inside.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let valid = open.write(lease);
    worker
        .witness
        .fenced_write(&worker.store, token, Duration::ZERO);
    Ok(valid)
}

/// True when `err` is the cluster telling the client to ask another node:
/// what the client must follow, never hand to the caller.
fn is_redirection(err: &LockError) -> bool {
    if spent_budget(err) {
        // Names the cluster's last answer, which may be a redirection.
        return false;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(error) = source {
        if let Some(redis) = error.downcast_ref::<redis::RedisError>()
            && matches!(
                redis.kind(),
                redis::ErrorKind::Server(
                    redis::ServerErrorKind::Moved | redis::ServerErrorKind::Ask
                )
            )
        {
            return true;
        }
        source = error.source();
    }
    let text = err.to_string();
    ["Moved", "MOVED", "Ask:", "ASK "]
        .iter()
        .any(|word| text.contains(word))
}

/// True for the error of a call that followed the slot for its whole budget.
fn spent_budget(err: &LockError) -> bool {
    matches!(err, LockError::Backend(backend) if backend.kind() == BackendErrorKind::Timeout)
        && err
            .to_string()
            .contains("answered within the response timeout")
}

#[derive(Debug, Default)]
struct Calls {
    done: usize,
    busy: usize,
    lost: usize,
    /// Backend errors, with how long each call took.
    failed: Vec<(Duration, BackendErrorKind, String)>,
    redirections: Vec<String>,
    longest: Duration,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_master_is_followed_without_redirection_errors_or_overlaps() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    let store = FencedStore::memory();
    let witness = Arc::new(Witness::new(TTL));
    let master = cluster.master_for(KEY);

    let mut lockers = Vec::new();
    let config = RedisConfig::default().response_timeout(BUDGET);
    for _ in 0..WORKERS {
        match ClusterBackend::connect_with(cluster.seeds(), config.clone()).await {
            Ok(backend) => lockers.push(Locker::new(backend)),
            Err(err) => cluster.fail(format_args!("connect: {err}")),
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let completed = Arc::new(AtomicUsize::new(0));
    let calls = Arc::new(Mutex::new(Calls::default()));
    let mut workers = tokio::task::JoinSet::new();
    for (id, locker) in lockers.into_iter().enumerate() {
        let worker = Worker {
            id,
            witness: witness.clone(),
            store: store.clone(),
        };
        let (stop, completed, calls) = (stop.clone(), completed.clone(), calls.clone());
        workers.spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let called = Instant::now();
                let result = section(&locker, &worker, called).await;
                let took = called.elapsed();
                let mut calls = calls.lock().unwrap();
                calls.longest = calls.longest.max(took);
                match result {
                    Ok(_) => {
                        calls.done += 1;
                        completed.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(LockError::NotObtained { .. }) => calls.busy += 1,
                    Err(LockError::Lost { .. }) => calls.lost += 1,
                    Err(err) => {
                        if is_redirection(&err) {
                            calls.redirections.push(format!("{err:?}"));
                        }
                        let kind = match &err {
                            LockError::Backend(backend) => backend.kind(),
                            other => panic!("worker {id}: unexpected error: {other}"),
                        };
                        calls.failed.push((took, kind, err.to_string()));
                    }
                }
            }
        });
    }

    // Wait for the workload to be under way, then kill the key's master.
    let under_way = {
        let (completed, calls) = (completed.clone(), calls.clone());
        move |at_least: usize, what: &str, cluster: &RedisCluster| {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while completed.load(Ordering::SeqCst) < at_least {
                if std::time::Instant::now() > deadline {
                    cluster.fail(format_args!("{what}: {:?}", calls.lock().unwrap()));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    let cluster = tokio::task::spawn_blocking({
        let under_way = under_way.clone();
        move || {
            under_way(50, "the workload did not start", &cluster);
            let mut cluster = cluster;
            cluster.fail_over(master);
            cluster
        }
    })
    .await
    .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    // And it goes on on the new master.
    let before = completed.load(Ordering::SeqCst);
    let cluster = tokio::task::spawn_blocking(move || {
        under_way(
            before + 100,
            "the workload did not carry on after the failover",
            &cluster,
        );
        cluster
    })
    .await
    .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    stop.store(true, Ordering::SeqCst);
    while let Some(done) = workers.join_next().await {
        if let Err(err) = done {
            std::panic::resume_unwind(err.into_panic());
        }
    }

    let verdict = witness.verdict(&store).await;
    let calls = calls.lock().unwrap();
    println!(
        "calls: {} completed, {} found the key busy, {} lost their lease, {} failed; longest {:?}",
        calls.done,
        calls.busy,
        calls.lost,
        calls.failed.len(),
        calls.longest
    );
    for (took, kind, err) in &calls.failed {
        println!("  failed after {took:?} ({kind:?}): {err}");
    }
    println!("{verdict}");
    if !calls.redirections.is_empty() {
        cluster.fail(format_args!(
            "{} calls returned a redirection instead of following it, e.g. {}",
            calls.redirections.len(),
            calls.redirections[0]
        ));
    }
    if let Some((_, _, err)) = calls
        .failed
        .iter()
        .find(|(_, _, err)| !err.contains("answered within the response timeout"))
    {
        cluster.fail(format_args!(
            "a call failed with a failover's passing error: {err}"
        ));
    }
    assert_eq!(verdict.overlaps, 0, "valid critical sections overlapped");
    assert_eq!(
        verdict.tokens_out_of_order, 0,
        "a fencing token did not increase"
    );
    assert_eq!(
        verdict.stale_writes_accepted, 0,
        "the resource accepted a stale write"
    );
    assert_eq!(verdict.lost_updates, 0, "updates were lost");
}
