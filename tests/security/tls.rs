//! `rediss://` against servers that accept TLS only, with a certificate
//! authority made for the test and given to the client with
//! `RedisConfig::tls_root_certificate`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lockmacro_runtime::{
    BackendErrorKind, ClusterBackend, FencedStore, LockError, Locker, RedisBackend, RedisConfig,
    RedlockBackend, RetryStrategy,
};
use lockmacro_testkit::RedisServer;
use lockmacro_testkit::tls::TestCa;
use redis::Value;

use crate::connect::{connect_failure, connect_failure_with};
use crate::{LONG, once};

fn trusting(ca: &TestCa) -> RedisConfig {
    RedisConfig::default().tls_root_certificate(ca.ca_pem())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_fences_and_wakeups_work_over_tls() {
    let ca = TestCa::generate();
    let server = RedisServer::start_tls(&ca, &[]);
    assert!(server.url().starts_with("rediss://"));
    let connect = || async {
        let backend = RedisBackend::connect_with(&server.url(), trusting(&ca)).await;
        Locker::new(server.expect_ok(backend, "connect over TLS"))
    };
    let (holder, waiter) = (connect().await, connect().await);

    let lock = server.expect_ok(holder.obtain("job", LONG, once().fence()).await, "obtain");
    assert!(lock.fence_token().is_some());
    // Seen through the harness's own TLS connection.
    let stored: Option<String> = server.cmd(&["GET", "job"]);
    assert_eq!(stored.as_deref(), Some(lock.token()));
    server.expect_ok(lock.refresh(LONG).await, "refresh");

    let retry = RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(20));
    let waiting =
        tokio::spawn(async move { waiter.obtain("job", LONG, once().retry(retry)).await });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let subscribers: Vec<Value> = server.cmd(&["PUBSUB", "NUMSUB", "lockmacro:released:job"]);
        if subscribers.get(1) == Some(&Value::Int(1)) {
            break;
        }
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.expect_ok(lock.release().await, "release");
    let got = server.expect_ok(waiting.await.expect("waiter task"), "woken waiter obtains");
    server.expect_ok(got.release().await, "waiter release");
}

#[tokio::test]
async fn redlock_works_over_tls() {
    let ca = TestCa::generate();
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_tls(&ca, &[])).collect();
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let backend = RedlockBackend::connect_with(&urls, trusting(&ca))
        .await
        .expect("connect");
    let locker = Locker::new(backend);
    let lock = locker
        .obtain("job", LONG, once().fence())
        .await
        .expect("obtain");
    for master in &masters {
        let stored: Option<String> = master.cmd(&["GET", "job"]);
        assert_eq!(
            stored.as_deref(),
            Some(lock.token()),
            "port {}",
            master.port()
        );
    }
    lock.release().await.expect("release");
}

/// The fenced resource on a TLS-only server: trusting the test CA through
/// `FencedStore::connect_with`, and refused without it.
#[tokio::test]
async fn fenced_store_works_over_tls() {
    let ca = TestCa::generate();
    let server = RedisServer::start_tls(&ca, &[]);
    let store = server.expect_ok(
        FencedStore::connect_with(&server.url(), trusting(&ca)).await,
        "connect over TLS",
    );
    assert!(server.expect_ok(store.set("report", "newer", 2).await, "set"));
    assert!(!server.expect_ok(store.set("report", "stale", 1).await, "stale set"));
    // Seen through the harness's own TLS connection.
    let stored: Option<String> = server.cmd(&["HGET", "report", "value"]);
    assert_eq!(stored.as_deref(), Some("newer"));

    let Err(LockError::Backend(refused)) = FencedStore::connect(&server.url()).await else {
        panic!("connected without trusting the test CA");
    };
    assert_eq!(refused.kind(), BackendErrorKind::Tls, "{refused}");
}

