use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use lockmacro_runtime::{LockError, Locker, ObtainOptions, RetryStrategy, distributed_lock};
use tokio::sync::oneshot;

use lockmacro_testkit::Fixture;

const LONG: Duration = Duration::from_secs(30);

/// Counts how often a body ran, so a test can show it never ran unlocked.
#[derive(Default)]
struct Runs(AtomicUsize);

impl Runs {
    fn hit(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Debug, PartialEq)]
enum AppError {
    Lock(String),
    Domain,
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err.to_string())
    }
}

struct Service {
    locker: Locker,
    runs: Runs,
}

impl Service {
    #[distributed_lock(key = "job:{id}", ttl = "30s", locker = self.locker)]
    async fn errors_when_busy(&self, id: u32) -> Result<u32, LockError> {
        self.runs.hit();
        Ok(id)
    }

    #[distributed_lock(key = "job:{id}", ttl = "30s", locker = self.locker, on_busy = "skip")]
    async fn skips_unit(&self, id: u32) {
        let _ = id;
        self.runs.hit();
    }

    #[distributed_lock(key = "job:{id}", ttl = "30s", locker = self.locker)]
    async fn skips_option(&self, id: u32) -> Option<u32> {
        self.runs.hit();
        Some(id)
    }

    #[distributed_lock(key = "job:{id}", ttl = "30s", locker = self.locker, on_busy = "skip")]
    async fn skips_result_unit(&self, id: u32) -> Result<(), AppError> {
        let _ = id;
        self.runs.hit();
        Ok(())
    }

    #[distributed_lock(key = "job:{id}", ttl = "30s", locker = self.locker, on_busy = "skip")]
    async fn skips_result_option(&self, id: u32) -> Result<Option<u32>, AppError> {
        self.runs.hit();
        Ok(Some(id))
    }

    #[distributed_lock(key = "job:{id}", ttl = "30s", locker = self.locker)]
    async fn fails_early(&self, id: u32, fail: bool) -> Result<u32, AppError> {
        self.runs.hit();
        let check = || if fail { Err(AppError::Domain) } else { Ok(()) };
        check()?;
        Ok(id)
    }

    #[distributed_lock(key = "job:{id}", ttl = "30s", locker = self.locker)]
    async fn panics(&self, id: u32) -> Result<(), AppError> {
        self.runs.hit();
        panic!("body of job {id} panicked");
    }

    #[distributed_lock(key = "job:{id}", ttl = "30s", locker = self.locker)]
    async fn waits_forever(&self, id: u32, entered: oneshot::Sender<()>) -> Result<(), AppError> {
        let _ = id;
        self.runs.hit();
        let _ = entered.send(());
        std::future::pending::<()>().await;
        Ok(())
    }
}

async fn service(fixture: &Fixture) -> Service {
    Service {
        locker: fixture.locker().await,
        runs: Runs::default(),
    }
}

async fn hold(fixture: &Fixture, key: &str) -> lockmacro_runtime::Lock {
    fixture.check(
        fixture
            .locker()
            .await
            .obtain(key, LONG, ObtainOptions::new())
            .await,
        "hold",
    )
}

pub async fn busy_under_error_returns_not_obtained_and_skips_the_body(fixture: &Fixture) {
    let svc = service(fixture).await;
    let _held = hold(fixture, "job:1").await;
    let err = svc.errors_when_busy(1).await.unwrap_err();
    assert!(
        matches!(&err, LockError::NotObtained { key, .. } if key == "job:1"),
        "{err:?}"
    );
    assert_eq!(svc.runs.count(), 0, "the body ran without the lock");
}

pub async fn busy_under_skip_returns_the_skipped_value_for_each_return_type(fixture: &Fixture) {
    let svc = service(fixture).await;
    let _held = hold(fixture, "job:1").await;
    svc.skips_unit(1).await;
    assert_eq!(svc.skips_option(1).await, None);
    assert_eq!(svc.skips_result_unit(1).await, Ok(()));
    assert_eq!(svc.skips_result_option(1).await, Ok(None));
    assert_eq!(svc.runs.count(), 0, "a body ran without the lock");

    // And each runs once the key is free.
    assert_eq!(svc.skips_option(2).await, Some(2));
    assert_eq!(svc.skips_result_option(2).await, Ok(Some(2)));
    assert_eq!(svc.runs.count(), 2);
}

