//! Following a failover: the sentinels asked again when a call meets one,
//! and the call sent again to the master they name next.

use std::sync::{Arc, MutexGuard};

use redis::{ErrorKind, RedisError, ServerErrorKind};
use tokio::time::Instant;

use super::{Current, Inner};
use crate::LockError;
use crate::backend::RedisBackend;
use crate::backend::redis::retry::Policy;
use crate::error::{BackendError, BackendErrorKind};

impl Inner {
    pub(super) fn current(&self) -> Current {
        self.lock_current().clone()
    }

    pub(super) fn lock_current(&self) -> MutexGuard<'_, Current> {
        // Replaced whole: a panic cannot leave it torn.
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The master once the sentinels were asked, unless another call already
    /// switched since generation `seen`: the same one when they still name
    /// it, a new backend on the new one otherwise.
    pub(super) async fn switch(&self, seen: u64) -> Result<Current, LockError> {
        let _one = self.switching.lock().await;
        let current = self.current();
        if current.generation != seen {
            return Ok(current);
        }
        let (client, addr) = self.lookup.find_master().await?;
        if addr == current.addr {
            return Ok(current);
        }
        let backend = RedisBackend::from_client(client, self.lookup.config.clone()).await?;
        let next = Current {
            backend: Arc::new(backend),
            generation: seen + 1,
            addr,
        };
        tracing::info!(target: "lockmacro", master = %self.lookup.master_name, from = %current.addr, to = %next.addr, "following the master the sentinels name");
        *self.lock_current() = next.clone();
        Ok(next)
    }

    /// Asks the sentinels again in the background, after a call that got no
    /// answer in time from master generation `seen`.
    pub(super) fn recheck(self: &Arc<Self>, seen: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = self.clone();
        let budget = self.lookup.config.connect_timeout + self.lookup.config.response_timeout;
        runtime.spawn(async move {
            let _ = tokio::time::timeout(budget, inner.switch(seen)).await;
        });
    }

    /// The error of a call whose budget ran out while no master answered;
    /// `last` is the last failure met.
    pub(super) fn spent(&self, what: &str, last: Option<String>) -> LockError {
        let budget = self.lookup.config.response_timeout;
        let message = match last {
            Some(last) => format!(
                "no master answered within the response timeout ({budget:?}): the sentinels \
                 are failing over or have no master; last answer: {last}"
            ),
            None => format!("no answer within the response timeout ({budget:?})"),
        };
        BackendError::new(
            BackendErrorKind::Timeout,
            format!("{}: {what}", self.lookup.name),
            message,
        )
        .into()
    }
}

/// How a call follows the master: a failover's failures are sent again to
/// the master the sentinels name next, until the response timeout.
pub(super) struct Following<'a> {
    pub(super) inner: &'a Arc<Inner>,
    pub(super) current: Current,
    pub(super) what: &'a str,
    pub(super) deadline: Instant,
}

impl Policy for Following<'_> {
    type Target = Arc<RedisBackend>;
    type Error = LockError;
    type Failure = LockError;

    fn deadline(&self) -> Option<Instant> {
        Some(self.deadline)
    }

    fn target(&self) -> Arc<RedisBackend> {
        self.current.backend.clone()
    }

    fn retry(&mut self, err: &LockError) -> bool {
        let failing = failing_over(err);
        if failing {
            tracing::debug!(target: "lockmacro", master = %self.current.addr, error = %err, "master failing; asking the sentinels");
        }
        failing
    }

    async fn recover(&mut self) -> Result<bool, LockError> {
        let next = self.inner.switch(self.current.generation).await?;
        // The same master: its connection is being made again; give it a
        // moment.
        let same = next.generation == self.current.generation;
        self.current = next;
        Ok(same)
    }

    fn fail(&mut self, err: LockError, _: Option<LockError>) -> LockError {
        if timed_out(&err) {
            self.inner.recheck(self.current.generation);
        }
        err
    }

    fn spent(&mut self, last: Option<LockError>, cut: bool) -> LockError {
        if cut {
            self.inner.recheck(self.current.generation);
            return self.inner.spent(self.what, None);
        }
        self.inner
            .spent(self.what, last.map(|last| last.to_string()))
    }
}

/// True for the failures a failover causes, which the same call sent to the
/// master the sentinels name next gets past.
pub(super) fn failing_over(err: &LockError) -> bool {
    let LockError::Backend(err) = err else {
        return false;
    };
    if err.kind() == BackendErrorKind::Unreachable {
        return true;
    }
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if let Some(redis) = cause.downcast_ref::<RedisError>() {
            return matches!(
                redis.kind(),
                ErrorKind::Server(
                    ServerErrorKind::ReadOnly
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::BusyLoading
                        | ServerErrorKind::TryAgain
                )
            ) || redis.is_connection_refusal()
                || redis.is_connection_dropped()
                // A write refused inside a script on a demoted master.
                || redis.to_string().contains("READONLY");
        }
        source = cause.source();
    }
    false
}

pub(super) fn timed_out(err: &LockError) -> bool {
    matches!(err, LockError::Backend(err) if err.kind() == BackendErrorKind::Timeout)
}
