//! Faults on the etcd backend, against real `etcd` members: the leader killed
//! under a contended workload, a holder frozen (SIGSTOP) past its ttl whose
//! late write the resource refuses by its fencing token, and a holder cut off
//! from the cluster that gives its lease up on its own local deadline.
//!
//! The fenced resource is a key in etcd itself, written only by a
//! transaction that compares the token stored with it: the check a resource
//! must make, since no lease can stop a holder that acts late.

use std::env;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use lockmacro_runtime::{EtcdBackend, EtcdConfig, LockError, Locker, ObtainOptions, RetryStrategy};
use tokio::sync::Notify;
use tokio::time::Instant;

use lockmacro_testkit::etcd::EtcdCluster;
use lockmacro_testkit::proxy::Proxy;

/// The key of the fenced resource, and of the token it last accepted.
const RESOURCE: &str = "resource";
const RESOURCE_FENCE: &str = "resource/fence";

/// Tokens as fixed-width decimals, so that etcd's byte-wise comparison of
/// values orders them as numbers.
pub(crate) fn padded(token: u64) -> String {
    format!("{token:020}")
}

async fn client(cluster: &EtcdCluster) -> Client {
    match Client::connect(cluster.endpoints(), None).await {
        Ok(client) => client,
        Err(err) => cluster.fail(format_args!("connect: {err}")),
    }
}

/// A client of the resource that survives a member's death: one
/// `etcd_client::Client` per member, moving to the next on an error. (One
/// client over all members keeps dialing a dead one: etcdv3/etcd-client#39.)
struct Resource {
    clients: Vec<Client>,
    current: usize,
}

impl Resource {
    async fn new(cluster: &EtcdCluster) -> Self {
        let mut clients = Vec::new();
        for endpoint in cluster.endpoints() {
            match Client::connect([endpoint], None).await {
                Ok(client) => clients.push(client),
                Err(err) => cluster.fail(format_args!("connect: {err}")),
            }
        }
        Resource {
            clients,
            current: 0,
        }
    }

    /// `fenced_write` on the current member, then on the others in turn.
    async fn write(&mut self, token: u64, data: &str) -> Result<bool, etcd_client::Error> {
        let mut last = None;
        for _ in 0..self.clients.len() {
            match fenced_write(&mut self.clients[self.current], token, data).await {
                Ok(accepted) => return Ok(accepted),
                Err(err) => {
                    last = Some(err);
                    self.current = (self.current + 1) % self.clients.len();
                }
            }
        }
        Err(last.expect("at least one member"))
    }

    async fn read(&mut self) -> Option<String> {
        for _ in 0..self.clients.len() {
            if let Ok(found) = self.clients[self.current].get(RESOURCE, None).await {
                return found
                    .kvs()
                    .first()
                    .map(|kv| String::from_utf8_lossy(kv.value()).into_owned());
            }
            self.current = (self.current + 1) % self.clients.len();
        }
        panic!("no member answered a read of the resource")
    }
}

/// Creates the resource with token 0.
async fn create_resource(client: &mut Client) {
    client
        .put(RESOURCE_FENCE, padded(0), None)
        .await
        .expect("create the resource");
}

/// Writes `data` to the resource if `token` is newer than the last token it
/// accepted; whether it did.
async fn fenced_write(
    client: &mut Client,
    token: u64,
    data: &str,
) -> Result<bool, etcd_client::Error> {
    let txn = Txn::new()
        .when([Compare::value(
            RESOURCE_FENCE,
            CompareOp::Less,
            padded(token),
        )])
        .and_then([
            TxnOp::put(RESOURCE_FENCE, padded(token), None),
            TxnOp::put(RESOURCE, data, None),
        ]);
    Ok(client.txn(txn).await?.succeeded())
}

async fn resource(client: &mut Client) -> Option<String> {
    let found = client.get(RESOURCE, None).await.expect("read the resource");
    found
        .kvs()
        .first()
        .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
}

