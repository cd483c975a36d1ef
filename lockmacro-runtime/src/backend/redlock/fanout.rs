//! Asking every master at once: the calls in flight, their answers, and
//! whether a majority agreed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::time::{Instant, Sleep};

use super::{Inner, RedlockBackend};
use crate::LockError;
use crate::backend::BoxFuture;
use crate::backend::redis::RedisBackend;
use crate::error::{BackendError, BackendErrorKind};

/// How often a master that could not be reached is tried again; in between,
/// calls count it as failed at once instead of waiting for it.
const RECONNECT_INTERVAL: Duration = Duration::from_secs(1);

impl Inner {
    /// The connection to master `index`, made now if it was never reached and
    /// the last attempt is long enough ago. Once made, it reconnects by itself.
    pub(super) async fn connection(
        self: &Arc<Self>,
        index: usize,
    ) -> Result<RedisBackend, LockError> {
        let master = &self.masters[index];
        if let Some(backend) = master.backend.get() {
            return Ok(backend.clone());
        }
        {
            let mut retry_at = master
                .retry_at
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let now = Instant::now();
            if now < *retry_at {
                return Err(BackendError::new(
                    BackendErrorKind::Unreachable,
                    format!("{}: connect", master.name),
                    "not connected: the last attempt failed, the next one starts within a second",
                )
                .into());
            }
            *retry_at = now + RECONNECT_INTERVAL;
        }
        // A task of its own: a call that returns as soon as a majority
        // answered cancels its requests to slower masters, and would cancel a
        // connection attempt with them, so that a master that was down would
        // never join.
        let inner = self.clone();
        let connecting = tokio::spawn(async move {
            let master = &inner.masters[index];
            let connect = || RedisBackend::connect_with(&master.url, inner.config.clone());
            master.backend.get_or_try_init(connect).await.cloned()
        });
        connecting.await.map_err(|err| {
            BackendError::new(
                BackendErrorKind::Other,
                format!("{}: connect", master.name),
                err.to_string(),
            )
        })?
    }
}

/// What one master said.
pub(super) enum Answer<Y, N> {
    /// It did what was asked.
    Yes(Y),
    /// It answered, and refused.
    No(N),
}

pub(super) type Reply<Y, N> = (usize, Result<Answer<Y, N>, LockError>);

/// One call's requests to several masters, in flight at once and polled by
/// the caller's own task (no task per master), under one deadline: a master
/// that has not answered by then counts as timed out, and its request is
/// cancelled. Each request owns what it uses, so that the ones still on
/// their way once the outcome is known can be left to finish
/// ([`detach`](Self::detach)) or cancelled (dropped).
pub(super) struct Fanout<Y, N> {
    inflight: FuturesUnordered<BoxFuture<'static, Reply<Y, N>>>,
    /// The masters that have not answered yet.
    pending: Vec<usize>,
    deadline: Pin<Box<Sleep>>,
    expired: bool,
    timeout: Duration,
    what: &'static str,
    inner: Arc<Inner>,
}

impl<Y: Send + 'static, N: Send + 'static> Fanout<Y, N> {
    /// How many masters have not answered yet.
    pub(super) fn len(&self) -> usize {
        self.pending.len()
    }

    /// The next answer, or a timeout for a master that did not answer by
    /// the deadline; `None` once every master is accounted for.
    pub(super) async fn next(&mut self) -> Option<Reply<Y, N>> {
        if !self.expired {
            tokio::select! {
                biased;
                reply = self.inflight.next() => {
                    if let Some((index, _)) = &reply {
                        self.pending.retain(|pending| pending != index);
                    }
                    return reply;
                }
                () = &mut self.deadline => {
                    self.expired = true;
                    self.inflight = FuturesUnordered::new();
                }
            }
        }
        let index = self.pending.pop()?;
        let master = &self.inner.masters[index];
        let err = BackendError::new(
            BackendErrorKind::Timeout,
            format!("{}: {}", master.name, self.what),
            format!("no answer within {:?}", self.timeout),
        );
        Some((index, Err(err.into())))
    }

    /// Lets the requests still on their way finish, until the deadline, on
    /// one task for all of them. Those whose answer is in already finish
    /// here: usually every one, and then no task is started.
    pub(super) fn detach(self) {
        if self.pending.is_empty() || self.expired {
            return;
        }
        let (mut inflight, deadline) = (self.inflight, self.deadline);
        while let Some(Some(_)) = inflight.next().now_or_never() {}
        if inflight.is_empty() {
            return;
        }
        tokio::spawn(async move {
            let finish = inflight.for_each(|_| std::future::ready(()));
            tokio::select! {
                () = finish => {}
                () = deadline => {}
            }
        });
    }
}

/// The answers gathered so far, with the index of the master that gave each.
pub(super) struct Tally<Y, N> {
    pub(super) yes: Vec<(usize, Y)>,
    pub(super) no: Vec<(usize, N)>,
    pub(super) failed: Vec<LockError>,
}

impl RedlockBackend {
    /// The index of every master, for [`fan_out`](Self::fan_out) to ask
    /// them all.
    pub(super) fn masters(&self) -> std::ops::Range<usize> {
        0..self.inner.masters.len()
    }