pub async fn backend_down_returns_a_backend_error_or_the_skipped_value(fixture: &Fixture) {
    let svc = service(fixture).await;
    fixture.stop();
    let err = svc.errors_when_busy(1).await.unwrap_err();
    assert!(matches!(err, LockError::Backend(_)), "{err:?}");
    assert_eq!(svc.skips_option(1).await, None);
    assert_eq!(svc.skips_result_unit(1).await, Ok(()));
    assert_eq!(svc.runs.count(), 0, "a body ran without the lock");
}

pub async fn return_releases_the_lock_before_the_value_comes_back(fixture: &Fixture) {
    let svc = service(fixture).await;
    assert_eq!(svc.errors_when_busy(7).await.unwrap(), 7);
    assert!(!fixture.is_held("job:7").await, "the key outlived the call");
    assert_eq!(
        svc.errors_when_busy(7).await.unwrap(),
        7,
        "a second call finds it free"
    );
}

pub async fn question_mark_return_releases_the_lock(fixture: &Fixture) {
    let svc = service(fixture).await;
    assert_eq!(svc.fails_early(3, true).await, Err(AppError::Domain));
    assert!(!fixture.is_held("job:3").await);
    assert_eq!(svc.fails_early(3, false).await, Ok(3));
}

pub async fn panic_releases_the_lock_before_the_panic_resumes(fixture: &Fixture) {
    let svc = Arc::new(service(fixture).await);
    let task = tokio::spawn({
        let svc = svc.clone();
        async move { svc.panics(5).await }
    });
    let err = task.await.unwrap_err();
    assert!(err.is_panic());
    // Checked at once: the release happened before the panic went on.
    assert!(
        !fixture.is_held("job:5").await,
        "the key outlived the panic"
    );
    assert_eq!(svc.runs.count(), 1);
}

pub async fn cancellation_stops_the_watchdog_and_releases_in_the_background(fixture: &Fixture) {
    let svc = Arc::new(service(fixture).await);
    let (entered_tx, entered) = oneshot::channel();
    let call = tokio::spawn({
        let svc = svc.clone();
        async move { svc.waits_forever(9, entered_tx).await }
    });
    entered.await.unwrap();
    assert!(fixture.is_held("job:9").await);
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    // The release is in flight; it must land well before the 30 s ttl.
    let retry = RetryStrategy::linear(Duration::from_millis(10)).deadline(Duration::from_secs(5));
    let other = fixture.locker().await;
    fixture.check(
        other
            .obtain("job:9", LONG, ObtainOptions::new().retry(retry))
            .await,
        "obtain after cancel",
    );
}

#[tokio::test]
async fn no_locker_configured_is_an_error_that_says_how_to_configure_one() {
    // The global slot is empty in this test binary: no test sets it.
    #[distributed_lock(key = "job", ttl = "1s")]
    async fn uses_global() -> Result<(), LockError> {
        unreachable!("the body ran without a locker")
    }
    #[distributed_lock(key = "job", ttl = "1s")]
    async fn uses_global_skip() -> Option<()> {
        unreachable!("the body ran without a locker")
    }
    let err = uses_global().await.unwrap_err();
    assert!(matches!(err, LockError::NotConfigured), "{err:?}");
    assert!(err.to_string().contains("set_global"), "{err}");
    assert_eq!(uses_global_skip().await, None);
}

pub async fn design_card_line_locks_the_key_of_the_argument(fixture: &Fixture) {
    let locker = fixture.locker().await;
    struct User {
        id: u64,
    }
    #[distributed_lock(key = "user:<u.id>", ttl = "30s", locker = locker)]
    async fn bill(
        locker: &Locker,
        u: &User,
        seen: &AtomicBool,
        fixture: &Fixture,
    ) -> Result<(), LockError> {
        let _ = locker;
        seen.store(fixture.is_held("user:42").await, Ordering::SeqCst);
        Ok(())
    }
    let seen = AtomicBool::new(false);
    bill(&locker, &User { id: 42 }, &seen, fixture)
        .await
        .unwrap();
    assert!(
        seen.load(Ordering::SeqCst),
        "user:42 was not locked while the body ran"
    );
    assert!(!fixture.is_held("user:42").await);
}

