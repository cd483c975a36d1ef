//! Bad and hostile input, Redis users with restricted permissions, and TLS,
//! against real `redis-server` processes: keys that look like hash tags,
//! protocol or control characters, tokens that try to pass for the owner's,
//! ACL users that lack a permission (and the smallest set that works), and
//! connections that cannot work (wrong password, TLS on one side only, a host
//! that does not exist).

mod acl;
mod connect;
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
