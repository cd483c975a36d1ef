//! Connections that cannot work fail at connect, in bounded time, each with
//! an error of its own. `tests/runtime/redis.rs` checks a wrong password, a
//! refused connection and a silent server one by one; this adds a host that
//! does not exist, a wrong ACL user, and compares all of them with the TLS
//! mismatches, so that no two look alike.

use std::net::TcpListener;
use std::time::Duration;

use lockmacro_runtime::{BackendErrorKind, LockError, RedisBackend, RedisConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use lockmacro_testkit::RedisServer;
use lockmacro_testkit::tls::TestCa;

/// Generous: every failure here is expected within the connect timeout
/// (3 s by default), most at once.
const BOUND: Duration = Duration::from_secs(10);

/// Connects to `url` with the default configuration, expecting a backend
/// error within [`BOUND`]; returns its kind and message.
pub async fn connect_failure(url: &str) -> (BackendErrorKind, String) {
    connect_failure_with(url, RedisConfig::default()).await
}

pub async fn connect_failure_with(url: &str, config: RedisConfig) -> (BackendErrorKind, String) {
    let start = Instant::now();
    let result = RedisBackend::connect_with(url, config).await;
    let elapsed = start.elapsed();
    let err = result.expect_err(url);
    assert!(elapsed < BOUND, "{url}: failed after {elapsed:?}: {err}");
    let LockError::Backend(backend) = &err else {
        panic!("{url}: expected a backend error, got {err:?}")
    };
    (backend.kind(), err.to_string())
}

#[tokio::test]
async fn host_that_does_not_exist_is_unreachable() {
    // `.invalid` never resolves (RFC 2606).
    let (kind, message) = connect_failure("redis://lockmacro-no-such-host.invalid:6379/").await;
    assert_eq!(kind, BackendErrorKind::Unreachable, "{message}");
    assert!(
        message.contains("lockmacro-no-such-host.invalid"),
        "{message}"
    );
}

#[tokio::test]
async fn unknown_acl_user_or_wrong_password_is_an_authentication_failure() {
    let server = RedisServer::start();
    let () = server.cmd(&["ACL", "SETUSER", "app", "on", ">right", "~*", "+@all"]);
    // (The `default` user has no password here, so any password lets it in.)
    for (user, password) in [("app", "wrong"), ("nobody", "right")] {
        let url = format!("redis://{user}:{password}@127.0.0.1:{}/", server.port());
        let (kind, message) = connect_failure(&url).await;
        assert_eq!(kind, BackendErrorKind::Authentication, "{user}: {message}");
        assert!(message.contains("authentication failed"), "{message}");
        assert!(!message.contains(password), "password in {message}");
    }
}

#[tokio::test]
async fn missing_password_fails_at_connect_with_a_credentials_error() {
    let server = RedisServer::start_with(&["--requirepass", "right"]);
    let url = format!("redis://127.0.0.1:{}/", server.port());
    let (kind, message) = connect_failure(&url).await;
    assert_eq!(kind, BackendErrorKind::Authentication, "{message}");
    assert!(message.contains("authentication failed"), "{message}");
}

#[tokio::test]
async fn frozen_server_fails_at_connect_with_a_timeout() {
    let server = RedisServer::start();
    server.pause();
    let config = RedisConfig::default().connect_timeout(Duration::from_millis(500));
    let (kind, message) = connect_failure_with(&server.url(), config).await;
    server.resume();
    assert_eq!(kind, BackendErrorKind::Timeout, "{message}");
    assert!(message.contains("no answer in time"), "{message}");
}

#[tokio::test]
async fn a_port_that_speaks_http_is_not_a_redis_server() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // What an HTTP server answers to bytes it cannot read as a request, on
    // every connection (the client may try more than one).
    let http = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = [0; 512];
            let _ = stream.read(&mut request).await;
            let _ = stream
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                .await;
        }
    });
    let (kind, message) = connect_failure(&format!("redis://{addr}/")).await;
    http.abort();
    assert_eq!(kind, BackendErrorKind::Protocol, "{message}");
    assert!(message.contains("not a Redis server"), "{message}");
    assert!(!kind.is_transient());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_failure_is_told_apart() {
    let plain = RedisServer::start_with(&["--requirepass", "right"]);
    let ca = TestCa::generate();
    let tls = RedisServer::start_tls(&ca, &[]);
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    // The cases that must time out wait 0.5 s; the others get 10 s, so
    // that a TLS handshake slowed by a loaded machine is not one of them.
    let quick = RedisConfig::default()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500));
    let patient = RedisConfig::default()
        .connect_timeout(Duration::from_secs(10))
        .response_timeout(Duration::from_secs(10));
    let trusting = quick.clone().tls_root_certificate(ca.ca_pem());

    // Each case with the kind and the words that set it apart.
    let cases = [
        (
            "wrong password",
            format!("redis://:wrong@127.0.0.1:{}/", plain.port()),
            patient.clone(),
            BackendErrorKind::Authentication,
            "authentication failed",
        ),
        (
            "nothing listens",
            format!("redis://{closed}/"),
            patient.clone(),
            BackendErrorKind::Unreachable,
            "refused",
        ),
        (
            "never answers",
            format!("redis://{}/", silent.local_addr().unwrap()),
            quick.clone(),
            BackendErrorKind::Timeout,
            "no answer in time",
        ),
        (
            "host does not exist",
            "redis://lockmacro-no-such-host.invalid/".to_owned(),
            patient.clone(),
            BackendErrorKind::Unreachable,
            "lookup",
        ),
        (
            "rediss:// to a plain port",
            format!("rediss://127.0.0.1:{}/", plain.port()),
            trusting,
            BackendErrorKind::Timeout,
            "use a `redis://` URL",
        ),
        (
            "redis:// to a TLS port",
            format!("redis://127.0.0.1:{}/", tls.port()),
            patient.clone(),
            BackendErrorKind::Unreachable,
            "use a `rediss://` URL",
        ),
        (
            "untrusted certificate",
            tls.url(),
            patient,
            BackendErrorKind::Tls,
            "UnknownIssuer",
        ),
    ];
    let mut messages: Vec<(&str, String)> = Vec::new();
    for (what, url, config, kind, words) in cases {
        let (found, message) = connect_failure_with(&url, config).await;
        assert_eq!(found, kind, "{what}: {message}");
        assert!(message.contains(words), "{what}: {message}");
        for (other, other_message) in &messages {
            assert!(
                !other_message.contains(words),
                "{other} also says {words:?}: {other_message}"
            );
        }
        messages.push((what, message));
    }
    drop(silent);
}
