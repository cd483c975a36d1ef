//! The runtime's behaviour suite: the same test bodies (`cases`), run against
//! every backend, plus what only a real Redis can show (`redis`).

#[path = "../support/mod.rs"]
mod support;

mod cases;
mod fixture;
mod logs;
mod redis;

/// Instantiates every case in `cases` once per backend.
macro_rules! behaviour_suite {
    ($($case:ident),* $(,)?) => {
        mod on_redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let fixture = crate::fixture::Fixture::redis().await;
                    crate::cases::$case(&fixture).await;
                }
            )*
        }

        mod on_memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let fixture = crate::fixture::Fixture::memory();
                    crate::cases::$case(&fixture).await;
                }
            )*
        }
    };
}

behaviour_suite!(
    obtain_then_busy_then_release,
    busy_error_names_the_key,
    refresh_extends_the_lease,
    ttl_reports_the_remaining_lease,
    lease_expires_without_refresh,
    stale_owner_can_neither_release_nor_refresh,
    wrong_or_short_token_is_refused,
    fence_tokens_strictly_increase_across_releases_and_lockers,
    explicit_fence_key_is_used_and_namespaced,
    no_fence_token_unless_asked,
    namespaces_isolate,
    metadata_round_trips,
    linear_retry_obtains_once_the_holder_releases,
    exponential_retry_obtains_once_the_holder_releases,
    retry_gives_up_at_its_deadline,
    retry_gives_up_after_max_attempts,
    retry_wait_is_cut_short_by_the_holders_expiry,
    obtain_many_is_all_or_nothing,
    obtain_many_releases_and_refreshes_every_key,
    empty_key_is_invalid,
    zero_and_huge_ttls_are_invalid,
    dropped_lock_is_released_in_the_background,
    keep_alive_outlives_the_ttl_and_release_stops_it,
);
