//! What a [`LockLayer`](crate::LockLayer) records as the holder of each key
//! it takes: [`RequestMetadata`], by default [`HostAndRequest`].

use http::Request;

/// The metadata a request's lock records
/// ([`ObtainOptions::metadata`](crate::ObtainOptions::metadata)): what
/// `lockmacro list` and [`Locker::inspect`](crate::Locker::inspect) show as
/// its holder, and what a request refused meanwhile is told (see
/// [`HttpResponses`](crate::HttpResponses)).
///
/// Any `Fn(&Req) -> String` is one; [`HostAndRequest`] is the default.
/// Give it with [`LockLayer::metadata`](crate::LockLayer::metadata).
pub trait RequestMetadata<Req> {
    /// The metadata for `request`'s lock.
    fn metadata(&self, request: &Req) -> String;
}

impl<F, Req> RequestMetadata<Req> for F
where
    F: Fn(&Req) -> String,
{
    fn metadata(&self, request: &Req) -> String {
        self(request)
    }
}

/// The default holder of a request's lock: this host's name and this
/// process's id, as `#[distributed_lock]` records them, then the request's
/// method and path, without the query (which may carry secrets):
/// `web-3 pid 4242 POST /invoices/7/send`. The host name and process id
/// are read once per process.
///
/// ```
/// use lockmacro_runtime::{HostAndRequest, RequestMetadata};
///
/// let request = http::Request::post("/invoices/7/send?token=secret").body(()).unwrap();
/// let holder = HostAndRequest.metadata(&request);
/// assert!(holder.contains(&format!(" pid {} ", std::process::id())));
/// assert!(holder.ends_with(" POST /invoices/7/send"));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct HostAndRequest;

impl<B> RequestMetadata<Request<B>> for HostAndRequest {
    fn metadata(&self, request: &Request<B>) -> String {
        format!(
            "{} {} {}",
            crate::hold::default_metadata(),
            request.method(),
            request.uri().path()
        )
    }
}
