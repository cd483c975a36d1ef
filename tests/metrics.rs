//! The `metrics` feature: a scripted sequence of obtains, a busy key, a
//! release, a lease lost to `max_hold` and one lost while Redis is frozen,
//! read back through a recorder from `metrics-util`; every metric described,
//! and listed in the guide.
//!
//! The scripted sequence reads a process-wide recorder; the outage test
//! runs on one thread with a recorder of that thread's own, which takes
//! precedence there, so the two do not see each other's figures.

use std::collections::HashMap;
use std::time::Duration;

use lockmacro_runtime::{Locker, Next, ObtainOptions, RedisBackend, RedisConfig};
use metrics_util::CompositeKey;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

use lockmacro_testkit::RedisServer;

/// What the recorder was given for one backend and namespace, summed over
/// snapshots (each snapshot hands over what came since the last one):
/// counters and gauges by value, histograms by number of samples.
struct Recorded {
    snapshotter: Snapshotter,
    namespace: &'static str,
    totals: HashMap<String, f64>,
}

impl Recorded {
    fn install(namespace: &'static str) -> Self {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this process");
        Recorded {
            snapshotter,
            namespace,
            totals: HashMap::new(),
        }
    }

    /// The totals so far.
    fn read(&mut self) -> &HashMap<String, f64> {
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let key = key.key();
            let label = |name: &str| {
                key.labels()
                    .find(|label| label.key() == name)
                    .map(|label| label.value().to_owned())
            };
            assert_eq!(label("backend").as_deref(), Some("redis"), "{key:?}");
            if label("namespace").as_deref() != Some(self.namespace) {
                continue;
            }
            let value = match value {
                DebugValue::Counter(n) => n as f64,
                DebugValue::Gauge(x) => x.into_inner(),
                DebugValue::Histogram(samples) => samples.len() as f64,
            };
            *self.totals.entry(key.name().to_owned()).or_default() += value;
        }
        &self.totals
    }

    fn get(&mut self, name: &str) -> f64 {
        self.read().get(name).copied().unwrap_or(0.0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_sequence_is_counted() {
    let mut recorded = Recorded::install("billing");
    let server = RedisServer::start();
    let config = RedisConfig::default().response_timeout(Duration::from_millis(200));
    let locker = Locker::new(server.expect_ok(
        RedisBackend::connect_with(&server.url(), config).await,
        "connect",
    ))
    .with_namespace("billing");
    let other = server
        .expect_ok(Locker::connect(&server.url()).await, "connect")
        .with_namespace("billing");
    let ttl = Duration::from_secs(1);

    let lock = server.expect_ok(
        locker.obtain("a", ttl, ObtainOptions::new()).await,
        "obtain",
    );
    assert_eq!(recorded.get("lockmacro_obtained_total"), 1.0);
    assert_eq!(recorded.get("lockmacro_leases_held"), 1.0);
    assert_eq!(recorded.get("lockmacro_wait_seconds"), 1.0);

    let busy = other.obtain("a", ttl, ObtainOptions::new()).await;
    assert!(busy.is_err_and(|err| err.is_not_obtained()));
    assert_eq!(recorded.get("lockmacro_busy_total"), 1.0);
    assert_eq!(recorded.get("lockmacro_wait_seconds"), 2.0);

    server.expect_ok(lock.release().await, "release");
    assert_eq!(recorded.get("lockmacro_released_total"), 1.0);
    assert_eq!(recorded.get("lockmacro_leases_held"), 0.0);
    assert_eq!(recorded.get("lockmacro_hold_seconds"), 1.0);

    // Lost to max_hold: no refresh failed.
    let capped = ObtainOptions::new().max_hold(Duration::from_millis(300));
    let guard = server
        .expect_ok(locker.obtain("b", ttl, capped).await, "obtain")
        .keep_alive();
    guard.lost().await;
    assert_eq!(recorded.get("lockmacro_lost_total"), 1.0);
    assert_eq!(recorded.get("lockmacro_refresh_failures_total"), 0.0);
    assert_eq!(
        recorded.get("lockmacro_leases_held"),
        0.0,
        "a lost lease is not held"
    );
    drop(guard);

    // The watchdog's thread and this one both find the deadline passed; the
    // loss is counted before either lets it be seen, whichever declares it.
    let mut lost = 1.0;
    for n in 0..20 {
        let capped = ObtainOptions::new().max_hold(Duration::from_millis(10));
        let key = format!("b{n}");
        let guard = server
            .expect_ok(locker.obtain(&key, ttl, capped).await, "obtain")
            .keep_alive();
        guard.lost().await;
        lost += 1.0;
        assert_eq!(recorded.get("lockmacro_lost_total"), lost);
    }

    // Lost while Redis is frozen: its refreshes time out first.
    let guard = server
        .expect_ok(
            locker.obtain("c", ttl, ObtainOptions::new()).await,
            "obtain",
        )
        .keep_alive();
    server.pause();
    guard.lost().await;
    server.resume();
    drop(guard);
    assert_eq!(recorded.get("lockmacro_lost_total"), lost + 1.0);
    assert!(recorded.get("lockmacro_refresh_failures_total") >= 1.0);
    assert!(recorded.get("lockmacro_backend_errors_total") >= 1.0);
    assert_eq!(recorded.get("lockmacro_obtained_total"), 23.0);

    // The other namespace's obtain and busy are apart.
    let unlabelled = server.locker().await;
    let lock = server.expect_ok(
        unlabelled.obtain("a", ttl, ObtainOptions::new()).await,
        "obtain",
    );
    server.expect_ok(lock.release().await, "release");
    assert_eq!(recorded.get("lockmacro_obtained_total"), 23.0);
}

/// The counter `lockmacro_backend_errors_total` for `op` and `kind` in one
/// snapshot.
fn backend_errors(snapshot: &[(CompositeKey, DebugValue)], op: &str, kind: &str) -> u64 {
    snapshot
        .iter()
        .filter(|(key, _)| {
            let key = key.key();
            let has = |name: &str, value: &str| {
                key.labels()
                    .any(|label| label.key() == name && label.value() == value)
            };
            key.name() == "lockmacro_backend_errors_total"
                && has("op", op)
                && has("kind", kind)
                && has("namespace", "outage")
        })
        .map(|(_, value)| match value {
            DebugValue::Counter(n) => *n,
            other => panic!("a counter, not {other:?}"),
        })
        .sum()
}

#[tokio::test(flavor = "current_thread")]
async fn obtains_refreshes_and_releases_that_fail_during_an_outage_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // Every call below runs on this thread, so this recorder hears it all.
    let _local = metrics::set_default_local_recorder(&recorder);
    let mut server = RedisServer::start();
    let config = RedisConfig::default()
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300));
    let locker = Locker::new(server.expect_ok(
        RedisBackend::connect_with(&server.url(), config).await,
        "connect",
    ))
    .with_namespace("outage");
    let ttl = Duration::from_secs(30);
    let refreshed = server.expect_ok(
        locker.obtain("refreshed", ttl, ObtainOptions::new()).await,
        "obtain",
    );
    let released = server.expect_ok(
        locker.obtain("released", ttl, ObtainOptions::new()).await,
        "obtain",
    );

    server.stop();
    for n in 0..3 {
        let err = locker
            .obtain(&format!("campaign:{n}"), ttl, ObtainOptions::new())
            .await
            .expect_err("an obtain while the server is down");
        assert!(err.is_transient(), "{err}");
    }
    let err = refreshed.refresh(ttl).await.expect_err("a refresh");
    assert!(err.is_transient(), "{err}");
    let err = released.release().await.expect_err("a release");
    assert!(err.is_transient(), "{err}");

    let snapshot: Vec<(CompositeKey, DebugValue)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| (key, value))
        .collect();
    assert_eq!(backend_errors(&snapshot, "obtain", "unreachable"), 3);
    assert_eq!(backend_errors(&snapshot, "refresh", "unreachable"), 1);
    assert_eq!(backend_errors(&snapshot, "release", "unreachable"), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn every_metric_has_a_description() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let locker = Locker::memory();
    let lock = locker
        .obtain("described", Duration::from_secs(5), ObtainOptions::new())
        .await
        .unwrap();
    let busy = locker
        .obtain("described", Duration::from_secs(5), ObtainOptions::new())
        .await;
    assert!(busy.is_err_and(|err| err.is_not_obtained()));
    lock.release().await.unwrap();
    // A leader's term that fails, then one that ends the campaign.
    let mut first = true;
    let ended = locker
        .election("described", Duration::from_secs(5))
        .backoff(Duration::from_millis(1), Duration::from_millis(1))
        .run(|term| {
            let fail = std::mem::take(&mut first);
            async move {
                if fail {
                    Next::Retry("the first term fails")
                } else {
                    Next::Stop(term.number())
                }
            }
        })
        .await;
    assert!(ended.is_ok(), "{ended:?}");

    let snapshot = snapshotter.snapshot().into_vec();
    assert!(snapshot.len() >= 7, "{snapshot:?}");
    for (key, _, description, _) in snapshot {
        let name = key.key().name();
        assert!(
            description.is_some_and(|text| !text.is_empty()),
            "{name} has no description"
        );
    }
}

/// The guide's table of metrics names every metric the runtime records:
/// each name quoted in `metrics.rs`, where they are all recorded.
#[test]
fn the_guide_lists_every_metric() {
    let guide = include_str!("../lockmacro-runtime/src/guide/5-wire-and-observability.md");
    let code = include_str!("../lockmacro-runtime/src/metrics.rs");
    let names: std::collections::BTreeSet<&str> = code
        .split("\"lockmacro_")
        .skip(1)
        .filter_map(|rest| rest.split_once('"'))
        .map(|(name, _)| name)
        .collect();
    assert!(names.len() >= 10, "{names:?}");
    for name in names {
        assert!(
            guide.contains(&format!("| `lockmacro_{name}` |")),
            "the guide's table of metrics does not list `lockmacro_{name}`"
        );
    }
}
