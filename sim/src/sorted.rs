//! A sorted set as Redis orders it: by score, then by member's bytes.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use crate::keyspace::Bytes;

/// A score with a total order (`f64::total_cmp`); Redis refuses NaN scores,
/// so none is ever stored.
#[derive(Debug, Clone, Copy)]
struct Score(f64);

impl PartialEq for Score {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        // -0.0 and 0.0 are one score in Redis.
        let norm = |x: f64| if x == 0.0 { 0.0 } else { x };
        norm(self.0).total_cmp(&norm(other.0))
    }
}

#[derive(Debug, Clone, Default)]
pub struct SortedSet {
    by_member: BTreeMap<Bytes, f64>,
    by_score: BTreeSet<(Score, Bytes)>,
}

impl PartialEq for SortedSet {
    fn eq(&self, other: &Self) -> bool {
        self.by_member == other.by_member
    }
}

/// One end of a score range: `(x` is exclusive.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub value: f64,
    pub exclusive: bool,
}

impl Bound {
    /// Parses `1.5`, `(1.5`, `+inf`, `-inf`, `(+inf`; None for what Redis
    /// answers "min or max is not a float".
    pub fn parse(text: &[u8]) -> Option<Bound> {
        let (exclusive, rest) = match text.first() {
            Some(b'(') => (true, &text[1..]),
            _ => (false, text),
        };
        Some(Bound {
            value: parse_score(rest)?,
            exclusive,
        })
    }

    fn below(&self, score: f64) -> bool {
        if self.exclusive {
            self.value < score
        } else {
            self.value <= score
        }
    }

    fn above(&self, score: f64) -> bool {
        if self.exclusive {
            score < self.value
        } else {
            score <= self.value
        }
    }
}

/// A score as Redis reads one (`strtod`, plus `inf` spelt as Redis does);
/// None for NaN or text that is not a number.
pub fn parse_score(text: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(text).ok()?;
    let value = match text.to_ascii_lowercase().as_str() {
        "+inf" | "inf" | "+infinity" | "infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        other if other.contains("inf") || other.contains("nan") => return None,
        other if other.trim() != other || other.is_empty() => return None,
        other => other.parse().ok()?,
    };
    (!value.is_nan()).then_some(value)
}

impl SortedSet {
    pub fn len(&self) -> usize {
        self.by_member.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_member.is_empty()
    }

    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.by_member.get(member).copied()
    }

    /// Sets `member`'s score; true if it is new.
    pub fn insert(&mut self, member: &[u8], score: f64) -> bool {
        let old = self.by_member.insert(member.to_vec(), score);
        if let Some(old) = old {
            self.by_score.remove(&(Score(old), member.to_vec()));
        }
        self.by_score.insert((Score(score), member.to_vec()));
        old.is_none()
    }

    pub fn remove(&mut self, member: &[u8]) -> bool {
        match self.by_member.remove(member) {
            Some(old) => {
                self.by_score.remove(&(Score(old), member.to_vec()));
                true
            }
            None => false,
        }
    }

    /// Members with their scores, lowest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&Bytes, f64)> {
        self.by_score
            .iter()
            .map(|(score, member)| (member, score.0))
    }

    /// Members whose score is within `min`..`max`, lowest first.
    pub fn range_by_score(&self, min: Bound, max: Bound) -> Vec<(Bytes, f64)> {
        self.iter()
            .filter(|(_, score)| min.below(*score) && max.above(*score))
            .map(|(member, score)| (member.clone(), score))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_by_score_then_member_with_infinities_at_the_ends() {
        let mut set = SortedSet::default();
        set.insert(b"b", 1.0);
        set.insert(b"a", 1.0);
        set.insert(b"z", f64::INFINITY);
        set.insert(b"m", f64::NEG_INFINITY);
        let order: Vec<_> = set.iter().map(|(m, _)| m.clone()).collect();
        assert_eq!(
            order,
            vec![b"m".to_vec(), b"a".to_vec(), b"b".to_vec(), b"z".to_vec()]
        );
        let finite = set.range_by_score(
            Bound::parse(b"-inf").unwrap(),
            Bound::parse(b"(+inf").unwrap(),
        );
        assert_eq!(finite.len(), 3);
        assert!(Bound::parse(b"nan").is_none());
        assert!(Bound::parse(b"x").is_none());
    }
}