/// A server that checks clients (`tls-auth-clients yes`) ends the handshake
/// of a client without a certificate or with one from another CA, and lets
/// in one that presents a certificate signed by the CA it trusts.
#[tokio::test]
async fn client_certificate_is_presented_to_a_server_that_checks_clients() {
    let ca = TestCa::generate();
    let server = RedisServer::start_tls(&ca, &["--tls-auth-clients", "yes"]);
    let (kind, message) = connect_failure_with(&server.url(), trusting(&ca)).await;
    assert_eq!(kind, BackendErrorKind::Tls, "{message}");
    assert!(message.contains("client certificate"), "{message}");

    // Signed by a CA the server does not trust.
    let stranger = TestCa::generate();
    let config =
        trusting(&ca).tls_client_certificate(stranger.client_cert_pem(), stranger.client_key_pem());
    let (kind, message) = connect_failure_with(&server.url(), config).await;
    assert_eq!(kind, BackendErrorKind::Tls, "{message}");
    assert!(
        message.contains("the server refused the client certificate"),
        "{message}"
    );

    let config = trusting(&ca).tls_client_certificate(ca.client_cert_pem(), ca.client_key_pem());
    let backend = RedisBackend::connect_with(&server.url(), config).await;
    let locker = Locker::new(server.expect_ok(backend, "connect with a client certificate"));
    let lock = server.expect_ok(locker.obtain("job", LONG, once().fence()).await, "obtain");
    let stored: Option<String> = server.cmd(&["GET", "job"]);
    assert_eq!(stored.as_deref(), Some(lock.token()));
    server.expect_ok(lock.release().await, "release");
}

#[tokio::test]
async fn client_key_that_is_not_pem_is_refused_without_showing_it() {
    let ca = TestCa::generate();
    let server = RedisServer::start_tls(&ca, &["--tls-auth-clients", "yes"]);
    let secret = "not-a-key-but-secret";
    let config = trusting(&ca).tls_client_certificate(ca.client_cert_pem(), secret);
    let (kind, message) = connect_failure_with(&server.url(), config.clone()).await;
    assert_eq!(kind, BackendErrorKind::Tls, "{message}");
    assert!(
        message.contains("RedisConfig::tls_client_certificate"),
        "{message}"
    );
    assert!(!message.contains(secret), "{message}");
    assert!(!format!("{config:?}").contains(secret), "{config:?}");
}

#[tokio::test]
async fn server_certificate_from_an_untrusted_ca_is_refused() {
    let ca = TestCa::generate();
    let server = RedisServer::start_tls(&ca, &[]);
    // The system's roots do not include the test CA, nor does another CA.
    let (kind, message) = connect_failure(&server.url()).await;
    assert_eq!(kind, BackendErrorKind::Tls, "{message}");
    assert!(message.contains("TLS handshake failed"), "{message}");
    assert!(message.contains("UnknownIssuer"), "{message}");
    let stranger = TestCa::generate();
    let (kind, message) = connect_failure_with(&server.url(), trusting(&stranger)).await;
    assert_eq!(kind, BackendErrorKind::Tls, "{message}");
}

#[tokio::test]
async fn server_certificate_for_another_name_is_refused() {
    // The certificate names 127.0.0.1 and localhost; the server also listens
    // on 127.0.0.2, a name the certificate does not give.
    let ca = TestCa::generate();
    let server = RedisServer::start_tls(&ca, &["--bind", "127.0.0.1", "127.0.0.2"]);
    let url = format!("rediss://127.0.0.2:{}/", server.port());
    let (kind, message) = connect_failure_with(&url, trusting(&ca)).await;
    assert_eq!(kind, BackendErrorKind::Tls, "{message}");
    assert!(
        message.contains("certificate not valid for name \"127.0.0.2\""),
        "{message}"
    );
}

#[tokio::test]
async fn rediss_to_a_plain_port_times_out_and_says_to_use_redis() {
    // The server reads the TLS greeting as the start of a command and waits
    // for the rest of it: the client sees silence, not an error.
    let server = RedisServer::start();
    let ca = TestCa::generate();
    let url = format!("rediss://127.0.0.1:{}/", server.port());
    let (kind, message) = connect_failure_with(&url, trusting(&ca)).await;
    assert_eq!(kind, BackendErrorKind::Timeout, "{message}");
    assert!(
        message.contains("the TLS handshake got no reply"),
        "{message}"
    );
    assert!(message.contains("use a `redis://` URL"), "{message}");
}

