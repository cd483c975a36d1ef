//! The index of keys by expiry time, and when Redis counts a key expired.
//!
//! Redis keeps a key while its clock equals the expiry and deletes it once
//! the clock is past (`now > when`): a `PTTL` of 0 is still a key. Deleting
//! every due key before each command (rather than only on access, plus a
//! sampling cycle) gives a client the same view: a key past its expiry is
//! never seen, and its deletion is a write to anyone watching it, as in
//! Redis 7 for a key that existed when it was watched.

use std::collections::BTreeSet;

use crate::keyspace::Bytes;

/// (expires_at, key) for every key with an expiry, the soonest first.
#[derive(Debug, Clone, Default)]
pub struct Expiries(BTreeSet<(u64, Bytes)>);

impl Expiries {
    pub fn insert(&mut self, at: u64, key: &[u8]) {
        self.0.insert((at, key.to_vec()));
    }

    pub fn remove(&mut self, at: u64, key: &[u8]) {
        self.0.remove(&(at, key.to_vec()));
    }

    /// Takes out the next key whose expiry is before `now_ms`, if any.
    pub fn pop_due(&mut self, now_ms: u64) -> Option<Bytes> {
        let (at, _) = self.0.first()?;
        if !is_past(*at, now_ms) {
            return None;
        }
        self.0.pop_first().map(|(_, key)| key)
    }
}

/// True once a key that expires at `at` is gone at `now_ms`.
pub fn is_past(at: u64, now_ms: u64) -> bool {
    now_ms > at
}
