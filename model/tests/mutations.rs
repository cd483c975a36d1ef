//! Each property can fail: a fault planted in the model (or an assumption
//! dropped) and the checker finds the counterexample.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::hash::Hash;

use lockmacro_model::{
    Asked, Fair, FairMutations, Fences, FencesMutations, Kinds, KindsMutations, Loss, Plain,
    PlainMutations, Refreshes, RefreshesMutations, ScriptedAsk, Scriptless, ScriptlessMutations,
    Shares, SharesKind, SharesMutations, Timing,
};
use stateright::{Checker, HasDiscoveries, Model};

/// Searches `model` until it finds a counterexample to `property`, and
/// returns its path, printed.
pub fn break_it<M>(model: M, property: &'static str) -> String
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Eq + Hash + Send + Sync,
    M::Action: Clone + Debug + PartialEq,
{
    search(model, property, false)
}

/// As [`break_it`], depth first: for a space whose breadth-first search
/// takes long to reach the counterexample's depth. The trace found is then
/// not the shortest.
pub fn break_it_depth_first<M>(model: M, property: &'static str) -> String
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Eq + Hash + Send + Sync,
    M::Action: Clone + Debug + PartialEq,
{
    search(model, property, true)
}

fn search<M>(model: M, property: &'static str, depth_first: bool) -> String
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Eq + Hash + Send + Sync,
    M::Action: Clone + Debug + PartialEq,
{
    let checker = model
        .checker()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])));
    let path = if depth_first {
        checker.spawn_dfs().join().discovery(property)
    } else {
        checker.spawn_bfs().join().discovery(property)
    };
    let path =
        path.unwrap_or_else(|| panic!("the checker found no counterexample to `{property}`"));
    let trace = format!("{:?}", path.into_actions());
    eprintln!("{property}: {trace}");
    trace
}

fn plain(mutations: PlainMutations) -> Plain {
    Plain {
        attempts: 2,
        mutations,
        ..Plain::new(
            2,
            Timing {
                horizon: 4,
                ..Timing::default()
            },
        )
    }
}

#[test]
fn a_release_without_the_token_check_lets_two_clients_hold() {
    let model = Plain {
        clients: 3,
        ..plain(PlainMutations {
            release_without_token_check: true,
            ..PlainMutations::default()
        })
    };
    break_it(model, "at most one holder");
}

#[test]
fn a_refresh_that_retakes_an_expired_key_confirms_a_lapsed_lease() {
    let model = plain(PlainMutations {
        refresh_retakes: true,
        ..PlainMutations::default()
    });
    break_it(model, "no lapsed lease is confirmed");
}

#[test]
fn a_waiters_flag_set_after_the_attempt_misses_a_wake_up() {
    let model = plain(PlainMutations {
        flag_after_attempt: true,
        ..PlainMutations::default()
    });
    break_it(model, "a release wakes its waiters");
}

#[test]
fn a_waiter_that_does_not_mark_the_value_misses_a_wake_up() {
    let model = plain(PlainMutations {
        waiter_does_not_mark: true,
        ..PlainMutations::default()
    });
    break_it(model, "a release wakes its waiters");
}

#[test]
fn a_clock_slower_than_the_drift_margin_lets_two_clients_hold() {
    let model = Plain {
        max_skew: Timing::default().drift + 1,
        ..plain(PlainMutations::default())
    };
    break_it(model, "at most one holder");
}

#[test]
fn a_restart_without_persistence_lets_a_second_client_hold() {
    let model = Plain {
        restarts: 1,
        ..plain(PlainMutations::default())
    };
    break_it(model, "at most one holder");
}

fn fair(mutations: FairMutations) -> Fair {
    Fair {
        attempts: 2,
        mutations,
        ..Fair::new(
            2,
            Timing {
                horizon: 4,
                ..Timing::default()
            },
        )
    }
}

#[test]
fn a_grant_without_a_lease_keeps_the_key_for_a_dead_waiter() {
    let model = fair(FairMutations {
        grant_without_lease: true,
        ..FairMutations::default()
    });
    break_it(model, "a dead waiter holds a grant for its lease at most");
}

#[test]
fn a_waiters_flag_set_after_joining_the_queue_strands_a_waiter() {
    let model = fair(FairMutations {
        flag_after_attempt: true,
        ..FairMutations::default()
    });
    break_it(model, "a release hands the key to a waiter in line");
}

