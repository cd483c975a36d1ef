//! `https://` etcd members: a member that serves TLS only and checks client
//! certificates (`--client-cert-auth`), reached with the test CA as the root
//! and the CA's client certificate, given as PEM or as files; and every way
//! of getting that wrong, each refused at connect with an error of its own.

use std::time::{Duration, Instant};

use lockmacro_runtime::{
    BackendErrorKind, EtcdBackend, EtcdConfig, LockError, Locker, RetryStrategy,
};
use lockmacro_testkit::etcd_secure::SecureEtcd;
use lockmacro_testkit::tls::TestCa;

use crate::{LONG, once};

/// Generous: every failure here is expected within the connect and
/// response timeouts (2 s each by default), most at once.
const BOUND: Duration = Duration::from_secs(10);

fn trusting(ca: &TestCa) -> EtcdConfig {
    EtcdConfig::default()
        .tls_root_certificate(ca.ca_pem())
        .tls_client_certificate(ca.client_cert_pem(), ca.client_key_pem())
}

/// Connects to `url` with `config`, expecting a failure within [`BOUND`].
pub async fn connect_failure(url: &str, config: EtcdConfig) -> LockError {
    let start = Instant::now();
    let result = EtcdBackend::connect_with([url], config).await;
    let elapsed = start.elapsed();
    let err = result.expect_err(url);
    assert!(elapsed < BOUND, "{url}: failed after {elapsed:?}: {err}");
    err
}

/// The kind and message of a backend error at connect.
pub async fn backend_failure(url: &str, config: EtcdConfig) -> (BackendErrorKind, String) {
    match connect_failure(url, config).await {
        LockError::Backend(err) => (err.kind(), err.to_string()),
        other => panic!("{url}: expected a backend error, got {other:?}"),
    }
}

