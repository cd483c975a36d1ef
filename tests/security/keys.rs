//! Keys are opaque bytes: whatever text a key holds, it is stored under exactly
//! those bytes (after the namespace prefix), locks like any other key, and
//! never collides with a key that merely looks the same.

use std::time::{Duration, Instant};

use lockmacro_runtime::{LockError, Locker, ObtainOptions, RetryStrategy};

use lockmacro_testkit::{Fixture, Kind, RedisServer};

use crate::{LONG, once};

// Where the store can be read behind the library's back, the scenarios look
// at the Redis keys; the memory backend shows what a store without servers
// does.
lockmacro_testkit::for_each_backend! {
    needs: [],
    only: [Redis, Valkey, Cluster, Redlock, Memory],
    servers: own,
    runtime: (flavor = "multi_thread", worker_threads = 2),
    cases: crate::keys::[
        hostile_keys_lock_fence_refresh_and_release_as_given,
        look_alike_keys_are_different_locks,
    ],
}

/// Keys an application may build from input it does not control.
pub fn hostile_keys() -> Vec<String> {
    let mut keys: Vec<String> = [
        // Hash-tag look-alikes: a tag, an empty tag, braces the wrong way
        // round, nested braces, a close without an open.
        "a{b}c",
        "{}",
        "}{",
        "{{x}}",
        "a}b",
        // Line breaks, and a would-be command injected into the protocol.
        "line\nbreak",
        "\r\n*1\r\n$8\r\nFLUSHALL\r\n",
        // Spaces, tabs and other control characters.
        "with space",
        " ",
        "tab\tbell\u{7}escape\u{1b}[0m",
        "\u{1}\u{2}\u{7f}\u{ff}\u{fffd}",
        // Unicode, including a combining accent and a character outside the BMP.
        "ключ:🔒:e\u{301}",
        // Glob, Lua pattern and format characters; a release channel's name.
        "*?[a-z]\\",
        "%s%d%%..",
        "lockmacro:released:*",
    ]
    .map(str::to_owned)
    .to_vec();
    keys.push("k".repeat(10 * 1024));
    keys.push(format!("{}{{tag}}", "é".repeat(5 * 1024)));
    keys
}

/// The fence counter's key for `wire_key`, by the rule the crate documents:
/// `{K}:fence`, or `K:fence` when `K` already has a hash tag (text between
/// its first `{` and the next `}`, not empty).
fn documented_fence_key(wire_key: &str) -> String {
    let has_tag = wire_key.find('{').is_some_and(|open| {
        wire_key[open + 1..]
            .find('}')
            .is_some_and(|close| close > 0)
    });
    if has_tag {
        format!("{wire_key}:fence")
    } else {
        format!("{{{wire_key}}}:fence")
    }
}

