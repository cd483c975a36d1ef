//! What a request gets when its lock is refused or lost: [`LockResponses`],
//! and the HTTP answers it gets by default ([`HttpResponses`]).

use std::time::Duration;

use http::{HeaderValue, Response, StatusCode, header};

use super::problem::Problem;
use crate::LockError;

/// Turns a lock failure into the response the client gets: a busy key
/// ([`LockError::is_not_obtained`]), a lease lost while the request ran
/// ([`LockError::is_not_held`]), a locker that was shut down
/// ([`LockError::ShutDown`]), the lock store unavailable
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
///     } else if err.is_not_held()
///         || err.is_transient()
///         || matches!(err, LockError::ShutDown { .. })
///     {
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
///
/// A [`LockLayer`](crate::LockLayer) answers a busy key through
/// [`respond_busy`](Self::respond_busy), with its advice on when to try
/// again; a closure sees the error alone. Implement the trait to use the
/// advice in a response of your own:
///
/// ```
/// use std::time::Duration;
/// use lockmacro_runtime::{LockError, LockResponses};
///
/// /// Every failure as `503`, a busy key with the layer's `Retry-After`.
/// struct Unavailable;
///
/// impl LockResponses<http::Response<String>> for Unavailable {
///     fn respond(&self, error: LockError) -> http::Response<String> {
///         let mut response = http::Response::new(format!("{error}\n"));
///         *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
///         response
///     }
///
///     fn respond_busy(&self, error: LockError, retry_after: Duration) -> http::Response<String> {
///         let mut response = self.respond(error);
///         response.headers_mut().insert(
///             http::header::RETRY_AFTER,
///             http::HeaderValue::from(retry_after.as_secs().max(1)),
///         );
///         response
///     }
/// }
///
/// let busy = LockError::NotObtained {
///     key: "order:7".into(),
///     namespace: String::new(),
///     remaining: None,
///     holder: None,
/// };
/// let response = Unavailable.respond_busy(busy, Duration::from_secs(4));
/// assert_eq!(response.status(), 503);
/// assert_eq!(response.headers()["retry-after"], "4");
/// ```
pub trait LockResponses<Res> {
    /// The response for a request whose lock failed with `error`.
    fn respond(&self, error: LockError) -> Res;

    /// The response for a request refused because its key is held
    /// elsewhere (`error` is a [`LockError::NotObtained`]), with how long
    /// the layer advises the client to wait before trying again (see
    /// [`LockLayer::retry_after`](crate::LockLayer::retry_after)).
    ///
    /// By default the advice is dropped and [`respond`](Self::respond)
    /// answers.
    fn respond_busy(&self, error: LockError, retry_after: Duration) -> Res {
        let _ = retry_after;
        self.respond(error)
    }
}

impl<F, Res> LockResponses<Res> for F
where
    F: Fn(LockError) -> Res,
{
    fn respond(&self, error: LockError) -> Res {
        self(error)
    }
}

/// The default answers of a [`LockLayer`](crate::LockLayer):
///
/// | failure | status |
/// |---|---|
/// | the key is held elsewhere | `409 Conflict`, with `Retry-After` in whole seconds, rounded up |
/// | the lease was lost while the request ran | `503 Service Unavailable` |
/// | the locker was shut down ([`LockError::ShutDown`]) | `503 Service Unavailable` |
/// | the lock store is unavailable ([`LockError::is_transient`]) | `503 Service Unavailable` |
/// | anything else (an invalid key, a key held as another kind) | `500 Internal Server Error` |
///
/// `Retry-After` is the layer's advice (see
/// [`LockLayer::retry_after`](crate::LockLayer::retry_after)); a busy key
/// answered through [`respond`](LockResponses::respond), without advice,
/// gets none: the remaining lease in the error says when the holder's
/// lease runs out if it is not renewed, which a watchdog-kept lease always
/// is.
///
/// The body says what failed, as problem details (RFC 9457,
/// `Content-Type: application/problem+json`) by default, or as one line of
/// text with [`HttpResponses::plain_text`]. A busy key is this problem:
///
/// ```json
/// {
///   "type": "https://docs.rs/lockmacro-runtime/latest/lockmacro_runtime/struct.HttpResponses.html",
///   "title": "Locked by someone else",
///   "status": 409,
///   "detail": "lock `invoice:7` is held by someone else",
///   "key": "invoice:7",
///   "namespace": "billing",
///   "holder": "web-3 pid 4242 POST /invoices/7/send"
/// }
/// ```
///
/// with `namespace` when the locker has one, and `holder` (what the
/// holder recorded: see [`LockLayer::metadata`](crate::LockLayer::metadata))
/// only with [`with_holder`](HttpResponses::with_holder), and when the
/// lock store told it: by default a holder records its host name, process
/// id, method and path, which are the operator's business. Every other
/// failure is `"type": "about:blank"`, with the status's reason as its
/// title and the error's message as its detail; an error of the lock
/// store itself says only that the store is unavailable, or that the lock
/// could not be taken, never which server or why.
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
/// let busy = || LockError::NotObtained {
///     key: "order:7".into(),
///     namespace: String::new(),
///     remaining: Some(Duration::from_secs(30)),
///     holder: None,
/// };
/// let response: http::Response<String> =
///     HttpResponses::default().respond_busy(busy(), Duration::from_millis(2300));
/// assert_eq!(response.status(), 409);
/// assert_eq!(response.headers()["retry-after"], "3");
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// assert!(response.body().contains(r#""key":"order:7""#));
///
/// let response: http::Response<String> = HttpResponses::plain_text().respond(busy());
/// assert_eq!(response.headers()["content-type"], "text/plain; charset=utf-8");
/// assert_eq!(response.body(), "lock `order:7` is held by someone else\n");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpResponses {
    body: Body,
    /// Whether a busy key's problem names its holder's metadata.
    holder: bool,
}

