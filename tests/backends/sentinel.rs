//! `SentinelBackend` against real `redis-sentinel` processes: one master, two
//! replicas, three sentinels (`testkit/src/sentinel.rs`). The master is killed
//! (SIGKILL) and the tests wait for the sentinels to promote a replica, asking
//! them, then check what the lockers do on the new master.
//!
//! The lockers run with a 10 s response timeout, longer than a failover here
//! (`down-after-milliseconds 1000`, then agreement and promotion), so that a
//! call made meanwhile follows the failover instead of failing. Waiters have
//! a 60 s backoff and a 30 s deadline: they obtain within the 5 s bound only
//! if the release wakes them.

use std::time::Duration;

use lockmacro_runtime::{
    BackendErrorKind, Lock, LockError, Locker, ObtainOptions, RedisConfig, RetryStrategy,
    SentinelBackend,
};

use lockmacro_testkit::RedisServer;
use lockmacro_testkit::sentinel::{MASTER_NAME, RedisSentinel};
use lockmacro_testkit::tls::TestCa;

const TTL: Duration = Duration::from_secs(30);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a woken waiter may take to obtain: a bound for a hang.
const PROMPTLY: Duration = Duration::from_secs(5);
/// How long a waiter may take to listen on the new master once the sentinels
/// have promoted it.
const RELISTEN: Duration = Duration::from_secs(20);

async fn start() -> RedisSentinel {
    tokio::task::spawn_blocking(RedisSentinel::start)
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()))
}

async fn backend(deployment: &RedisSentinel) -> SentinelBackend {
    let config = RedisConfig::default().response_timeout(RESPONSE_TIMEOUT);
    match SentinelBackend::connect_with(MASTER_NAME, deployment.sentinel_urls(), config).await {
        Ok(backend) => backend,
        Err(err) => deployment.fail(format_args!("connect: {err:?}")),
    }
}

/// Kills the master and waits for the sentinels to promote a replica that
/// `replicas` replicas follow; returns the new master's index.
async fn fail_over(deployment: RedisSentinel, replicas: usize) -> (RedisSentinel, usize) {
    tokio::task::spawn_blocking(move || {
        let mut deployment = deployment;
        let old = deployment.kill_master();
        let new = deployment.wait_for_failover(old, replicas);
        (deployment, new)
    })
    .await
    .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()))
}

fn addr(server: &RedisServer) -> String {
    format!("127.0.0.1:{}", server.port())
}

/// Subscribers of the channel on which releases of `key` are announced.
fn listeners(server: &RedisServer, key: &str) -> i64 {
    let reply: (String, i64) =
        server.cmd(&["PUBSUB", "NUMSUB", &format!("lockmacro:released:{key}")]);
    reply.1
}