/// Three members; four workers (separate lockers, as separate processes
/// would be), each taking the lock around a non-atomic increment and a fenced
/// write. The leader is killed once the workload is under way. Every
/// section runs alone, no increment is lost, each token is larger than every
/// token before it, and the resource accepts every write of a live lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_under_contention_no_overlap_no_lost_update_tokens_never_regress() {
    const WORKERS: usize = 4;
    const ROUNDS: usize = 40;
    // Longer than an election (1 s timeout by default) plus the failover of
    // a refresh: the watchdog keeps leases through the election.
    const TTL: Duration = Duration::from_secs(5);
    let cluster = Arc::new(
        tokio::task::spawn_blocking(|| EtcdCluster::start(3))
            .await
            .unwrap(),
    );
    let mut admin = Resource::new(&cluster).await;
    create_resource(&mut admin.clients[0]).await;

    let inside = Arc::new(AtomicUsize::new(0));
    let counter = Arc::new(AtomicU64::new(0));
    let last_token = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let progress = Arc::new(Notify::new());
    let mut tasks = Vec::new();
    for worker in 0..WORKERS {
        let config = EtcdConfig::default();
        let backend = match EtcdBackend::connect_with(cluster.endpoints(), config).await {
            Ok(backend) => backend,
            Err(err) => cluster.fail(format_args!("connect: {err:?}")),
        };
        let locker = Locker::new(backend);
        let mut resource_client = Resource::new(&cluster).await;
        let (inside, counter, last_token, refused, progress) = (
            inside.clone(),
            counter.clone(),
            last_token.clone(),
            refused.clone(),
            progress.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let retry =
                RetryStrategy::exponential(Duration::from_millis(1), Duration::from_millis(50))
                    .deadline(Duration::from_secs(60));
            for round in 0..ROUNDS {
                // A backend error while the cluster elects a new leader is
                // retried: the witness checks safety, not availability.
                let give_up = Instant::now() + Duration::from_secs(60);
                let lock = loop {
                    match locker
                        .obtain(
                            "counter-lock",
                            TTL,
                            ObtainOptions::new().fence().retry(retry.clone()),
                        )
                        .await
                    {
                        Ok(lock) => break lock,
                        Err(LockError::Backend(_)) if Instant::now() < give_up => {}
                        Err(err) => panic!("worker {worker} round {round}: obtain: {err}"),
                    }
                };
                let token = lock.fence_token().expect("fenced");
                let others = inside.fetch_add(1, Ordering::SeqCst);
                assert_eq!(
                    others, 0,
                    "worker {worker} round {round}: {others} other holder(s) inside"
                );
                let previous = last_token.swap(token, Ordering::SeqCst);
                assert!(
                    token > previous,
                    "worker {worker} round {round}: token {token} after {previous}"
                );
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                assert!(
                    Instant::now() < lock.deadline(),
                    "worker {worker} round {round}: the lease ran out inside the critical section"
                );
                counter.store(seen + 1, Ordering::SeqCst);
                // The section the lease protects ends here. The fenced write
                // below may outlast the lease while the cluster elects a
                // leader (its retries run for up to a minute); the token, not
                // the lease, guards it, so a holder that comes next is not
                // counted as beside this one.
                inside.fetch_sub(1, Ordering::SeqCst);
                // The resource's own check: a write of the current holder
                // is never refused, whatever the cluster went through.
                let write = loop {
                    match resource_client
                        .write(token, &format!("{worker}:{round}"))
                        .await
                    {
                        Ok(accepted) => break accepted,
                        Err(_) if Instant::now() < give_up => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Err(err) => panic!("worker {worker} round {round}: fenced write: {err}"),
                    }
                };
                // Refused once its lease had run out, a write may have been
                // overtaken by the next holder's, as fencing intends.
                if !write && Instant::now() < lock.deadline() {
                    refused.fetch_add(1, Ordering::SeqCst);
                }
                progress.notify_one();
                // A release that fails during the election leaves the key to
                // its lease, which is allowed.
                let _ = lock.release().await;
            }
        }));
    }

    // Kill the leader once a quarter of the work is done.
    while counter.load(Ordering::SeqCst) < (WORKERS * ROUNDS / 4) as u64 {
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
    let killed_at = counter.load(Ordering::SeqCst);
    let killed = Instant::now();
    // How long the workers took to make progress again: a measurement for
    // the log, not an assertion.
    while counter.load(Ordering::SeqCst) == killed_at {
        tokio::time::timeout(Duration::from_secs(120), progress.notified())
            .await
            .unwrap_or_else(|_| cluster.fail("no progress after the leader was killed"));
    }
    let resumed = killed.elapsed();

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
             {} of {} increments",
            counter.load(Ordering::SeqCst),
            WORKERS * ROUNDS
        ));
    }
    println!(
        "leader m{leader} killed after {killed_at} increments; next increment {resumed:?} \
         later; the rest took {:?}",
        killed.elapsed()
    );
    assert_eq!(
        counter.load(Ordering::SeqCst),
        (WORKERS * ROUNDS) as u64,
        "lost updates"
    );
    assert_eq!(
        refused.load(Ordering::SeqCst),
        0,
        "a live holder's write was refused"
    );
    assert!(
        admin.read().await.is_some(),
        "the resource was never written"
    );
}

