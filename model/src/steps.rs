//! Which steps a model's checker offered and which it took: a step that is
//! offered in every configuration and never enabled checks nothing, however
//! many states are visited, and a fault planted in it goes unseen.
//!
//! A model given [`Steps`] records, per kind of action (its `Debug` form
//! with the client numbers left out: `Attempt(_)`, `Send(_, Release)`),
//! how often `actions` offered it and how often `next_state` took it.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};

/// Counts of the steps offered and taken, shared by a model's clones.
///
/// ```
/// use lockmacro_model::{Fences, Steps, Timing};
/// use stateright::{Checker, Model};
///
/// let steps = Steps::new();
/// let model = Fences { steps: Some(steps.clone()), ..Fences::new(2, Timing::default()) };
/// model.checker().spawn_bfs().join().assert_properties();
/// steps.assert_every_offered_step_taken(&[]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Steps(Arc<Mutex<BTreeMap<String, Count>>>);

/// How often one kind of step was offered and taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    /// Offered by `actions`.
    pub offered: u64,
    /// Taken: `next_state` answered a state.
    pub taken: u64,
}

impl Steps {
    /// No step counted yet.
    pub fn new() -> Self {
        Steps::default()
    }

    /// Counts `actions`, as offered in one state.
    pub fn offered<A: Debug>(&self, actions: &[A]) {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for action in actions {
            counts.entry(kind(action)).or_default().offered += 1;
        }
    }

    /// Counts `action`, taken.
    pub fn taken<A: Debug>(&self, action: &A) {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        counts.entry(kind(action)).or_default().taken += 1;
    }

    /// The counts so far, by kind of step.
    pub fn counts(&self) -> BTreeMap<String, Count> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Panics, naming them, if steps were offered and never taken, other
    /// than those of `allowed` (kinds as [`Steps::counts`] names them),
    /// which a configuration is not meant to reach.
    pub fn assert_every_offered_step_taken(&self, allowed: &[&str]) {
        let counts = self.counts();
        let never: Vec<String> = counts
            .iter()
            .filter(|(name, count)| count.taken == 0 && !allowed.contains(&name.as_str()))
            .map(|(name, count)| format!("{name} (offered {} times)", count.offered))
            .collect();
        assert!(
            never.is_empty(),
            "steps offered and never taken: {}; all: {counts:?}",
            never.join(", ")
        );
    }
}

/// Counts `actions` as offered, when the model was given [`Steps`].
pub(crate) fn offered<A: Debug>(steps: Option<&Steps>, actions: &[A]) {
    if let Some(steps) = steps {
        steps.offered(actions);
    }
}

/// Counts `action` as taken when it led somewhere (`next`), and the model
/// was given [`Steps`]; returns `next`.
pub(crate) fn taken<A: Debug, S>(steps: Option<&Steps>, action: &A, next: Option<S>) -> Option<S> {
    if let Some(steps) = steps
        && next.is_some()
    {
        steps.taken(action);
    }
    next
}

/// An action's kind: its `Debug` form without the client numbers.
fn kind<A: Debug>(action: &A) -> String {
    let full = format!("{action:?}");
    let mut kind = String::with_capacity(full.len());
    let mut in_number = false;
    for c in full.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                kind.push('_');
            }
            in_number = true;
        } else {
            in_number = false;
            kind.push(c);
        }
    }
    kind
}
