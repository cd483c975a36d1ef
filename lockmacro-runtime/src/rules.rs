//! What an obtain may ask for, checked before anything is sent.
//!
//! Which options combine is one table, [`RULES`]. The attribute refuses the
//! same combinations at compile time from a mirror of it (the macro crate's
//! `rules.rs`, which cannot depend on this crate); a test holds the two
//! together. What a given backend cannot do, and the bounds on each option,
//! are checked after the table: an obtain that no backend would take is
//! told so first.

use std::time::Duration;

use crate::backend::{Backend, Share};
use crate::error::{BackendError, BackendErrorKind};
use crate::lease::check_duration;
use crate::{LockError, ObtainOptions};

/// An option of an obtain, or a condition on its keys, that a rule names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Term {
    /// More than one key.
    SeveralKeys,
    /// [`ObtainOptions::fair`].
    Fair,
    /// [`ObtainOptions::replicas`], above zero.
    Replicas,
    /// [`ObtainOptions::permits`].
    Permits,
    /// [`ObtainOptions::read`] or [`ObtainOptions::write`].
    Mode,
}

impl Term {
    /// The term as the attribute names it, which both tables share.
    #[cfg(test)]
    fn name(self) -> &'static str {
        match self {
            Term::SeveralKeys => "several keys",
            Term::Fair => "fair",
            Term::Replicas => "replicas",
            Term::Permits => "permits",
            Term::Mode => "mode",
        }
    }

    /// True when an obtain of `keys` with `opts` asks for it.
    fn holds(self, keys: &[String], opts: &ObtainOptions) -> bool {
        match self {
            Term::SeveralKeys => keys.len() > 1,
            Term::Fair => opts.fair,
            Term::Replicas => opts.replicas > 0,
            Term::Permits => matches!(opts.share, Some(Share::Permits(_))),
            Term::Mode => matches!(opts.share, Some(Share::Read | Share::Write)),
        }
    }
}

/// Two terms that cannot be asked for together.
#[derive(Debug)]
struct Rule {
    /// The option refused.
    refused: Term,
    /// What it cannot be combined with.
    with: Term,
    /// Why, and what to ask for instead.
    reason: &'static str,
}

/// Every combination an obtain refuses, whatever the backend, in the order
/// they are checked.
const RULES: [Rule; 8] = [
    Rule {
        refused: Term::Fair,
        with: Term::SeveralKeys,
        reason: "a fair obtain takes one key (waiters queue per key); lock several keys without \
                 `fair`",
    },
    Rule {
        refused: Term::Permits,
        with: Term::SeveralKeys,
        reason: "permits are kept per key: obtain one key with them, or several keys as a plain \
                 lock",
    },
    Rule {
        refused: Term::Mode,
        with: Term::SeveralKeys,
        reason: "read-write locks are kept per key: obtain one key with them, or several keys as \
                 a plain lock",
    },
    Rule {
        refused: Term::Mode,
        with: Term::Fair,
        reason: "`fair` cannot be combined with read-write locks: readers and writers are woken \
                 by releases but not queued (a waiting writer holds back later readers); obtain \
                 without `fair`",
    },
    Rule {
        refused: Term::Permits,
        with: Term::Replicas,
        reason: "`replicas` cannot be combined with permits; obtain without `replicas`",
    },
    Rule {
        refused: Term::Mode,
        with: Term::Replicas,
        reason: "`replicas` cannot be combined with read-write locks; obtain without `replicas`",
    },
    Rule {
        refused: Term::Replicas,
        with: Term::Fair,
        // A fair waiter is handed the key by the release before it, whose
        // write is not waited for.
        reason: "`replicas` cannot be combined with `fair`: a fair waiter is handed the key by a \
                 release, not by its own acquire, so nothing waits for the replicas; use one or \
                 the other",
    },
    Rule {
        refused: Term::Mode,
        with: Term::Permits,
        // `ObtainOptions` keeps one share, the last asked for, so only the
        // attribute can ask for both; the rule is here for the mirror.
        reason: "a key is a read-write lock or a semaphore: ask for `permits`, `read` or \
                 `write`, one of them",
    },
];

/// Refuses an obtain of `keys` (as the caller named them) with `opts` that
/// cannot be served as asked: first a combination no backend takes, then
/// what `backend` cannot do, then a bound out of range.
pub(crate) fn check(
    backend: &dyn Backend,
    keys: &[String],
    ttl: Duration,
    opts: &ObtainOptions,
) -> Result<(), LockError> {
    check_combinations(keys, opts)?;
    if opts.fair {
        check_fair(backend, keys, opts)?;
    }
    if let Some(share) = opts.share {
        check_share(backend, keys, share)?;
    }
    if opts.replicas > 0 {
        check_replicas(backend, keys, ttl, opts)?;
    }
    Ok(())
}

