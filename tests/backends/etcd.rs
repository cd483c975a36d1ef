//! What only etcd shows: fencing tokens that are revisions, ttls rounded up
//! to etcd's whole-second leases, wake-ups by watch, and a client that moves
//! past members it cannot reach. The behaviours every backend shares run in
//! `tests/runtime` and `tests/attribute` (`on_etcd`).

use std::time::Duration;

use etcd_client::Client;
use lockmacro_runtime::{
    BackendErrorKind, EtcdBackend, LockError, Locker, ObtainOptions, RetryStrategy,
};
use tokio::time::Instant;

use lockmacro_testkit::etcd::EtcdCluster;

const LONG: Duration = Duration::from_secs(30);

async fn start() -> EtcdCluster {
    tokio::task::spawn_blocking(EtcdCluster::single)
        .await
        .expect("starting etcd")
}

async fn client(cluster: &EtcdCluster) -> Client {
    match Client::connect(cluster.endpoints(), None).await {
        Ok(client) => client,
        Err(err) => cluster.fail(format_args!("connect: {err}")),
    }
}

async fn kv(client: &mut Client, key: &str) -> Option<etcd_client::KeyValue> {
    let mut found = client.get(key, None).await.expect("get");
    found.take_kvs().into_iter().next()
}

/// The token is the revision at which the key was created, and it grows
/// across a release, another locker, another key, and a lease that ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_tokens_are_create_revisions_and_grow_across_releases_lockers_keys_and_expiry() {
    let cluster = start().await;
    let (a, b) = (cluster.locker().await, cluster.locker().await);
    let mut etcd = client(&cluster).await;
    let fenced = || ObtainOptions::new().fence();

    let first = a.obtain("job", LONG, fenced()).await.unwrap();
    let token = first.fence_token().unwrap();
    let created = kv(&mut etcd, "job").await.expect("the key is in etcd");
    assert_eq!(token, created.create_revision() as u64);
    first.release().await.unwrap();

    let second = b.obtain("job", LONG, fenced()).await.unwrap();
    assert!(second.fence_token().unwrap() > token);
    let other_key = a.obtain("other", LONG, fenced()).await.unwrap();
    assert!(other_key.fence_token() > second.fence_token());
    second.release().await.unwrap();

    // Left to run out (no watchdog): the next holder gets in once etcd drops
    // the key, and its token is larger still.
    let expiring = a
        .obtain("job", Duration::from_secs(1), fenced())
        .await
        .unwrap();
    let expiring_token = expiring.fence_token().unwrap();
    let waiting = fenced().retry(RetryStrategy::linear(Duration::from_millis(50)).deadline(LONG));
    let after = b.obtain("job", LONG, waiting).await.unwrap();
    assert!(after.fence_token().unwrap() > expiring_token);
    assert!(matches!(
        expiring.release().await,
        Err(LockError::NotHeld { .. })
    ));
}

/// Revisions are the cluster's, kept on disk: a member restarted with its
/// data goes on from where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_tokens_keep_growing_after_the_member_restarts() {
    let cluster = start().await;
    let before = {
        let a = cluster.locker().await;
        let lock = a
            .obtain("job", LONG, ObtainOptions::new().fence())
            .await
            .unwrap();
        let token = lock.fence_token().unwrap();
        lock.release().await.unwrap();
        token
    };
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.restart(0);
        cluster
    })
    .await
    .unwrap();
    let b = cluster.locker().await;
    let lock = b
        .obtain("job", LONG, ObtainOptions::new().fence())
        .await
        .unwrap();
    assert!(
        lock.fence_token().unwrap() > before,
        "{:?} after {before}",
        lock.fence_token()
    );
}

/// An explicit fence key is written, namespaced, in the transaction that
/// takes the lock: its mod revision is the lock's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_fence_key_is_written_with_the_lock_and_namespaced() {
    let cluster = start().await;
    let billing = cluster.locker().await.with_namespace("billing");
    let mut etcd = client(&cluster).await;
    let lock = billing
        .obtain("a", LONG, ObtainOptions::new().fence_key("shared"))
        .await
        .unwrap();
    let fence = kv(&mut etcd, "billing:shared")
        .await
        .expect("the fence key was written");
    assert_eq!(lock.fence_token(), Some(fence.mod_revision() as u64));
    assert_eq!(fence.value(), lock.token().as_bytes());
    assert!(
        kv(&mut etcd, "shared").await.is_none(),
        "the namespace was not applied"
    );
    let next = billing
        .obtain("b", LONG, ObtainOptions::new().fence_key("shared"))
        .await
        .unwrap();
    assert!(next.fence_token() > lock.fence_token());
}

/// A ttl shorter than a second is not refused: etcd's lease is rounded up to
/// whole seconds (at least etcd's minimum), while the holder trusts the lease
/// only for the ttl it asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subsecond_ttl_is_rounded_up_on_the_server_and_trusted_locally_for_what_was_asked() {
    let cluster = start().await;
    let a = cluster.locker().await;
    let mut etcd = client(&cluster).await;
    let ttl = Duration::from_millis(500);
    let sent = Instant::now();
    let lock = a.obtain("job", ttl, ObtainOptions::new()).await.unwrap();
    assert!(
        lock.deadline() <= sent + ttl,
        "trusted past the ttl asked for"
    );
    let lease = kv(&mut etcd, "job").await.expect("held").lease();
    let granted = etcd
        .lease_time_to_live(lease, None)
        .await
        .unwrap()
        .granted_ttl();
    assert!(granted >= 1, "granted {granted} s");
}