#[test]
fn a_grant_without_the_waiters_mark_strands_the_next_in_line() {
    let model = Fair {
        clients: 3,
        ..fair(FairMutations {
            grant_unmarked: true,
            ..FairMutations::default()
        })
    };
    break_it(model, "a release hands the key to a waiter in line");
}

/// One permit, two clients, horizon 4.
fn one_permit(mutations: SharesMutations) -> Shares {
    Shares {
        mutations,
        ..Shares::new(
            SharesKind::Permits(1),
            2,
            Timing {
                horizon: 4,
                ..Timing::default()
            },
        )
    }
}

#[test]
fn a_refresh_that_retakes_an_expired_permit_exceeds_the_permits() {
    let model = one_permit(SharesMutations {
        refresh_retakes: true,
        ..SharesMutations::default()
    });
    break_it(model, "the server keeps no more shares than allowed");
}

#[test]
fn a_read_that_ignores_the_write_lets_both_hold() {
    let model = Shares {
        attempts: 1,
        mutations: SharesMutations {
            read_ignores_write: true,
            ..SharesMutations::default()
        },
        ..Shares::new(
            SharesKind::ReadWrite { writers: 1 },
            2,
            Timing {
                horizon: 3,
                ..Timing::default()
            },
        )
    };
    break_it(model, "no more holders than shares allow");
}

#[test]
fn a_counter_seeded_from_zero_goes_back_after_a_restart() {
    let model = Fences {
        mutations: FencesMutations {
            seed_from_zero: true,
            ..FencesMutations::default()
        },
        ..Fences::new(2, Timing::default())
    };
    break_it(model, "fences only go up");
}

#[test]
fn a_clock_that_steps_back_across_a_restart_sends_fences_back() {
    let model = Fences {
        mutations: FencesMutations {
            clock_steps_back: 4,
            ..FencesMutations::default()
        },
        ..Fences::new(2, Timing::default())
    };
    break_it(model, "fences only go up");
}

/// The scripts as they were before `held_fence`: a retry that finds its own
/// value after the counter expired (a `fence_expiry` shorter than the time
/// the lease was kept) is told 0. See `docs/model.md`.
#[test]
fn a_retry_that_reads_a_missing_counter_as_zero_is_told_a_lower_fence() {
    let model = Fences {
        fence_expiry: Timing::default().ttl + 1,
        restarts: 0,
        mutations: FencesMutations {
            retry_reads_zero: true,
            ..FencesMutations::default()
        },
        ..Fences::new(2, Timing::default())
    };
    break_it(model, "a retry is told no fence below its own");
}

fn kinds(clients: Vec<Asked>, mutations: KindsMutations) -> Kinds {
    Kinds {
        mutations,
        ..Kinds::new(
            clients,
            Timing {
                horizon: 3,
                ..Timing::default()
            },
        )
    }
}

#[test]
fn a_lock_written_over_live_shares_holds_the_key_as_two_kinds() {
    let model = kinds(
        vec![Asked::Permits(2), Asked::Lock],
        KindsMutations {
            lock_ignores_shares: true,
            ..KindsMutations::default()
        },
    );
    break_it(model, "a key is never held as two kinds at once");
}

#[test]
fn a_forced_release_that_spares_shares_lets_their_refresh_succeed() {
    let model = kinds(
        vec![Asked::Permits(2)],
        KindsMutations {
            force_spares_shares: true,
            ..KindsMutations::default()
        },
    );
    break_it(model, "a forced release ends every lease on the key");
}

#[test]
fn a_downgrade_in_two_steps_lets_a_writer_in_beside_the_reader() {
    let model = kinds(
        vec![Asked::Write, Asked::Write],
        KindsMutations {
            downgrade_in_two_steps: true,
            ..KindsMutations::default()
        },
    );
    break_it(model, "a writer holds alone, across a downgrade");
}

/// Each of these breaks a property no other planted fault reaches.
#[test]
fn a_clock_slower_than_the_drift_margin_believes_in_a_key_that_is_gone() {
    let model = Plain {
        max_skew: Timing::default().drift + 1,
        ..plain(PlainMutations::default())
    };
    break_it(model, "a holder's key is its own");
}

#[test]
fn a_refresh_that_retakes_an_expired_permit_confirms_a_lapsed_share() {
    let model = one_permit(SharesMutations {
        refresh_retakes: true,
        ..SharesMutations::default()
    });
    break_it(model, "no lapsed share is confirmed");
}

