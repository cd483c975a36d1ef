//! The lock protocol over any [`Transport`]: which script each call runs,
//! with which keys and arguments, and what its reply means. A single server
//! and a cluster speak it alike.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::FromRedisValue;

use super::capabilities::Features;
use super::config::RedisConfig;
use super::errors::Failure;
use super::protocol::{
    Joined, REFRESH_BATCH, RefreshMany, acknowledged_acquire_pipe, acknowledged_outcome,
    acquire_args, acquire_fair_args, acquire_shared_args, acquired, check_replica_timeout, millis,
    not_a_fence, not_shares, plain_outcome, plain_set, pttl, refreshed, release_args,
};
use super::retry;
use super::scripts::{
    ACQUIRE, ACQUIRE_FAIR, ACQUIRE_SHARED, CONFIRM, Call, Lua, REFRESH, REFRESH_MANY, RELEASE,
    REMAINING, call,
};
use super::transport::Transport;
use crate::LockError;
use crate::backend::{AcquireRequest, Acquired, RefreshRequest, ReleaseListener, TOKEN_LEN};

/// The lock protocol, sent through `T`.
#[derive(Clone)]
pub(in crate::backend) struct Protocol<T> {
    pub(in crate::backend) transport: T,
    /// `RedisConfig::fence_expiry` and `grant_lease`, in ms, as the scripts
    /// take them.
    pub(in crate::backend) fence_expiry: String,
    grant_lease: String,
    /// Whether calls go through the scripts, and the native commands.
    pub(in crate::backend) features: Arc<Features>,
}

impl<T: Transport> Protocol<T> {
    pub(in crate::backend) fn new(transport: T, config: &RedisConfig) -> Self {
        let features = if transport.exclusive().is_some() {
            Features::new(config.scripts)
        } else {
            Features::scripts_only(config.scripts)
        };
        Protocol {
            transport,
            fence_expiry: millis(config.fence_expiry),
            grant_lease: millis(config.grant_lease),
            features: Arc::new(features),
        }
    }

    pub(super) fn name(&self) -> &str {
        self.transport.name()
    }

