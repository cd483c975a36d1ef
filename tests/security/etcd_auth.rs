//! etcd users: a member with authentication enabled through etcd's own API,
//! a user whose role may read and write its namespace only, credentials in the
//! URL or the config, the wrong ones, a key outside the prefix, and tokens
//! that expire while a lock is held.

use std::time::Duration;

use lockmacro_runtime::{BackendErrorKind, EtcdBackend, EtcdConfig, LockError, Locker};
use lockmacro_testkit::etcd_secure::SecureEtcd;

use crate::etcd_tls::{backend_failure, exercise};
use crate::{LONG, once};

const USER: &str = "billing";
const PASSWORD: &str = "s3cret-password";
/// The namespace, whose prefix the user's role may read and write.
const NAMESPACE: &str = "billing";

/// A member with authentication whose tokens last `token_ttl`.
async fn member(token_ttl: Duration) -> SecureEtcd {
    let member = tokio::task::spawn_blocking(move || SecureEtcd::start_with_token_ttl(token_ttl))
        .await
        .expect("start etcd");
    // The lock keys and what is under them, and the derived fence keys
    // (`{billing:job}:fence`).
    let prefixes = [format!("{NAMESPACE}:"), format!("{{{NAMESPACE}:")];
    let prefixes: Vec<&str> = prefixes.iter().map(String::as_str).collect();
    member.enable_auth(USER, PASSWORD, &prefixes).await;
    member
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_readwrite_on_the_namespace_locks_there() {
    let member = member(Duration::from_secs(300)).await;
    // Credentials in the URL for one locker, in the config for the other.
    let holder = EtcdBackend::connect([member.url_for(USER, PASSWORD)]).await;
    let holder = Locker::new(member.expect_ok(holder, "connect with the URL's user"));
    let config = EtcdConfig::default().user(USER, PASSWORD);
    let waiter = EtcdBackend::connect_with([member.url()], config).await;
    let waiter = Locker::new(member.expect_ok(waiter, "connect with the config's user"));
    exercise(
        &member,
        holder.with_namespace(NAMESPACE),
        waiter.with_namespace(NAMESPACE),
    )
    .await;
}

#[tokio::test]
async fn a_key_outside_the_users_prefix_is_a_permission_error() {
    let member = member(Duration::from_secs(300)).await;
    let backend = EtcdBackend::connect([member.url_for(USER, PASSWORD)]).await;
    let locker = Locker::new(member.expect_ok(backend, "connect"));
    let refused = locker
        .with_namespace("payroll")
        .obtain("job", LONG, once())
        .await;
    let Err(LockError::Backend(err)) = refused else {
        panic!("obtained outside the prefix: {refused:?}");
    };
    assert_eq!(err.kind(), BackendErrorKind::Permission, "{err}");
    let message = err.to_string();
    assert!(message.contains("permission denied"), "{message}");
    assert!(message.contains("`job` (namespace `payroll`)"), "{message}");
    // Nothing was written, inside the prefix or out.
    let mut root = member.root_client().await;
    let keys = member.expect_ok(
        root.get(
            "",
            Some(
                etcd_client::GetOptions::new()
                    .with_all_keys()
                    .with_count_only(),
            ),
        )
        .await,
        "count keys",
    );
    assert_eq!(keys.count(), 0);
}

#[tokio::test]
async fn wrong_credentials_and_none_fail_at_connect() {
    let member = member(Duration::from_secs(300)).await;
    for (user, password) in [(USER, "wrong-password"), ("nobody", PASSWORD)] {
        let (kind, message) =
            backend_failure(&member.url_for(user, password), EtcdConfig::default()).await;
        assert_eq!(kind, BackendErrorKind::Authentication, "{user}: {message}");
        assert!(message.contains("wrong user or password"), "{message}");
        assert!(!message.contains(password), "password in {message}");
    }
    let (kind, message) = backend_failure(&member.url(), EtcdConfig::default()).await;
    assert_eq!(kind, BackendErrorKind::Authentication, "{message}");
    assert!(message.contains("authentication enabled"), "{message}");
}

/// Tokens last 2 s without use; the lock is refreshed only after each has
/// run out, three times over, and a waiter is woken after that: each call
/// authenticates again and goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_outlive_the_tokens_they_were_taken_with() {
    const TOKEN_TTL: Duration = Duration::from_secs(2);
    /// Past the token's ttl and the member's check of it (every second).
    const IDLE: Duration = Duration::from_secs(4);
    let member = member(TOKEN_TTL).await;
    let connect = || async {
        let backend = EtcdBackend::connect([member.url_for(USER, PASSWORD)]).await;
        Locker::new(member.expect_ok(backend, "connect")).with_namespace(NAMESPACE)
    };
    let (holder, waiter) = (connect().await, connect().await);
    let lock = member.expect_ok(holder.obtain("job", LONG, once().fence()).await, "obtain");

    // The tokens do expire: a client that authenticated once is refused
    // after a pause.
    let options = etcd_client::ConnectOptions::new().with_user(USER, PASSWORD);
    let mut witness = member.expect_ok(
        etcd_client::Client::connect([member.url()], Some(options)).await,
        "witness connects",
    );
    tokio::time::sleep(IDLE).await;
    let expired = witness.get(format!("{NAMESPACE}:job"), None).await;
    let Err(etcd_client::Error::GRpcStatus(status)) = expired else {
        panic!("the witness's token did not expire: {expired:?}");
    };
    assert!(
        status.message().contains("invalid auth token"),
        "{status:?}"
    );

    for round in 0..3 {
        if round > 0 {
            tokio::time::sleep(IDLE).await;
        }
        member.expect_ok(lock.refresh(LONG).await, "refresh after the token expired");
    }
    tokio::time::sleep(IDLE).await;
    exercise_after_expiry(&member, lock, waiter).await;
}

/// The waiter's token has expired too: it obtains after the holder releases.
async fn exercise_after_expiry(member: &SecureEtcd, lock: lockmacro_runtime::Lock, waiter: Locker) {
    let first = lock.fence_token().expect("a fencing token");
    member.expect_ok(lock.release().await, "release after the token expired");
    let next = member.expect_ok(waiter.obtain("job", LONG, once().fence()).await, "obtain");
    assert!(next.fence_token().expect("a fencing token") > first);
    member.expect_ok(next.release().await, "release");
}
