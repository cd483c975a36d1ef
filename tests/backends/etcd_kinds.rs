//! What only etcd shows of a key's kind, its inspection and its forced
//! release: the kind is in the names of the shares' keys, so a key held as
//! one kind refuses another before anything is written; `inspect` reads the
//! holders, their leases' time to live and the fence key's revision from the
//! store; `force_release` deletes the keys, and each holder's next refresh
//! finds its key gone.

use std::time::Duration;

use etcd_client::{Client, GetOptions};
use lockmacro_runtime::{HeldAs, KeyKind, LockError, ObtainOptions, RetryStrategy};

use lockmacro_testkit::etcd::EtcdCluster;

const LONG: Duration = Duration::from_secs(30);
const PROMPTLY: Duration = Duration::from_secs(10);

async fn start() -> EtcdCluster {
    tokio::task::spawn_blocking(EtcdCluster::single)
        .await
        .expect("starting etcd")
}

/// The keys stored under `prefix`.
async fn keys_under(cluster: &EtcdCluster, prefix: &str) -> Vec<String> {
    let mut client = match Client::connect(cluster.endpoints(), None).await {
        Ok(client) => client,
        Err(err) => cluster.fail(format_args!("connect: {err}")),
    };
    let options = GetOptions::new().with_prefix().with_keys_only();
    let found = client.get(prefix, Some(options)).await.expect("get");
    found
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect()
}

fn wrong_kind(err: &LockError, held: KeyKind, asked: KeyKind) -> bool {
    matches!(err, LockError::WrongKind { key, held: h, asked: a } if key == "job" && *h == held && *a == asked)
}

/// A lock, a semaphore of 2 and a read-write lock each refuse the other
/// kinds, and a semaphore of 2 refuses one of 5, with nothing written for
/// the refused obtain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_held_as_one_kind_refuses_every_other_before_writing() {
    let cluster = start().await;
    let locker = cluster.locker().await;
    let two = KeyKind::Semaphore { permits: 2 };

    let lock = locker
        .obtain("job", LONG, ObtainOptions::new())
        .await
        .unwrap();
    for (opts, asked) in [
        (ObtainOptions::new().permits(2), two),
        (ObtainOptions::new().read(), KeyKind::ReadWrite),
    ] {
        let err = locker.obtain("job", LONG, opts).await.unwrap_err();
        assert!(wrong_kind(&err, KeyKind::Lock, asked), "{err:?}");
    }
    assert!(keys_under(&cluster, "job/shares/").await.is_empty());
    lock.release().await.unwrap();

    let permit = locker
        .obtain("job", LONG, ObtainOptions::new().permits(2))
        .await
        .unwrap();
    for (opts, asked) in [
        (ObtainOptions::new(), KeyKind::Lock),
        (
            ObtainOptions::new().permits(5),
            KeyKind::Semaphore { permits: 5 },
        ),
        (ObtainOptions::new().write(), KeyKind::ReadWrite),
    ] {
        let err = locker.obtain("job", LONG, opts).await.unwrap_err();
        assert!(wrong_kind(&err, two, asked), "{err:?}");
    }
    let stored = keys_under(&cluster, "job").await;
    assert_eq!(stored, [format!("job/shares/permits-2/{}", permit.token())]);
    permit.release().await.unwrap();

    let read = locker
        .obtain("job", LONG, ObtainOptions::new().read())
        .await
        .unwrap();
    let err = locker
        .obtain("job", LONG, ObtainOptions::new().permits(2))
        .await
        .unwrap_err();
    assert!(wrong_kind(&err, KeyKind::ReadWrite, two), "{err:?}");
    read.release().await.unwrap();
    // Free again, the key takes any kind.
    let lock = locker
        .obtain("job", LONG, ObtainOptions::new())
        .await
        .unwrap();
    lock.release().await.unwrap();
}

