//! Every state of each model, checked against every property. The sizes
//! are those `docs/model.md` quotes (`cargo test -p lockmacro-model --
//! --nocapture` prints them).

use lockmacro_model::{
    Asked, Fair, Fences, Kinds, Loss, Plain, Refreshes, ScriptedAsk, Scriptless, Shares,
    SharesKind, Steps, Timing,
};
use std::fmt::Debug;
use std::hash::Hash;
use std::time::Instant;

use stateright::{Checker, Model};

/// Checks every state of `model` (breadth first, to the end), prints the
/// state count, time and steps (`steps`, which the model counted), and
/// fails when `docs/model.md`'s row for `test` gives other state counts:
/// the table is the run's, not a hand-copied figure.
pub fn exhaust<M>(test: &str, model: M, steps: &Steps) -> impl Checker<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Eq + Hash + Send + Sync,
    M::Action: Clone + Debug + PartialEq,
{
    let start = Instant::now();
    let checker = model.checker().spawn_bfs().join();
    let counted = format!(
        "{} ({})",
        grouped(checker.state_count()),
        grouped(checker.unique_state_count())
    );
    eprintln!(
        "{test}: {counted} states, depth {}, {:.2?}; steps {:?}",
        checker.max_depth(),
        start.elapsed(),
        steps.counts()
    );
    let doc = include_str!("../../docs/model.md");
    let row = format!("| `{test}` |");
    let documented = doc
        .lines()
        .find(|line| line.starts_with(&row))
        .and_then(|line| line.split('|').nth(3))
        .map(str::trim);
    assert_eq!(
        documented,
        Some(counted.as_str()),
        "docs/model.md's \"Sizes and times\" row for `{test}` should give {counted} states"
    );
    checker
}

/// `n` with its thousands separated by commas, as the table writes it.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn timing(horizon: u8) -> Timing {
    Timing {
        horizon,
        ..Timing::default()
    }
}

#[test]
fn the_plain_lock_keeps_every_property() {
    let steps = Steps::new();
    let model = Plain {
        attempts: 3,
        steps: Some(steps.clone()),
        ..Plain::new(2, timing(4))
    };
    exhaust("the_plain_lock_keeps_every_property", model, &steps).assert_properties();
    steps.assert_every_offered_step_taken(&[]);
}

/// A ttl of 4 and a grant lease of 3: with the default 3 and 2, a waiter
/// woken by a hand-off never had time left to go on with the key it was
/// handed (`TakeHanded` was offered 23,478 times and never taken).
#[test]
fn the_fair_queue_keeps_every_property() {
    let steps = Steps::new();
    let model = Fair {
        attempts: 2,
        steps: Some(steps.clone()),
        ..Fair::new(
            2,
            Timing {
                ttl: 4,
                grant: 3,
                ..timing(4)
            },
        )
    };
    exhaust("the_fair_queue_keeps_every_property", model, &steps).assert_properties();
    steps.assert_every_offered_step_taken(&[]);
}

#[test]
fn one_permit_is_held_by_one_client_at_a_time() {
    let steps = Steps::new();
    let model = Shares {
        attempts: 2,
        steps: Some(steps.clone()),
        ..Shares::new(SharesKind::Permits(1), 2, timing(4))
    };
    exhaust("one_permit_is_held_by_one_client_at_a_time", model, &steps).assert_properties();
    steps.assert_every_offered_step_taken(&[]);
}

#[test]
fn two_permits_are_held_by_two_clients_at_most() {
    let steps = Steps::new();
    let model = Shares {
        attempts: 1,
        steps: Some(steps.clone()),
        ..Shares::new(SharesKind::Permits(2), 3, timing(3))
    };
    exhaust("two_permits_are_held_by_two_clients_at_most", model, &steps).assert_properties();
    steps.assert_every_offered_step_taken(&[]);
}

#[test]
fn readers_and_the_writer_exclude_each_other() {
    let steps = Steps::new();
    let model = Shares {
        attempts: 1,
        steps: Some(steps.clone()),
        ..Shares::new(SharesKind::ReadWrite { writers: 1 }, 3, timing(3))
    };
    exhaust("readers_and_the_writer_exclude_each_other", model, &steps).assert_properties();
    steps.assert_every_offered_step_taken(&[]);
}

#[test]
fn fences_go_up_across_a_restart() {
    let steps = Steps::new();
    let model = Fences {
        steps: Some(steps.clone()),
        ..Fences::new(2, Timing::default())
    };
    exhaust("fences_go_up_across_a_restart", model, &steps).assert_properties();
    steps.assert_every_offered_step_taken(&[]);
}

#[test]
fn fences_go_up_across_the_counters_expiry() {
    let steps = Steps::new();
    let model = Fences {
        fence_expiry: Timing::default().ttl + 1,
        steps: Some(steps.clone()),
        ..Fences::new(2, Timing::default())
    };
    exhaust("fences_go_up_across_the_counters_expiry", model, &steps).assert_properties();
    steps.assert_every_offered_step_taken(&[]);
}