/// Waits until `command` returns `expected` on `server`. Redlock answers once
/// a majority of masters did; the last one gets the same request a moment
/// later.
fn eventually(server: &RedisServer, command: &[&str], expected: Option<Vec<u8>>, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found: Option<Vec<u8>> = server.cmd(command);
        if found == expected {
            return;
        }
        if Instant::now() > deadline {
            server.fail(format_args!("{what}: {found:?}, expected {expected:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Shows a key in assertion messages: short, escaped.
fn show(key: &str) -> String {
    let mut shown: String = key.chars().take(40).collect();
    if shown.len() < key.len() {
        shown.push_str(&format!("… ({} bytes)", key.len()));
    }
    format!("{shown:?}")
}

pub async fn hostile_keys_lock_fence_refresh_and_release_as_given(fx: &Fixture) {
    let base = fx.locker().await;
    let rival = fx.locker().await;
    let mut fence_keys = Vec::new();
    let mut refused = Vec::new();
    for namespace in ["", "ns"] {
        let (locker, rival) = (
            base.with_namespace(namespace),
            rival.with_namespace(namespace),
        );
        for key in hostile_keys() {
            match round_trip(fx, &locker, &rival, &key).await {
                Some(fence_key) => fence_keys.push(fence_key),
                None => refused.push(locker.wire_key(&key)),
            }
        }
    }
    // A key with a `}` but no hash tag cannot be wrapped in one: `{K}` would
    // end the tag at K's own `}`. Only a cluster has to care.
    let expected: &[&str] = match fx.kind() {
        Kind::Cluster => &["{}", "}{", "a}b", "ns:{}", "ns:}{", "ns:a}b"],
        _ => &[],
    };
    assert_eq!(refused, expected, "fenced locks refused");
    // Nothing else was written: no key cut at a line break, no command
    // smuggled in, no lock key left behind. Fence counters outlive their
    // locks. (A Redlock master that was slow to answer may lack some, and a
    // release returns once a majority answered: the last master's delete may
    // still be on its way, so its keys are looked at until it lands.)
    if matches!(fx.kind(), Kind::Redis | Kind::Valkey | Kind::Redlock) {
        let expected: Vec<Vec<u8>> = fence_keys
            .iter()
            .map(|key| key.as_bytes().to_vec())
            .collect();
        for server in fx.servers_for("") {
            let foreign_keys = || -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
                let stored: Vec<Vec<u8>> = server.cmd(&["KEYS", "*"]);
                let foreign = stored
                    .iter()
                    .filter(|key| !expected.contains(key))
                    .cloned()
                    .collect();
                (stored, foreign)
            };
            let (mut stored, mut foreign) = foreign_keys();
            for _ in 0..200 {
                if foreign.is_empty() || fx.kind() != Kind::Redlock {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                (stored, foreign) = foreign_keys();
            }
            assert!(
                foreign.is_empty(),
                "port {}: unexpected keys {foreign:?}",
                server.port()
            );
            if matches!(fx.kind(), Kind::Redis | Kind::Valkey) {
                assert_eq!(stored.len(), expected.len(), "fence counters missing");
            }
        }
    }
}

/// Takes `key` with a fencing token, checks what is stored and that `rival`
/// is kept out, refreshes and releases it. Returns the fence counter's key,
/// or `None` where a cluster refuses the lock because its derived fence key
/// is in another slot.
async fn round_trip(fx: &Fixture, locker: &Locker, rival: &Locker, key: &str) -> Option<String> {
    let shown = show(key);
    let wire_key = locker.wire_key(key);
    let fence_key = documented_fence_key(&wire_key);
    let obtained = locker.obtain(key, LONG, once().fence()).await;
    if let Some(cluster) = fx.redis_cluster() {
        // The cluster's own slot computation decides: the library must agree.
        if cluster.slot(&wire_key) != cluster.slot(&fence_key) {
            let err = obtained.expect_err(&format!("{shown}: fence key in another slot"));
            assert!(
                matches!(&err, LockError::InvalidKey { key, .. } if *key == fence_key),
                "{shown}: {err:?}"
            );
            // Without fencing the same key locks as usual.
            let lock = fx.check(locker.obtain(key, LONG, once()).await, &shown);
            fx.check(lock.release().await, &shown);
            return None;
        }
    }
    let lock = fx.check(obtained, &format!("obtain {shown}"));
    assert_eq!(lock.key(), key);
    let fence = lock.fence_token().expect("fencing was asked for");

    // Redlock holds the lock on a majority of its masters; a master that
    // was slow to answer may or may not have it.
    let servers = fx.servers_for(&wire_key);
    let majority = servers.len() / 2 + 1;
    let holding = |key: &str, expected: &[u8]| {
        servers
            .iter()
            .filter(|server| {
                server.cmd::<Option<Vec<u8>>>(&["GET", key]).as_deref() == Some(expected)
            })
            .count()
    };
    if !servers.is_empty() {
        let stored = holding(&wire_key, lock.token().as_bytes());
        assert!(
            stored >= majority,
            "{shown}: stored on {stored} of {}",
            servers.len()
        );
        let counted = holding(&fence_key, fence.to_string().as_bytes());
        assert!(
            counted >= majority,
            "{shown}: fence counter on {counted} of {}",
            servers.len()
        );
    }

    let err = rival.obtain(key, LONG, once()).await.unwrap_err();
    assert!(
        matches!(&err, LockError::NotObtained { key: named, .. } if named == key),
        "{shown}: {err:?}"
    );
    fx.check(lock.refresh(LONG).await, &format!("refresh {shown}"));
    let left = fx.check(lock.ttl().await, &format!("ttl {shown}"));
    assert!(left > LONG / 2, "{shown}: {left:?}");
    fx.check(lock.release().await, &format!("release {shown}"));
    for server in fx.servers_for(&wire_key) {
        eventually(
            server,
            &["GET", &wire_key],
            None,
            &format!("{shown}: released key"),
        );
    }

    let next = fx.check(
        rival.obtain(key, LONG, once().fence()).await,
        &format!("obtain {shown} again"),
    );
    // Up by one on a single counter; under Redlock, by the largest counter
    // of the new majority, whose masters seeded their counters apart.
    assert!(next.fence_token() > Some(fence), "{shown}");
    fx.check(next.release().await, &format!("release {shown} again"));
    Some(fence_key)
}

pub async fn look_alike_keys_are_different_locks(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let long = "k".repeat(10 * 1024);
    let pairs = [
        ("caf\u{e9}", "cafe\u{301}"),
        ("job", "job "),
        ("job", "JOB"),
        ("x\n", "x\r\n"),
        ("{a}b", "{a}c"),
        ("a{b}c", "a{b}c:fenced"),
        (long.as_str(), &long[1..]),
    ];
    for (held, other) in pairs {
        let lock = fx.check(a.obtain(held, LONG, once()).await, &show(held));
        let free = fx.check(b.obtain(other, LONG, once()).await, &show(other));
        fx.check(free.release().await, &show(other));
        fx.check(lock.release().await, &show(held));
    }
    // The name of a key's fence counter is not a lock of its own: refused
    // before anything is sent, naming the key whose counter it is.
    let counter = b.obtain("a{b}c:fence", LONG, once()).await;
    assert!(
        matches!(&counter, Err(LockError::InvalidKey { reason, .. }) if reason.contains("`a{b}c`")),
        "{counter:?}"
    );
    // A namespace is a prefix: `ns` + `a:b` is the same key as `ns:a` + `b`.
    let held = fx.check(
        a.with_namespace("ns").obtain("a:b", LONG, once()).await,
        "ns",
    );
    let same = b
        .with_namespace("ns:a")
        .obtain("b", LONG, once())
        .await
        .unwrap_err();
    assert!(same.is_not_obtained(), "{same:?}");
    fx.check(held.release().await, "release ns");
}

#[lockmacro_runtime::distributed_lock(key = "order:{a}:{b}", ttl = "30s", locker = locker)]
async fn touch_order(locker: &Locker, a: &str, b: &str) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test]
async fn attribute_keys_hold_interpolated_values_verbatim() {
    let locker = Locker::memory();
    let busy = |result: Result<(), LockError>, key: &str| {
        assert!(
            matches!(&result, Err(LockError::NotObtained { key: named, .. }) if named == key),
            "{result:?}"
        );
    };
    // Separators in a value are not escaped: two argument lists, one key.
    let held = locker.obtain("order:1:2:3", LONG, once()).await.unwrap();
    busy(touch_order(&locker, "1:2", "3").await, "order:1:2:3");
    busy(touch_order(&locker, "1", "2:3").await, "order:1:2:3");
    held.release().await.unwrap();
    // Nor are braces: the value picks the key's hash tag.
    let held = locker.obtain("order:{x}:y", LONG, once()).await.unwrap();
    busy(touch_order(&locker, "{x}", "y").await, "order:{x}:y");
    held.release().await.unwrap();
    touch_order(&locker, "{x}", "y").await.unwrap();
}

/// A fair lock keeps its waiters at `{K}:queue`, which a key with a `}` but no
/// hash tag cannot share a slot with: the cluster refuses such a fair lock
/// before sending anything, and still takes and releases the plain lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_on_a_key_that_cannot_share_its_queues_slot_is_refused_on_a_cluster() {
    let fx = Fixture::own_cluster().await;
    let locker = fx.locker().await;
    let fair = ObtainOptions::new()
        .fair()
        .retry(RetryStrategy::linear(Duration::from_millis(10)).deadline(Duration::from_secs(1)));
    for key in ["a}b", "{}"] {
        match locker.obtain(key, LONG, fair.clone()).await {
            Err(LockError::InvalidKey {
                key: refused,
                reason,
            }) => {
                assert_eq!(refused, key);
                assert!(reason.contains("hash tag"), "{reason}");
            }
            other => panic!("fair lock on {key:?}: {other:?}"),
        }
        let lock = fx.check(locker.obtain(key, LONG, once()).await, "plain obtain");
        fx.check(lock.release().await, "plain release");
    }
}
