//! A backend behind an `Arc`, shared by several lockers.

use std::sync::Arc;
use std::time::Duration;

use super::{
    AcquireRequest, Acquired, Backend, BoxFuture, Capabilities, Inspection, RefreshRequest,
    ReleaseListener,
};
use crate::LockError;

/// A shared backend: several [`Locker`](crate::Locker)s built with
/// `Locker::new(backend.clone())` contend on the same locks.
impl<B: Backend + ?Sized> Backend for Arc<B> {
    fn acquire<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        (**self).acquire(req)
    }

    fn refresh<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        (**self).refresh(keys, token, ttl)
    }

    fn refresh_many<'a>(
        &'a self,
        requests: &'a [RefreshRequest<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, LockError>>> {
        (**self).refresh_many(requests)
    }

    fn release<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        (**self).release(keys, token)
    }

    fn remaining<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Duration>, LockError>> {
        (**self).remaining(keys, token)
    }

    fn drift(&self, ttl: Duration) -> Duration {
        (**self).drift(ttl)
    }

    fn name(&self) -> &'static str {
        (**self).name()
    }

    fn listen<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ReleaseListener> {
        (**self).listen(key)
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

    fn inspect<'a>(
        &'a self,
        key: &'a str,
        fence_key: &'a str,
    ) -> BoxFuture<'a, Result<Inspection, LockError>> {
        (**self).inspect(key, fence_key)
    }

    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, LockError>> {
        (**self).force_release(key)
    }

    fn keys<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>, LockError>> {
        (**self).keys(prefix)
    }

    fn downgrade<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        (**self).downgrade(key, token)
    }
}
