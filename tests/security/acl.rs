//! Redis users restricted by ACLs: a missing permission is reported as such,
//! naming what to grant, and the list in docs/security.md's "Permissions a Redis
//! user needs" is enough for everything, wake-ups included.

use std::time::{Duration, Instant};

use lockmacro_runtime::{
    BackendErrorKind, LockError, Locker, RedisBackend, RedisConfig, RetryStrategy, Scripts,
};
use lockmacro_testkit::RedisServer;
use lockmacro_testkit::cluster::RedisCluster;
use redis::Value;

use crate::{LONG, once};

const SECURITY_DOC: &str = include_str!("../../docs/security.md");

/// The `ACL SETUSER` line of docs/security.md, as separate arguments.
fn documented_acl_line() -> Vec<&'static str> {
    let line = SECURITY_DOC
        .lines()
        .find(|line| line.starts_with("ACL SETUSER locks "))
        .expect(
            "docs/security.md shows `ACL SETUSER locks …` under \"Permissions a Redis user needs\"",
        );
    line.split_whitespace().collect()
}

/// The `ACL SETUSER` line of docs/security.md for a user denied scripts.
fn documented_scriptless_line() -> Vec<&'static str> {
    let line = SECURITY_DOC
        .lines()
        .find(|line| line.starts_with("ACL SETUSER nolua "))
        .expect("docs/security.md shows `ACL SETUSER nolua …` under \"A user denied scripts\"");
    line.split_whitespace().collect()
}

/// What docs/security.md adds to the line for `Locker::cluster`.
fn documented_cluster_extras() -> Vec<&'static str> {
    let line = SECURITY_DOC
        .lines()
        .find(|line| line.starts_with("ACL SETUSER locks +"))
        .expect("docs/security.md shows the cluster's additions as `ACL SETUSER locks +…`");
    line.split_whitespace().skip(3).collect()
}

/// What docs/security.md adds to the line for semaphores and read-write
/// locks.
fn documented_shares_extras() -> Vec<&'static str> {
    let line = SECURITY_DOC
        .lines()
        .find(|line| line.starts_with("ACL SETUSER locks +zadd"))
        .expect("docs/security.md shows the shares' additions as `ACL SETUSER locks +zadd …`");
    line.split_whitespace().skip(3).collect()
}

/// Makes user `app` with password `pw` and `rules` on `server`.
fn add_user(server: &RedisServer, rules: &[&str]) {
    let mut args = vec!["ACL", "SETUSER", "app", "on", ">pw"];
    args.extend_from_slice(rules);
    let () = server.cmd(&args);
}

fn url_for(server: &RedisServer, user: &str, password: &str) -> String {
    format!("redis://{user}:{password}@127.0.0.1:{}/", server.port())
}

/// Commands the server refused to anyone since start, as `ACL LOG` lists
/// them, leaving out `CLIENT SETINFO`: the client library names itself with
/// it on connect (Redis 7.2 and later) and carries on when refused.
fn denied(server: &RedisServer) -> Vec<String> {
    let log: Vec<Value> = server.cmd(&["ACL", "LOG"]);
    let mut denied = Vec::new();
    for entry in log {
        let text = format!("{entry:?}");
        if !text.contains("client|setinfo") {
            denied.push(text);
        }
    }
    denied
}

/// The error of a fenced obtain by user `app`, who requires scripts: by
/// default a user denied them locks without them instead.
async fn permission_error(server: &RedisServer) -> String {
    let config = RedisConfig::default().scripts(Scripts::Required);
    let backend = server.expect_ok(
        RedisBackend::connect_with(&url_for(server, "app", "pw"), config).await,
        "connect",
    );
    let locker = Locker::new(backend);
    // Fenced: a plain obtain is a `SET` alone, which needs none of the
    // script permissions these tests take away.
    let err = locker
        .obtain("job", LONG, once().fence())
        .await
        .unwrap_err();
    let LockError::Backend(backend) = &err else {
        server.fail(format_args!("expected a backend error, got {err:?}"))
    };
    assert_eq!(backend.kind(), BackendErrorKind::Permission, "{err}");
    err.to_string()
}

#[tokio::test]
async fn user_without_evalsha_is_told_to_grant_it() {
    let server = RedisServer::start();
    add_user(&server, &["~*", "&*", "+@all", "-evalsha"]);
    let message = permission_error(&server).await;
    assert!(message.contains("'evalsha'"), "{message}");
    assert!(
        message.contains("`ACL SETUSER <user> +evalsha`"),
        "{message}"
    );
}

