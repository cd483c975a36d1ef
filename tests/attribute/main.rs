//! Every row of the attribute's outcomes table, on every backend: what the
//! annotated function returns, whether its body ran, and what is left in the
//! store afterwards.

mod outcomes;
mod permits;
mod watchdog;

/// One test per case, each on a fixture made by `$fixture`, in a runtime of
/// the flavour the case asks for (the default when none is given).
macro_rules! cases_on {
    ($fixture:expr; $($module:ident::$case:ident $(($($flavor:tt)*))?),* $(,)?) => {
        $(
            #[tokio::test$(($($flavor)*))?]
            async fn $case() {
                let fixture = $fixture;
                crate::$module::$case(&fixture).await;
            }
        )*
    };
}

/// Instantiates every case once per backend.
///
/// The in-memory backend runs all but the cases that need servers: one that
/// can be stopped or frozen, or a key to write or read behind the library's
/// back (another owner taking the key over, the lease left on it). A store
/// inside the process has neither.
///
/// The cluster, Sentinel and etcd cases share one deployment per backend
/// (each case in a namespace of its own), but for the cases that stop or
/// freeze the servers, which get servers of their own.
macro_rules! attribute_suite {
    (
        anywhere: [$($any:tt)*],
        on_servers: [$($servers:tt)*],
        on_own_servers: [$($own:tt)*] $(,)?
    ) => {
        mod on_redis {
            cases_on!(lockmacro_testkit::Fixture::redis().await; $($any)* $($servers)* $($own)*);
        }

        mod on_cluster {
            cases_on!(lockmacro_testkit::Fixture::cluster().await; $($any)* $($servers)*);
            cases_on!(lockmacro_testkit::Fixture::own_cluster().await; $($own)*);
        }

        mod on_redlock {
            cases_on!(lockmacro_testkit::Fixture::redlock().await; $($any)* $($servers)* $($own)*);
        }

        mod on_memory {
            cases_on!(lockmacro_testkit::Fixture::memory(); $($any)*);
        }

        mod on_sentinel {
            cases_on!(lockmacro_testkit::Fixture::sentinel().await; $($any)* $($servers)*);
            cases_on!(lockmacro_testkit::Fixture::own_sentinel().await; $($own)*);
        }

        #[cfg(feature = "etcd")]
        mod on_etcd {
            cases_on!(lockmacro_testkit::Fixture::etcd().await; $($any)* $($servers)*);
            cases_on!(lockmacro_testkit::Fixture::own_etcd().await; $($own)*);
        }
    };
}

attribute_suite!(
    anywhere: [
        outcomes::busy_under_error_returns_not_obtained_and_skips_the_body,
        outcomes::busy_under_skip_returns_the_skipped_value_for_each_return_type,
        outcomes::return_releases_the_lock_before_the_value_comes_back,
        outcomes::question_mark_return_releases_the_lock,
        outcomes::panic_releases_the_lock_before_the_panic_resumes,
        outcomes::cancellation_stops_the_watchdog_and_releases_in_the_background,
        outcomes::design_card_line_locks_the_key_of_the_argument,
        outcomes::wait_obtains_once_the_holder_releases,
        outcomes::wait_gives_up_at_its_deadline,
        outcomes::fence_tokens_increase_per_key_and_guard_exposes_the_lock,
        outcomes::several_keys_are_taken_all_or_nothing,
        outcomes::nested_call_on_a_held_key_reenters_and_other_tasks_still_contend,
        watchdog::body_longer_than_the_ttl_keeps_the_lock(flavor = "multi_thread", worker_threads = 2),
        watchdog::no_task_outlives_its_lock(flavor = "current_thread"),
        watchdog::max_hold_aborts_a_body_that_runs_too_long,
    ],
    on_servers: [
        outcomes::hold_at_least_keeps_the_key_after_the_body_ends,
        watchdog::lost_lease_under_abort_drops_the_body_and_returns_lost,
        watchdog::lost_lease_under_continue_lets_the_body_finish,
    ],
    on_own_servers: [
        outcomes::backend_down_returns_a_backend_error_or_the_skipped_value,
        watchdog::lease_is_lost_on_its_local_deadline_while_redis_is_unreachable,
    ],
);

/// `permits = N` on the backends that keep permits.
macro_rules! permit_suite {
    ($($case:ident),* $(,)?) => {
        mod permits_on_redis {
            cases_on!(lockmacro_testkit::Fixture::redis().await; $(permits::$case(flavor = "multi_thread", worker_threads = 2)),*);
        }

        mod permits_on_cluster {
            cases_on!(lockmacro_testkit::Fixture::cluster().await; $(permits::$case(flavor = "multi_thread", worker_threads = 2)),*);
        }

        mod permits_on_memory {
            cases_on!(lockmacro_testkit::Fixture::memory(); $(permits::$case(flavor = "multi_thread", worker_threads = 2)),*);
        }
    };
}

permit_suite!(
    a_third_call_skips_while_two_permits_are_held,
    waiting_calls_never_exceed_the_permits,
    readers_run_together_and_the_writer_alone,
);