/// Two permits held with metadata and a fair waiter in line: `inspect` sees
/// the kind, both holders with their metadata and what their leases have
/// left (whole seconds, at most the ttl), the waiter, and the token of the
/// last permit taken (the fence key's revision).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_sees_holders_waiters_and_the_last_fence() {
    let cluster = start().await;
    let (a, b) = (cluster.locker().await, cluster.locker().await);
    assert_eq!(a.inspect("job").await.unwrap().kind, None);
    let permits = ObtainOptions::new().permits(2).fence();
    let first = a
        .obtain("job", LONG, permits.clone().metadata("w-1"))
        .await
        .unwrap();
    let second = a
        .obtain("job", LONG, permits.clone().metadata("w-2"))
        .await
        .unwrap();
    let fair = permits
        .clone()
        .fair()
        .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(30)));
    let waiter = tokio::spawn(async move { b.obtain("job", LONG, fair).await });
    let mut seen = a.inspect("job").await.unwrap();
    for _ in 0..500 {
        if seen.waiters == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        seen = a.inspect("job").await.unwrap();
    }
    assert_eq!(seen.kind, Some(KeyKind::Semaphore { permits: 2 }));
    assert_eq!(seen.waiters, 1, "{seen:?}");
    assert_eq!(seen.fence, second.fence_token());
    let mut metadata: Vec<&str> = seen.holders.iter().map(|h| h.metadata.as_str()).collect();
    metadata.sort_unstable();
    assert_eq!(metadata, ["w-1", "w-2"]);
    for holder in &seen.holders {
        assert_eq!(holder.held_as, HeldAs::Permit);
        assert!(
            holder
                .remaining
                .is_some_and(|left| left <= LONG && left > LONG / 2),
            "{holder:?}"
        );
    }
    first.release().await.unwrap();
    let third = tokio::time::timeout(PROMPTLY, waiter)
        .await
        .expect("the waiter was not woken")
        .unwrap()
        .unwrap();
    assert_eq!(a.inspect("job").await.unwrap().fence, third.fence_token());
    second.release().await.unwrap();
    third.release().await.unwrap();
    let seen = a.inspect("job").await.unwrap();
    assert_eq!((seen.kind, seen.holders.len(), seen.waiters), (None, 0, 0));
}

/// Two readers kept alive by the watchdog: `force_release` deletes both
/// reads, each guard reports its lease lost at its next refresh, a writer
/// gets in, and a second `force_release` of the free key finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_deletes_every_share_and_each_holder_loses_its_lease() {
    let cluster = start().await;
    let (a, b) = (cluster.locker().await, cluster.locker().await);
    let ttl = Duration::from_secs(2);
    let read = ObtainOptions::new().read();
    let first = a
        .obtain("job", ttl, read.clone())
        .await
        .unwrap()
        .keep_alive();
    let second = b.obtain("job", ttl, read).await.unwrap().keep_alive();
    assert!(b.force_release("job").await.unwrap());
    assert!(keys_under(&cluster, "job").await.is_empty());
    for guard in [&first, &second] {
        tokio::time::timeout(PROMPTLY, guard.lost())
            .await
            .expect("a holder was not told its share is gone");
    }
    let write = b
        .obtain("job", LONG, ObtainOptions::new().write())
        .await
        .unwrap();
    write.release().await.unwrap();
    assert!(!a.force_release("job").await.unwrap());
}

/// A write turned into a read stays on its lease and keeps its fencing
/// token; another reader gets in beside it, a writer does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgraded_write_is_a_read_on_the_same_lease() {
    let cluster = start().await;
    let (a, b) = (cluster.locker().await, cluster.locker().await);
    let write = a
        .obtain("job", LONG, ObtainOptions::new().write().fence())
        .await
        .unwrap();
    let token = write.fence_token();
    let read = write.downgrade().await.unwrap();
    assert_eq!(read.fence_token(), token);
    let stored = keys_under(&cluster, "job").await;
    assert_eq!(stored, [format!("job/shares/read/{}", read.token())]);
    let other = b
        .obtain("job", LONG, ObtainOptions::new().read())
        .await
        .unwrap();
    let refused = b
        .obtain("job", LONG, ObtainOptions::new().write())
        .await
        .unwrap_err();
    assert!(refused.is_not_obtained(), "{refused:?}");
    read.refresh(LONG).await.unwrap();
    read.release().await.unwrap();
    other.release().await.unwrap();
    assert!(keys_under(&cluster, "job").await.is_empty());
}