/// A waiter is woken by the holder's release, heard through a watch: with a
/// backoff and a holder's lease both far longer than its deadline, it can
/// only obtain in time if it heard the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_is_woken_by_the_release_through_a_watch() {
    let cluster = start().await;
    let (a, b) = (cluster.locker().await, cluster.locker().await);
    let held = a.obtain("job", LONG, ObtainOptions::new()).await.unwrap();
    let waiting = ObtainOptions::new()
        .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(20)));
    let waiter = tokio::spawn(async move { b.obtain("job", LONG, waiting).await });
    // The listener hears every release after it is set up: set one up here,
    // release, and it hears.
    let mut listener = a.backend().listen("job").await;
    assert!(listener.hears(), "the watch could not be set up");
    held.release().await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(10),
        listener.wait(Duration::from_secs(60)),
    )
    .await
    .expect("the listener did not hear the release");
    waiter
        .await
        .unwrap()
        .expect("the waiter obtains once woken by the release");
}

/// Members that cannot be reached are skipped; when none can be, the error
/// names each one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_members_are_skipped_and_named_when_none_answers() {
    let cluster = start().await;
    let dead: Vec<String> = lockmacro_testkit::redis::free_ports(2)
        .into_iter()
        .map(|port| format!("http://127.0.0.1:{port}"))
        .collect();
    let mut endpoints = dead.clone();
    endpoints.extend(cluster.endpoints());
    let a = match Locker::etcd(&endpoints).await {
        Ok(locker) => locker,
        Err(err) => cluster.fail(format_args!("a live member was listed: {err:?}")),
    };
    let lock = a.obtain("job", LONG, ObtainOptions::new()).await.unwrap();
    lock.release().await.unwrap();

    let err = EtcdBackend::connect(&dead).await.unwrap_err();
    let LockError::Backend(backend) = &err else {
        panic!("{err:?}");
    };
    assert_eq!(backend.kind(), BackendErrorKind::Unreachable, "{err}");
    for endpoint in &dead {
        let name = endpoint.trim_start_matches("http://");
        assert!(err.to_string().contains(name), "{name} not named in: {err}");
    }
}

/// etcd caps a transaction at 128 comparisons and a lock compares three per
/// key (the key, its queue, its shares): 42 keys are taken, released and
/// refreshed together; 43 are refused before anything is sent, with the
/// reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_takes_up_to_42_keys_and_more_are_refused_with_the_reason() {
    let cluster = start().await;
    let a = cluster.locker().await;
    let keys: Vec<String> = (0..43).map(|i| format!("k{i:02}")).collect();
    let err = a
        .obtain_many(&keys, LONG, ObtainOptions::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidKey { reason, .. } if reason.contains("at most 42 keys")),
        "{err:?}"
    );
    let mut etcd = client(&cluster).await;
    assert!(
        kv(&mut etcd, "k00").await.is_none(),
        "a refused lock took a key"
    );

    let all = a
        .obtain_many(&keys[..42], LONG, ObtainOptions::new())
        .await
        .unwrap();
    all.refresh(Duration::from_secs(20)).await.unwrap();
    all.release().await.unwrap();
    assert!(
        kv(&mut etcd, "k41").await.is_none(),
        "the release left a key"
    );
}

/// The member a waiter watches on is killed while it waits: its watch ends,
/// it tries again at once and watches on another member, and the release
/// (made through another member) still wakes it, well before its 60 s
/// backoff or the holder's 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_watches_on_another_member_when_its_member_dies() {
    let cluster = tokio::task::spawn_blocking(|| EtcdCluster::start(3))
        .await
        .expect("starting etcd");
    // The waiter talks to a follower first, so that killing it costs no
    // election; the holder talks to the other two.
    let endpoints = cluster.endpoints();
    let leader = cluster.leader();
    let watched = (leader + 1) % 3;
    let others: Vec<&String> = (1..3).map(|i| &endpoints[(watched + i) % 3]).collect();
    let holder = match Locker::etcd(&others).await {
        Ok(locker) => locker,
        Err(err) => cluster.fail(format_args!("connect: {err:?}")),
    };
    let mut order = vec![&endpoints[watched]];
    order.extend(others.iter().copied());
    let waiter = match Locker::etcd(order).await {
        Ok(locker) => locker,
        Err(err) => cluster.fail(format_args!("connect: {err:?}")),
    };
    let held = holder
        .obtain("job", LONG, ObtainOptions::new())
        .await
        .unwrap();
    let streams = || {
        cluster
            .member(watched)
            .metric("etcd_debugging_mvcc_watch_stream_total")
    };
    let before = streams().unwrap_or_else(|err| cluster.fail(err));
    let waiting = ObtainOptions::new()
        .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(25)));
    let waiting = tokio::spawn(async move { waiter.obtain("job", LONG, waiting).await });
    // Watching once its member counts one more watch stream.
    let deadline = Instant::now() + Duration::from_secs(10);
    while streams().unwrap_or_else(|err| cluster.fail(err)) <= before {
        if Instant::now() > deadline {
            cluster.fail("the waiter never watched on its member");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.kill(watched);
        cluster
    })
    .await
    .unwrap();
    held.release().await.unwrap();
    match waiting.await.unwrap() {
        Ok(lock) => lock.release().await.unwrap(),
        Err(err) => cluster.fail(format_args!("the waiter was not woken: {err:?}")),
    }
}