/// Set, to the etcd member's URL, for the child process that holds the lock.
const FROZEN_ENV: &str = "LOCKMACRO_FAULTS_ETCD_FROZEN";

/// Kills the child on drop, so that a failing test leaves no holder behind.
pub(crate) struct Holder(pub(crate) Child);

impl Drop for Holder {
    fn drop(&mut self) {
        // A frozen child cannot die until it is continued.
        // SAFETY: the pid is our unreaped child.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGCONT) };
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A holder frozen (SIGSTOP) past its ttl, as a long GC pause would: its
/// lease runs out on the server, a second holder takes the key with a larger
/// token and writes the resource. Continued, the first holder still tries
/// its write, and the resource refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_frozen_past_its_ttl_has_its_late_write_refused() {
    if let Ok(url) = env::var(FROZEN_ENV) {
        return frozen_holder(&url).await;
    }
    let cluster = tokio::task::spawn_blocking(EtcdCluster::single)
        .await
        .unwrap();
    let mut admin = client(&cluster).await;
    create_resource(&mut admin).await;
    let mut holder = Holder(
        Command::new(env::current_exe().unwrap())
            .args([
                "etcd::holder_frozen_past_its_ttl_has_its_late_write_refused",
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
    let first_token = tokio::task::spawn_blocking(move || {
        let token = lines.by_ref().find_map(|line| {
            line.ok()?
                .strip_prefix("inside, fence ")?
                .parse::<u64>()
                .ok()
        });
        (token, lines)
    });
    let (first_token, mut lines) = tokio::time::timeout(Duration::from_secs(30), first_token)
        .await
        .unwrap_or_else(|_| cluster.fail("the holder did not get inside within 30 s"))
        .unwrap();
    let first_token =
        first_token.unwrap_or_else(|| cluster.fail("the holder exited without getting inside"));

    // SAFETY: the pid is our unreaped child.
    unsafe { libc::kill(holder.0.id() as libc::pid_t, libc::SIGSTOP) };
    // The second holder gets in once the frozen holder's lease runs out on
    // the server: its waiter is woken by the key's deletion.
    let second = match Locker::etcd(cluster.endpoints()).await {
        Ok(locker) => locker,
        Err(err) => cluster.fail(format_args!("connect: {err:?}")),
    };
    let waiting = ObtainOptions::new()
        .fence()
        .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(30)));
    let lock = match second.obtain("job", Duration::from_secs(30), waiting).await {
        Ok(lock) => lock,
        Err(err) => cluster.fail(format_args!("the second holder: {err:?}")),
    };
    let second_token = lock.fence_token().unwrap();
    assert!(
        second_token > first_token,
        "token {second_token} after {first_token}"
    );
    assert!(
        fenced_write(&mut admin, second_token, "second")
            .await
            .unwrap(),
        "the second holder's write was refused"
    );

    // The frozen holder wakes up and acts on its stale lease.
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
    assert_eq!(resource(&mut admin).await.as_deref(), Some("second"));
    lock.release().await.unwrap();
}

/// The child's part: takes the lock, says so, waits for the word (frozen in
/// between), then writes regardless of its lease, and says how it went.
async fn frozen_holder(url: &str) {
    let locker = Locker::etcd([url]).await.unwrap();
    // Kept alive by the watchdog until the process is frozen.
    let guard = locker
        .obtain("job", Duration::from_secs(1), ObtainOptions::new().fence())
        .await
        .unwrap()
        .keep_alive();
    let token = guard.fence_token().unwrap();
    println!("inside, fence {token}");
    tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new()))
        .await
        .unwrap()
        .unwrap();
    let mut client = Client::connect([url], None).await.unwrap();
    let accepted = fenced_write(&mut client, token, "first").await.unwrap();
    println!("write {}", if accepted { "accepted" } else { "refused" });
}

