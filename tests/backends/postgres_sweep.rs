//! What no lease needs any more goes: the cron pattern's rows (a key per
//! fire, kept at least its period and never released, so each runs out by
//! itself) and the fence rows of keys nobody locks any more. A live lease
//! stays, and fencing tokens keep going up.

use std::time::Duration;

use lockmacro_runtime::{HoldOptions, Locker, ObtainOptions, PostgresBackend, PostgresConfig};
use lockmacro_testkit::Fixture;

const FIRES: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_per_fire_leaves_no_rows_behind() {
    let fx = Fixture::postgres().await;
    let db = fx.postgres_db().unwrap();
    let config = PostgresConfig::default()
        .sweep_every(Duration::from_millis(200))
        .fence_expiry(Duration::from_millis(1));
    let backend = PostgresBackend::connect_with(&db.url(), config).await;
    let locker = Locker::new(backend.unwrap());
    let live = locker
        .obtain(
            "live",
            Duration::from_secs(60),
            ObtainOptions::new().fence(),
        )
        .await
        .unwrap();

    let mut last = live.fence_token().unwrap();
    for fire in 0..FIRES {
        let options = HoldOptions::new(Duration::from_millis(200))
            .hold_at_least(Duration::from_millis(100))
            .fence();
        let token = locker
            .hold([format!("nightly:{fire}")], options, |guard| async move {
                guard.fence_token().unwrap()
            })
            .await
            .unwrap();
        assert!(token > last, "fire {fire}: token {token} after {last}");
        last = token;
    }

    let rows =
        |table: &str| format!("SELECT count(*)::text FROM {table} WHERE key LIKE 'nightly:%'");
    let count = |table: &'static str| {
        let sql = rows(table);
        async move { db.column(&sql).await[0].clone().unwrap() }
    };
    let mut left = (String::new(), String::new());
    for _ in 0..300 {
        left = (
            count("lockmacro_locks").await,
            count("lockmacro_fences").await,
        );
        if left == ("0".to_owned(), "0".to_owned()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        left,
        ("0".to_owned(), "0".to_owned()),
        "rows of {FIRES} fires left behind (locks, fences)"
    );

    assert!(db.is_held("live").await, "the sweep took a live lease");
    live.refresh(Duration::from_secs(60)).await.unwrap();
    let again = locker
        .obtain(
            "nightly:0",
            Duration::from_secs(5),
            ObtainOptions::new().fence(),
        )
        .await
        .unwrap();
    assert!(
        again.fence_token().unwrap() > last,
        "a reaped fence row sent the tokens backwards"
    );
    again.release().await.unwrap();
    live.release().await.unwrap();
}
