//! [`LockLayer`] and the service it wraps around another ([`LockService`]).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use super::hold_times::HoldTimes;
use super::{HostAndRequest, HttpResponses, LockResponses, RequestMetadata};
use crate::{HoldOptions, Locker};

/// A tower layer that runs each request while holding a key computed from
/// it: what `#[distributed_lock]` does for a handler, for a whole router or
/// server.
///
/// `key` maps a request to its key, or to `None` for a request that needs
/// no lock (it then goes straight to the inner service). The key is taken
/// as [`Locker::hold`] takes it, with the layer's [`HoldOptions`] (ttl,
/// wait, fencing, `hold_at_least`, …): the watchdog keeps the lease alive
/// while the inner service's future runs, and it is given back once that
/// future has produced the response, or when the future is dropped (the
/// client went away). A streamed body is sent after the release: lock what
/// computes the response, not its transfer.
///
/// Each lock records who holds it, for `lockmacro list` and
/// [`Locker::inspect`]: by default the host, the process and the request
/// ([`HostAndRequest`]: `web-3 pid 4242 POST /invoices/7/send`); see
/// [`LockLayer::metadata`].
///
/// A request that does not get its key, or whose lease is lost while it
/// runs (the inner future is then dropped, under the default
/// [`OnLost::Abort`](crate::OnLost::Abort)), is answered by the layer's
/// [`LockResponses`]: [`HttpResponses`] by default, `409` with
/// `Retry-After` (see [`LockLayer::retry_after`]) and a body naming the key
/// for a busy key, `503` for a lost lease, a locker that was shut down or
/// an unavailable lock store.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// use axum::{Router, routing::post};
/// use lockmacro_runtime::{HoldOptions, LockLayer, Locker};
///
/// async fn send_invoice() -> &'static str {
///     "sent"
/// }
///
/// let locker = Locker::memory();
/// // One request at a time per invoice, across every instance that shares
/// // the lock store; requests to other paths take no lock.
/// let layer = LockLayer::new(
///     locker,
///     HoldOptions::new(Duration::from_secs(30)),
///     |request: &axum::extract::Request| {
///         let id = request.uri().path().strip_prefix("/invoices/")?.strip_suffix("/send")?;
///         Some(format!("invoice:{id}"))
///     },
/// );
/// let app: Router = Router::new()
///     .route("/invoices/{id}/send", post(send_invoice))
///     .layer(layer);
/// # let _ = app;
/// # }
/// ```
///
/// The layer is generic over the request type: under tonic it takes an
/// `http::Request<tonic::body::Body>`, and a `Status` is answered through
/// [`LockLayer::responses`] (see [`LockResponses`] for the mapping).
/// Each request that takes a key holds the inner service's readiness
/// (it was cloned, ready, for this request) while it waits for the key.
pub struct LockLayer<K, R = HttpResponses, M = HostAndRequest> {
    locker: Locker,
    options: HoldOptions,
    key: Arc<K>,
    responses: Arc<R>,
    metadata: Arc<M>,
    retry_after: Option<Duration>,
    /// Shared by the layer's clones and the services it made: one mean per
    /// layer.
    hold_times: Arc<HoldTimes>,
}

impl<K> LockLayer<K> {
    /// A layer that runs each request for which `key` returns a key while
    /// holding it, as `options` say, on `locker`; the refusals answered by
    /// [`HttpResponses`].
    pub fn new(locker: Locker, options: HoldOptions, key: K) -> Self {
        LockLayer {
            locker,
            options,
            key: Arc::new(key),
            responses: Arc::new(HttpResponses::default()),
            metadata: Arc::new(HostAndRequest),
            retry_after: None,
            hold_times: Arc::default(),
        }
    }
}

impl<K, R, M> LockLayer<K, R, M> {
    /// Answers refused and lost requests with `responses` instead: any
    /// `Fn(LockError) -> Response`, [`HttpResponses::plain_text`], or a
    /// [`LockResponses`] of your own.
    ///
    /// ```
    /// use std::time::Duration;
    /// use axum::http::StatusCode;
    /// use axum::response::{IntoResponse, Response};
    /// use lockmacro_runtime::{HoldOptions, LockError, LockLayer, Locker};
    ///
    /// let layer = LockLayer::new(
    ///     Locker::memory(),
    ///     HoldOptions::new(Duration::from_secs(30)),
    ///     |_: &axum::extract::Request| Some("reports".to_owned()),
    /// )
    /// .responses(|err: LockError| -> Response {
    ///     if err.is_not_obtained() {
    ///         (StatusCode::TOO_MANY_REQUESTS, "a report is being built").into_response()
    ///     } else {
    ///         (StatusCode::SERVICE_UNAVAILABLE, err.to_string()).into_response()
    ///     }
    /// });
    /// let app: axum::Router = axum::Router::new().layer(layer);
    /// # let _ = app;
    /// ```
    pub fn responses<R2>(self, responses: R2) -> LockLayer<K, R2, M> {
        LockLayer {
            locker: self.locker,
            options: self.options,
            key: self.key,
            responses: Arc::new(responses),
            metadata: self.metadata,
            retry_after: self.retry_after,
            hold_times: self.hold_times,
        }
    }