/// The first rule of [`RULES`] that the obtain breaks. Several keys are a
/// mistake in the keys ([`LockError::InvalidKey`]); two options that do not
/// go together are something no backend does
/// ([`BackendErrorKind::Unsupported`]).
fn check_combinations(keys: &[String], opts: &ObtainOptions) -> Result<(), LockError> {
    let Some(rule) = RULES
        .iter()
        .find(|rule| rule.refused.holds(keys, opts) && rule.with.holds(keys, opts))
    else {
        return Ok(());
    };
    Err(match rule.with {
        Term::SeveralKeys => LockError::InvalidKey {
            key: keys.join(","),
            reason: rule.reason.into(),
        },
        _ => unsupported(keys, rule.reason),
    })
}

/// Refuses a fair obtain that this backend cannot queue, or whose place in
/// the queue would never lapse.
fn check_fair(
    backend: &dyn Backend,
    keys: &[String],
    opts: &ObtainOptions,
) -> Result<(), LockError> {
    if backend.capabilities().fair_queue.is_none() {
        return Err(unsupported(
            keys,
            "this backend keeps no queue of waiters, so it cannot hand locks over fairly \
             (Redlock cannot: see `RedlockBackend`); obtain without `fair`",
        ));
    }
    match opts.retry.get_deadline() {
        Some(wait) => check_duration(&keys[0], "fair wait (the retry deadline)", wait),
        None if opts.retry.is_none() => Ok(()),
        None => Err(LockError::InvalidDuration {
            key: keys[0].clone(),
            what: "fair wait",
            value: Duration::ZERO,
            reason: "a fair obtain that waits needs a deadline on its retry strategy \
                     (`RetryStrategy::deadline`): its place in the queue lapses then"
                .into(),
        }),
    }
}

/// Refuses a share (permits, a read, the write) that cannot be kept.
fn check_share(backend: &dyn Backend, keys: &[String], share: Share) -> Result<(), LockError> {
    if share == Share::Permits(0) {
        return Err(LockError::InvalidKey {
            key: keys[0].clone(),
            reason: "`permits` must be at least 1: a semaphore of 0 permits can never be \
                     obtained"
                .into(),
        });
    }
    if !backend.capabilities().shares {
        let what = match share {
            Share::Permits(_) => "permits",
            _ => "read-write locks",
        };
        return Err(unsupported(
            keys,
            &format!(
                "this backend keeps no {what} (Redlock would need a majority to agree on who \
                 holds which share); use one Redis server, a cluster, Sentinel, etcd, \
                 PostgreSQL or the in-memory backend, or a plain lock"
            ),
        ));
    }
    Ok(())
}

/// Refuses an obtain with [`ObtainOptions::replicas`] that the backend
/// could not honour, or whose wait for the replicas is out of range.
fn check_replicas(
    backend: &dyn Backend,
    keys: &[String],
    ttl: Duration,
    opts: &ObtainOptions,
) -> Result<(), LockError> {
    if !backend.capabilities().replicas {
        return Err(unsupported(
            keys,
            "this backend cannot wait for replicas to acknowledge a lock (Redlock's masters \
             have no replicas to wait for: its safety is the majority; the in-memory backend \
             has nothing to replicate); obtain without `replicas`",
        ));
    }
    check_duration(
        &keys[0],
        "replica wait (`ObtainOptions::replica_timeout`)",
        opts.replica_bound(ttl),
    )
}

fn unsupported(keys: &[String], reason: &str) -> LockError {
    BackendError::new(
        BackendErrorKind::Unsupported,
        format!("obtain `{}`", keys.join("`, `")),
        reason,
    )
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The attribute refuses at compile time exactly what an obtain refuses
    /// at run time: its table, expanded by the macro crate, names the same
    /// pairs (in its own order: each side reports in the order it checks).
    #[test]
    fn the_attribute_refuses_the_same_combinations() {
        let mut attribute: Vec<(&str, &str)> = lockmacro::__rules!().to_vec();
        let mut runtime: Vec<(&str, &str)> = RULES
            .iter()
            .map(|rule| (rule.refused.name(), rule.with.name()))
            .collect();
        attribute.sort_unstable();
        runtime.sort_unstable();
        assert_eq!(attribute, runtime);
    }

    #[test]
    fn a_rule_refuses_each_combination_it_names() {
        let keys = ["a".to_owned(), "b".to_owned()];
        let refused = check_combinations(&keys, &ObtainOptions::new().fair()).unwrap_err();
        assert!(
            matches!(&refused, LockError::InvalidKey { key, .. } if key == "a,b"),
            "{refused:?}"
        );
        let refused =
            check_combinations(&keys[..1], &ObtainOptions::new().read().replicas(1)).unwrap_err();
        assert!(
            matches!(&refused, LockError::Backend(err) if err.kind() == BackendErrorKind::Unsupported),
            "{refused:?}"
        );
        assert!(check_combinations(&keys[..1], &ObtainOptions::new().permits(2).fair()).is_ok());
    }
}
