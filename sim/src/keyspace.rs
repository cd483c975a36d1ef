//! The data: keys holding strings, sorted sets, hashes and lists, each with
//! an optional expiry in milliseconds on the harness's clock.
//!
//! Every map here is ordered, so that two runs from one seed see the same
//! iteration order (SCAN, a restart that keeps a fraction of the keys):
//! nothing in the simulated server may depend on a hasher's seed.

use std::collections::{BTreeMap, VecDeque};

use crate::expiry::Expiries;
use crate::hash::Hash;
use crate::sorted::SortedSet;

/// A key, a member or a value: Redis strings are bytes.
pub type Bytes = Vec<u8>;

/// What one key holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(Bytes),
    ZSet(SortedSet),
    Hash(Hash),
    List(VecDeque<Bytes>),
}

impl Value {
    /// The name `TYPE` answers.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::ZSet(_) => "zset",
            Value::Hash(_) => "hash",
            Value::List(_) => "list",
        }
    }

    /// True for a container Redis would have deleted: Redis never keeps an
    /// empty sorted set, hash or list.
    fn is_empty_container(&self) -> bool {
        match self {
            Value::Str(_) => false,
            Value::ZSet(set) => set.is_empty(),
            Value::Hash(map) => map.is_empty(),
            Value::List(list) => list.is_empty(),
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    value: Value,
    /// Absolute, in ms on the server's clock; the key is gone once the clock
    /// is past it (Redis: `now > when`).
    expires_at: Option<u64>,
}

/// All keys of the one database, with their expiries and the stamps that
/// `WATCH` compares.
///
/// Expiry: [`Keyspace::expire_due`] deletes every key whose time has passed;
/// the server calls it before each command, script or transaction (see
/// [`crate::expiry`] for why that is Redis's behaviour as a client sees it).
#[derive(Debug, Clone, Default)]
pub struct Keyspace {
    entries: BTreeMap<Bytes, Entry>,
    expiries: Expiries,
    /// The stamp of each key's last change, kept after a deletion so that a
    /// key deleted and set again does not look untouched to a watcher.
    stamps: BTreeMap<Bytes, u64>,
    next_stamp: u64,
}

impl Keyspace {
    pub fn new() -> Self {
        Self::default()
    }

    /// Deletes the keys whose expiry is before `now_ms`.
    pub fn expire_due(&mut self, now_ms: u64) {
        while let Some(key) = self.expiries.pop_due(now_ms) {
            self.entries.remove(&key);
            self.touch(&key);
        }
    }

    pub fn get(&self, key: &[u8]) -> Option<&Value> {
        self.entries.get(key).map(|entry| &entry.value)
    }

    /// The value at `key` to change in place; the caller has made a change
    /// once it returns, so the key is touched for `WATCH` (call
    /// [`Keyspace::get`] first to only look). An emptied container is
    /// removed by [`Keyspace::drop_if_empty`].
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut Value> {
        if !self.entries.contains_key(key) {
            return None;
        }
        self.touch(key);
        self.entries.get_mut(key).map(|entry| &mut entry.value)
    }

    /// Deletes `key` if it is a container left empty, as Redis does.
    pub fn drop_if_empty(&mut self, key: &[u8]) {
        if self
            .entries
            .get(key)
            .is_some_and(|entry| entry.value.is_empty_container())
        {
            self.remove(key);
        }
    }

    /// Sets `key` to `value`, with `expires_at` (`None`: no expiry).
    pub fn set(&mut self, key: &[u8], value: Value, expires_at: Option<u64>) {
        self.unindex_expiry(key);
        if let Some(at) = expires_at {
            self.expiries.insert(at, key);
        }
        self.entries
            .insert(key.to_vec(), Entry { value, expires_at });
        self.touch(key);
    }

    /// Sets `key`'s value, keeping its expiry (`SET … KEEPTTL`, and every
    /// container write that creates or changes a value).
    pub fn set_keep_ttl(&mut self, key: &[u8], value: Value) {
        let expires_at = self.expires_at(key);
        self.set(key, value, expires_at);
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Value> {
        self.unindex_expiry(key);
        let entry = self.entries.remove(key)?;
        self.touch(key);
        Some(entry.value)
    }

    pub fn exists(&self, key: &[u8]) -> bool {
        self.entries.contains_key(key)
    }

    pub fn expires_at(&self, key: &[u8]) -> Option<u64> {
        self.entries.get(key).and_then(|entry| entry.expires_at)
    }

    /// Gives an existing `key` an expiry (or none); false if there is no key.
    pub fn set_expiry(&mut self, key: &[u8], expires_at: Option<u64>) -> bool {
        if !self.entries.contains_key(key) {
            return false;
        }
        self.unindex_expiry(key);
        if let Some(at) = expires_at {
            self.expiries.insert(at, key);
        }
        self.entries.get_mut(key).expect("checked above").expires_at = expires_at;
        self.touch(key);
        true
    }

    /// The stamp `WATCH` keeps for `key`: it changes with every write to the
    /// key, deletion and expiry included.
    pub fn stamp(&self, key: &[u8]) -> u64 {
        self.stamps.get(key).copied().unwrap_or(0)
    }

    /// Every key, in order.
    pub fn keys(&self) -> impl Iterator<Item = &Bytes> {
        self.entries.keys()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Keeps only the keys for which `keep` is true; the others are lost as
    /// in a restart from an older snapshot (their watchers see a change).
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], &Value) -> bool) {
        let lost: Vec<Bytes> = self
            .entries
            .iter()
            .filter(|(key, entry)| !keep(key, &entry.value))
            .map(|(key, _)| key.clone())
            .collect();
        for key in lost {
            self.remove(&key);
        }
    }

    fn unindex_expiry(&mut self, key: &[u8]) {
        if let Some(at) = self.expires_at(key) {
            self.expiries.remove(at, key);
        }
    }

    fn touch(&mut self, key: &[u8]) {
        self.next_stamp += 1;
        self.stamps.insert(key.to_vec(), self.next_stamp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_gone_only_once_the_clock_is_past_its_expiry() {
        let mut keys = Keyspace::new();
        keys.set(b"k", Value::Str(b"v".to_vec()), Some(100));
        keys.expire_due(100);
        assert!(keys.exists(b"k"), "Redis keeps a key while now == when");
        keys.expire_due(101);
        assert!(!keys.exists(b"k"));
    }

    #[test]
    fn expiry_and_deletion_change_the_stamp_and_a_new_set_forgets_the_old_expiry() {
        let mut keys = Keyspace::new();
        keys.set(b"k", Value::Str(b"v".to_vec()), Some(100));
        let before = keys.stamp(b"k");
        keys.set(b"k", Value::Str(b"w".to_vec()), None);
        assert_ne!(keys.stamp(b"k"), before);
        keys.expire_due(1_000);
        assert!(keys.exists(b"k"));
        let set = keys.stamp(b"k");
        keys.remove(b"k");
        assert_ne!(keys.stamp(b"k"), set);
    }

    #[test]
    fn retain_loses_the_rest() {
        let mut keys = Keyspace::new();
        keys.set(b"a", Value::Str(vec![]), None);
        keys.set(b"b", Value::Str(vec![]), Some(5));
        keys.retain(|key, _| key == b"a");
        assert_eq!(
            keys.keys().cloned().collect::<Vec<_>>(),
            vec![b"a".to_vec()]
        );
        keys.expire_due(10);
        assert_eq!(keys.len(), 1);
    }
}
