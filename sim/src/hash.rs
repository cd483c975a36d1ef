//! A hash as Redis keeps a small one (a listpack): its fields in the order
//! they were first set, which `HGETALL` answers in. Redis turns a hash of
//! more than 128 fields into a hash table of its own order; the runtime's
//! hashes (`FencedStore`'s) have two fields.

use crate::keyspace::Bytes;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hash(Vec<(Bytes, Bytes)>);

impl Hash {
    pub fn get(&self, field: &[u8]) -> Option<&Bytes> {
        self.0.iter().find(|(f, _)| f == field).map(|(_, v)| v)
    }

    pub fn contains_key(&self, field: &[u8]) -> bool {
        self.get(field).is_some()
    }

    /// Sets `field`, in place if it exists; true if it is new.
    pub fn insert(&mut self, field: &[u8], value: &[u8]) -> bool {
        match self.0.iter_mut().find(|(f, _)| f == field) {
            Some((_, old)) => {
                *old = value.to_vec();
                false
            }
            None => {
                self.0.push((field.to_vec(), value.to_vec()));
                true
            }
        }
    }

    pub fn remove(&mut self, field: &[u8]) -> bool {
        let before = self.0.len();
        self.0.retain(|(f, _)| f != field);
        self.0.len() != before
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Bytes, &Bytes)> {
        self.0.iter().map(|(f, v)| (f, v))
    }
}
