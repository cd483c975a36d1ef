//! `LockLayer` in front of a real axum server: two instances (two lockers,
//! each with its own connections) on one Redis, asked over real HTTP
//! connections. Without the `tower` feature this binary is not built.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::routing::post;
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use lockmacro_runtime::{HoldOptions, LockLayer, Locker};
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

/// `/jobs/{id}` and `/pairs/{id}` lock their id; `/free` takes no lock.
fn key(request: &Request) -> Option<String> {
    let path = request.uri().path();
    if let Some(id) = path.strip_prefix("/jobs/") {
        return Some(format!("job:{id}"));
    }
    path.strip_prefix("/pairs/").map(|id| format!("pair:{id}"))
}

/// One instance of the service, serving on a free loopback port until the
/// test ends.
async fn serve(locker: Locker, options: HoldOptions, shared: Arc<Shared>) -> SocketAddr {
    let router = Router::new()
        .route("/jobs/{id}", post(job))
        .route("/pairs/{id}", post(meet))
        .route("/free", post(meet))
        .with_state(shared)
        .layer(LockLayer::new(locker, options, key));
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
    Answer {
        status: response.status(),
        retry_after,
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
        let after = answer.retry_after.expect("a refusal says when to retry");
        assert!((1..=ttl.as_secs()).contains(&after), "Retry-After: {after}");
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
    assert_eq!(
        shared.most_inside.load(Ordering::SeqCst),
        0,
        "the handler ran unlocked"
    );
}
