//! How locks are written in etcd: lease lengths, fencing tokens from
//! revisions, queue prefixes, and reading a transaction's answer.

use std::time::Duration;

use etcd_client::{KeyValue, TxnOpResponse, TxnResponse};

use crate::KeyKind;
use crate::backend::{HeldAs, Share, TOKEN_LEN};

/// Most operations etcd accepts in one transaction (`--max-txn-ops`, 128 by
/// default): longer batches of reads are split.
pub(super) const MAX_TXN_OPS: usize = 128;

/// `ttl` in whole seconds, rounded up: etcd's lease unit.
pub(super) fn lease_secs(ttl: Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

pub(super) fn revision(response: &TxnResponse) -> i64 {
    response.header().map_or(0, |header| header.revision())
}

/// The single key-value of each `get` in `response`, in order.
pub(super) fn gets(response: &TxnResponse) -> Vec<Option<KeyValue>> {
    response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get.kvs().first().cloned()),
            _ => None,
        })
        .collect()
}

pub(super) fn owned_by(kv: &KeyValue, token: &str) -> bool {
    token.len() == TOKEN_LEN && kv.value().get(..TOKEN_LEN) == Some(token.as_bytes())
}

pub(super) fn fence(revision: i64) -> u64 {
    u64::try_from(revision).unwrap_or(0)
}

/// The queue of fair waiters of `key`, as a key prefix.
pub(super) fn queue_prefix(key: &str) -> String {
    format!("{key}/queue/")
}

/// Everything the shares of `key` keep, as a key prefix: one key per share
/// (`permits-<n>/<token>`, `read/<token>`, `write/<token>`) and the marks of
/// writers waiting for readers (`writing/<token>`). The kind of the key is
/// in the names, so that it lives exactly as long as a share does.
pub(super) fn shares_prefix(key: &str) -> String {
    format!("{key}/shares/")
}

/// Where a waiting writer marks that readers coming after it must wait.
pub(super) const WRITING: &str = "writing/";

/// The folder of `share` under the shares prefix.
pub(super) fn share_folder(share: Share) -> String {
    match share {
        Share::Permits(permits) => format!("permits-{permits}/"),
        Share::Read => "read/".to_owned(),
        Share::Write => "write/".to_owned(),
    }
}

/// The key of `token`'s `share` of `key`.
pub(super) fn share_key(key: &str, share: Share, token: &str) -> String {
    format!("{}{}{token}", shares_prefix(key), share_folder(share))
}

/// The folder of the stored share `stored` of the key whose shares prefix
/// is `prefix` (`read/`, `permits-3/`, …): what comes after the prefix, up
/// to the token.
pub(super) fn folder<'k>(prefix: &str, stored: &'k [u8]) -> &'k str {
    let Some(rest) = stored.strip_prefix(prefix.as_bytes()) else {
        return "";
    };
    let end = rest.iter().rposition(|b| *b == b'/').map_or(0, |at| at + 1);
    std::str::from_utf8(&rest[..end]).unwrap_or_default()
}

/// What a share's folder says: the kind of the key, and what the share
/// holds of it (`None` for a waiting writer's mark). `None` for a folder
/// the backend never writes.
pub(super) fn share_of(folder: &str) -> Option<(KeyKind, Option<HeldAs>)> {
    match folder {
        "read/" => Some((KeyKind::ReadWrite, Some(HeldAs::Read))),
        "write/" => Some((KeyKind::ReadWrite, Some(HeldAs::Write))),
        WRITING => Some((KeyKind::ReadWrite, None)),
        _ => {
            let permits = folder.strip_prefix("permits-")?.strip_suffix('/')?;
            let permits = permits.parse().ok()?;
            Some((KeyKind::Semaphore { permits }, Some(HeldAs::Permit)))
        }
    }
}

/// What the holder recorded with its lease: the value after the token.
pub(super) fn metadata(kv: &KeyValue) -> String {
    String::from_utf8_lossy(kv.value().get(TOKEN_LEN..).unwrap_or_default()).into_owned()
}

/// Every key-value of each `get` in `response`, in order.
pub(super) fn ranges(response: &TxnResponse) -> Vec<Vec<KeyValue>> {
    response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get.kvs().to_vec()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_round_up_to_whole_seconds() {
        assert_eq!(lease_secs(Duration::from_millis(1)), 1);
        assert_eq!(lease_secs(Duration::from_millis(500)), 1);
        assert_eq!(lease_secs(Duration::from_secs(1)), 1);
        assert_eq!(lease_secs(Duration::from_millis(1001)), 2);
        assert_eq!(lease_secs(Duration::from_secs(30)), 30);
    }

    #[test]
    fn each_share_has_its_folder() {
        let token = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            share_key("ns:api", Share::Permits(3), token),
            format!("ns:api/shares/permits-3/{token}")
        );
        assert_eq!(
            share_key("db", Share::Write, token),
            format!("db/shares/write/{token}")
        );
        assert_eq!(share_folder(Share::Read), "read/");
    }

    #[test]
    fn folders_name_the_kind_and_the_share() {
        let prefix = "db/shares/";
        let stored = b"db/shares/permits-12/0123456789abcdef0123456789abcdef";
        assert_eq!(folder(prefix, stored), "permits-12/");
        assert_eq!(folder(prefix, b"db/queue/0123456789abcdef"), "");
        assert_eq!(
            share_of("permits-12/"),
            Some((KeyKind::Semaphore { permits: 12 }, Some(HeldAs::Permit)))
        );
        assert_eq!(share_of(WRITING), Some((KeyKind::ReadWrite, None)));
        assert_eq!(share_of("permits-x/"), None);
        assert_eq!(share_of("other/"), None);
    }
}
