//! `LockLayer` in front of a real axum server: two instances (two lockers,
//! each with its own connections) on one Redis, asked over real HTTP
//! connections; what a refused request is told, and what the lock records
//! as its holder. Without the `tower` feature this binary is not built.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::routing::post;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use lockmacro_runtime::{HoldOptions, HttpResponses, LockLayer, Locker, ObtainOptions};
use lockmacro_testkit::Fixture;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Barrier, mpsc, watch};
use tokio::task::JoinSet;

/// A hang limit, not a measurement: each wait below ends on a signal long
/// before it.
const HANG: Duration = Duration::from_secs(30);

/// What the handlers share across both instances: they run in this process,
/// so they can count what the lock is meant to prevent.
#[derive(Default)]
struct Shared {
    /// Requests for one job inside the handler now, and the most ever.
    inside: AtomicUsize,
    most_inside: AtomicUsize,
    /// Told each time a job's handler has started.
    entered: Option<mpsc::UnboundedSender<u64>>,
    /// Lets the job handlers finish once it says `true`.
    gate: watch::Sender<bool>,
    /// Where the handlers that must run together meet.
    meet: Option<Barrier>,
}

impl Shared {
    fn with_entered(entered: mpsc::UnboundedSender<u64>) -> Self {
        Shared {
            entered: Some(entered),
            ..Shared::default()
        }
    }

    fn open_gate(&self) {
        self.gate.send_replace(true);
    }

    fn with_meeting(n: usize) -> Self {
        Shared {
            meet: Some(Barrier::new(n)),
            ..Shared::default()
        }
    }
}

/// Holds the job until the test opens the gate.
async fn job(State(shared): State<Arc<Shared>>, Path(id): Path<u64>) -> &'static str {
    let now = shared.inside.fetch_add(1, Ordering::SeqCst) + 1;
    shared.most_inside.fetch_max(now, Ordering::SeqCst);
    if let Some(entered) = &shared.entered {
        entered.send(id).expect("the test listens");
    }
    let mut gate = shared.gate.subscribe();
    gate.wait_for(|open| *open)
        .await
        .expect("the gate lives as long as the server");
    shared.inside.fetch_sub(1, Ordering::SeqCst);
    "done"
}

/// Returns only once every request the test sends is inside at once.
async fn meet(State(shared): State<Arc<Shared>>) -> &'static str {
    shared.meet.as_ref().expect("a meeting point").wait().await;
    "met"
}

/// Returns at once.
async fn now() -> &'static str {
    "done"
}

/// `/jobs/{id}`, `/pairs/{id}` and `/now/{id}` lock their id; `/free`
/// takes no lock.
fn key(request: &Request) -> Option<String> {
    let path = request.uri().path();
    if let Some(id) = path.strip_prefix("/jobs/") {
        return Some(format!("job:{id}"));
    }
    if let Some(id) = path.strip_prefix("/now/") {
        return Some(format!("now:{id}"));
    }
    path.strip_prefix("/pairs/").map(|id| format!("pair:{id}"))
}

/// The service's routes, before the layer.
fn routes(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/jobs/{id}", post(job))
        .route("/now/{id}", post(now))
        .route("/pairs/{id}", post(meet))
        .route("/free", post(meet))
        .with_state(shared)
}

/// One instance of the service with the layer's defaults, serving on a
/// free loopback port until the test ends.
async fn serve(locker: Locker, options: HoldOptions, shared: Arc<Shared>) -> SocketAddr {
    serve_router(routes(shared).layer(LockLayer::new(locker, options, key))).await
}

async fn serve_router(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move { axum::serve(listener, router).await.expect("serve") });
    addr
}

/// Two instances on one Redis, each with its own locker.
async fn two_instances(
    fixture: &Fixture,
    options: HoldOptions,
    shared: &Arc<Shared>,
) -> [SocketAddr; 2] {
    let mut addrs = Vec::new();
    for locker in fixture.lockers(2).await {
        addrs.push(serve(locker, options.clone(), Arc::clone(shared)).await);
    }
    [addrs[0], addrs[1]]
}