/// How [`HttpResponses`] writes its bodies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Body {
    #[default]
    Problem,
    PlainText,
}

/// The problem type of a busy key: the page that documents it.
const BUSY: &str =
    "https://docs.rs/lockmacro-runtime/latest/lockmacro_runtime/struct.HttpResponses.html";

impl HttpResponses {
    /// Bodies as problem details (`application/problem+json`): the
    /// default.
    pub fn problem_json() -> Self {
        HttpResponses {
            body: Body::Problem,
            holder: false,
        }
    }

    /// Names the holder's metadata in a busy key's problem (`holder`), for
    /// clients that may read what holders record.
    ///
    /// ```
    /// use lockmacro_runtime::{HttpResponses, LockError, LockResponses};
    ///
    /// let busy = || LockError::NotObtained {
    ///     key: "order:7".into(),
    ///     namespace: String::new(),
    ///     remaining: None,
    ///     holder: Some("billing-api".into()),
    /// };
    /// let response: http::Response<String> = HttpResponses::default().respond(busy());
    /// assert!(!response.body().contains("billing-api"));
    /// let response: http::Response<String> =
    ///     HttpResponses::default().with_holder().respond(busy());
    /// assert!(response.body().contains(r#""holder":"billing-api""#));
    /// ```
    pub fn with_holder(mut self) -> Self {
        self.holder = true;
        self
    }

    /// Bodies as the error's message on one line
    /// (`text/plain; charset=utf-8`), as `#[distributed_lock]`'s error
    /// prints it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lockmacro_runtime::{HoldOptions, HttpResponses, LockLayer, Locker};
    ///
    /// let layer = LockLayer::new(
    ///     Locker::memory(),
    ///     HoldOptions::new(Duration::from_secs(30)),
    ///     |_: &axum::extract::Request| Some("reports".to_owned()),
    /// )
    /// .responses(HttpResponses::plain_text());
    /// let app: axum::Router = axum::Router::new().layer(layer);
    /// # let _ = app;
    /// ```
    pub fn plain_text() -> Self {
        HttpResponses {
            body: Body::PlainText,
            holder: false,
        }
    }

    fn answer<B: From<String>>(
        &self,
        error: LockError,
        retry_after: Option<Duration>,
    ) -> Response<B> {
        let status = status_of(&error);
        // A busy key is the lock doing its work; anything else is the
        // operator's to look into, and the client is not told the details.
        if status == StatusCode::CONFLICT {
            tracing::debug!(target: "lockmacro", error = %error, status = status.as_u16(), "request refused by its lock");
        } else {
            tracing::warn!(target: "lockmacro", error = %error, status = status.as_u16(), "request refused by its lock");
        }
        let (content_type, body) = match self.body {
            Body::Problem => (
                "application/problem+json",
                problem(&error, status, self.holder),
            ),
            Body::PlainText => ("text/plain; charset=utf-8", format!("{}\n", detail(&error))),
        };
        let mut response = Response::new(B::from(body));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        if let Some(after) = retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(whole_seconds(after)));
        }
        response
    }
}

impl<B: From<String>> LockResponses<Response<B>> for HttpResponses {
    fn respond(&self, error: LockError) -> Response<B> {
        self.answer(error, None)
    }

    fn respond_busy(&self, error: LockError, retry_after: Duration) -> Response<B> {
        self.answer(error, Some(retry_after))
    }
}

fn status_of(error: &LockError) -> StatusCode {
    if error.is_not_obtained() {
        StatusCode::CONFLICT
    } else if error.is_not_held()
        || error.is_transient()
        || matches!(error, LockError::ShutDown { .. })
    {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

/// What the client is told: the error's message, except for the lock
/// store's own errors, whose messages name servers and addresses that are
/// the operator's business (the log has them).
fn detail(error: &LockError) -> String {
    match error {
        LockError::Backend(_) if error.is_transient() => {
            "the lock store is unavailable; try again later".to_owned()
        }
        LockError::Backend(_) => "the request's lock could not be taken".to_owned(),
        error => error.to_string(),
    }
}

fn problem(error: &LockError, status: StatusCode, show_holder: bool) -> String {
    match error {
        LockError::NotObtained {
            key,
            namespace,
            holder,
            ..
        } => {
            let mut problem =
                Problem::new(BUSY, "Locked by someone else", status, &error.to_string())
                    .member("key", key);
            if !namespace.is_empty() {
                problem = problem.member("namespace", namespace);
            }
            if let Some(holder) = holder
                .as_deref()
                .filter(|holder| show_holder && !holder.is_empty())
            {
                problem = problem.member("holder", holder);
            }
            problem.finish()
        }
        error => Problem::new(
            "about:blank",
            status.canonical_reason().unwrap_or_default(),
            status,
            &detail(error),
        )
        .finish(),
    }
}

/// Rounded up: a client told to come back sooner would only be refused
/// again.
fn whole_seconds(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}
