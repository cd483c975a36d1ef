//! The runtime's behaviour suite: the same test bodies (`cases`), run against
//! every backend, plus what only a real Redis can show (`redis`).

mod cases;
mod dial;
mod election;
mod fair;
mod fence_retry;
mod inspect;
mod kinds;
mod leftovers;
mod list;
mod logs;
mod naming;
mod native;
mod own_connection;
mod permits;
mod redis;
mod rwlock;
mod scriptless;
mod shutdown;
mod waited_mark;
mod wakeup;
mod watchdog;

// Every case in `cases`, once per backend that can run it, each on the
// servers the binary shares for its backend (under a namespace of the test's
// own) or on servers of its own where they start in milliseconds.
//
// A cluster runs all but the cases that lock keys of several hash slots
// together (`k:a`, `k:b`; a lock and the fence key `shared`): a cluster
// refuses those by design, before sending anything (see
// `backends/cluster.rs` for that refusal and for the same behaviours with
// keys that share a hash tag).
//
// etcd runs all but the cases that need a lease shorter than a second to run
// out on the server, or fence tokens that count one by one: etcd leases are
// whole seconds, and its tokens are revisions (see `backends/etcd.rs` for
// those behaviours on etcd's terms).
lockmacro_testkit::for_each_backend! {
    runtime: (flavor = "multi_thread", worker_threads = 2),
    cases: [crate::cases],
    { needs: [], servers: shared } => [
        obtain_then_busy_then_release,
        busy_error_names_the_key,
        refresh_extends_the_lease,
        ttl_reports_the_remaining_lease,
        wrong_or_short_token_is_refused,
        a_release_is_decided_by_the_token_with_or_without_the_metadata,
        no_fence_token_unless_asked,
        namespaces_isolate,
        metadata_round_trips,
        linear_retry_obtains_once_the_holder_releases,
        exponential_retry_obtains_once_the_holder_releases,
        retry_gives_up_at_its_deadline,
        retry_gives_up_after_max_attempts,
        retry_wait_is_cut_short_by_the_holders_expiry,
        empty_key_is_invalid,
        zero_and_huge_ttls_are_invalid,
        dropped_lock_is_released_in_the_background,
        keep_alive_outlives_the_ttl_and_release_stops_it,
        keep_alive_period_must_fit_within_the_ttl,
        ttl_within_the_drift_margin_is_invalid,
        max_hold_stops_renewing_and_the_lease_is_lost,
        hold_runs_the_body_while_holding_and_releases_after,
    ],
    { needs: [SeveralSlots], servers: shared } => [
        obtain_many_is_all_or_nothing,
        obtain_many_releases_and_refreshes_every_key,
    ],
    { needs: [ShortLeases], servers: shared } => [
        lease_expires_without_refresh,
        stale_owner_can_neither_release_nor_refresh,
        fence_tokens_strictly_increase_across_releases_and_lockers,
    ],
    { needs: [SeveralSlots, ShortLeases], servers: shared } => [
        explicit_fence_key_is_used_and_namespaced,
    ],
}