/// The answer to one request.
struct Answer {
    status: StatusCode,
    retry_after: Option<u64>,
    content_type: Option<String>,
    body: String,
}

/// `POST path` over a new HTTP/1.1 connection.
async fn post_to(addr: SocketAddr, path: &str) -> Answer {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let request = axum::http::Request::post(path)
        .header(axum::http::header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .expect("request");
    let response = sender.send_request(request).await.expect("response");
    let retry_after = response
        .headers()
        .get(axum::http::header::RETRY_AFTER)
        .map(|value| {
            value
                .to_str()
                .expect("ASCII")
                .parse()
                .expect("Retry-After in whole seconds")
        });
    let status = response.status();
    let content_type = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .map(|value| value.to_str().expect("ASCII").to_owned());
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the body")
        .to_bytes();
    Answer {
        status,
        retry_after,
        content_type,
        body: String::from_utf8(body.to_vec()).expect("UTF-8"),
    }
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(HANG, future)
        .await
        .unwrap_or_else(|_| panic!("hung: {what}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_per_key_runs_and_the_others_get_409_with_retry_after() {
    let fixture = Fixture::redis().await;
    let (entered, mut entries) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared::with_entered(entered));
    let ttl = Duration::from_secs(20);
    let instances = two_instances(&fixture, HoldOptions::new(ttl), &shared).await;

    let mut requests = JoinSet::new();
    for i in 0..12 {
        requests.spawn(post_to(instances[i % 2], "/jobs/7"));
    }
    within("the first request enters", entries.recv()).await;
    // The gate stays shut: every other request must be answered while the
    // first one holds the key, or this waits until the hang limit.
    let mut refused = Vec::new();
    while refused.len() < 11 {
        let answer = within("the others are refused", requests.join_next())
            .await
            .expect("a request left")
            .expect("request task");
        assert_eq!(answer.status, StatusCode::CONFLICT, "a second request ran");
        refused.push(answer);
    }
    shared.open_gate();
    let first = within("the first request ends", requests.join_next())
        .await
        .expect("the first request")
        .expect("request task");
    assert_eq!(first.status, StatusCode::OK);
    for answer in &refused {
        // No request had finished: the layer's first guess, a second, where
        // the holder's lease, kept by the watchdog, had nearly 20 left.
        assert_eq!(answer.retry_after, Some(1), "a refusal says when to retry");
    }
    assert_eq!(
        shared.most_inside.load(Ordering::SeqCst),
        1,
        "handlers overlapped"
    );

    // The response released the key: the next request runs.
    let next = tokio::spawn(post_to(instances[1], "/jobs/7"));
    within("the next request enters", entries.recv()).await;
    assert_eq!(
        within("the next request", next)
            .await
            .expect("request task")
            .status,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_for_different_keys_run_together() {
    // Each handler returns only once both are inside.
    both_handlers_meet("/pairs/1", "/pairs/2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_key_passes_through_unlocked() {
    // Under any one key, one of the two would be refused.
    both_handlers_meet("/free", "/free").await;
}

/// Sends `first` and `second` to two instances at once, each handler
/// waiting until both are inside: both answer 200 only if neither request
/// was refused or held back by the other.
async fn both_handlers_meet(first: &str, second: &str) {
    let fixture = Fixture::redis().await;
    let shared = Arc::new(Shared::with_meeting(2));
    let instances =
        two_instances(&fixture, HoldOptions::new(Duration::from_secs(20)), &shared).await;
    let (a, b) = within(
        "both handlers meet",
        futures::future::join(post_to(instances[0], first), post_to(instances[1], second)),
    )
    .await;
    assert_eq!((a.status, b.status), (StatusCode::OK, StatusCode::OK));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_while_the_handler_runs_answers_503() {
    let fixture = Fixture::redis().await;
    let (entered, mut entries) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared::with_entered(entered));
    // A short ttl: the watchdog's next refresh, a second away, finds the
    // key gone.
    let options = HoldOptions::new(Duration::from_secs(3));
    let instances = two_instances(&fixture, options, &shared).await;
    let request = tokio::spawn(post_to(instances[0], "/jobs/9"));
    within("the request enters", entries.recv()).await;
    let operator = fixture.locker().await;
    assert!(
        operator
            .force_release("job:9")
            .await
            .expect("force-release")
    );
    // The gate stays shut: only the lost lease ends the request.
    let answer = within("the lost request is answered", request)
        .await
        .expect("request task");
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        shared.inside.load(Ordering::SeqCst),
        1,
        "the handler was dropped, not finished"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_lock_store_answers_503() {
    let fixture = Fixture::redis().await;
    let shared = Arc::new(Shared::default());
    let instances =
        two_instances(&fixture, HoldOptions::new(Duration::from_secs(20)), &shared).await;
    fixture.stop();
    let answer = within("the request is answered", post_to(instances[0], "/jobs/3")).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    // Which server failed, and how, is for the log, not the client.
    assert_eq!(
        answer.body,
        r#"{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the lock store is unavailable; try again later"}"#
    );
    assert_eq!(
        shared.most_inside.load(Ordering::SeqCst),
        0,
        "the handler ran unlocked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locker_shut_down_answers_503_with_why() {
    let fixture = Fixture::redis().await;
    let (entered, mut entries) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared::with_entered(entered));
    let locker = fixture.locker().await;
    let options = HoldOptions::new(Duration::from_secs(20));
    let addr = serve(locker.clone(), options, Arc::clone(&shared)).await;
    let running = tokio::spawn(post_to(addr, "/jobs/1"));
    within("the request enters", entries.recv()).await;

    within("the shutdown", locker.shutdown()).await;
    // The gate stays shut: the shutdown gave the lease back, which ends the
    // request that held it.
    let ended = within("the running request is answered", running)
        .await
        .expect("request task");
    let refused = within("a later request", post_to(addr, "/jobs/2")).await;

    for (answer, key) in [(ended, "job:1"), (refused, "job:2")] {
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            answer.content_type.as_deref(),
            Some("application/problem+json")
        );
        assert_eq!(
            answer.body,
            format!(
                r#"{{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"lock `{key}`: its locker was shut down, and takes or keeps no locks any more"}}"#
            )
        );
    }
    assert_eq!(
        shared.most_inside.load(Ordering::SeqCst),
        1,
        "the later request ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_key_is_a_problem_naming_the_key_and_the_lock_records_its_holder() {
    let fixture = Fixture::redis().await;
    let (entered, mut entries) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared::with_entered(entered));
    let [holding, refusing] =
        two_instances(&fixture, HoldOptions::new(Duration::from_secs(20)), &shared).await;
    let running = tokio::spawn(post_to(holding, "/jobs/5"));
    within("the request enters", entries.recv()).await;

    // What `lockmacro list` shows as the holder: this process, then the
    // request.
    let seen = fixture
        .locker()
        .await
        .inspect("job:5")
        .await
        .expect("inspect");
    assert_eq!(seen.holders.len(), 1);
    let holder = &seen.holders[0].metadata;
    assert!(
        holder.contains(&format!(" pid {} ", std::process::id())),
        "holder: {holder}"
    );
    assert!(holder.ends_with(" POST /jobs/5"), "holder: {holder}");

    let answer = within("the refusal", post_to(refusing, "/jobs/5")).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(
        answer.content_type.as_deref(),
        Some("application/problem+json")
    );
    assert_eq!(
        answer.body,
        format!(
            r#"{{"type":"https://docs.rs/lockmacro-runtime/latest/lockmacro_runtime/struct.HttpResponses.html","title":"Locked by someone else","status":409,"detail":"lock `job:5` is held by someone else","key":"job:5"}}"#
        )
    );

    shared.open_gate();
    let done = within("the holder ends", running)
        .await
        .expect("request task");
    assert_eq!(done.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_key_in_plain_text_and_a_holder_of_the_services_choosing() {
    let fixture = Fixture::redis().await;
    let (entered, mut entries) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared::with_entered(entered));
    let layer = LockLayer::new(
        fixture.locker().await,
        HoldOptions::new(Duration::from_secs(20)),
        key,
    )
    .responses(HttpResponses::plain_text())
    .metadata(|request: &Request| format!("billing-api {}", request.uri().path()));
    let addr = serve_router(routes(Arc::clone(&shared)).layer(layer)).await;
    let running = tokio::spawn(post_to(addr, "/jobs/6"));
    within("the request enters", entries.recv()).await;

    let seen = fixture
        .locker()
        .await
        .inspect("job:6")
        .await
        .expect("inspect");
    assert_eq!(seen.holders[0].metadata, "billing-api /jobs/6");

    let answer = within("the refusal", post_to(addr, "/jobs/6")).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(
        answer.content_type.as_deref(),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(answer.body, "lock `job:6` is held by someone else\n");
    assert_eq!(answer.retry_after, Some(1));

    shared.open_gate();
    let done = within("the holder ends", running)
        .await
        .expect("request task");
    assert_eq!(done.status, StatusCode::OK);
}

/// A lock on `key` held by another instance (a batch job) for the ttl of
/// `ttl`: the remaining lease a refusal finds is nearly all of it.
async fn held_elsewhere(fixture: &Fixture, key: &str, ttl: Duration) -> lockmacro_runtime::Lock {
    fixture
        .locker()
        .await
        .obtain(key, ttl, ObtainOptions::new().metadata("nightly batch"))
        .await
        .expect("obtain")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_the_configured_value_when_there_is_one() {
    let fixture = Fixture::redis().await;
    let shared = Arc::new(Shared::default());
    let layer = LockLayer::new(
        fixture.locker().await,
        HoldOptions::new(Duration::from_secs(20)),
        key,
    )
    .retry_after(Duration::from_millis(6500));
    let addr = serve_router(routes(shared).layer(layer)).await;
    // Finished requests do not move a configured value.
    for _ in 0..3 {
        assert_eq!(
            within("a request", post_to(addr, "/now/1")).await.status,
            StatusCode::OK
        );
    }
    let _held = held_elsewhere(&fixture, "now:1", Duration::from_secs(60)).await;
    let answer = within("the refusal", post_to(addr, "/now/1")).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(answer.retry_after, Some(7), "rounded up to whole seconds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_a_second_when_requests_finish_at_once() {
    let fixture = Fixture::redis().await;
    let shared = Arc::new(Shared::default());
    let addr = serve(
        fixture.locker().await,
        HoldOptions::new(Duration::from_secs(30)),
        shared,
    )
    .await;
    for _ in 0..3 {
        assert_eq!(
            within("a request", post_to(addr, "/now/1")).await.status,
            StatusCode::OK
        );
    }
    // The batch job's lease has nearly 60 s left; the layer's requests
    // held their keys for a few milliseconds.
    let _held = held_elsewhere(&fixture, "now:1", Duration::from_secs(60)).await;
    let answer = within("the refusal", post_to(addr, "/now/1")).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    assert_eq!(answer.retry_after, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_follows_how_long_requests_held_their_keys() {
    let fixture = Fixture::redis().await;
    let (entered, mut entries) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared::with_entered(entered));
    let addr = serve(
        fixture.locker().await,
        HoldOptions::new(Duration::from_secs(30)),
        Arc::clone(&shared),
    )
    .await;
    let running = tokio::spawn(post_to(addr, "/jobs/8"));
    within("the request enters", entries.recv()).await;
    // Not a wait for something to happen: the time the request is made to
    // hold its key, at least this long, which the layer measures.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    shared.open_gate();
    let done = within("the request ends", running)
        .await
        .expect("request task");
    assert_eq!(done.status, StatusCode::OK);

    let _held = held_elsewhere(&fixture, "job:8", Duration::from_secs(60)).await;
    let answer = within("the refusal", post_to(addr, "/jobs/8")).await;
    assert_eq!(answer.status, StatusCode::CONFLICT);
    // At least the 1.5 s held, rounded up; far from the nearly 60 s the
    // batch job's lease has left.
    let after = answer.retry_after.expect("Retry-After");
    assert!((2..=30).contains(&after), "Retry-After: {after}");
}