#[test]
fn a_share_counted_from_its_reply_outlives_the_server() {
    let model = Shares {
        attempts: 1,
        ..one_permit(SharesMutations {
            lease_from_reply: true,
            ..SharesMutations::default()
        })
    };
    break_it(model, "a holder's share is on the server");
}

#[test]
fn a_grant_lease_trusted_from_the_hand_off_lets_two_clients_hold() {
    // A third client, one attempt each: the key expires under the waiter
    // that trusts it too long, and the third takes it.
    let model = Fair {
        clients: 3,
        attempts: 1,
        ..handing_off(FairMutations {
            lease_from_arrival: true,
            ..FairMutations::default()
        })
    };
    break_it_depth_first(model, "at most one holder");
}

#[test]
fn a_grant_lease_trusted_from_the_hand_off_outlives_the_key() {
    let model = handing_off(FairMutations {
        lease_from_arrival: true,
        ..FairMutations::default()
    });
    break_it(model, "a holder's key is its own");
}

/// The fair queue with the timing that reaches the hand-off (see
/// `the_fair_queue_keeps_every_property`).
fn handing_off(mutations: FairMutations) -> Fair {
    Fair {
        attempts: 2,
        mutations,
        ..Fair::new(
            2,
            Timing {
                ttl: 4,
                grant: 3,
                horizon: 4,
                ..Timing::default()
            },
        )
    }
}

fn refreshes(mutations: RefreshesMutations) -> Refreshes {
    Refreshes {
        mutations,
        ..Refreshes::new(Timing::default())
    }
}

#[test]
fn a_deadline_moved_only_on_confirmation_outlives_a_shortened_key() {
    let only_on_confirm = RefreshesMutations {
        deadline_moves_only_on_confirm: true,
        ..RefreshesMutations::default()
    };
    break_it(refreshes(only_on_confirm), "at most one holder");
    break_it(refreshes(only_on_confirm), "a holder's key is its own");
}

#[test]
fn a_confirmation_that_ignores_a_shorter_refresh_in_flight_outlives_the_key() {
    let model = refreshes(RefreshesMutations {
        confirm_ignores_in_flight: true,
        ..RefreshesMutations::default()
    });
    break_it(model, "a holder's key is its own");
}

#[test]
fn a_confirmation_that_forgets_a_refresh_given_up_on_outlives_the_key() {
    let model = refreshes(RefreshesMutations {
        confirm_ignores_given_up: true,
        ..RefreshesMutations::default()
    });
    break_it(model, "a holder's key is its own");
}

#[test]
fn a_bound_read_after_settling_forgets_a_shorter_refresh_applied_later() {
    let model = refreshes(RefreshesMutations {
        bound_read_after_settling: true,
        ..RefreshesMutations::default()
    });
    break_it(model.clone(), "a holder's key is its own");
    break_it(model, "at most one holder");
}

#[test]
fn a_set_read_in_a_transaction_of_its_own_lets_two_clients_hold() {
    for ask in [ScriptedAsk::Permit, ScriptedAsk::Lock] {
        let model = Scriptless {
            mutations: ScriptlessMutations {
                nested_exec_ends_watch: true,
                ..ScriptlessMutations::default()
            },
            ..Scriptless::new(
                ask,
                Timing {
                    horizon: 4,
                    ..Timing::default()
                },
            )
        };
        break_it(model.clone(), "at most one holder");
        break_it(model, "a holder's key is its own");
    }
}

/// The assumption `fence.lua` states: a restart loses the counter or keeps
/// it as it was, never brings an older one back.
#[test]
fn a_restart_from_an_older_snapshot_sends_fences_back() {
    let model = Fences {
        loss: Loss::SinceSnapshot,
        ..Fences::new(2, Timing::default())
    };
    break_it(model, "fences only go up");
}

#[test]
fn a_refusal_read_across_two_replies_and_not_confirmed_names_the_wrong_kind() {
    let model = Scriptless {
        mutations: ScriptlessMutations {
            refusal_unconfirmed: true,
            ..ScriptlessMutations::default()
        },
        ..Scriptless::new(
            ScriptedAsk::Lock,
            Timing {
                horizon: 4,
                ..Timing::default()
            },
        )
    };
    break_it(model, "a script-free refusal names a set of shares");
}