async fn until_listening(deployment: &RedisSentinel, server: usize, key: &str, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while listeners(deployment.server(server), key) < 1 {
        if tokio::time::Instant::now() > deadline {
            deployment.fail(format_args!(
                "nobody listens for releases of `{key}` on server {server}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_taken_before_a_failover_holds_on_the_new_master_and_fence_tokens_keep_increasing() {
    let deployment = start().await;
    let holder = backend(&deployment).await;
    let holder_locker = Locker::new(holder.clone());
    let other = Locker::new(backend(&deployment).await);
    let old = deployment.master();
    assert_eq!(holder.master(), addr(deployment.server(old)));

    // Both replicas have the lock and its counter: whichever is promoted
    // keeps them.
    let opts = ObtainOptions::new().fence().replicas(2);
    let lock = match holder_locker.obtain("job", TTL, opts).await {
        Ok(lock) => lock,
        Err(err) => deployment.fail(format_args!("obtain before the failover: {err:?}")),
    };
    let before = lock.fence_token().expect("a fencing token was asked for");

    let (deployment, new) = fail_over(deployment, 1).await;

    // The first call after the failover finds the new master.
    match other.obtain("job", TTL, ObtainOptions::new()).await {
        Err(LockError::NotObtained { key, .. }) if key == "job" => {}
        outcome => deployment.fail(format_args!(
            "the lock did not hold on the new master: {outcome:?}"
        )),
    }
    let value: Option<String> = deployment.server(new).cmd(&["GET", "job"]);
    assert!(
        value
            .as_deref()
            .is_some_and(|v| v.starts_with(lock.token())),
        "the new master holds {value:?}, not the lock"
    );
    // The holder follows too: its refresh and release reach the new master.
    if let Err(err) = lock.refresh(TTL).await {
        deployment.fail(format_args!("refresh after the failover: {err:?}"));
    }
    assert_eq!(holder.master(), addr(deployment.server(new)));
    if let Err(err) = lock.release().await {
        deployment.fail(format_args!("release after the failover: {err:?}"));
    }
    let exists: bool = deployment.server(new).cmd(&["EXISTS", "job"]);
    assert!(
        !exists,
        "the release did not delete the key on the new master"
    );

    let after = match other.obtain("job", TTL, ObtainOptions::new().fence()).await {
        Ok(lock) => lock,
        Err(err) => deployment.fail(format_args!("obtain after the failover: {err:?}")),
    };
    let after_token = after.fence_token().expect("a fencing token was asked for");
    assert_eq!(
        after_token,
        before + 1,
        "the counter the replica received continues on the new master"
    );
    if let Err(err) = after.release().await {
        deployment.fail(format_args!("release: {err:?}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_is_woken_on_the_new_master_by_a_release_after_the_failover() {
    let deployment = start().await;
    let holder = Locker::new(backend(&deployment).await);
    let waiter_locker = Locker::new(backend(&deployment).await);
    let old = deployment.master();
    let held = match holder
        .obtain("job", TTL, ObtainOptions::new().replicas(2))
        .await
    {
        Ok(lock) => lock,
        Err(err) => deployment.fail(format_args!("obtain: {err:?}")),
    };
    let waiter = tokio::spawn(async move {
        let patient = ObtainOptions::new()
            .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(TTL));
        waiter_locker.obtain("job", TTL, patient).await
    });
    until_listening(&deployment, old, "job", PROMPTLY).await;

    let (deployment, new) = fail_over(deployment, 1).await;

    // Its pub/sub connection died with the master: it tries again, which
    // finds the new master, and listens there.
    until_listening(&deployment, new, "job", RELISTEN).await;
    if let Err(err) = held.release().await {
        deployment.fail(format_args!("release after the failover: {err:?}"));
    }
    let lock: Lock = match tokio::time::timeout(PROMPTLY, waiter).await {
        Ok(Ok(Ok(lock))) => lock,
        Ok(Ok(Err(err))) => deployment.fail(format_args!("the waiter failed: {err:?}")),
        Ok(Err(err)) => std::panic::resume_unwind(err.into_panic()),
        Err(_) => deployment.fail("the waiter was not woken by the release on the new master"),
    };
    if let Err(err) = lock.release().await {
        deployment.fail(format_args!("release: {err:?}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_option_waits_for_the_masters_replicas_and_gives_the_lock_back_without_them() {
    let deployment = start().await;
    let locker = Locker::new(backend(&deployment).await);
    assert!(locker.backend().capabilities().replicas);
    let master = deployment.master();
    let replicas: Vec<usize> = (0..3).filter(|&index| index != master).collect();

    let lock = match locker
        .obtain("job", TTL, ObtainOptions::new().replicas(2).fence())
        .await
    {
        Ok(lock) => lock,
        Err(err) => deployment.fail(format_args!("obtain: {err:?}")),
    };
    // Acknowledged: each replica's own copy has it when obtain returns.
    for &replica in &replicas {
        let copy: Option<String> = deployment.server(replica).cmd(&["GET", "job"]);
        assert!(
            copy.as_deref().is_some_and(|v| v.starts_with(lock.token())),
            "replica {replica} does not have the lock: {copy:?}"
        );
    }
    if let Err(err) = lock.release().await {
        deployment.fail(format_args!("release: {err:?}"));
    }

    // One replica frozen: two acknowledgements cannot come.
    deployment.server(replicas[0]).pause();
    let short = ObtainOptions::new()
        .replicas(2)
        .replica_timeout(Duration::from_millis(200));
    let outcome = locker.obtain("job", TTL, short).await;
    deployment.server(replicas[0]).resume();
    match outcome {
        // The live replica's acknowledgement may itself be late on a
        // loaded machine: fewer than two is what counts.
        Err(LockError::NotReplicated {
            key,
            wanted: 2,
            acknowledged,
            ..
        }) if key == "job" && acknowledged < 2 => {}
        other => deployment.fail(format_args!("expected NotReplicated, got {other:?}")),
    }
    let exists: bool = deployment.server(master).cmd(&["EXISTS", "job"]);
    assert!(!exists, "the unacknowledged lock was not given back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_and_sentinels_are_reached_with_their_own_passwords() {
    let deployment = tokio::task::spawn_blocking(|| {
        RedisSentinel::start_with_passwords("master-secret", "sentinel-secret")
    })
    .await
    .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    let with_password = |password: &str| -> Vec<String> {
        deployment
            .sentinel_urls()
            .iter()
            .map(|url| url.replacen("://", &format!("://:{password}@"), 1))
            .collect()
    };
    let master = format!("redis://:master-secret@{MASTER_NAME}/");
    let config = RedisConfig::default();

    let backend =
        SentinelBackend::connect_with(&master, with_password("sentinel-secret"), config.clone())
            .await;
    let locker = Locker::new(
        backend.unwrap_or_else(|err| deployment.fail(format_args!("connect: {err:?}"))),
    );
    let lock = locker
        .obtain("job", TTL, ObtainOptions::new().fence())
        .await
        .unwrap_or_else(|err| deployment.fail(format_args!("obtain: {err:?}")));
    if let Err(err) = lock.release().await {
        deployment.fail(format_args!("release: {err:?}"));
    }

    // The master's password left out, or the sentinels' given for it.
    for master in [
        MASTER_NAME.to_owned(),
        format!("redis://:sentinel-secret@{MASTER_NAME}/"),
    ] {
        let refused = SentinelBackend::connect_with(
            &master,
            with_password("sentinel-secret"),
            config.clone(),
        )
        .await;
        match refused {
            Err(LockError::Backend(err))
                if err.kind() == BackendErrorKind::Authentication
                    && err.to_string().contains("the master's URL") => {}
            other => deployment.fail(format_args!(
                "{master}: expected the master to refuse, got {other:?}"
            )),
        }
    }
    // The sentinels' password left out.
    let refused = SentinelBackend::connect_with(&master, deployment.sentinel_urls(), config).await;
    match refused {
        Err(LockError::Backend(err))
            if err.kind() == BackendErrorKind::Authentication
                && err.to_string().contains("the sentinel's URL") => {}
        other => deployment.fail(format_args!(
            "expected the sentinels to refuse, got {other:?}"
        )),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_and_master_are_reached_over_tls() {
    let ca = tokio::task::spawn_blocking(TestCa::generate)
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    let ca_pem = ca.ca_pem();
    // The CA's files live as long as the deployment.
    let (deployment, _ca) =
        tokio::task::spawn_blocking(move || (RedisSentinel::start_tls(&ca), ca))
            .await
            .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    let urls = deployment.sentinel_urls();
    assert!(
        urls.iter().all(|url| url.starts_with("rediss://")),
        "{urls:?}"
    );

    // Every process listens on TLS only: the master, named by the sentinels
    // over TLS, is reached over TLS too, as the sentinels' URLs say.
    let config = RedisConfig::default().tls_root_certificate(ca_pem);
    let backend = SentinelBackend::connect_with(MASTER_NAME, &urls, config.clone())
        .await
        .unwrap_or_else(|err| deployment.fail(format_args!("connect: {err:?}")));
    assert_eq!(backend.master(), addr(deployment.server(0)));
    let locker = Locker::new(backend);
    let lock = locker
        .obtain("job", TTL, ObtainOptions::new().fence().replicas(2))
        .await
        .unwrap_or_else(|err| deployment.fail(format_args!("obtain: {err:?}")));
    let value: Option<String> = deployment.server(0).cmd(&["GET", "job"]);
    assert!(value.is_some_and(|v| v.starts_with(lock.token())));
    if let Err(err) = lock.release().await {
        deployment.fail(format_args!("release: {err:?}"));
    }

    // A master URL that asks for plain text is refused by the TLS-only master.
    let plain =
        SentinelBackend::connect_with(&format!("redis://{MASTER_NAME}"), &urls, config).await;
    assert!(plain.is_err(), "a plain-text master connection succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_sentinel_does_not_hold_up_finding_the_master() {
    let deployment = tokio::task::spawn_blocking(RedisSentinel::start_quick)
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    deployment.sentinels()[0].pause();
    // Asked one after the other, the frozen first sentinel would hold the
    // lookup for its whole response timeout (60 s) before the others.
    let patient = RedisConfig::default()
        .connect_timeout(Duration::from_secs(60))
        .response_timeout(Duration::from_secs(60));
    let connect = SentinelBackend::connect_with(MASTER_NAME, deployment.sentinel_urls(), patient);
    let outcome = tokio::time::timeout(PROMPTLY, connect).await;
    deployment.sentinels()[0].resume();
    let backend = match outcome {
        Ok(Ok(backend)) => backend,
        Ok(Err(err)) => deployment.fail(format_args!("connect: {err:?}")),
        Err(_) => deployment.fail("the lookup waited for the frozen sentinel"),
    };
    assert_eq!(backend.master(), addr(deployment.server(0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_by_hand_is_followed_from_the_demoted_masters_readonly_refusal() {
    let deployment = start().await;
    let holder = Locker::new(backend(&deployment).await);
    let waiter_locker = Locker::new(backend(&deployment).await);
    let old = deployment.master();
    let held = match holder
        .obtain("job", TTL, ObtainOptions::new().fence().replicas(2))
        .await
    {
        Ok(lock) => lock,
        Err(err) => deployment.fail(format_args!("obtain: {err:?}")),
    };
    let waiter = tokio::spawn(async move {
        let patient = ObtainOptions::new()
            .fence()
            .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(TTL));
        waiter_locker.obtain("job", TTL, patient).await
    });
    until_listening(&deployment, old, "job", PROMPTLY).await;

    let deployment = tokio::task::spawn_blocking(move || {
        let old = deployment.fail_over_by_hand();
        deployment.wait_for_failover(old, 1);
        deployment.wait_for_role(old, "slave");
        deployment
    })
    .await
    .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));

    // The holder's locker still sends to the old master (the sentinels
    // closed its connection, which is made again to the same server), which
    // refuses the release's write (`READONLY`): the release follows to the
    // new one. The waiter, whose connection was closed too, listens there.
    let before = held.fence_token().expect("fenced");
    if let Err(err) = held.release().await {
        deployment.fail(format_args!("release after the failover: {err:?}"));
    }
    let lock: Lock = match tokio::time::timeout(PROMPTLY, waiter).await {
        Ok(Ok(Ok(lock))) => lock,
        Ok(Ok(Err(err))) => deployment.fail(format_args!("the waiter failed: {err:?}")),
        Ok(Err(err)) => std::panic::resume_unwind(err.into_panic()),
        Err(_) => deployment.fail("the waiter was not woken by the release"),
    };
    assert!(lock.fence_token().expect("fenced") > before);
    let new = deployment.master();
    let value: Option<String> = deployment.server(new).cmd(&["GET", "job"]);
    assert!(
        value.is_some_and(|v| v.starts_with(lock.token())),
        "the waiter's lock is not on the new master"
    );
    if let Err(err) = lock.release().await {
        deployment.fail(format_args!("release: {err:?}"));
    }
}