#[tokio::test]
async fn redis_to_a_tls_port_says_to_use_rediss() {
    let ca = TestCa::generate();
    let server = RedisServer::start_tls(&ca, &[]);
    let url = format!("redis://127.0.0.1:{}/", server.port());
    let (kind, message) = connect_failure(&url).await;
    assert_eq!(kind, BackendErrorKind::Unreachable, "{message}");
    assert!(message.contains("use a `rediss://` URL"), "{message}");
}

#[tokio::test]
async fn root_certificate_with_a_plain_url_is_refused_rather_than_ignored() {
    let ca = TestCa::generate();
    let server = RedisServer::start();
    let err = RedisBackend::connect_with(&server.url(), trusting(&ca))
        .await
        .unwrap_err();
    let LockError::InvalidUrl { reason, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(reason.contains("use `rediss://`"), "{err}");
}

#[tokio::test]
async fn root_certificate_that_is_not_pem_is_refused() {
    let ca = TestCa::generate();
    let server = RedisServer::start_tls(&ca, &[]);
    for pem in [b"not a certificate".to_vec(), Vec::new()] {
        let config = RedisConfig::default().tls_root_certificate(pem);
        let (kind, message) = connect_failure_with(&server.url(), config).await;
        assert_eq!(kind, BackendErrorKind::Tls, "{message}");
        assert!(
            message.contains("RedisConfig::tls_root_certificate"),
            "{message}"
        );
    }
}

/// Three TLS-only masters joined into a cluster whose bus also runs over
/// TLS, created with `redis-cli --tls`; returns once every node reports
/// `cluster_state:ok`.
fn tls_cluster(ca: &TestCa) -> Vec<RedisServer> {
    let args = [
        "--cluster-enabled",
        "yes",
        "--tls-cluster",
        "yes",
        "--cluster-node-timeout",
        "1000",
    ];
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_tls(ca, &args)).collect();
    let cli = std::env::var_os("LOCKMACRO_REDIS_CLI")
        .filter(|cli| !cli.is_empty())
        .unwrap_or_else(|| "redis-cli".into());
    let mut command = Command::new(cli);
    command
        .arg("--tls")
        .arg("--cacert")
        .arg(ca.ca_cert())
        .args(["--cluster", "create"]);
    for node in &nodes {
        command.arg(format!("127.0.0.1:{}", node.port()));
    }
    command
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut cli = command.spawn().expect("cannot run redis-cli");
    // `redis-cli --cluster create` waits for the nodes to meet without a
    // time limit of its own.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = nodes.iter().all(|node| {
            let info: String = node.cmd(&["CLUSTER", "INFO"]);
            info.lines().any(|line| line.trim() == "cluster_state:ok")
        });
        if ready {
            break;
        }
        if Instant::now() > deadline {
            let _ = cli.kill();
            let _ = cli.wait();
            nodes[0].fail("the TLS cluster did not reach cluster_state:ok within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = cli.wait().expect("waiting for redis-cli");
    assert!(status.success(), "redis-cli --cluster create: {status}");
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_works_over_tls() {
    let ca = TestCa::generate();
    let nodes = tokio::task::block_in_place(|| tls_cluster(&ca));
    let seeds: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let backend = ClusterBackend::connect_with(&seeds, trusting(&ca)).await;
    let locker = Locker::new(nodes[0].expect_ok(backend, "connect over TLS"));
    let lock = nodes[0].expect_ok(locker.obtain("job", LONG, once().fence()).await, "obtain");
    let keys: i64 = nodes.iter().map(|node| node.cmd::<i64>(&["DBSIZE"])).sum();
    assert_eq!(keys, 2, "the lock and its fence counter");
    nodes[0].expect_ok(lock.refresh(LONG).await, "refresh");
    nodes[0].expect_ok(lock.release().await, "release");
    let keys: i64 = nodes.iter().map(|node| node.cmd::<i64>(&["DBSIZE"])).sum();
    assert_eq!(keys, 1, "the fence counter outlives the lock");
}