    /// Sends `op` to the masters at `indices` at once, all bounded by
    /// `timeout`.
    pub(super) fn fan_out<Y, N, F, Fut>(
        &self,
        indices: impl IntoIterator<Item = usize>,
        timeout: Duration,
        what: &'static str,
        op: F,
    ) -> Fanout<Y, N>
    where
        Y: Send + 'static,
        N: Send + 'static,
        F: Fn(RedisBackend) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Answer<Y, N>, LockError>> + Send + 'static,
    {
        let op = Arc::new(op);
        let inflight = FuturesUnordered::new();
        let mut pending = Vec::new();
        for index in indices {
            pending.push(index);
            // A master connected already is asked at once; only one that is
            // not carries the connection's state.
            if let Some(backend) = self.inner.masters[index].backend.get() {
                inflight.push(
                    Box::pin(op(backend.clone()).map(move |answer| (index, answer)))
                        as Pin<Box<dyn Future<Output = Reply<Y, N>> + Send>>,
                );
                continue;
            }
            let inner = self.inner.clone();
            let op = op.clone();
            inflight.push(Box::pin(async move {
                let answer = match inner.connection(index).await {
                    Ok(backend) => op(backend).await,
                    Err(err) => Err(err),
                };
                (index, answer)
            }));
        }
        // No timer can be set that far: a year stands for "never".
        let deadline = Instant::now() + timeout.min(Duration::from_secs(365 * 24 * 3600));
        Fanout {
            inflight,
            pending,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            expired: false,
            timeout,
            what,
            inner: self.inner.clone(),
        }
    }

    /// Gathers answers until the outcome is known: a majority said yes, or
    /// no longer can, and either a majority answered (a refusal) or nobody is
    /// left to answer (a failure). Answers still on their way stay in `set`.
    pub(super) async fn tally<Y: Send + 'static, N: Send + 'static>(
        &self,
        set: &mut Fanout<Y, N>,
    ) -> Tally<Y, N> {
        let quorum = self.inner.quorum;
        let mut tally = Tally::default();
        loop {
            let (yes, pending) = (tally.yes.len(), set.len());
            let decided = yes >= quorum
                || (yes + pending < quorum && (tally.answered() >= quorum || pending == 0));
            if decided {
                return tally;
            }
            match set.next().await {
                Some(reply) => tally.add(reply),
                None => return tally,
            }
        }
    }

    /// `Ok(true)` when a majority said yes, `Ok(false)` when a majority
    /// answered but not enough said yes, an error when too few answered.
    pub(super) fn verdict<Y, N>(&self, what: &str, tally: &Tally<Y, N>) -> Result<bool, LockError> {
        if tally.yes.len() >= self.inner.quorum {
            Ok(true)
        } else if tally.answered() >= self.inner.quorum {
            Ok(false)
        } else {
            Err(self.no_quorum(what, tally).into())
        }
    }

    pub(super) fn no_quorum<Y, N>(&self, what: &str, tally: &Tally<Y, N>) -> BackendError {
        let kind = match tally.failed.first() {
            Some(LockError::Backend(err)) => err.kind(),
            _ => BackendErrorKind::Other,
        };
        let reasons: Vec<String> = tally.failed.iter().map(ToString::to_string).collect();
        BackendError::new(
            kind,
            format!("{}: {what}", self.inner.name),
            format!(
                "{} of {} masters answered, a majority ({}) is needed: {}",
                tally.answered(),
                self.inner.masters.len(),
                self.inner.quorum,
                reasons.join("; "),
            ),
        )
    }
}

impl<Y, N> Default for Tally<Y, N> {
    fn default() -> Self {
        Tally {
            yes: Vec::new(),
            no: Vec::new(),
            failed: Vec::new(),
        }
    }
}

impl<Y, N> Tally<Y, N> {
    pub(super) fn answered(&self) -> usize {
        self.yes.len() + self.no.len()
    }

    pub(super) fn add(&mut self, reply: Reply<Y, N>) {
        match reply {
            (index, Ok(Answer::Yes(yes))) => self.yes.push((index, yes)),
            (index, Ok(Answer::No(no))) => self.no.push((index, no)),
            (_, Err(err)) => self.failed.push(err),
        }
    }
}

/// The masters' answers about one lease of a batch refresh.
#[derive(Default)]
pub(super) struct Votes {
    pub(super) yes: usize,
    pub(super) no: usize,
    /// Why the others failed, and the kind of the first failure.
    pub(super) failed: Vec<String>,
    pub(super) kind: Option<BackendErrorKind>,
}

impl Votes {
    pub(super) fn fail(&mut self, err: &LockError, reason: String) {
        if self.kind.is_none() {
            self.kind = Some(match err {
                LockError::Backend(err) => err.kind(),
                _ => BackendErrorKind::Other,
            });
        }
        self.failed.push(reason);
    }

    /// As [`RedlockBackend::tally`] decides: a majority said yes, or no
    /// longer can and either a majority answered or nobody is left to.
    pub(super) fn decided(&self, quorum: usize, pending: usize) -> bool {
        self.yes >= quorum
            || (self.yes + pending < quorum && (self.yes + self.no >= quorum || pending == 0))
    }
}