pub async fn wait_obtains_once_the_holder_releases(fixture: &Fixture) {
    let svc = service(fixture).await;
    let held = hold(fixture, "job:4").await;
    let released = Arc::new(AtomicBool::new(false));
    let release = tokio::spawn({
        let released = released.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            released.store(true, Ordering::SeqCst);
            held.release().await
        }
    });
    #[distributed_lock(key = "job:{id}", ttl = "30s", locker = locker, wait = "10s")]
    async fn patient(locker: &Locker, id: u32, released: &AtomicBool) -> Result<bool, LockError> {
        let _ = (locker, id);
        Ok(released.load(Ordering::SeqCst))
    }
    assert!(
        patient(&svc.locker, 4, &released).await.unwrap(),
        "ran before the holder released"
    );
    release.await.unwrap().unwrap();
}

pub async fn wait_gives_up_at_its_deadline(fixture: &Fixture) {
    let svc = service(fixture).await;
    let _held = hold(fixture, "job:4").await;
    #[distributed_lock(key = "job:{id}", ttl = "30s", locker = locker, wait = "300ms")]
    async fn patient(locker: &Locker, id: u32) -> Result<(), LockError> {
        let _ = (locker, id);
        unreachable!("the body ran without the lock")
    }
    let start = tokio::time::Instant::now();
    assert!(patient(&svc.locker, 4).await.unwrap_err().is_not_obtained());
    assert!(start.elapsed() >= Duration::from_millis(300));
}

pub async fn fence_tokens_increase_per_key_and_guard_exposes_the_lock(fixture: &Fixture) {
    let locker = fixture.locker().await;
    #[distributed_lock(key = "invoice:{n}", ttl = "30s", locker = locker, fence, guard = lock)]
    async fn write(locker: &Locker, n: u32) -> Result<(u64, String, bool), LockError> {
        let _ = locker;
        assert!(lock.deadline() > tokio::time::Instant::now());
        Ok((
            lock.fence_token().expect("fence"),
            lock.key().to_owned(),
            lock.is_lost(),
        ))
    }
    let (t1, key, lost) = write(&locker, 1).await.unwrap();
    let (t2, _, _) = write(&locker, 1).await.unwrap();
    let (other, _, _) = write(&locker, 2).await.unwrap();
    let (t3, _, _) = write(&locker, 1).await.unwrap();
    assert_eq!(key, "invoice:1");
    assert!(!lost);
    assert!(t2 > t1, "{t2} after {t1}");
    // Taking invoice:2 in between does not break invoice:1's sequence. (By
    // how much a token steps is the backend's business: one per lock on a
    // single counter, more under Redlock, whose masters seed their counters
    // from their own clocks; see the runtime suite.)
    assert!(t3 > t2, "{t3} after {t2}, with invoice:2 at {other}");
}

pub async fn hold_at_least_keeps_the_key_after_the_body_ends(fixture: &Fixture) {
    let locker = fixture.locker().await;
    #[distributed_lock(key = "nightly", ttl = "10s", locker = locker, hold_at_least = "20s")]
    async fn nightly(locker: &Locker, runs: &Runs) {
        let _ = locker;
        runs.hit();
    }
    let runs = Runs::default();
    nightly(&locker, &runs).await;
    let left = fixture.lease_left("nightly").await;
    assert!(
        left.is_some_and(|left| left > Duration::from_secs(15) && left <= Duration::from_secs(20)),
        "lease left {left:?}"
    );
    nightly(&locker, &runs).await;
    assert_eq!(
        runs.count(),
        1,
        "a second node ran the job within hold_at_least"
    );
}

