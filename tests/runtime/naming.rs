//! Every error about a lock names its key as the caller gave it, with the
//! locker's namespace beside it, whoever reports it: the locker (busy, no
//! longer held) or the backend (unreachable); and a skipped call logs the
//! error once.

use std::time::Duration;

use lockmacro_runtime::{LockError, Locker, ObtainOptions, RedisBackend, RedisConfig};

use lockmacro_testkit::RedisServer;
use lockmacro_testkit::logs::Logs;

const LONG: Duration = Duration::from_secs(30);
const NAMED: &str = "`customer:42` (namespace `shop`)";

#[tokio::test]
async fn every_error_names_the_key_as_given_with_its_namespace() {
    let mut server = RedisServer::start();
    let config = RedisConfig::default()
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300));
    let connect = || async {
        let backend = RedisBackend::connect_with(&server.url(), config.clone()).await;
        Locker::new(server.expect_ok(backend, "connect")).with_namespace("shop")
    };
    let (holder, other) = (connect().await, connect().await);
    let lock = server.expect_ok(
        holder
            .obtain("customer:42", LONG, ObtainOptions::new())
            .await,
        "obtain",
    );

    let busy = other
        .obtain("customer:42", LONG, ObtainOptions::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&busy, LockError::NotObtained { key, namespace, .. } if key == "customer:42" && namespace == "shop"),
        "{busy:?}"
    );
    assert!(busy.to_string().contains(NAMED), "{busy}");

    let () = server.cmd(&["DEL", "shop:customer:42"]);
    let gone = lock.refresh(LONG).await.unwrap_err();
    assert!(
        matches!(&gone, LockError::NotHeld { key, namespace } if key == "customer:42" && namespace == "shop"),
        "{gone:?}"
    );
    assert!(gone.to_string().contains(NAMED), "{gone}");

    let lock = server.expect_ok(
        holder
            .obtain("customer:42", LONG, ObtainOptions::new())
            .await,
        "obtain again",
    );
    server.stop();
    let down = other
        .obtain("customer:42", LONG, ObtainOptions::new())
        .await
        .unwrap_err();
    let release = lock.release().await.unwrap_err();
    for err in [down, release] {
        assert!(matches!(&err, LockError::Backend(_)), "{err:?}");
        let message = err.to_string();
        assert!(message.contains(NAMED), "{message}");
        assert!(!message.contains("shop:customer:42"), "{message}");
    }
}

#[lockmacro_runtime::distributed_lock(key = "{id}", ttl = "5s", locker = locker)]
async fn report(locker: &Locker, id: &str) {
    let _ = (locker, id);
}

#[tokio::test(flavor = "current_thread")]
async fn a_skipped_call_logs_its_error_once() {
    let captured = Logs::capture(tracing::Level::ERROR);

    // A key the locker refuses, known only at run time.
    report(&Locker::memory(), "").await;

    let logs = captured.text();
    let line = logs
        .lines()
        .find(|line| line.contains("skipped"))
        .unwrap_or_else(|| panic!("no skipped line in:\n{logs}"));
    assert_eq!(line.matches("invalid lock key").count(), 1, "{line}");
}
