//! A lock per request in a tower stack: [`LockLayer`] wraps a service
//! (an axum `Router`, a tonic server, any `tower::Service`) so that a
//! request runs only while its key is held, and [`LockResponses`] says what
//! a request gets when it is not.

mod layer;
mod responses;

pub use layer::{LockLayer, LockService};
pub use responses::{HttpResponses, LockResponses};