/// A holder cut off from the whole cluster (a proxy in front of each of the
/// three members, all turned black holes) while its watchdog keeps the
/// lease: the lease is declared lost at its local deadline, without an
/// answer from etcd and without hanging, before anyone else can get the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_cut_off_loses_its_lease_on_the_local_deadline() {
    const TTL: Duration = Duration::from_secs(2);
    let cluster = tokio::task::spawn_blocking(|| EtcdCluster::start(3))
        .await
        .unwrap();
    let proxies: Vec<Proxy> = cluster
        .members()
        .iter()
        .map(|member| Proxy::start(member.addr()))
        .collect();
    let config = EtcdConfig::default()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(300));
    let through: Vec<String> = proxies
        .iter()
        .map(|proxy| format!("http://{}", proxy.addr()))
        .collect();
    let cut_off = match EtcdBackend::connect_with(&through, config).await {
        Ok(backend) => Locker::new(backend),
        Err(err) => cluster.fail(format_args!("connect through the proxies: {err:?}")),
    };
    let other = match Locker::etcd(cluster.endpoints()).await {
        Ok(locker) => locker,
        Err(err) => cluster.fail(format_args!("connect: {err:?}")),
    };
    let guard = match cut_off.obtain("job", TTL, ObtainOptions::new()).await {
        Ok(lock) => lock.keep_alive(),
        Err(err) => cluster.fail(format_args!("obtain: {err:?}")),
    };
    proxies.iter().for_each(Proxy::black_hole);
    let cut = Instant::now();
    tokio::time::timeout(Duration::from_secs(20), guard.lost())
        .await
        .unwrap_or_else(|_| cluster.fail("the lease was not declared lost: the watchdog hung"));
    let lost = Instant::now();
    assert!(guard.is_lost());
    assert!(
        guard.deadline() <= cut + TTL,
        "the deadline counts from a refresh sent after the cut"
    );
    assert!(
        lost >= guard.deadline(),
        "declared lost before its deadline"
    );
    let waiting = ObtainOptions::new()
        .retry(RetryStrategy::linear(Duration::from_millis(50)).deadline(Duration::from_secs(20)));
    let second = match other.obtain("job", TTL, waiting).await {
        Ok(lock) => lock,
        Err(err) => cluster.fail(format_args!("the second holder: {err:?}")),
    };
    let second_at = Instant::now();
    println!(
        "cut at 0; lost {:?}, second holder in {:?}",
        lost - cut,
        second_at - cut
    );
    assert!(
        lost < second_at,
        "the second holder got in before the first gave up"
    );
    proxies.iter().for_each(Proxy::heal);
    second.release().await.unwrap();
    // Healed, the cut-off locker takes locks again.
    let retry = RetryStrategy::linear(Duration::from_millis(50)).deadline(Duration::from_secs(20));
    let again = match cut_off
        .obtain("job", TTL, ObtainOptions::new().retry(retry))
        .await
    {
        Ok(lock) => lock,
        Err(err) => cluster.fail(format_args!("after healing: {err:?}")),
    };
    again.release().await.unwrap();
}