#[tokio::test]
async fn user_without_script_load_is_told_to_grant_it() {
    // Scripts are sent by hash and loaded when the server does not know them:
    // on a fresh server that needs SCRIPT LOAD.
    let server = RedisServer::start();
    add_user(&server, &["~*", "&*", "+@all", "-script|load"]);
    let message = permission_error(&server).await;
    assert!(message.contains("'script|load'"), "{message}");
    assert!(
        message.contains("`ACL SETUSER <user> +script|load`"),
        "{message}"
    );
}

#[tokio::test]
async fn user_without_the_lock_keys_is_told_to_grant_them() {
    let server = RedisServer::start();
    add_user(&server, &["~other:*", "&*", "+@all"]);
    let message = permission_error(&server).await;
    assert!(message.contains("`job`"), "names the key: {message}");
    assert!(
        message.contains("~<namespace>:* ~{<namespace>:*"),
        "{message}"
    );
}

#[tokio::test]
async fn user_without_a_command_the_scripts_call_is_told_so() {
    // Refused inside a script, a command comes back as a plain error that
    // does not name it: the message lists what the scripts call.
    let server = RedisServer::start();
    add_user(&server, &["~*", "&*", "+@all", "-set"]);
    let message = permission_error(&server).await;
    assert!(
        message.contains("a command called by the lock scripts was refused"),
        "{message}"
    );
    assert!(
        message.contains(
            "+get +set +pexpire +pttl +del +incr +time +lrange +lpop +lset +lrem +rpush +publish"
        ),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_permissions_are_enough_for_locks_fences_and_wakeups() {
    let server = RedisServer::start();
    let () = server.cmd(&documented_acl_line());
    let url = url_for(&server, "locks", "change-me");
    let holder = server
        .expect_ok(Locker::connect(&url).await, "connect")
        .with_namespace("billing");
    let waiter = server
        .expect_ok(Locker::connect(&url).await, "connect")
        .with_namespace("billing");

    let lock = server.expect_ok(
        holder.obtain("user:1", LONG, once().fence()).await,
        "obtain",
    );
    assert!(lock.fence_token().is_some());
    server.expect_ok(lock.refresh(LONG).await, "refresh");
    server.expect_ok(lock.ttl().await, "ttl");
    let explicit = once().fence_key("invoices");
    let other = server.expect_ok(
        holder.obtain("user:2", LONG, explicit).await,
        "explicit fence key",
    );
    server.expect_ok(other.release().await, "release");

    // A waiter whose backoff alone would outlast its deadline gets the lock
    // only if the release wakes it up.
    let retry = RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(20));
    let waiting =
        tokio::spawn(async move { waiter.obtain("user:1", LONG, once().retry(retry)).await });
    let channel = "lockmacro:released:billing:user:1";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let subscribers: Vec<Value> = server.cmd(&["PUBSUB", "NUMSUB", channel]);
        if subscribers.get(1) == Some(&Value::Int(1)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the waiter never subscribed to {channel}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.expect_ok(lock.release().await, "release");
    let got = waiting.await.expect("waiter task");
    let got = server.expect_ok(got, "woken waiter obtains");
    server.expect_ok(got.release().await, "waiter release");

    assert_eq!(
        denied(&server),
        Vec::<String>::new(),
        "commands were refused on the way"
    );
}

/// The shares' line of docs/security.md is enough for permits, reads and
/// writes; without its hash commands they still work, and show no
/// metadata; with them they show it, and leave nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_permissions_are_enough_for_shares_whose_metadata_needs_the_hash_commands() {
    let server = RedisServer::start();
    let () = server.cmd(&documented_acl_line());
    let (hash, sorted): (Vec<&str>, Vec<&str>) = documented_shares_extras()
        .into_iter()
        .partition(|command| command.starts_with("+h"));
    assert!(
        !hash.is_empty() && !sorted.is_empty(),
        "{hash:?} {sorted:?}"
    );
    let grant = |commands: &[&str]| {
        let mut args = vec!["ACL", "SETUSER", "locks"];
        args.extend_from_slice(commands);
        let () = server.cmd(&args);
    };
    grant(&sorted);
    let url = url_for(&server, "locks", "change-me");
    let locker = server
        .expect_ok(Locker::connect(&url).await, "connect")
        .with_namespace("billing");
    let shares = [
        ("pool", once().permits(2), "worker-1"),
        ("doc", once().read(), "reader-1"),
        ("doc", once().write(), "writer-1"),
    ];
    // Each share taken, refreshed, inspected and given back: its metadata
    // shown when `kept`, else none.
    let round = async |kept: bool| {
        for (key, opts, metadata) in &shares {
            let opts = opts.clone().metadata(*metadata);
            let lease = server.expect_ok(locker.obtain(key, LONG, opts).await, "obtain");
            server.expect_ok(lease.refresh(LONG).await, "refresh");
            let seen = server.expect_ok(locker.inspect(key).await, "inspect");
            let shown = if kept { *metadata } else { "" };
            assert_eq!(seen.holders[0].metadata, shown, "{seen:?}");
            server.expect_ok(lease.release().await, "release");
        }
    };
    round(false).await;
    // Only the hash commands were refused, inside the scripts.
    let refused = denied(&server);
    assert!(!refused.is_empty(), "the hash commands were never called");
    assert!(
        refused
            .iter()
            .all(|entry| hash.iter().any(|command| entry.contains(&command[1..]))),
        "{refused:?}"
    );
    let () = server.cmd(&["ACL", "LOG", "RESET"]);
    grant(&hash);
    round(true).await;
    assert_eq!(
        denied(&server),
        Vec::<String>::new(),
        "commands were refused on the way"
    );
    let left: i64 = server.cmd(&["DBSIZE"]);
    assert_eq!(left, 0, "keys left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_permissions_without_scripts_are_enough_for_locks_fences_and_wakeups() {
    let server = RedisServer::start();
    let () = server.cmd(&documented_scriptless_line());
    let url = url_for(&server, "nolua", "change-me");
    let connect = async || {
        let config = RedisConfig::default().scripts(Scripts::Never);
        let backend = server.expect_ok(RedisBackend::connect_with(&url, config).await, "connect");
        Locker::new(backend).with_namespace("billing")
    };
    let (holder, waiter) = (connect().await, connect().await);
    let lock = server.expect_ok(
        holder
            .obtain_many(["user:1", "user:2"], LONG, once().fence())
            .await,
        "obtain",
    );
    assert!(lock.fence_token().is_some());
    server.expect_ok(lock.refresh(LONG).await, "refresh");
    server.expect_ok(lock.ttl().await, "ttl");
    server.expect_ok(holder.inspect("user:1").await, "inspect");
    let retry = RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(20));
    let waiting =
        tokio::spawn(async move { waiter.obtain("user:1", LONG, once().retry(retry)).await });
    let channel = "lockmacro:released:billing:user:1";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let subscribers: Vec<Value> = server.cmd(&["PUBSUB", "NUMSUB", channel]);
        if subscribers.get(1) == Some(&Value::Int(1)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the waiter never subscribed to {channel}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.expect_ok(lock.release().await, "release");
    let got = waiting.await.expect("waiter task");
    let got = server.expect_ok(got, "woken waiter obtains");
    server.expect_ok(got.release().await, "waiter release");
    let forced = server.expect_ok(holder.force_release("user:2").await, "force");
    assert!(!forced, "the release took both keys");
    assert_eq!(
        denied(&server),
        Vec::<String>::new(),
        "commands were refused on the way"
    );
}

#[tokio::test]
async fn documented_permissions_are_enough_for_redlock() {
    let masters = RedisServer::start_many(3);
    let mut urls = Vec::new();
    for master in &masters {
        let () = master.cmd(&documented_acl_line());
        urls.push(url_for(master, "locks", "change-me"));
    }
    let locker = Locker::redlock(&urls)
        .await
        .expect("connect")
        .with_namespace("billing");
    let lock = locker
        .obtain("user:1", LONG, once().fence())
        .await
        .expect("obtain");
    assert!(lock.fence_token().is_some());
    lock.refresh(LONG).await.expect("refresh");
    lock.release().await.expect("release");
    for master in &masters {
        assert_eq!(
            denied(master),
            Vec::<String>::new(),
            "port {}",
            master.port()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_permissions_and_the_cluster_extras_are_enough_for_a_cluster() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .expect("cluster");
    let mut line = documented_acl_line();
    line.extend_from_slice(&documented_cluster_extras());
    let mut seeds = Vec::new();
    for node in cluster.nodes() {
        let () = node.cmd(&line);
        seeds.push(url_for(node, "locks", "change-me"));
    }
    let locker = Locker::cluster(&seeds)
        .await
        .expect("connect")
        .with_namespace("billing");
    let lock = locker
        .obtain("user:1", LONG, once().fence())
        .await
        .expect("obtain");
    assert!(lock.fence_token().is_some());
    lock.refresh(LONG).await.expect("refresh");
    lock.release().await.expect("release");
    for node in cluster.nodes() {
        assert_eq!(denied(node), Vec::<String>::new(), "port {}", node.port());
    }
}
