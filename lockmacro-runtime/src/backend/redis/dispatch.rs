//! Which path each call of the lock protocol takes: the scripts
//! (`locks.rs`, `operate.rs`) while the backend uses them, else the
//! script-free protocol (`scriptless*.rs`). A script call the server
//! refuses as denied, in [`Scripts::Auto`](super::Scripts::Auto), is made
//! again without scripts, and so is every later call.

use std::future::Future;
use std::time::Duration;

use super::locks::Protocol;
use super::transport::Transport;
use crate::LockError;
use crate::backend::{AcquireRequest, Acquired, Inspection, RefreshRequest, TOKEN_LEN};

/// Runs `$scripted` while the backend uses scripts; `$scriptless` when it
/// does not, or when the server just refused the script. The script-free
/// call is boxed: its `WATCH` transaction's state is several times the
/// script call's, and inline it would be the size of every call's future,
/// which the backend's own box then copies on every obtain and release.
macro_rules! either {
    ($self:ident, $scripted:expr, $scriptless:expr) => {{
        if $self.features.scripted() {
            match $scripted.await {
                Err(err) if $self.features.gave_up_scripts(&err) => {}
                other => return other,
            }
        }
        Box::pin($scriptless).await
    }};
}

impl<T: Transport> Protocol<T> {
    /// Without scripts, what the scripts check before they touch a key:
    /// keys the transport can send together (else the error), and a token
    /// of this library's length (else it holds nothing: `false`).
    fn may_hold(&self, keys: &[String], token: &str) -> Result<bool, LockError> {
        if self.features.scripted() {
            return Ok(true);
        }
        self.transport.check(keys, None)?;
        Ok(token.len() == TOKEN_LEN)
    }

    /// Not an `async fn`, whose future would hold the request twice: this
    /// one is boxed on every obtain.
    #[allow(
        clippy::manual_async_fn,
        reason = "an async fn's future holds its arguments twice"
    )]
    pub(in crate::backend) fn acquire<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> impl Future<Output = Result<Acquired, LockError>> + Send + 'a {
        async move {
            self.transport.check(req.keys, req.fence_key)?;
            either!(
                self,
                self.acquire_scripted(req),
                self.acquire_scriptless(req)
            )
        }
    }

    pub(in crate::backend) async fn refresh(
        &self,
        keys: &[String],
        token: &str,
        ttl: Duration,
    ) -> Result<bool, LockError> {
        if !self.may_hold(keys, token)? {
            return Ok(false);
        }
        either!(
            self,
            self.refresh_scripted(keys, token, ttl),
            self.refresh_scriptless(keys, token, ttl)
        )
    }

    /// Without scripts, lease by lease, all at once.
    pub(in crate::backend) async fn refresh_many(
        &self,
        requests: &[RefreshRequest<'_>],
    ) -> Vec<Result<bool, LockError>> {
        if self.features.scripted() {
            let results = self.refresh_many_scripted(requests).await;
            let denied = results.iter().any(|result| {
                result
                    .as_ref()
                    .is_err_and(|err| self.features.gave_up_scripts(err))
            });
            if !denied {
                return results;
            }
        }
        let calls = requests
            .iter()
            .map(|req| self.refresh(req.keys, req.token, req.ttl));
        futures_util::future::join_all(calls).await
    }

    /// A release, told the lease's metadata when the caller has it (else
    /// empty): the script compares the value whole. Without scripts the
    /// value is read first either way.
    ///
    /// Not an `async fn`, whose future would hold its arguments twice: this
    /// one is boxed on every release, and small enough without the copies
    /// for the allocator's per-thread cache (at most 1032 bytes).
    #[allow(
        clippy::manual_async_fn,
        reason = "an async fn's future holds its arguments twice"
    )]
    pub(in crate::backend) fn release_value<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        metadata: &'a str,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'a {
        async move {
            if !self.may_hold(keys, token)? {
                return Ok(false);
            }
            either!(
                self,
                self.release_scripted(keys, token, metadata),
                self.release_scriptless(keys, token)
            )
        }
    }

    pub(in crate::backend) async fn remaining(
        &self,
        keys: &[String],
        token: &str,
    ) -> Result<Option<Duration>, LockError> {
        if !self.may_hold(keys, token)? {
            return Ok(None);
        }
        either!(
            self,
            self.remaining_scripted(keys, token),
            self.remaining_scriptless(keys, token)
        )
    }

    pub(in crate::backend) async fn confirm(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<bool, LockError> {
        either!(self, self.confirm_scripted(key, token, ttl), async {
            Err(self.needs_scripts("confirm", key, "a fair queue"))
        })
    }

    pub(in crate::backend) async fn inspect(
        &self,
        key: &str,
        fence_key: &str,
    ) -> Result<Inspection, LockError> {
        self.transport
            .check(std::slice::from_ref(&key.to_owned()), Some(fence_key))?;
        either!(
            self,
            self.inspect_scripted(key, fence_key),
            self.inspect_scriptless(key, fence_key)
        )
    }

    pub(in crate::backend) async fn force_release(&self, key: &str) -> Result<bool, LockError> {
        either!(
            self,
            self.force_release_scripted(key),
            self.force_release_scriptless(key)
        )
    }

    pub(in crate::backend) async fn downgrade(
        &self,
        key: &str,
        token: &str,
    ) -> Result<bool, LockError> {
        either!(self, self.downgrade_scripted(key, token), async {
            Err(self.needs_scripts("downgrade", key, "a downgrade"))
        })
    }
}
