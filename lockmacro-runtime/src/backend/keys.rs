//! The names a lock key brings with it (its fence counter, fair queue,
//! waiters flag and, on Redis, the hash of its shares' metadata, all in the
//! key's cluster slot), and the keys refused because they would collide
//! with one of them. Every backend refuses the same keys, so that a lock
//! moves between backends unchanged.

use crate::LockError;

/// The Redis Cluster hash tag of `key`: the text between the first `{` and the
/// next `}`, when it is not empty.
pub(crate) fn hashtag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

/// The fence counter key derived from a lock key, in the same cluster slot.
pub(crate) fn derived_fence_key(key: &str) -> String {
    if hashtag(key).is_some() {
        format!("{key}:fence")
    } else {
        format!("{{{key}}}:fence")
    }
}

/// The queue of fair waiters for a lock key, in the same cluster slot (see
/// [`derived_fence_key`]).
pub(crate) fn derived_queue_key(key: &str) -> String {
    if hashtag(key).is_some() {
        format!("{key}:queue")
    } else {
        format!("{{{key}}}:queue")
    }
}

/// The flag that says someone may wait for the release of a lock key, in
/// the same cluster slot (see [`derived_fence_key`] and `waiters.lua`).
pub(crate) fn derived_waiters_key(key: &str) -> String {
    if hashtag(key).is_some() {
        format!("{key}:waiters")
    } else {
        format!("{{{key}}}:waiters")
    }
}

/// The hash that keeps the metadata of the shares of `key` on Redis
/// (`holders.lua`: field the holder's token, value its metadata), in the
/// same cluster slot: `K:holders` for a key with a hash tag,
/// `{K}:holders` for a key without a `}`. A key with a `}` but no hash tag
/// is hashed whole, and no name beside it shares its slot: `None`, and its
/// shares keep no metadata on Redis. Named so on every server, clustered or
/// not, as the scripts name it.
pub(crate) fn derived_holders_key(key: &str) -> Option<String> {
    if hashtag(key).is_some() {
        Some(format!("{key}:holders"))
    } else if key.contains('}') {
        None
    } else {
        Some(format!("{{{key}}}:holders"))
    }
}

/// The lock key whose derived fence counter ([`derived_fence_key`]), queue
/// ([`derived_queue_key`]), waiters flag ([`derived_waiters_key`]) or
/// holders hash ([`derived_holders_key`]) is `key`, if any, and which of
/// them.
fn derived_from(key: &str) -> Option<(&str, &'static str)> {
    type Derive = fn(&str) -> Option<String>;
    for (suffix, what, derive) in [
        (
            ":fence",
            "fence counter",
            (|key| Some(derived_fence_key(key))) as Derive,
        ),
        (":queue", "queue of fair waiters", |key| {
            Some(derived_queue_key(key))
        }),
        (":waiters", "waiters flag", |key| {
            Some(derived_waiters_key(key))
        }),
        (":holders", "holders hash", derived_holders_key),
    ] {
        let Some(base) = key.strip_suffix(suffix) else {
            continue;
        };
        // `K:fence` for a key with a hash tag, `{K}:fence` for one without.
        let inner = base
            .strip_prefix('{')
            .and_then(|base| base.strip_suffix('}'));
        for owner in std::iter::once(base).chain(inner) {
            if !owner.is_empty() && derive(owner).as_deref() == Some(key) {
                return Some((owner, what));
            }
        }
    }
    None
}

/// True for a name the backend keeps beside a lock (its fence counter, fair
/// queue, waiters flag or holders hash) rather than a lock key: what a
/// listing of keys leaves out.
#[cfg(any(feature = "redis", feature = "etcd"))]
pub(crate) fn is_companion(key: &str) -> bool {
    derived_from(key).is_some()
}

/// `prefix` as a Redis `SCAN MATCH` pattern for the keys that start with
/// it: its glob characters escaped, then `*`.
#[cfg(feature = "redis")]
pub(crate) fn prefix_pattern(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('*');
    pattern
}

/// Refuses, before anything is sent, the keys that would collide with a fence
/// counter, a fair queue, a waiters flag or a hash of shares' metadata: a
/// lock key that is the derived counter, queue, flag or hash of another key,
/// and a fence key that is one of the keys locked, a queue, a flag or a
/// hash. Such an acquire would fail midway, could never succeed, or would
/// have its counter overwritten.
pub(crate) fn check_reserved(keys: &[String], fence_key: Option<&str>) -> Result<(), LockError> {
    for key in keys {
        if let Some((owner, what)) = derived_from(key) {
            return Err(LockError::InvalidKey {
                key: key.clone(),
                reason: format!(
                    "`{key}` is the name of the {what} of the lock `{owner}`, so it cannot be \
                     locked itself (it would be busy while that exists, and locking it would \
                     break `{owner}`); name the lock differently, e.g. `{key}-lock`"
                ),
            });
        }
    }
    let Some(fence_key) = fence_key else {
        return Ok(());
    };
    if keys.iter().any(|key| key == fence_key) {
        return Err(fence_key_refused(
            fence_key,
            "the fence counter is also a key being locked",
        ));
    }
    if let Some((owner, what @ ("queue of fair waiters" | "waiters flag" | "holders hash"))) =
        derived_from(fence_key)
    {
        return Err(fence_key_refused(
            fence_key,
            &format!("it is the {what} of the lock `{owner}`"),
        ));
    }
    Ok(())
}

