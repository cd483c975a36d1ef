//! Which arguments combine: the mirror of the runtime's table of the
//! options an obtain refuses together (`rules.rs` in `lockmacro-runtime`,
//! which depends on this crate, so this crate cannot read it). The same
//! combinations are refused here at compile time, on the argument to
//! change, in the attribute's words; a test of the runtime compares the two
//! tables through [`table`].

use proc_macro2::TokenStream;
use quote::quote;

/// An argument, or a condition on the keys, that a rule names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Term {
    /// `keys = […]` with more than one key.
    SeveralKeys,
    /// `fair` or `fair = true`.
    Fair,
    /// `replicas` above zero.
    Replicas,
    /// `permits`, whatever its value.
    Permits,
    /// `mode`, whatever its value.
    Mode,
}

impl Term {
    /// The term as both tables name it.
    fn name(self) -> &'static str {
        match self {
            Term::SeveralKeys => "several keys",
            Term::Fair => "fair",
            Term::Replicas => "replicas",
            Term::Permits => "permits",
            Term::Mode => "mode",
        }
    }
}

/// Two terms that cannot be given together.
pub(crate) struct Rule {
    /// The argument the error is reported on: of the two, the later in the
    /// list of arguments.
    pub(crate) argument: Term,
    /// What it cannot be combined with.
    pub(crate) with: Term,
    /// Why, and what to write instead.
    pub(crate) message: &'static str,
}

/// Every combination the attribute refuses, in the order it reports them.
pub(crate) const RULES: [Rule; 8] = [
    Rule {
        argument: Term::Fair,
        with: Term::SeveralKeys,
        message: "`fair = true` takes one `key`: waiters queue per key; remove `fair` to lock several keys",
    },
    Rule {
        argument: Term::Replicas,
        with: Term::Fair,
        message: "`replicas` cannot be combined with `fair = true`: a fair waiter is handed the key by a release, which nothing waits for the replicas to receive; remove one of them",
    },
    Rule {
        argument: Term::Permits,
        with: Term::SeveralKeys,
        message: "`permits` counts the holders of one key: lock one `key = \"…\"` with `permits`, or remove `permits` to lock several keys",
    },
    Rule {
        argument: Term::Permits,
        with: Term::Replicas,
        message: "`permits` cannot be combined with `replicas`: remove one of them",
    },
    Rule {
        argument: Term::Mode,
        with: Term::SeveralKeys,
        message: "`mode` reads or writes one key: lock one `key = \"…\"` with `mode`, or remove `mode` to lock several keys",
    },
    Rule {
        argument: Term::Mode,
        with: Term::Permits,
        message: "`mode` cannot be combined with `permits`: a key is a read-write lock or a semaphore; remove one of them",
    },
    Rule {
        argument: Term::Mode,
        with: Term::Fair,
        message: "`mode` cannot be combined with `fair = true`: readers and writers are woken by releases but not queued; remove `fair`",
    },
    Rule {
        argument: Term::Mode,
        with: Term::Replicas,
        message: "`mode` cannot be combined with `replicas`: remove one of them",
    },
];

/// The table as `[(argument, with), …]`, names as strings: what the hidden
/// `__rules!()` expands to.
pub(crate) fn table() -> TokenStream {
    let pairs = RULES.iter().map(|rule| {
        let (argument, with) = (rule.argument.name(), rule.with.name());
        quote!((#argument, #with))
    });
    quote!([#(#pairs),*])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_expands_to_its_pairs() {
        let table = table().to_string();
        assert!(
            table.starts_with("[(\"fair\" , \"several keys\") , (\"replicas\" , \"fair\")"),
            "{table}"
        );
        assert_eq!(table.matches('(').count(), RULES.len());
    }
}
