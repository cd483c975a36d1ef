//! Every row of the attribute's outcomes table, on every backend: what the
//! annotated function returns, whether its body ran, and what is left in the
//! store afterwards.

mod outcomes;
mod permits;
mod tokens;
mod watchdog;

/// The cases of every backend's module: the outcomes and the watchdog's.
mod cases {
    pub use crate::outcomes::*;
    pub use crate::tokens::*;
    pub use crate::watchdog::*;
}

// Every case, once per backend that can run it, in a runtime of the flavour
// the case asks for (the default when none is given).
//
// The stores in this process (the memory backend, one written outside the
// crate) run all but the cases that need servers: one that can be stopped or
// frozen, or a key to write or read behind the library's back (another owner
// taking the key over, the lease left on it). A store inside the process has
// neither.
//
// The cluster, Sentinel and etcd cases share one deployment per backend
// (each case in a namespace of its own), but for the cases that stop or
// freeze the servers, which get servers of their own.
lockmacro_testkit::for_each_backend! {
    runtime: (),
    cases: [crate::cases],
    { needs: [], servers: shared } => [
        busy_under_error_returns_not_obtained_and_skips_the_body,
        busy_under_skip_returns_the_skipped_value_for_each_return_type,
        return_releases_the_lock_before_the_value_comes_back,
        question_mark_return_releases_the_lock,
        panic_releases_the_lock_before_the_panic_resumes,
        cancellation_stops_the_watchdog_and_releases_in_the_background,
        design_card_line_locks_the_key_of_the_argument,
        wait_obtains_once_the_holder_releases,
        wait_gives_up_at_its_deadline,
        fence_tokens_increase_per_key_and_guard_exposes_the_lock,
        several_keys_are_taken_all_or_nothing,
        nested_call_on_a_held_key_reenters_and_other_tasks_still_contend,
        body_longer_than_the_ttl_keeps_the_lock(flavor = "multi_thread", worker_threads = 2),
        no_task_outlives_its_lock(flavor = "current_thread"),
        max_hold_aborts_a_body_that_runs_too_long,
        a_task_spawned_with_the_bodys_token_stops_when_the_body_returns,
        a_task_spawned_with_the_bodys_token_stops_when_the_lease_is_lost(flavor = "multi_thread", worker_threads = 2),
        shutdown_ends_the_body_with_shut_down_and_cancels_its_token,
        metadata_is_rendered_and_defaults_to_the_host_and_pid,
    ],
    { needs: [Servers], servers: shared } => [
        hold_at_least_keeps_the_key_after_the_body_ends,
        lock_delay_keeps_the_key_longer_on_the_server_and_a_release_frees_it,
        lost_lease_under_abort_drops_the_body_and_returns_lost,
        lost_lease_under_continue_lets_the_body_finish,
    ],
    { needs: [Servers], servers: own } => [
        backend_down_returns_a_backend_error_or_the_skipped_value,
        lease_is_lost_on_its_local_deadline_while_redis_is_unreachable,
    ],
}

/// `permits = N` on the backends that keep permits.
mod permits_on {
    lockmacro_testkit::for_each_backend! {
        needs: [Shares],
        servers: shared,
        runtime: (flavor = "multi_thread", worker_threads = 2),
        cases: crate::permits::[
            a_third_call_skips_while_two_permits_are_held,
            waiting_calls_never_exceed_the_permits,
            readers_run_together_and_the_writer_alone,
        ],
    }
}
