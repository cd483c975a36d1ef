//! The native compare commands of newer servers, which do what the refresh
//! and release scripts do to a lock key in one command: Valkey 8.1's
//! `SET … IFEQ` (also in Redis 8.4), Valkey 9's `DELIFEQ`, Redis 8.4's
//! `DELEX … IFEQ`. They compare the whole value, so the value is read
//! first; a value holds a random token, so a value read once cannot come
//! back with another owner.

use super::capabilities::DeleteIfEqual;

/// Makes `key` last `ttl` ms from now, keeping `value`, only while it holds
/// `value`: answers `OK`, or nil when it did not.
pub(in crate::backend) fn extend_if_equal(key: &str, value: &str, ttl: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key)
        .arg(value)
        .arg("IFEQ")
        .arg(value)
        .arg("PX")
        .arg(ttl);
    cmd
}

/// Deletes `key` only while it holds `value`: answers 1 if it did, else 0.
pub(in crate::backend) fn delete_if_equal(
    command: DeleteIfEqual,
    key: &str,
    value: &str,
) -> redis::Cmd {
    match command {
        DeleteIfEqual::DelIfEq => {
            let mut cmd = redis::cmd("DELIFEQ");
            cmd.arg(key).arg(value);
            cmd
        }
        DeleteIfEqual::DelEx => {
            let mut cmd = redis::cmd("DELEX");
            cmd.arg(key).arg("IFEQ").arg(value);
            cmd
        }
    }
}