/// `lock_delay`: while the body runs the server keeps the key the ttl plus
/// the delay (more than any lease without one has left); once the body
/// returns, the release frees the key at once.
pub async fn lock_delay_keeps_the_key_longer_on_the_server_and_a_release_frees_it(
    fixture: &Fixture,
) {
    let locker = fixture.locker().await;
    #[distributed_lock(key = "payout", ttl = "10s", lock_delay = "20s", locker = locker)]
    async fn payout(locker: &Locker, fixture: &Fixture) -> Option<Duration> {
        let _ = locker;
        fixture.lease_left("payout").await
    }
    let left = payout(&locker, fixture).await;
    assert!(
        left.is_some_and(|left| left > Duration::from_secs(10)),
        "the server had {left:?} left: the delay was not asked for"
    );
    let next = fixture.check(
        locker
            .obtain("payout", Duration::from_secs(10), ObtainOptions::new())
            .await,
        "a released key is free at once",
    );
    fixture.check(next.release().await, "release");
}

pub async fn several_keys_are_taken_all_or_nothing(fixture: &Fixture) {
    let locker = fixture.locker().await;
    // The hash tag `{bank}` keeps both keys in one slot: a cluster takes
    // several keys together only then.
    #[distributed_lock(keys = ["{{bank}}:account:{from}", "{{bank}}:account:{to}"], ttl = "30s", locker = locker)]
    async fn transfer(
        locker: &Locker,
        from: u32,
        to: u32,
        fixture: &Fixture,
    ) -> Result<(bool, bool), LockError> {
        let _ = locker;
        let key = |n: u32| format!("{{bank}}:account:{n}");
        Ok((
            fixture.is_held(&key(from)).await,
            fixture.is_held(&key(to)).await,
        ))
    }
    assert_eq!(
        transfer(&locker, 1, 2, fixture).await.unwrap(),
        (true, true)
    );
    let _held = hold(fixture, "{bank}:account:2").await;
    assert!(
        transfer(&locker, 1, 2, fixture)
            .await
            .unwrap_err()
            .is_not_obtained()
    );
    assert!(
        !fixture.is_held("{bank}:account:1").await,
        "{{bank}}:account:1 was left locked"
    );
}

pub async fn nested_call_on_a_held_key_reenters_and_other_tasks_still_contend(fixture: &Fixture) {
    let locker = fixture.locker().await;

    #[distributed_lock(key = "tenant:{t}", ttl = "30s", locker = locker, guard = inner)]
    async fn inner(locker: &Locker, t: u32) -> Result<String, LockError> {
        let _ = locker;
        Ok(inner.token().to_owned())
    }

    #[distributed_lock(key = "tenant:{t}", ttl = "30s", locker = locker, guard = outer)]
    async fn outer(locker: &Locker, t: u32) -> Result<(String, String, bool), LockError> {
        let nested = inner(locker, t).await?;
        let other_task = tokio::spawn({
            let locker = locker.clone();
            async move { inner(&locker, t).await }
        });
        let contended = other_task
            .await
            .unwrap()
            .is_err_and(|err| err.is_not_obtained());
        Ok((outer.token().to_owned(), nested, contended))
    }

    let (outer_token, nested_token, contended) = outer(&locker, 1).await.unwrap();
    assert_eq!(
        outer_token, nested_token,
        "the nested call took a lock of its own"
    );
    assert!(contended, "another task re-entered a lock it does not hold");
    assert!(!fixture.is_held("tenant:1").await);
}

/// `metadata = "…"` is rendered from the arguments like the key and stored
/// with the lock; without it the holder records its host and process id.
pub async fn metadata_is_rendered_and_defaults_to_the_host_and_pid(fixture: &Fixture) {
    let locker = fixture.locker().await;
    #[distributed_lock(key = "invoice:{id}", ttl = "30s", locker = locker, metadata = "billing-{id}", guard = lease)]
    async fn given(locker: &Locker, id: u64) -> Result<String, LockError> {
        let _ = locker;
        Ok(lease.metadata().to_owned())
    }
    #[distributed_lock(key = "invoice:{id}", ttl = "30s", locker = locker, guard = lease)]
    async fn default(locker: &Locker, id: u64) -> Result<String, LockError> {
        let _ = locker;
        Ok(lease.metadata().to_owned())
    }
    assert_eq!(given(&locker, 42).await.unwrap(), "billing-42");
    let recorded = default(&locker, 42).await.unwrap();
    assert!(
        recorded.ends_with(&format!(" pid {}", std::process::id())),
        "{recorded}"
    );
}