    /// Runs `attempt` on `conn`, and again as the transport's policy says.
    pub(super) fn send<'a, R, F, Fut>(
        &'a self,
        conn: &'a T::Conn,
        keys: &[String],
        attempt: F,
    ) -> impl Future<Output = Result<R, Failure>> + use<'a, R, F, Fut, T>
    where
        F: FnMut(T::Conn) -> Fut,
        Fut: Future<Output = redis::RedisResult<R>>,
    {
        retry::follow(self.transport.policy(conn, keys), attempt)
    }

    /// Calls `lua` with `keys` and `args`; `what` names the call in errors.
    ///
    /// Not an `async fn`, whose future would hold its arguments twice: every
    /// release and refresh awaits this one.
    #[allow(
        clippy::manual_async_fn,
        reason = "an async fn's future holds its arguments twice"
    )]
    pub(in crate::backend) fn script<'a, R, A>(
        &'a self,
        what: &'a str,
        keys: &'a [String],
        lua: &'a Lua,
        args: &'a [A],
    ) -> impl Future<Output = Result<R, LockError>> + Send + 'a
    where
        R: FromRedisValue + Send + 'a,
        A: redis::ToRedisArgs + Sync,
    {
        async move {
            self.send(self.transport.conn(), keys, |mut conn| async move {
                call(&mut conn, lua, T::LOAD, Call { keys, args }).await
            })
            .await
            .map_err(|failure| {
                let what = format!("{what} `{}`", keys.join("`, `"));
                failure.into_error(self.name(), &what).into()
            })
        }
    }

    /// A plain lock's one `SET … NX PX`, with scripts or without: the
    /// answer when it decides, `None` when the key holds shares (a set, a
    /// hash), which the caller's full acquire reads and may take.
    pub(super) async fn plain_attempt(
        &self,
        req: &AcquireRequest<'_>,
    ) -> Result<Option<Acquired>, LockError> {
        let set = &plain_set(req);
        let taken: Result<bool, Failure> = self
            .send(self.transport.conn(), req.keys, |mut conn| async move {
                set.query_async(&mut conn).await
            })
            .await;
        match taken {
            Ok(true) => Ok(Some(Acquired::Obtained { fence: None })),
            // Boxed, as the busy path alone reads the key.
            Ok(false) => Box::pin(self.plain_refused(req)).await,
            Err(failure) => Err(self.obtain_failed(req, failure)),
        }
    }

    /// After a refused `SET … NX`: who holds the key, and for how long.
    /// `GET` and `PTTL` are sent at once, in one round trip, as two
    /// commands rather than a pipeline: a cluster's client follows a slot's
    /// migration (`ASK`) for a command, not for a pipeline.
    async fn plain_refused(&self, req: &AcquireRequest<'_>) -> Result<Option<Acquired>, LockError> {
        let key = &req.keys[0];
        let conn = self.transport.conn();
        let value = self.send(conn, req.keys, |mut conn| async move {
            redis::cmd("GET")
                .arg(key)
                .query_async::<Option<String>>(&mut conn)
                .await
        });
        let left = self.send(conn, req.keys, |mut conn| async move {
            redis::cmd("PTTL")
                .arg(key)
                .query_async::<i64>(&mut conn)
                .await
        });
        match futures_util::future::join(value, left).await {
            // How long it has left is only shown: without it, the refusal
            // stands.
            (Ok(value), left) => Ok(plain_outcome(req, value, left.ok())),
            (Err(Failure::Redis(err)), _) if err.code() == Some("WRONGTYPE") => Ok(None),
            (Err(failure), _) => Err(self.obtain_failed(req, failure)),
        }
    }

    fn obtain_failed(&self, req: &AcquireRequest<'_>, failure: Failure) -> LockError {
        let what = format!("obtain `{}`", req.keys[0]);
        failure.into_error(self.name(), &what).into()
    }

    /// Not an `async fn`, whose future would hold the request twice: this
    /// one is part of every obtain's boxed future.
    #[allow(
        clippy::manual_async_fn,
        reason = "an async fn's future holds its arguments twice"
    )]
    pub(super) fn acquire_scripted<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> impl Future<Output = Result<Acquired, LockError>> + Send + 'a {
        async move {
            self.transport.check(req.keys, req.fence_key)?;
            if req.replicas > 0 {
                // Boxed: its pipeline's state would otherwise double the size
                // of every acquire's future, which the backend's box copies.
                return Box::pin(self.acquire_acknowledged(req)).await;
            }
            if req.is_plain()
                && let Some(done) = self.plain_attempt(&req).await?
            {
                return Ok(done);
            }
            // Boxed, so that a plain lock's acquire, the most frequent,
            // carries only the plain attempt's state.
            Box::pin(self.acquire_script(req)).await
        }
    }

    /// The acquire script: a fair, shared or fenced lock, several keys, or
    /// a plain lock whose key holds shares.
    async fn acquire_script(&self, req: AcquireRequest<'_>) -> Result<Acquired, LockError> {
        let companions = T::COMPANIONS;
        if req.queue_for.is_some() && companions.queue(&req.keys[0]).is_empty() {
            return Err(LockError::InvalidKey {
                key: req.keys[0].clone(),
                reason: "a fair lock keeps its waiters at a key derived from the lock's, \
                         which for a key with a `}` but no hash tag is in another Redis \
                         Cluster slot; give the key a hash tag (only the text between the \
                         first `{` and `}` is hashed)"
                    .to_owned(),
            });
        }
        let mut keys = req.keys.to_vec();
        keys.extend(req.fence_key.map(str::to_owned));
        let (expiry, lease) = (self.fence_expiry.as_str(), self.grant_lease.as_str());
        let reply: Result<Vec<i64>, LockError> = if let Some(share) = req.share {
            let args = acquire_shared_args(&req, share, expiry, lease, companions);
            self.script("obtain", &keys, &ACQUIRE_SHARED, &args)
                .await
                .map_err(|err| not_shares(err, &req.keys[0]))
        } else if let Some(wait) = req.queue_for {
            let queue = companions.queue(&req.keys[0]);
            let args = acquire_fair_args(&req, wait, queue, expiry, lease, companions);
            self.script("obtain", &keys, &ACQUIRE_FAIR, &args).await
        } else {
            let args = acquire_args(&req, expiry, companions);
            self.script("obtain", &keys, &ACQUIRE, &args).await
        };
        let reply = reply.map_err(|err| not_a_fence(err, req.fence_key))?;
        acquired(&reply, &req, self.name())
    }

    /// An acquire that waits for `req.replicas` replicas; gives the keys
    /// back when fewer acknowledge them in time. The acquire and its `WAIT`
    /// go in one pipeline, and are sent again together.
    async fn acquire_acknowledged(&self, req: AcquireRequest<'_>) -> Result<Acquired, LockError> {
        let what = || format!("obtain `{}`", req.keys.join("`, `"));
        check_replica_timeout(&req, self.transport.response_timeout(), self.name())?;
        let conn = self.transport.acknowledged(req.keys).await?;
        let pipe = &acknowledged_acquire_pipe(&req, &self.fence_expiry, T::COMPANIONS);
        let (reply, acked): (Vec<i64>, usize) = self
            .send(&conn, req.keys, |mut conn| async move {
                pipe.query_async(&mut conn).await
            })
            .await
            .map_err(|failure| LockError::from(failure.into_error(self.name(), &what())))?;
        match acknowledged_outcome(&reply, acked, &req, self.name())? {
            Ok(outcome) => Ok(outcome),
            Err(acked) => {
                if let Err(err) = self.release_value(req.keys, req.token(), "").await {
                    tracing::warn!(target: "lockmacro", server = %self.name(), error = %err,
                        "could not give back a lock the replicas did not acknowledge; it expires with its ttl");
                }
                Err(LockError::NotReplicated {
                    key: req.keys[0].clone(),
                    // The locker names the key as given, and its namespace.
                    namespace: String::new(),
                    wanted: req.replicas,
                    acknowledged: acked,
                    timeout: req.replica_timeout,
                })
            }
        }
    }

    pub(super) async fn refresh_scripted(
        &self,
        keys: &[String],
        token: &str,
        ttl: Duration,
    ) -> Result<bool, LockError> {
        self.transport.check(keys, None)?;
        if token.len() != TOKEN_LEN {
            return Ok(false);
        }
        let args = [token, &millis(ttl)];
        let done: i64 = self.script("refresh", keys, &REFRESH, &args).await?;
        Ok(done == 1)
    }

    /// One script call per 500 leases (on a cluster: per slot, and per 500
    /// leases in it), all sent at once.
    pub(super) async fn refresh_many_scripted(
        &self,
        requests: &[RefreshRequest<'_>],
    ) -> Vec<Result<bool, LockError>> {
        let mut results: Vec<Option<Result<bool, LockError>>> =
            requests.iter().map(|_| None).collect();
        let mut batches: HashMap<u16, Vec<usize>> = HashMap::new();
        for (index, req) in requests.iter().enumerate() {
            if let Err(err) = self.transport.check(req.keys, None) {
                results[index] = Some(Err(err));
            } else if req.token.len() != TOKEN_LEN {
                results[index] = Some(Ok(false));
            } else {
                let first = req.keys.first().map_or(0, |key| self.transport.batch(key));
                batches.entry(first).or_default().push(index);
            }
        }
        let batches: Vec<&[usize]> = batches
            .values()
            .flat_map(|indices| indices.chunks(REFRESH_BATCH))
            .collect();
        let calls = batches
            .iter()
            .map(|batch| self.refresh_batch(batch.iter().map(|&i| &requests[i]).collect()));
        let outcomes = futures_util::future::join_all(calls).await;
        for (batch, outcome) in batches.iter().zip(outcomes) {
            for (&index, result) in batch.iter().zip(outcome) {
                results[index] = Some(result);
            }
        }
        results
            .into_iter()
            .map(|result| result.unwrap_or(Ok(false)))
            .collect()
    }

    /// One call of the refresh script for `requests` (all with a well-formed
    /// token, at most [`REFRESH_BATCH`] of them, all in one batch).
    async fn refresh_batch(
        &self,
        requests: Vec<&RefreshRequest<'_>>,
    ) -> Vec<Result<bool, LockError>> {
        let keys = requests.first().map(|req| req.keys).unwrap_or_default();
        let requests = &requests;
        let reply = self
            .send(self.transport.conn(), keys, |mut conn| async move {
                call(&mut conn, &REFRESH_MANY, T::LOAD, RefreshMany(requests)).await
            })
            .await;
        refreshed(reply, requests, self.name())
    }

    /// The release script, given the lease's value (`token`, then
    /// `metadata`; the metadata may be left out, which costs a release of a
    /// lock that has some the read of its waiters flag).
    pub(super) async fn release_scripted(
        &self,
        keys: &[String],
        token: &str,
        metadata: &str,
    ) -> Result<bool, LockError> {
        self.transport.check(keys, None)?;
        if token.len() != TOKEN_LEN {
            return Ok(false);
        }
        let done: i64 = if let [key] = keys {
            // One lock, the usual release: its arguments on the stack, the
            // value written as one argument without being joined first,
            // the flag only where the script cannot derive it.
            let value = Joined(token, metadata);
            if T::COMPANIONS.derivable() {
                self.script("release", keys, &RELEASE, &[value]).await?
            } else {
                let flag = T::COMPANIONS.flag(key);
                let args = [value, Joined(&flag, "")];
                self.script("release", keys, &RELEASE, &args).await?
            }
        } else {
            let args = release_args(keys, token, T::COMPANIONS);
            self.script("release", keys, &RELEASE, &args).await?
        };
        Ok(done == 1)
    }

    pub(super) async fn remaining_scripted(
        &self,
        keys: &[String],
        token: &str,
    ) -> Result<Option<Duration>, LockError> {
        self.transport.check(keys, None)?;
        if token.len() != TOKEN_LEN {
            return Ok(None);
        }
        let remaining: i64 = self.script("ttl", keys, &REMAINING, &[token]).await?;
        Ok(pttl(remaining))
    }

    pub(in crate::backend) async fn listen(
        &self,
        key: &str,
        token: Option<&str>,
    ) -> ReleaseListener {
        self.transport.wakeups().listen(key, token).await
    }

    pub(in crate::backend) fn listening(&self, key: &str) -> bool {
        self.transport.wakeups().subscribed(key)
    }

    pub(super) async fn confirm_scripted(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<bool, LockError> {
        let keys = [key.to_owned()];
        let args = [token, &millis(ttl)];
        let done: i64 = self.script("confirm", &keys, &CONFIRM, &args).await?;
        Ok(done == 1)
    }
}

/// [`Backend`](crate::backend::Backend) and
/// [`FairQueue`](crate::backend::FairQueue) for `$backend`, named `$name`,
/// whose `protocol` field is a [`Protocol`]: a single server and a cluster
/// answer every call alike.
macro_rules! speaks_protocol {
    ($backend:ty, $name:literal) => {
        impl $crate::backend::Backend for $backend {
            fn name(&self) -> &'static str {
                $name
            }

            fn acquire<'a>(
                &'a self,
                req: $crate::backend::AcquireRequest<'a>,
            ) -> $crate::backend::BoxFuture<'a, Result<$crate::backend::Acquired, $crate::LockError>>
            {
                Box::pin(self.protocol.acquire(req))
            }

            fn refresh<'a>(
                &'a self,
                keys: &'a [String],
                token: &'a str,
                ttl: ::std::time::Duration,
            ) -> $crate::backend::BoxFuture<'a, Result<bool, $crate::LockError>> {
                Box::pin(self.protocol.refresh(keys, token, ttl))
            }

            /// One script call per 500 leases (on a cluster: per hash slot,
            /// and per 500 leases in it), all sent at once.
            fn refresh_many<'a>(
                &'a self,
                requests: &'a [$crate::backend::RefreshRequest<'a>],
            ) -> $crate::backend::BoxFuture<'a, Vec<Result<bool, $crate::LockError>>> {
                Box::pin(self.protocol.refresh_many(requests))
            }

            fn release<'a>(
                &'a self,
                keys: &'a [String],
                token: &'a str,
            ) -> $crate::backend::BoxFuture<'a, Result<bool, $crate::LockError>> {
                Box::pin(self.protocol.release_value(keys, token, ""))
            }

            fn release_value<'a>(
                &'a self,
                keys: &'a [String],
                token: &'a str,
                metadata: &'a str,
            ) -> $crate::backend::BoxFuture<'a, Result<bool, $crate::LockError>> {
                Box::pin(self.protocol.release_value(keys, token, metadata))
            }

            fn remaining<'a>(
                &'a self,
                keys: &'a [String],
                token: &'a str,
            ) -> $crate::backend::BoxFuture<'a, Result<Option<::std::time::Duration>, $crate::LockError>>
            {
                Box::pin(self.protocol.remaining(keys, token))
            }

            fn listen<'a>(
                &'a self,
                key: &'a str,
            ) -> $crate::backend::BoxFuture<'a, $crate::backend::ReleaseListener> {
                Box::pin(self.protocol.listen(key, None))
            }

            fn capabilities(&self) -> $crate::backend::Capabilities<'_> {
                $crate::backend::Capabilities::none()
                    .with_fair_queue(self)
                    .with_shares()
                    .with_replicas()
            }

            fn inspect<'a>(
                &'a self,
                key: &'a str,
                fence_key: &'a str,
            ) -> $crate::backend::BoxFuture<'a, Result<$crate::backend::Inspection, $crate::LockError>>
            {
                Box::pin(self.protocol.inspect(key, fence_key))
            }

            fn keys<'a>(
                &'a self,
                prefix: &'a str,
            ) -> $crate::backend::BoxFuture<'a, Result<Vec<String>, $crate::LockError>> {
                Box::pin(self.protocol.keys(prefix))
            }

            fn force_release<'a>(
                &'a self,
                key: &'a str,
            ) -> $crate::backend::BoxFuture<'a, Result<bool, $crate::LockError>> {
                Box::pin(self.protocol.force_release(key))
            }

            fn downgrade<'a>(
                &'a self,
                key: &'a str,
                token: &'a str,
            ) -> $crate::backend::BoxFuture<'a, Result<bool, $crate::LockError>> {
                Box::pin(self.protocol.downgrade(key, token))
            }
        }

        impl $crate::backend::FairQueue for $backend {
            fn listen_granted<'a>(
                &'a self,
                key: &'a str,
                token: &'a str,
            ) -> $crate::backend::BoxFuture<'a, $crate::backend::ReleaseListener> {
                Box::pin(self.protocol.listen(key, Some(token)))
            }

            fn listening(&self, key: &str) -> bool {
                self.protocol.listening(key)
            }

            fn confirm<'a>(
                &'a self,
                key: &'a str,
                token: &'a str,
                ttl: ::std::time::Duration,
            ) -> $crate::backend::BoxFuture<'a, Result<bool, $crate::LockError>> {
                Box::pin(self.protocol.confirm(key, token, ttl))
            }
        }
    };
}

pub(in crate::backend) use speaks_protocol;
