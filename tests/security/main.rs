//! Bad and hostile input, Redis users with restricted permissions, and TLS,
//! against real `redis-server` processes: keys that look like hash tags,
//! protocol or control characters, tokens that try to pass for the owner's,
//! ACL users that lack a permission (and the smallest set that works), and
//! connections that cannot work (wrong password, TLS on one side only, a host
//! that does not exist); the same for etcd: a TLS-only member that checks
//! client certificates, and users with a role on one prefix whose tokens
//! expire.

mod acl;
mod connect;
#[cfg(feature = "etcd")]
mod etcd_auth;
#[cfg(feature = "etcd")]
mod etcd_tls;
mod keys;
#[cfg(feature = "postgres")]
mod postgres;
mod tls;
mod tokens;

use std::time::Duration;

use lockmacro_runtime::ObtainOptions;

/// A ttl no test outlives.
pub const LONG: Duration = Duration::from_secs(30);

/// One attempt, no retries.
pub fn once() -> ObtainOptions {
    ObtainOptions::new()
}
