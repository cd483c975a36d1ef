//! Connections opened through `RedisConfig::dial`: the URLs name hosts that
//! do not resolve, so a lock taken, a waiter woken, a script-free
//! transaction and a Redlock quorum show that every connection went through
//! the dial, to the address the URL gave. A cluster, Sentinel and a
//! `rediss://` URL refuse such a config before connecting.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockmacro_runtime::backend::{Dial, DialedStream, Dialing};
use lockmacro_runtime::{
    ClusterBackend, FencedStore, LockError, Locker, ObtainOptions, RedisBackend, RedisConfig,
    RedlockBackend, RetryStrategy, Scripts, SentinelBackend,
};
use lockmacro_testkit::RedisServer;

use crate::scriptless::denied_scripts;
use crate::wakeup::until_listening;

const TTL: Duration = Duration::from_secs(30);
const PROMPTLY: Duration = Duration::from_secs(5);

/// Dials `name:6379` to the local port of the server of that name, and
/// counts the dials per address.
#[derive(Clone, Default)]
struct Hosts {
    ports: Arc<BTreeMap<String, u16>>,
    dialled: Arc<Mutex<BTreeMap<String, usize>>>,
}

impl Hosts {
    fn new<'a>(servers: impl IntoIterator<Item = (&'a str, &'a RedisServer)>) -> Self {
        let ports = servers
            .into_iter()
            .map(|(name, server)| (format!("{name}:6379"), server.port()))
            .collect();
        Hosts {
            ports: Arc::new(ports),
            dialled: Arc::default(),
        }
    }

    fn dialled(&self) -> BTreeMap<String, usize> {
        self.dialled.lock().unwrap().clone()
    }
}

impl Dial for Hosts {
    fn dial(&self, address: &str) -> Dialing {
        *self
            .dialled
            .lock()
            .unwrap()
            .entry(address.to_owned())
            .or_default() += 1;
        let port = self.ports.get(address).copied();
        let address = address.to_owned();
        Box::pin(async move {
            let port = port.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no server named {address}"),
                )
            })?;
            let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
            Ok(Box::new(stream) as Box<dyn DialedStream>)
        })
    }
}

#[tokio::test]
async fn a_dialled_locker_locks_fences_and_wakes_its_waiters() {
    let server = RedisServer::start();
    let hosts = Hosts::new([("locks.invalid", &server)]);
    let config = RedisConfig::default().dial(hosts.clone());
    let url = "redis://locks.invalid:6379/";
    let holder = Locker::new(server.expect_ok(
        RedisBackend::connect_with(url, config.clone()).await,
        "connect through the dial",
    ));
    let waiter = Locker::new(server.expect_ok(
        RedisBackend::connect_with(url, config.clone()).await,
        "connect through the dial",
    ));
    let held = server.expect_ok(
        holder
            .obtain("job", TTL, ObtainOptions::new().fence())
            .await,
        "obtain",
    );
    assert!(held.fence_token().is_some_and(|fence| fence > 0));
    let value: Option<String> = server.cmd(&["GET", "job"]);
    assert!(value.is_some_and(|value| value.starts_with(held.token())));

    // A 60 s backoff: the waiter gets the key in time only if the release
    // wakes it, on the pub/sub connection it dialled.
    let waiting = tokio::spawn(async move {
        waiter
            .obtain(
                "job",
                TTL,
                ObtainOptions::new()
                    .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(TTL)),
            )
            .await
    });
    until_listening(&server, "job", 1).await;
    server.expect_ok(held.release().await, "release");
    let woken = tokio::time::timeout(PROMPTLY, waiting)
        .await
        .unwrap_or_else(|_| server.fail("the release did not wake the dialled waiter"))
        .unwrap();
    server.expect_ok(
        server
            .expect_ok(woken, "the waiter's obtain")
            .release()
            .await,
        "release",
    );

    let store = server.expect_ok(
        FencedStore::connect_with(url, config).await,
        "a fenced store through the dial",
    );
    drop(store);

    let dialled = hosts.dialled();
    assert_eq!(
        dialled.keys().collect::<Vec<_>>(),
        ["locks.invalid:6379"],
        "every connection is dialled to the URL's address"
    );
    // Two command connections, the waiter's pub/sub connection, the store's.
    assert!(dialled["locks.invalid:6379"] >= 4, "{dialled:?}");
}