/// Lock, refresh, fencing tokens, a waiter woken by the release, and the
/// release, through `holder` and `waiter` (two lockers with connections of
/// their own) on `member`.
pub async fn exercise(member: &SecureEtcd, holder: Locker, waiter: Locker) {
    let lock = member.expect_ok(holder.obtain("job", LONG, once().fence()).await, "obtain");
    let first = lock.fence_token().expect("a fencing token");
    member.expect_ok(lock.refresh(LONG).await, "refresh");

    let watchers = || {
        member
            .metric("etcd_debugging_mvcc_watcher_total")
            .unwrap_or_else(|err| member.fail(err))
    };
    let before = watchers();
    // Woken by the release, or not at all: the retry's pause and the
    // holder's lease both outlast the deadline.
    let retry = RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(20));
    let waiting = tokio::spawn(async move {
        waiter
            .obtain("job", LONG, once().fence().retry(retry))
            .await
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while watchers() <= before {
        if Instant::now() > deadline {
            member.fail("the waiter never watched the key");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    member.expect_ok(lock.release().await, "release");
    let next = member.expect_ok(waiting.await.expect("waiter task"), "woken waiter obtains");
    let second = next.fence_token().expect("a fencing token");
    assert!(
        second > first,
        "fencing tokens went from {first} to {second}"
    );
    member.expect_ok(next.release().await, "waiter release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_fences_and_wakeups_work_on_a_tls_only_member() {
    let ca = TestCa::generate();
    let member = SecureEtcd::start_tls(&ca);
    assert!(member.url().starts_with("https://"));
    let holder = EtcdBackend::connect_with([member.url()], trusting(&ca)).await;
    let holder = Locker::new(member.expect_ok(holder, "connect with PEM"));
    // The same settings read from files, and a bare `host:port`, which TLS
    // settings make an `https://` member.
    let files = EtcdConfig::default()
        .tls_root_certificate_file(ca.ca_cert())
        .tls_client_certificate_files(ca.client_cert(), ca.client_key());
    let bare = member.url().replacen("https://", "", 1);
    let waiter = EtcdBackend::connect_with([bare], files).await;
    let waiter = Locker::new(member.expect_ok(waiter, "connect with files"));
    exercise(&member, holder, waiter).await;
}

#[tokio::test]
async fn unusable_certificates_and_files_are_refused_at_connect() {
    let ca = TestCa::generate();
    let member = SecureEtcd::start_tls(&ca);
    let url = member.url();
    let secret = "not-a-key-but-secret";
    let missing = std::env::temp_dir().join("lockmacro-no-such-dir/ca.crt");
    let cases = [
        (
            EtcdConfig::default().tls_root_certificate("not a certificate"),
            "`EtcdConfig::tls_root_certificate` holds no certificate",
        ),
        (
            EtcdConfig::default()
                .tls_root_certificate(ca.ca_pem())
                .tls_client_certificate(ca.client_cert_pem(), secret),
            "client key given to `EtcdConfig::tls_client_certificate` is not a PEM private key",
        ),
        (
            EtcdConfig::default().tls_root_certificate_file(&missing),
            "`EtcdConfig::tls_root_certificate_file` cannot be read",
        ),
    ];
    for (config, expected) in cases {
        let shown = format!("{config:?}");
        assert!(!shown.contains(secret), "{shown}");
        let (kind, message) = backend_failure(&url, config).await;
        assert_eq!(kind, BackendErrorKind::Tls, "{message}");
        assert!(message.contains(expected), "{message}");
        assert!(!message.contains(secret), "{message}");
    }
    let (_, message) = backend_failure(
        &url,
        EtcdConfig::default().tls_root_certificate_file(&missing),
    )
    .await;
    assert!(
        message.contains(&missing.display().to_string()),
        "{message}"
    );
}

/// A member whose certificate another CA signed, a client without a
/// certificate, or with one the member's CA did not sign: each fails the
/// handshake, as a TLS error that says what to check.
#[tokio::test]
async fn handshakes_that_cannot_succeed_are_tls_errors() {
    let ca = TestCa::generate();
    let stranger = TestCa::generate();
    let member = SecureEtcd::start_tls(&ca);
    let url = member.url();

    let (kind, message) = backend_failure(&url, trusting(&stranger)).await;
    assert_eq!(kind, BackendErrorKind::Tls, "{message}");
    assert!(
        message.contains("EtcdConfig::tls_root_certificate"),
        "{message}"
    );

    let without_client = EtcdConfig::default().tls_root_certificate(ca.ca_pem());
    let (kind, message) = backend_failure(&url, without_client).await;
    assert_eq!(kind, BackendErrorKind::Tls, "{message}");
    assert!(
        message.contains("EtcdConfig::tls_client_certificate"),
        "{message}"
    );

    let foreign_client = EtcdConfig::default()
        .tls_root_certificate(ca.ca_pem())
        .tls_client_certificate(stranger.client_cert_pem(), stranger.client_key_pem());
    let (kind, message) = backend_failure(&url, foreign_client).await;
    assert_eq!(kind, BackendErrorKind::Tls, "{message}");
    assert!(
        message.contains("refused the client certificate"),
        "{message}"
    );
}

/// `http://` to a member that speaks TLS only fails at connect, and TLS
/// settings with an `http://` URL are refused before anything is sent.
#[tokio::test]
async fn plaintext_against_a_tls_only_member_is_refused() {
    let ca = TestCa::generate();
    let member = SecureEtcd::start_tls(&ca);
    let plain = member.url_in_the_other_scheme();
    assert!(plain.starts_with("http://"));

    let err = connect_failure(&plain, trusting(&ca)).await;
    let LockError::InvalidUrl { reason, .. } = &err else {
        panic!("expected an invalid URL, got {err:?}");
    };
    assert!(reason.contains("write `https://`"), "{reason}");

    let (_, message) = backend_failure(&plain, EtcdConfig::default()).await;
    assert!(message.contains("write `https://`"), "{message}");
}
