//! A backend behind an `Arc`, shared by several lockers, and the macros
//! that write the [`Backend`] methods which only pass their call on.

use std::sync::Arc;
use std::time::Duration;

use super::{Backend, Capabilities};
use crate::LockError;

/// Writes [`Backend`] and [`FairQueue`](super::FairQueue) methods that pass
/// their arguments on unchanged, each signature once for every backend.
///
/// `forward!(via: inspect => inspect_key, keys)` writes `inspect` as
/// `via!(self, "inspect", key, inspect_key(key, fence_key))` and `keys` as
/// `via!(self, "list", …, keys(prefix))`: `via` is a macro saying how the
/// call is made (on the backend wrapped, boxing an inherent method, after a
/// failover), given the verb and subject that name the call in errors.
macro_rules! forward {
    ($via:ident: $($(#[$attr:meta])* $method:ident $(=> $target:ident)?),+ $(,)?) => {
        $( forward!(@ $via $(#[$attr])* $method [$($target)? $method]); )+
    };
    (@ $via:ident $(#[$attr:meta])* acquire [$to:ident $($_:ident)?]) => {
        $(#[$attr])*
        fn acquire<'a>(
            &'a self,
            req: $crate::backend::AcquireRequest<'a>,
        ) -> $crate::backend::BoxFuture<'a, Result<$crate::backend::Acquired, $crate::LockError>> {
            $via!(self, "obtain", req.keys.join("`, `"), $to(req))
        }
    };
    (@ $via:ident $(#[$attr:meta])* refresh [$to:ident $($_:ident)?]) => {
        $(#[$attr])*
        fn refresh<'a>(
            &'a self,
            keys: &'a [String],
            token: &'a str,
            ttl: ::std::time::Duration,
        ) -> $crate::backend::BoxFuture<'a, Result<bool, $crate::LockError>> {
            $via!(self, "refresh", keys.join("`, `"), $to(keys, token, ttl))
        }
    };
    (@ $via:ident $(#[$attr:meta])* refresh_many [$to:ident $($_:ident)?]) => {
        $(#[$attr])*
        fn refresh_many<'a>(
            &'a self,
            requests: &'a [$crate::backend::RefreshRequest<'a>],
        ) -> $crate::backend::BoxFuture<'a, Vec<Result<bool, $crate::LockError>>> {
            $via!(self, "refresh", "", $to(requests))
        }
    };
    (@ $via:ident $(#[$attr:meta])* release [$to:ident $($_:ident)?]) => {
        $(#[$attr])*
        fn release<'a>(
            &'a self,
            keys: &'a [String],
            token: &'a str,
        ) -> $crate::backend::BoxFuture<'a, Result<bool, $crate::LockError>> {
            $via!(self, "release", keys.join("`, `"), $to(keys, token))
        }
    };
    (@ $via:ident $(#[$attr:meta])* release_value [$to:ident $($_:ident)?]) => {
        $(#[$attr])*
        fn release_value<'a>(
            &'a self,
            keys: &'a [String],
            token: &'a str,
            metadata: &'a str,
        ) -> $crate::backend::BoxFuture<'a, Result<bool, $crate::LockError>> {
            $via!(self, "release", keys.join("`, `"), $to(keys, token, metadata))
        }
    };
    (@ $via:ident $(#[$attr:meta])* remaining [$to:ident $($_:ident)?]) => {
        $(#[$attr])*
        fn remaining<'a>(
            &'a self,
            keys: &'a [String],
            token: &'a str,
        ) -> $crate::backend::BoxFuture<'a, Result<Option<::std::time::Duration>, $crate::LockError>> {
            $via!(self, "ttl", keys.join("`, `"), $to(keys, token))
        }
    };
    (@ $via:ident $(#[$attr:meta])* listen [$to:ident $($_:ident)?]) => {
        $(#[$attr])*
        fn listen<'a>(
            &'a self,
            key: &'a str,
        ) -> $crate::backend::BoxFuture<'a, $crate::backend::ReleaseListener> {
            $via!(self, "listen", key, $to(key))
        }
    };
    (@ $via:ident $(#[$attr:meta])* inspect [$to:ident $($_:ident)?]) => {
        $(#[$attr])*
        fn inspect<'a>(
            &'a self,
            key: &'a str,
            fence_key: &'a str,
        ) -> $crate::backend::BoxFuture<'a, Result<$crate::backend::Inspection, $crate::LockError>> {
            $via!(self, "inspect", key, $to(key, fence_key))
        }
    };
    (@ $via:ident $(#[$attr:meta])* keys [$to:ident $($_:ident)?]) => {
        $(#[$attr])*
        fn keys<'a>(
            &'a self,
            prefix: &'a str,
        ) -> $crate::backend::BoxFuture<'a, Result<Vec<String>, $crate::LockError>> {
            $via!(self, "list", format_args!("{prefix}*"), $to(prefix))
        }
    };
    (@ $via:ident $(#[$attr:meta])* force_release [$to:ident $($_:ident)?]) => {
        $(#[$attr])*
        fn force_release<'a>(
            &'a self,
            key: &'a str,
        ) -> $crate::backend::BoxFuture<'a, Result<bool, $crate::LockError>> {
            $via!(self, "force-release", key, $to(key))
        }
    };
    (@ $via:ident $(#[$attr:meta])* downgrade [$to:ident $($_:ident)?]) => {
        $(#[$attr])*
        fn downgrade<'a>(
            &'a self,
            key: &'a str,
            token: &'a str,
        ) -> $crate::backend::BoxFuture<'a, Result<bool, $crate::LockError>> {
            $via!(self, "downgrade", key, $to(key, token))
        }
    };
    (@ $via:ident $(#[$attr:meta])* listen_granted [$to:ident $($_:ident)?]) => {
        $(#[$attr])*
        fn listen_granted<'a>(
            &'a self,
            key: &'a str,
            token: &'a str,
        ) -> $crate::backend::BoxFuture<'a, $crate::backend::ReleaseListener> {
            $via!(self, "listen", key, $to(key, token))
        }
    };
    (@ $via:ident $(#[$attr:meta])* confirm [$to:ident $($_:ident)?]) => {
        $(#[$attr])*
        fn confirm<'a>(
            &'a self,
            key: &'a str,
            token: &'a str,
            ttl: ::std::time::Duration,
        ) -> $crate::backend::BoxFuture<'a, Result<bool, $crate::LockError>> {
            $via!(self, "confirm", key, $to(key, token, ttl))
        }
    };
}

/// For [`forward!`]: the call on the backend behind the pointer.
macro_rules! inner {
    ($self:ident, $verb:literal, $subject:expr, $method:ident($($arg:ident),*)) => {
        (**$self).$method($($arg),*)
    };
}

/// For [`forward!`]: the call boxes the backend's inherent async method.
#[cfg(any(feature = "redis", feature = "etcd", feature = "postgres"))]
macro_rules! boxed {
    ($self:ident, $verb:literal, $subject:expr, $method:ident($($arg:ident),*)) => {
        Box::pin($self.$method($($arg),*))
    };
}

/// For [`forward!`]: one refresh sent as a batch of one through the
/// backend's inherent batch method, for backends whose batch is no dearer
/// than a single refresh.
#[cfg(any(feature = "etcd", feature = "postgres"))]
macro_rules! batch_of_one {
    ($self:ident, $verb:literal, $subject:expr, $method:ident($keys:ident, $token:ident, $ttl:ident)) => {
        Box::pin(async move {
            let requests = [$crate::backend::RefreshRequest::new($keys, $token, $ttl)];
            $self.$method(&requests).await.pop().unwrap_or(Ok(false))
        })
    };
}

/// For [`forward!`]: a fair waiter of a backend that sends no hand-off
/// message listens as any waiter does, for the release of the key (or the
/// departure of a waiter ahead), and then takes the key itself.
#[cfg(any(feature = "etcd", feature = "postgres"))]
macro_rules! as_any_waiter {
    ($self:ident, $verb:literal, $subject:expr, $method:ident($key:ident, $token:ident)) => {{
        let _ = $token;
        $crate::backend::Backend::listen($self, $key)
    }};
}

#[cfg(any(feature = "redis", feature = "etcd", feature = "postgres"))]
pub(super) use boxed;
pub(super) use forward;
#[cfg(any(feature = "etcd", feature = "postgres"))]
pub(super) use {as_any_waiter, batch_of_one};

/// A shared backend: several [`Locker`](crate::Locker)s built with
/// `Locker::new(backend.clone())` contend on the same locks.
impl<B: Backend + ?Sized> Backend for Arc<B> {
    forward!(inner: acquire, refresh, refresh_many, release, release_value, remaining, listen, inspect, keys);
    forward!(inner: force_release, downgrade);

    fn drift(&self, ttl: Duration) -> Duration {
        (**self).drift(ttl)
    }

    fn name(&self) -> &'static str {
        (**self).name()
    }

    fn fence_key(&self, key: &str) -> String {
        (**self).fence_key(key)
    }

    fn check_keys(&self, keys: &[String], fence_key: Option<&str>) -> Result<(), LockError> {
        (**self).check_keys(keys, fence_key)
    }

    fn capabilities(&self) -> Capabilities<'_> {
        (**self).capabilities()
    }
}
