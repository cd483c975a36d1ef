//! `#[distributed_lock]` on an axum handler: one invoice is sent by one
//! request at a time, across every instance of the service.
//!
//! ```text
//! cargo run --example axum
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example axum
//! cargo run --example axum -- --serve     # then: curl -X POST localhost:3000/invoices/7/send
//! ```
//!
//! The handler itself carries the attribute; its key comes from the `Path`
//! extractor and its locker from the `State` one. A request for an invoice
//! that is locked elsewhere gets `409 Conflict` (the `LockError` turns into a
//! response through the handler's error type), any other lock failure
//! `503 Service Unavailable`.
//!
//! By default the program tests itself and exits: it serves on a free port,
//! takes `invoice:7` as another instance would (a batch job sending the same
//! invoice), sends `POST /invoices/7/send` over plain TCP and expects 409,
//! then releases the batch job's lock and expects 200 with a fencing token.
//! It exits with an error on any other answer. Without `REDIS_URL` the locks
//! are in memory; with it, on Redis.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Router, serve};
use lockmacro_runtime::{LockError, Locker, MemoryBackend, ObtainOptions, distributed_lock};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Clone)]
struct App {
    locker: Locker,
}

/// What the handler fails with; a lock failure is one of them.
#[derive(Debug)]
struct ApiError(LockError);

impl From<LockError> for ApiError {
    fn from(err: LockError) -> Self {
        ApiError(err)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = if self.0.is_not_obtained() {
            StatusCode::CONFLICT
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        (status, format!("{}\n", self.0)).into_response()
    }
}

#[distributed_lock(key = "invoice:{id}", ttl = "10s", fence, guard = lock, locker = app.locker)]
async fn send_invoice(State(app): State<App>, Path(id): Path<u64>) -> Result<String, ApiError> {
    // Talking to the mail provider, while no other request or instance can
    // send this invoice.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let token = lock.fence_token().expect("`fence` mints a token");
    Ok(format!("sent invoice {id} (fencing token {token})\n"))
}

fn router(locker: Locker) -> Router {
    Router::new()
        .route("/invoices/{id}/send", post(send_invoice))
        .with_state(App { locker })
}

/// One request over a new connection, written by hand; returns the status
/// code and the body.
async fn post_request(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!(
                "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    println!("POST {path} -> {status}: {}", body.trim_end());
    Ok((status, body.to_owned()))
}

/// Runs the example; a failure is printed as its message (`main` returning
/// the error would print its `Debug` form).
#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("Error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let serve_only = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--serve") => true,
        Some(other) => {
            eprintln!(
                "unknown argument `{other}`\nusage: axum [--serve]   (REDIS_URL=redis://… to lock on Redis)"
            );
            std::process::exit(2);
        }
    };
    // Two lockers on one store: the service's, and another instance's.
    let (service, batch_job) = match std::env::var("REDIS_URL")
        .ok()
        .filter(|url| !url.is_empty())
    {
        None => {
            println!("REDIS_URL is not set: locks on the in-memory backend.");
            let store = std::sync::Arc::new(MemoryBackend::new());
            (Locker::new(store.clone()), Locker::new(store))
        }
        Some(url) => {
            println!("Locks on Redis at {url}.");
            (Locker::connect(&url).await?, Locker::connect(&url).await?)
        }
    };
    let (service, batch_job) = (
        service.with_namespace("demo"),
        batch_job.with_namespace("demo"),
    );

    if serve_only {
        let listener = TcpListener::bind("127.0.0.1:3000").await?;
        println!(
            "listening on http://127.0.0.1:3000; try: curl -X POST localhost:3000/invoices/7/send"
        );
        // SIGTERM (a deploy, `docker stop`, Kubernetes) or Ctrl-C.
        serve(listener, router(service.clone()))
            .with_graceful_shutdown(lockmacro_runtime::shutdown_signal())
            .await?;
        // The handlers are done: give back what this instance still holds,
        // so that the one replacing it does not wait out the ttls.
        let report = service.shutdown().await;
        println!("shut down: {report:?}");
        return Ok(());
    }

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}");
    let server = tokio::spawn({
        let service = service.clone();
        async move { serve(listener, router(service)).await }
    });

    let held = batch_job
        .obtain(
            "invoice:7",
            Duration::from_secs(10),
            ObtainOptions::default(),
        )
        .await?;
    println!("a batch job on another instance holds `invoice:7`");
    let (busy, _) = post_request(addr, "/invoices/7/send").await?;
    held.release().await?;
    println!("the batch job released `invoice:7`");
    let (sent, body) = post_request(addr, "/invoices/7/send").await?;
    server.abort();
    let report = service.shutdown().await;
    println!("shut down: {report:?}");

    if busy != 409 || sent != 200 || !body.starts_with("sent invoice 7") {
        return Err("expected 409 while the invoice was locked elsewhere, then 200".into());
    }
    println!("self-test passed");
    Ok(())
}
