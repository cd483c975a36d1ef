//! [`LockLayer`] and the service it wraps around another ([`LockService`]).

use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use tower_layer::Layer;
use tower_service::Service;

use super::{HttpResponses, LockResponses};
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
/// A request that does not get its key, or whose lease is lost while it
/// runs (the inner future is then dropped, under the default
/// [`OnLost::Abort`](crate::OnLost::Abort)), is answered by the layer's
/// [`LockResponses`]: [`HttpResponses`] by default, `409` with `Retry-After`
/// for a busy key and `503` for a lost lease or an unavailable lock store.
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
pub struct LockLayer<K, R = HttpResponses> {
    locker: Locker,
    options: HoldOptions,
    key: Arc<K>,
    responses: Arc<R>,
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
            responses: Arc::new(HttpResponses),
        }
    }
}

impl<K, R> LockLayer<K, R> {
    /// Answers refused and lost requests with `responses` instead: any
    /// `Fn(LockError) -> Response` or a [`LockResponses`] of your own.
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
    pub fn responses<R2>(self, responses: R2) -> LockLayer<K, R2> {
        LockLayer {
            locker: self.locker,
            options: self.options,
            key: self.key,
            responses: Arc::new(responses),
        }
    }
}

impl<K, R> Clone for LockLayer<K, R> {
    fn clone(&self) -> Self {
        LockLayer {
            locker: self.locker.clone(),
            options: self.options.clone(),
            key: Arc::clone(&self.key),
            responses: Arc::clone(&self.responses),
        }
    }
}

impl<K, R> std::fmt::Debug for LockLayer<K, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockLayer")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<S, K, R> Layer<S> for LockLayer<K, R> {
    type Service = LockService<S, K, R>;

    fn layer(&self, inner: S) -> Self::Service {
        LockService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service a [`LockLayer`] wraps around `S`: each request runs in `S`
/// while its key is held.
pub struct LockService<S, K, R = HttpResponses> {
    inner: S,
    layer: LockLayer<K, R>,
}

impl<S: Clone, K, R> Clone for LockService<S, K, R> {
    fn clone(&self) -> Self {
        LockService {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S, K, R> std::fmt::Debug for LockService<S, K, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockService")
            .field("layer", &self.layer)
            .finish_non_exhaustive()
    }
}

impl<S, K, R, Req> Service<Req> for LockService<S, K, R>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
    Req: Send + 'static,
    K: Fn(&Req) -> Option<String> + Send + Sync + 'static,
    R: LockResponses<S::Response> + Send + Sync + 'static,
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
        let locker = self.layer.locker.clone();
        let options = self.layer.options.clone();
        let responses = Arc::clone(&self.layer.responses);
        Box::pin(async move {
            let held = locker
                .hold([key], options, move |_guard| inner.call(request))
                .await;
            match held {
                Ok(response) => response,
                Err(err) => Ok(responses.respond(err)),
            }
        })
    }
}