/// Semaphores on every backend that keeps shares, and the refusal on the
/// others.
mod permits_on {
    lockmacro_testkit::for_each_backend! {
        runtime: (flavor = "multi_thread", worker_threads = 2),
        cases: [crate::permits],
        { needs: [Shares], servers: shared } => [
            at_most_n_holders_and_a_release_frees_one,
            a_permit_is_refreshed_measured_and_kept_alive,
            a_dead_holders_permit_comes_back_after_its_ttl_never_sooner,
            fence_tokens_strictly_increase_across_permits,
            a_waiter_for_a_permit_is_woken_by_a_release,
            holders_never_exceed_the_permits,
            misuses_are_refused_before_anything_is_sent,
            a_lock_and_a_semaphore_cannot_share_a_key,
        ],
        { needs: [], lacks: [Shares], servers: shared } => [
            permits_are_refused_where_the_backend_keeps_none,
        ],
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_waiter_for_a_permit_sends_nothing_and_is_woken() {
        let server = lockmacro_testkit::RedisServer::start();
        crate::permits::redis_waiter_for_a_permit_sends_nothing_and_is_woken(&server).await;
    }
}

/// Read-write locks on every backend that keeps shares, and the refusal on
/// the others.
mod read_write_on {
    lockmacro_testkit::for_each_backend! {
        runtime: (flavor = "multi_thread", worker_threads = 2),
        cases: [crate::rwlock],
        { needs: [Shares], servers: shared } => [
            readers_share_the_key_and_the_writer_is_alone,
            a_waiting_writer_is_not_starved_by_new_readers,
            a_waiting_writers_mark_outlives_the_last_readers_release,
            a_dead_readers_share_comes_back_after_its_ttl,
            the_writer_may_read_but_a_reader_may_not_upgrade,
            no_reader_or_writer_is_ever_beside_a_writer,
        ],
        { needs: [], lacks: [Shares], servers: shared } => [
            read_write_locks_are_refused_where_the_backend_keeps_none,
        ],
    }
}

/// `Locker::shutdown` and the lease's cancellation token, on every backend.
mod shutdown_on {
    lockmacro_testkit::for_each_backend! {
        runtime: (flavor = "multi_thread", worker_threads = 2),
        cases: [crate::shutdown],
        { needs: [], servers: shared } => [
            obtain_after_shutdown_fails_with_shut_down,
            a_clone_shares_the_shutdown,
            // One thread: the dropped lock's release cannot run before the
            // shutdown starts.
            shutdown_awaits_a_dropped_locks_release(flavor = "current_thread"),
            shutdown_ends_a_held_body_and_cancels_its_token,
            a_task_with_the_token_stops_when_the_lease_is_lost,
            a_task_with_the_token_stops_when_the_lease_is_released,
        ],
        { needs: [Shares], servers: shared } => [every_kind_of_lease_is_given_back],
        { needs: [Servers], servers: own } => [
            a_shutdown_past_its_limit_reports_what_is_left_to_expire,
        ],
    }
}

/// The gauge of leases held, read through a recorder local to the test's
/// thread: the one thread of its runtime.
#[cfg(feature = "metrics")]
mod shutdown_gauge_on {
    lockmacro_testkit::for_each_backend! {
        needs: [],
        servers: shared,
        runtime: (flavor = "current_thread"),
        cases: crate::shutdown::[the_leases_held_gauge_reads_zero_after_shutdown],
    }
}

/// One kind per key, and the downgrade of a write, on every backend that
/// keeps shares. (A backend joins by having `Shares` in `testkit/src/kind.rs`.)
mod kinds_on {
    lockmacro_testkit::for_each_backend! {
        runtime: (flavor = "multi_thread", worker_threads = 2),
        cases: [crate::kinds],
        { needs: [Shares], servers: shared } => [
            permits_on_a_key_held_as_a_read_are_refused,
            a_different_permit_count_than_the_holders_is_refused,
            a_semaphore_on_a_lock_and_a_lock_on_a_semaphore_are_refused,
            a_read_or_write_on_a_semaphore_is_refused,
            a_refused_upgrade_is_upgrade_refused,
            a_downgrade_lets_a_waiting_reader_in_and_no_writer,
            only_a_write_can_be_downgraded,
        ],
    }
}

/// Listing the keys held on every backend that can (`List` in
/// `testkit/src/kind.rs`), and the refusal of those that cannot.
mod list_on {
    lockmacro_testkit::for_each_backend! {
        runtime: (flavor = "multi_thread", worker_threads = 2),
        cases: [crate::list],
        { needs: [List], servers: shared } => [
            list_shows_held_keys_with_their_holders,
            list_takes_the_prefix_literally,
        ],
        { needs: [Shares, List], servers: shared } => [
            list_shows_every_share_of_a_key_once,
        ],
        { needs: [], lacks: [List], servers: shared } => [
            list_is_refused_where_the_backend_cannot_list,
        ],
    }
}

/// Seeing and clearing keys on every backend that can (`Inspect` in
/// `testkit/src/kind.rs`), and what a refusal tells of the holder, which
/// every backend's answers carry.
mod inspect_on {
    lockmacro_testkit::for_each_backend! {
        runtime: (flavor = "multi_thread", worker_threads = 2),
        cases: [crate::inspect],
        { needs: [Inspect], servers: shared } => [
            inspect_sees_a_free_key,
            inspect_sees_a_lock_its_metadata_and_lease,
            force_release_clears_a_key_and_its_holder_learns_it,
        ],
        { needs: [Inspect, ShortLeases], servers: shared } => [
            inspect_reports_the_last_fence_token,
        ],
        { needs: [Inspect, Shares], servers: shared } => [
            inspect_sees_two_permit_holders,
            inspect_sees_readers_then_the_writer,
            force_release_clears_every_share,
        ],
        { needs: [Inspect, FairQueue], servers: shared } => [
            inspect_counts_fair_waiters,
        ],
        { needs: [], servers: shared } => [a_refusal_tells_the_holders_lease_and_metadata],
    }
}