    /// Records what `metadata` returns for each request as the holder of
    /// its key, instead of [`HostAndRequest`]: any `Fn(&Request) -> String`
    /// or a [`RequestMetadata`] of your own. For the same text on every
    /// request, give [`HoldOptions::metadata`] to [`LockLayer::new`]
    /// instead; this replaces it.
    ///
    /// Clients refused meanwhile read it (see [`HttpResponses`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use axum::extract::Request;
    /// use lockmacro_runtime::{HoldOptions, LockLayer, Locker};
    ///
    /// let layer = LockLayer::new(
    ///     Locker::memory(),
    ///     HoldOptions::new(Duration::from_secs(30)),
    ///     |_: &Request| Some("reports".to_owned()),
    /// )
    /// .metadata(|request: &Request| {
    ///     let user = request.headers().get("x-user").and_then(|user| user.to_str().ok());
    ///     format!("billing-api for {}", user.unwrap_or("anonymous"))
    /// });
    /// let app: axum::Router = axum::Router::new().layer(layer);
    /// # let _ = app;
    /// ```
    pub fn metadata<M2>(self, metadata: M2) -> LockLayer<K, R, M2> {
        LockLayer {
            locker: self.locker,
            // Given last, the closure wins over the options' fixed text.
            options: self.options.metadata(""),
            key: self.key,
            responses: self.responses,
            metadata: Arc::new(metadata),
            retry_after: self.retry_after,
            hold_times: self.hold_times,
        }
    }

    /// Advises `retry_after` to every request refused because its key is
    /// busy (`Retry-After`, in whole seconds rounded up, from
    /// [`HttpResponses`]).
    ///
    /// Without it, the advice is how long this layer's own requests have
    /// held their keys: a running mean over all its keys, which each
    /// request that finishes moves an eighth of the way to its own time,
    /// and a second until one has finished. Where the key is also taken
    /// by others (a batch job, another service), or each key's requests
    /// take very different times, give the value that suits the clients.
    /// The holder's remaining lease is never used: the watchdog renews it
    /// while the request runs, so it says nothing about when the key will
    /// be free.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lockmacro_runtime::{HoldOptions, LockLayer, Locker};
    ///
    /// // Reports take about a minute to build.
    /// let layer = LockLayer::new(
    ///     Locker::memory(),
    ///     HoldOptions::new(Duration::from_secs(30)),
    ///     |_: &axum::extract::Request| Some("reports".to_owned()),
    /// )
    /// .retry_after(Duration::from_secs(60));
    /// let app: axum::Router = axum::Router::new().layer(layer);
    /// # let _ = app;
    /// ```
    pub fn retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }

    /// The options for `request`'s lock: the layer's, with its holder.
    fn options_for<Req>(&self, request: &Req) -> HoldOptions
    where
        M: RequestMetadata<Req>,
    {
        let options = self.options.clone();
        if options.has_metadata() {
            options
        } else {
            options.metadata(self.metadata.metadata(request))
        }
    }
}

impl<K, R, M> Clone for LockLayer<K, R, M> {
    fn clone(&self) -> Self {
        LockLayer {
            locker: self.locker.clone(),
            options: self.options.clone(),
            key: Arc::clone(&self.key),
            responses: Arc::clone(&self.responses),
            metadata: Arc::clone(&self.metadata),
            retry_after: self.retry_after,
            hold_times: Arc::clone(&self.hold_times),
        }
    }
}

impl<K, R, M> std::fmt::Debug for LockLayer<K, R, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockLayer")
            .field("options", &self.options)
            .field("retry_after", &self.retry_after)
            .finish_non_exhaustive()
    }
}

impl<S, K, R, M> Layer<S> for LockLayer<K, R, M> {
    type Service = LockService<S, K, R, M>;

    fn layer(&self, inner: S) -> Self::Service {
        LockService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service a [`LockLayer`] wraps around `S`: each request runs in `S`
/// while its key is held.
pub struct LockService<S, K, R = HttpResponses, M = HostAndRequest> {
    inner: S,
    layer: LockLayer<K, R, M>,
}

impl<S: Clone, K, R, M> Clone for LockService<S, K, R, M> {
    fn clone(&self) -> Self {
        LockService {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S, K, R, M> std::fmt::Debug for LockService<S, K, R, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockService")
            .field("layer", &self.layer)
            .finish_non_exhaustive()
    }
}

impl<S, K, R, M, Req> Service<Req> for LockService<S, K, R, M>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
    Req: Send + 'static,
    K: Fn(&Req) -> Option<String> + Send + Sync + 'static,
    R: LockResponses<S::Response> + Send + Sync + 'static,
    M: RequestMetadata<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        // The instance polled ready serves this request; the clone stays for
        // the next one (tower's rule for services called from a future).
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        let Some(key) = (self.layer.key)(&request) else {
            return Box::pin(inner.call(request));
        };
        let options = self.layer.options_for(&request);
        let locker = self.layer.locker.clone();
        let responses = Arc::clone(&self.layer.responses);
        let retry_after = self.layer.retry_after;
        let hold_times = Arc::clone(&self.layer.hold_times);
        Box::pin(async move {
            let recorded = Arc::clone(&hold_times);
            let held = locker
                .hold([key], options, move |_guard| async move {
                    let start = Instant::now();
                    let response = inner.call(request).await;
                    recorded.record(start.elapsed());
                    response
                })
                .await;
            match held {
                Ok(response) => response,
                Err(err) if err.is_not_obtained() => {
                    let advice = retry_after.unwrap_or_else(|| hold_times.estimate());
                    Ok(responses.respond_busy(err, advice))
                }
                Err(err) => Ok(responses.respond(err)),
            }
        })
    }
}