/// The error for a fence key that cannot count fencing tokens, `detail`
/// saying why.
pub(crate) fn fence_key_refused(fence_key: &str, detail: &str) -> LockError {
    LockError::InvalidKey {
        key: fence_key.to_owned(),
        reason: format!(
            "this fence key cannot count fencing tokens: {detail}. A fence key must be a key \
             of its own, holding nothing but its counter: use the counter derived from the \
             lock key (`ObtainOptions::fence`), or name an unused key in \
             `ObtainOptions::fence_key`; nothing was locked"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashtag_follows_the_cluster_rules() {
        assert_eq!(hashtag("user:1"), None);
        assert_eq!(hashtag("{user:1}:a"), Some("user:1"));
        assert_eq!(hashtag("a{b}{c}"), Some("b"));
        assert_eq!(hashtag("a{}{c}"), None);
        assert_eq!(hashtag("a}{b"), None);
        assert_eq!(hashtag("a{b"), None);
    }

    #[test]
    fn derived_fence_key_shares_the_slot() {
        assert_eq!(derived_fence_key("user:1"), "{user:1}:fence");
        assert_eq!(
            derived_fence_key("billing:{user:1}"),
            "billing:{user:1}:fence"
        );
        assert_eq!(derived_fence_key("a{}b"), "{a{}b}:fence");
    }

    #[test]
    fn queue_is_named_as_the_waiters_flag_with_another_suffix() {
        // The release script names the queue after the flag it is given.
        for key in ["user:1", "billing:{user:1}", "a{}b", "}b", "a}b"] {
            let flag = derived_waiters_key(key);
            let queue = format!("{}queue", flag.strip_suffix("waiters").unwrap());
            assert_eq!(queue, derived_queue_key(key), "{key}");
        }
    }

    #[cfg(feature = "redis")]
    #[test]
    fn prefix_pattern_matches_the_prefix_literally() {
        assert_eq!(prefix_pattern(""), "*");
        assert_eq!(prefix_pattern("billing:"), "billing:*");
        assert_eq!(prefix_pattern("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\*");
    }

    #[test]
    fn the_holders_hash_shares_the_slot_or_is_not_kept() {
        assert_eq!(
            derived_holders_key("user:1").as_deref(),
            Some("{user:1}:holders")
        );
        assert_eq!(
            derived_holders_key("billing:{user:1}").as_deref(),
            Some("billing:{user:1}:holders")
        );
        assert_eq!(derived_holders_key("a{b").as_deref(), Some("{a{b}:holders"));
        #[cfg(feature = "cluster")]
        for key in ["user:1", "billing:{user:1}", "a{b", "{"] {
            let meta = derived_holders_key(key).expect(key);
            assert_eq!(
                crate::backend::slot::slot(&meta),
                crate::backend::slot::slot(key),
                "{key}"
            );
        }
        for key in ["a{}b", "}b", "a}b", "a{}b{c}"] {
            assert_eq!(derived_holders_key(key), None, "{key}");
        }
    }

    #[test]
    fn derived_names_are_recognised() {
        for key in ["user:1", "billing:{user:1}", "a{}b", "}b", "a}b"] {
            assert!(derived_from(&derived_fence_key(key)).is_some(), "{key}");
            assert!(derived_from(&derived_queue_key(key)).is_some(), "{key}");
            assert!(derived_from(&derived_waiters_key(key)).is_some(), "{key}");
        }
        for key in ["user:1", "billing:{user:1}", "a{b"] {
            let meta = derived_holders_key(key).expect(key);
            let (owner, what) = derived_from(&meta).expect(key);
            assert_eq!(derived_holders_key(owner).as_deref(), Some(meta.as_str()));
            assert_eq!(what, "holders hash");
        }
        for key in [
            "user:1:fence",
            "{}:fence",
            "a{b}c:fenc",
            "fence",
            "{user:1}:queue:x",
            "a}b:holders",
            "user:1:holders",
        ] {
            assert_eq!(derived_from(key), None, "{key}");
        }
    }
}
