//! A lock per request in a tower stack: [`LockLayer`] wraps a service
//! (an axum `Router`, a tonic server, any `tower::Service`) so that a
//! request runs only while its key is held, [`RequestMetadata`] says what
//! it records as the key's holder, and [`LockResponses`] says what a
//! request gets when it is not.

mod hold_times;
mod layer;
mod metadata;
mod problem;
mod responses;

pub use layer::{LockLayer, LockService};
pub use metadata::{HostAndRequest, RequestMetadata};
pub use responses::{HttpResponses, LockResponses};