#[tokio::test]
async fn the_script_free_engine_opens_its_transactions_through_the_dial() {
    let server = denied_scripts();
    let hosts = Hosts::new([("locks.invalid", &server)]);
    let config = RedisConfig::default()
        .scripts(Scripts::Never)
        .dial(hosts.clone());
    let locker = Locker::new(server.expect_ok(
        RedisBackend::connect_with("redis://locker:pw@locks.invalid:6379/", config).await,
        "connect through the dial",
    ));
    let connected = hosts.dialled()["locks.invalid:6379"];
    let lock = server.expect_ok(
        locker
            .obtain("job", TTL, ObtainOptions::new().fence())
            .await,
        "a fenced obtain, a WATCH transaction without scripts",
    );
    assert!(lock.fence_token().is_some_and(|fence| fence > 0));
    assert!(
        hosts.dialled()["locks.invalid:6379"] > connected,
        "the transaction's connection was dialled"
    );
    server.expect_ok(lock.release().await, "release");
    let left: i64 = server.cmd(&["EXISTS", "job"]);
    assert_eq!(left, 0);
}

#[tokio::test]
async fn redlock_dials_each_master_by_its_address() {
    let masters = RedisServer::start_many(3);
    let names = ["m0.invalid", "m1.invalid", "m2.invalid"];
    let hosts = Hosts::new(names.iter().copied().zip(&masters));
    let urls: Vec<String> = names
        .iter()
        .map(|name| format!("redis://{name}:6379/"))
        .collect();
    let config = RedisConfig::default().dial(hosts.clone());
    let backend = match RedlockBackend::connect_with(&urls, config).await {
        Ok(backend) => backend,
        Err(err) => RedisServer::fail_all(&masters, format_args!("connect: {err}")),
    };
    let lock = match Locker::new(backend)
        .obtain("job", TTL, ObtainOptions::new())
        .await
    {
        Ok(lock) => lock,
        Err(err) => RedisServer::fail_all(&masters, format_args!("obtain: {err}")),
    };
    for master in &masters {
        let value: Option<String> = master.cmd(&["GET", "job"]);
        assert!(value.is_some_and(|value| value.starts_with(lock.token())));
    }
    lock.release().await.unwrap();
    let dialled = hosts.dialled();
    assert_eq!(
        dialled.keys().map(String::as_str).collect::<Vec<_>>(),
        ["m0.invalid:6379", "m1.invalid:6379", "m2.invalid:6379"]
    );
}

#[tokio::test]
async fn a_cluster_sentinel_or_tls_url_refuses_a_dial() {
    let config = RedisConfig::default().dial(Hosts::default());
    let refused = |result: Result<(), LockError>, what: &str| match result {
        Err(LockError::InvalidUrl { reason, .. }) => {
            assert!(reason.contains("RedisConfig::dial"), "{what}: {reason}")
        }
        other => panic!("{what}: expected a refusal of the dial, got {other:?}"),
    };
    refused(
        ClusterBackend::connect_with(["redis://127.0.0.1:1/"], config.clone())
            .await
            .map(drop),
        "cluster",
    );
    refused(
        SentinelBackend::connect_with("mymaster", ["redis://127.0.0.1:1/"], config.clone())
            .await
            .map(drop),
        "sentinel",
    );
    refused(
        RedisBackend::connect_with("rediss://127.0.0.1:1/", config)
            .await
            .map(drop),
        "rediss://",
    );
}