#[test]
fn three_clients_on_the_plain_lock_keep_every_property() {
    let steps = Steps::new();
    let model = Plain {
        attempts: 1,
        steps: Some(steps.clone()),
        ..Plain::new(3, timing(3))
    };
    // One attempt each: no waiter gets the key (the `sometimes` property),
    // which keeps the space within seconds; two pairs can still collide.
    let checker = exhaust(
        "three_clients_on_the_plain_lock_keep_every_property",
        model,
        &steps,
    );
    for property in [
        "at most one holder",
        "a holder's key is its own",
        "a release wakes its waiters",
        "no lapsed lease is confirmed",
    ] {
        checker.assert_no_discovery(property);
    }
    steps.assert_every_offered_step_taken(&[]);
}

#[test]
fn a_key_is_held_as_one_kind_at_a_time() {
    let steps = Steps::new();
    let model = Kinds {
        attempts: 1,
        steps: Some(steps.clone()),
        ..Kinds::new(vec![Asked::Lock, Asked::Permits(2), Asked::Read], timing(3))
    };
    exhaust("a_key_is_held_as_one_kind_at_a_time", model, &steps).assert_properties();
    steps.assert_every_offered_step_taken(&[]);
}

#[test]
fn a_downgrade_lets_no_writer_in_beside_the_reader() {
    let steps = Steps::new();
    let model = Kinds {
        steps: Some(steps.clone()),
        ..Kinds::new(vec![Asked::Write, Asked::Write], timing(3))
    };
    exhaust(
        "a_downgrade_lets_no_writer_in_beside_the_reader",
        model,
        &steps,
    )
    .assert_properties();
    steps.assert_every_offered_step_taken(&[]);
}

/// A long ttl of 4 and a short one of 2: a refresh to the short one ends
/// the key sooner than the lease it refreshes would have.
#[test]
fn refreshes_with_their_own_ttl_keep_the_deadline_within_the_key() {
    let steps = Steps::new();
    let model = Refreshes {
        steps: Some(steps.clone()),
        ..Refreshes::new(Timing::default())
    };
    exhaust(
        "refreshes_with_their_own_ttl_keep_the_deadline_within_the_key",
        model,
        &steps,
    )
    .assert_properties();
    steps.assert_every_offered_step_taken(&[]);
}

/// A third refresh, sent once the first two are settled (the running
/// minimum of the ttls in flight starts again), with clocks that agree.
#[test]
fn three_refreshes_keep_the_deadline_within_the_key() {
    let steps = Steps::new();
    let model = Refreshes {
        refreshes: 3,
        max_skew: 0,
        steps: Some(steps.clone()),
        ..Refreshes::new(Timing::default())
    };
    exhaust(
        "three_refreshes_keep_the_deadline_within_the_key",
        model,
        &steps,
    )
    .assert_properties();
    steps.assert_every_offered_step_taken(&[]);
}

#[test]
fn a_script_free_lock_beside_a_scripted_permit_is_held_once() {
    let steps = Steps::new();
    let model = Scriptless {
        steps: Some(steps.clone()),
        ..Scriptless::new(ScriptedAsk::Permit, timing(6))
    };
    exhaust(
        "a_script_free_lock_beside_a_scripted_permit_is_held_once",
        model,
        &steps,
    )
    .assert_properties();
    steps.assert_every_offered_step_taken(&[]);
}

#[test]
fn a_script_free_lock_beside_a_scripted_lock_is_held_once() {
    let steps = Steps::new();
    let model = Scriptless {
        steps: Some(steps.clone()),
        ..Scriptless::new(ScriptedAsk::Lock, timing(6))
    };
    exhaust(
        "a_script_free_lock_beside_a_scripted_lock_is_held_once",
        model,
        &steps,
    )
    .assert_properties();
    steps.assert_every_offered_step_taken(&[]);
}

/// A restart that keeps the key and loses the counter: the holder's retry
/// finds its own value and is minted a fence from the clock.
#[test]
fn fences_go_up_across_a_restart_that_keeps_the_key() {
    let steps = Steps::new();
    let model = Fences {
        loss: Loss::Counter,
        steps: Some(steps.clone()),
        ..Fences::new(2, Timing::default())
    };
    exhaust(
        "fences_go_up_across_a_restart_that_keeps_the_key",
        model,
        &steps,
    )
    .assert_properties();
    steps.assert_every_offered_step_taken(&[]);
}

/// A restart that keeps the counter and loses the key.
#[test]
fn fences_go_up_across_a_restart_that_keeps_the_counter() {
    let steps = Steps::new();
    let model = Fences {
        loss: Loss::Key,
        steps: Some(steps.clone()),
        ..Fences::new(2, Timing::default())
    };
    exhaust(
        "fences_go_up_across_a_restart_that_keeps_the_counter",
        model,
        &steps,
    )
    .assert_properties();
    steps.assert_every_offered_step_taken(&[]);
}
