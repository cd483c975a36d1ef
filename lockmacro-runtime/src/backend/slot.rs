//! Redis Cluster hash slots, and the check that keys used together share one.
//!
//! A Lua script may only touch keys of one slot; a cluster answers `CROSSSLOT`
//! otherwise. The check runs before anything is sent, so the caller learns
//! which keys clash and how to fix them instead of reading a server error.

use super::keys::hashtag;
use crate::LockError;

/// Number of hash slots in a Redis Cluster.
const SLOTS: u16 = 16384;

/// The hash slot of `key`: CRC16 (XMODEM) of its hash tag, or of the whole key
/// when it has none, modulo 16384.
///
/// The `redis` crate computes the same value (`cluster_routing::Slot`) but
/// does not expose the number, which the error messages show.
pub(crate) fn slot(key: &str) -> u16 {
    crc16(hashtag(key).unwrap_or(key).as_bytes()) % SLOTS
}

/// CRC16 with polynomial 0x1021, initial value 0, no reflection (XMODEM), as
/// specified by the Redis Cluster specification.
fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &byte| {
        (0..8).fold(crc ^ (u16::from(byte) << 8), |crc, _| {
            if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            }
        })
    })
}

/// Refuses `keys` and `fence_key` unless they all hash to one slot.
///
/// The error names the first key that is in another slot than `keys[0]`, both
/// slots, and the fix: a shared hash tag.
pub(crate) fn check_same_slot(keys: &[String], fence_key: Option<&str>) -> Result<(), LockError> {
    let Some(first) = keys.first() else {
        return Ok(());
    };
    let expected = slot(first);
    let others = keys[1..]
        .iter()
        .map(|key| (key.as_str(), "keys locked together"))
        .chain(fence_key.map(|key| (key, "a lock and its fence key")));
    for (key, what) in others {
        let found = slot(key);
        if found != expected {
            return Err(LockError::InvalidKey {
                key: key.to_owned(),
                reason: format!(
                    "it is in Redis Cluster slot {found} but `{first}` is in slot {expected}, \
                     and {what} must share a slot; give them the same hash tag (only the \
                     text between the first `{{` and `}}` is hashed), e.g. {}",
                    example(first, key),
                ),
            });
        }
    }
    Ok(())
}

/// Two keys rewritten to share `first`'s hash tag, or a new one.
fn example(first: &str, other: &str) -> String {
    match hashtag(first) {
        Some(tag) => format!("`{first}` and `{{{tag}}}:{other}`"),
        None => format!("`{{tag}}:{first}` and `{{tag}}:{other}`"),
    }
}

#[cfg(test)]
mod tests {
    use redis::cluster_routing::Slot;

    use super::*;

    #[test]
    fn slots_match_the_cluster_specification() {
        // The check value of CRC16/XMODEM, and examples from the specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("bar"), 5061);
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
        assert_eq!(slot("foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_eq!(slot("foo{{bar}}zap"), slot("{bar"));
        assert_eq!(slot("foo{bar}{zap}"), slot("bar"));
    }

    #[test]
    fn slots_agree_with_the_redis_crate() {
        for key in [
            "",
            "a",
            "job",
            "user:42",
            "{user:42}:fence",
            "x{}y",
            "x{y",
            "{}",
            "ü{ñ}",
            "a}{b}",
        ] {
            assert_eq!(Slot::new(slot(key)), Some(Slot::for_key(key)), "{key:?}");
        }
    }

    #[test]
    fn keys_with_one_hash_tag_pass() {
        let keys = ["{t}:a".to_owned(), "b:{t}".to_owned()];
        assert!(check_same_slot(&keys, Some("{t}:fence")).is_ok());
        assert!(check_same_slot(&keys[..1], None).is_ok());
        assert!(check_same_slot(&[], None).is_ok());
    }

    #[test]
    fn keys_in_two_slots_are_refused_with_the_fix() {
        let keys = ["foo".to_owned(), "bar".to_owned()];
        let err = check_same_slot(&keys, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid lock key `bar`: it is in Redis Cluster slot 5061 but `foo` is in slot \
             12182, and keys locked together must share a slot; give them the same hash tag \
             (only the text between the first `{` and `}` is hashed), e.g. `{tag}:foo` and \
             `{tag}:bar`"
        );
    }

    #[test]
    fn a_fence_key_in_another_slot_is_refused() {
        let keys = ["billing:{u1}:a".to_owned()];
        let err = check_same_slot(&keys, Some("billing:shared")).unwrap_err();
        let LockError::InvalidKey { key, reason } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(key, "billing:shared");
        assert!(reason.contains("a lock and its fence key"), "{reason}");
        assert!(
            reason.contains("`billing:{u1}:a` and `{u1}:billing:shared`"),
            "{reason}"
        );
    }
}
