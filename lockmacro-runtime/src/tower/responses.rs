//! What a request gets when its lock is refused or lost: [`LockResponses`],
//! and the HTTP answers it gets by default ([`HttpResponses`]).

use std::time::Duration;

use http::{HeaderValue, Response, StatusCode, header};

use crate::LockError;

/// Turns a lock failure into the response the client gets: a busy key
/// ([`LockError::is_not_obtained`]), a lease lost while the request ran
/// ([`LockError::is_not_held`]), the lock store unavailable
/// ([`LockError::is_transient`]), or a misconfiguration.
///
/// Any `Fn(LockError) -> Res` is one. [`HttpResponses`] is the default for
/// `http::Response` bodies.
///
/// A tonic server answers with a `Status` instead, as an HTTP response:
///
/// ```
/// use lockmacro_runtime::LockError;
///
/// fn grpc_status(err: LockError) -> http::Response<tonic::body::Body> {
///     let status = if err.is_not_obtained() {
///         tonic::Status::aborted(err.to_string())
///     } else if err.is_not_held() || err.is_transient() {
///         tonic::Status::unavailable(err.to_string())
///     } else {
///         tonic::Status::internal(err.to_string())
///     };
///     status.into_http()
/// }
///
/// let busy = LockError::NotObtained {
///     key: "order:7".into(),
///     namespace: String::new(),
///     remaining: None,
///     holder: None,
/// };
/// let response = grpc_status(busy);
/// assert_eq!(response.headers()["grpc-status"], "10"); // ABORTED
/// ```
///
/// and passes it to [`LockLayer::responses`](crate::LockLayer::responses).
pub trait LockResponses<Res> {
    /// The response for a request whose lock failed with `error`.
    fn respond(&self, error: LockError) -> Res;
}

impl<F, Res> LockResponses<Res> for F
where
    F: Fn(LockError) -> Res,
{
    fn respond(&self, error: LockError) -> Res {
        self(error)
    }
}

/// The default answers of a [`LockLayer`](crate::LockLayer), with an
/// empty body:
///
/// | failure | status |
/// |---|---|
/// | the key is held elsewhere | `409 Conflict`, with `Retry-After` (the holder's remaining lease in whole seconds, rounded up) when the backend told it |
/// | the lease was lost while the request ran | `503 Service Unavailable` |
/// | the lock store is unavailable ([`LockError::is_transient`]) | `503 Service Unavailable` |
/// | anything else (an invalid key, a key held as another kind) | `500 Internal Server Error` |
///
/// `409` rather than WebDAV's `423 Locked`: 423 belongs to WebDAV's own
/// locks, which a client takes and names with lock tokens, where here the
/// client can do nothing but try again later; `409` (the request conflicts
/// with the resource's current state) says that to every HTTP client.
///
/// ```
/// use std::time::Duration;
/// use lockmacro_runtime::{HttpResponses, LockError, LockResponses};
///
/// let busy = LockError::NotObtained {
///     key: "order:7".into(),
///     namespace: String::new(),
///     remaining: Some(Duration::from_millis(2300)),
///     holder: None,
/// };
/// let response: http::Response<String> = HttpResponses.respond(busy);
/// assert_eq!(response.status(), 409);
/// assert_eq!(response.headers()["retry-after"], "3");
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpResponses;

impl<B: Default> LockResponses<Response<B>> for HttpResponses {
    fn respond(&self, error: LockError) -> Response<B> {
        let status = if error.is_not_obtained() {
            StatusCode::CONFLICT
        } else if error.is_not_held() || error.is_transient() {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        tracing::debug!(target: "lockmacro", error = %error, status = status.as_u16(), "request refused by its lock");
        let mut response = Response::new(B::default());
        *response.status_mut() = status;
        if let Some(after) = error.retry_after() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(whole_seconds(after)));
        }
        response
    }
}

/// Rounded up: a client told to come back sooner than the lease ends would
/// only be refused again.
fn whole_seconds(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}
