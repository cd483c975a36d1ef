//! Every state of each model, checked against every property. The sizes
//! are those `docs/model.md` quotes (`cargo test -p lockmacro-model --
//! --nocapture` prints them).

use lockmacro_model::{Asked, Fair, Fences, Kinds, Plain, Shares, SharesKind, Timing};
use std::fmt::Debug;
use std::hash::Hash;
use std::time::Instant;

use stateright::{Checker, Model};

/// Checks every state of `model` (breadth first, to the end) and prints the
/// state count and time, which `docs/model.md` quotes.
pub fn exhaust<M>(name: &str, model: M) -> impl Checker<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Eq + Hash + Send + Sync,
    M::Action: Clone + Debug + PartialEq,
{
    let start = Instant::now();
    let checker = model.checker().spawn_bfs().join();
    eprintln!(
        "{name}: {} states ({} unique), depth {}, {:.2?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        start.elapsed()
    );
    checker
}

fn timing(horizon: u8) -> Timing {
    Timing {
        horizon,
        ..Timing::default()
    }
}

#[test]
fn the_plain_lock_keeps_every_property() {
    let model = Plain {
        attempts: 3,
        ..Plain::new(2, timing(4))
    };
    exhaust("plain, 2 clients", model).assert_properties();
}

#[test]
fn the_fair_queue_keeps_every_property() {
    let model = Fair {
        attempts: 2,
        ..Fair::new(2, timing(4))
    };
    exhaust("fair, 2 clients", model).assert_properties();
}

#[test]
fn one_permit_is_held_by_one_client_at_a_time() {
    let model = Shares {
        attempts: 2,
        ..Shares::new(SharesKind::Permits(1), 2, timing(4))
    };
    exhaust("permits 1, 2 clients", model).assert_properties();
}

#[test]
fn two_permits_are_held_by_two_clients_at_most() {
    let model = Shares {
        attempts: 1,
        ..Shares::new(SharesKind::Permits(2), 3, timing(3))
    };
    exhaust("permits 2, 3 clients", model).assert_properties();
}

#[test]
fn readers_and_the_writer_exclude_each_other() {
    let model = Shares {
        attempts: 1,
        ..Shares::new(SharesKind::ReadWrite { writers: 1 }, 3, timing(3))
    };
    exhaust("read-write, 1 writer 2 readers", model).assert_properties();
}

#[test]
fn fences_go_up_across_a_restart() {
    exhaust("fences, 2 clients", Fences::new(2, Timing::default())).assert_properties();
}

#[test]
fn fences_go_up_across_the_counters_expiry() {
    let model = Fences {
        fence_expiry: Timing::default().ttl + 1,
        ..Fences::new(2, Timing::default())
    };
    exhaust("fences expiring, 2 clients", model).assert_properties();
}

#[test]
fn three_clients_on_the_plain_lock_keep_every_property() {
    let model = Plain {
        attempts: 1,
        ..Plain::new(3, timing(3))
    };
    // One attempt each: no waiter gets the key (the `sometimes` property),
    // which keeps the space within seconds; two pairs can still collide.
    let checker = exhaust("plain, 3 clients", model);
    for property in [
        "at most one holder",
        "a holder's key is its own",
        "a release wakes its waiters",
        "no lapsed lease is confirmed",
    ] {
        checker.assert_no_discovery(property);
    }
}

#[test]
fn a_key_is_held_as_one_kind_at_a_time() {
    let model = Kinds {
        attempts: 1,
        ..Kinds::new(vec![Asked::Lock, Asked::Permits(2), Asked::Read], timing(3))
    };
    exhaust("kinds, a lock, a permit and a read", model).assert_properties();
}

#[test]
fn a_downgrade_lets_no_writer_in_beside_the_reader() {
    let model = Kinds::new(vec![Asked::Write, Asked::Write], timing(3));
    exhaust("kinds, 2 writers", model).assert_properties();
}
