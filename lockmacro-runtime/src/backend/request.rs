//! What the core sends a backend, and what it answers.

use std::time::Duration;

#[cfg(doc)]
use super::Backend;
use crate::KeyKind;
#[cfg(doc)]
use crate::LockError;

/// Length of a lock token: 32 lowercase hex digits (a 128-bit uuid v4).
///
/// The value stored under a lock key starts with the token; metadata follows.
/// Backends compare exactly this many leading bytes, so that a shorter string
/// can never pass for a token.
pub const TOKEN_LEN: usize = 32;

/// The byte a Redis waiter appends to the value of a lock it waits for, so
/// that a release of a value without it need not look for waiters (see
/// `scripts/mark.lua`, which defines it for the scripts). No token ends with
/// it; whoever compares a whole value, or shows its metadata, accepts or
/// drops one trailing mark.
#[cfg(feature = "redis")]
pub(crate) const WAITED_MARK: &str = "\0";

/// `value` without its trailing [`WAITED_MARK`], if it has one.
#[cfg(feature = "redis")]
pub(crate) fn unmarked(value: &str) -> &str {
    value.strip_suffix(WAITED_MARK).unwrap_or(value)
}

/// One acquisition attempt, as sent to a [`Backend`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AcquireRequest<'a> {
    /// Keys to take together, all or none; namespaced, sorted, no duplicates.
    pub keys: &'a [String],
    /// Value to store under every key: the token, then the metadata.
    pub value: &'a str,
    /// Lease length.
    pub ttl: Duration,
    /// Counter to increment and return when the keys are taken.
    pub fence_key: Option<&'a str>,
    /// A fair attempt (one key only): take the key only if nobody is queued
    /// ahead, else join the key's queue (once, whatever the number of
    /// attempts) for at most this long. `Duration::ZERO` respects the queue
    /// without joining it. `None`: an ordinary attempt.
    pub queue_for: Option<Duration>,
    /// Replicas that must acknowledge the keys once taken (`0`: none); see
    /// [`Capabilities::replicas`](super::Capabilities::replicas). A backend that takes the keys but
    /// hears fewer acknowledgements gives the keys back and fails with
    /// [`LockError::NotReplicated`].
    pub replicas: usize,
    /// How long to wait for those acknowledgements.
    pub replica_timeout: Duration,
    /// The caller listens for the release of a busy key and will wait for
    /// it: report the holder's remaining lease in [`Acquired::Busy`] if the
    /// backend can tell, so that the wait ends by itself when the lease
    /// does. Without it, a backend may answer a busy key more cheaply, with
    /// `remaining: None`.
    pub wait: bool,
    /// The number of this attempt within one obtain, from 1 (`0`: not
    /// counted). A backend that hands keys over for a grant lease names the
    /// last attempt that found the waiter in line, so that the waiter knows
    /// from when the lease runs.
    pub attempt: u32,
    /// `Some(share)`: take a share of the one key (one of its permits, or a
    /// read or the write of a read-write lock; see
    /// [`Capabilities::shares`](super::Capabilities::shares)) rather than the key itself.
    pub share: Option<Share>,
}

/// A share of a key, as opposed to the whole key: see
/// [`AcquireRequest::share`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Share {
    /// One of this many permits: a semaphore.
    Permits(u32),
    /// A read of a read-write lock: many readers at once, no writer.
    Read,
    /// The write of a read-write lock: alone, ahead of readers that come
    /// after it.
    Write,
}

impl Share {
    /// The kind of key this share is of: a semaphore for permits, a
    /// read-write lock for a read or the write.
    ///
    /// ```
    /// use lockmacro_runtime::KeyKind;
    /// use lockmacro_runtime::backend::Share;
    ///
    /// assert_eq!(Share::Permits(2).kind(), KeyKind::Semaphore { permits: 2 });
    /// assert_eq!(Share::Write.kind(), KeyKind::ReadWrite);
    /// ```
    pub fn kind(self) -> KeyKind {
        match self {
            Share::Permits(permits) => KeyKind::Semaphore { permits },
            Share::Read | Share::Write => KeyKind::ReadWrite,
        }
    }
}

impl<'a> AcquireRequest<'a> {
    /// The kind of key this attempt asks for: a lock without a share.
    pub fn kind(&self) -> KeyKind {
        self.share.map_or(KeyKind::Lock, Share::kind)
    }

    /// An ordinary attempt to take every one of `keys` (namespaced, sorted,
    /// no duplicates) for `ttl`, storing `value`: the owner's token
    /// ([`TOKEN_LEN`] hex digits), then any metadata. No fence, no queue,
    /// no replicas; add them with the methods below.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::MemoryBackend;
    /// use lockmacro_runtime::backend::{AcquireRequest, Acquired, Backend};
    ///
    /// let backend = MemoryBackend::new();
    /// let keys = ["job".to_owned()];
    /// let value = "0123456789abcdef0123456789abcdef worker-7";
    /// let request = AcquireRequest::new(&keys, value, Duration::from_secs(5)).fence_key("job:fence");
    /// assert!(matches!(backend.acquire(request).await?, Acquired::Obtained { fence: Some(_) }));
    /// assert_eq!(request.token(), "0123456789abcdef0123456789abcdef");
    /// # Ok(()) }
    /// ```
    pub fn new(keys: &'a [String], value: &'a str, ttl: Duration) -> Self {
        AcquireRequest {
            keys,
            value,
            ttl,
            fence_key: None,
            queue_for: None,
            replicas: 0,
            replica_timeout: Duration::ZERO,
            wait: false,
            attempt: 0,
            share: None,
        }
    }

    /// The caller will wait if the key is busy: see [`AcquireRequest::wait`].
    pub fn waiting(mut self) -> Self {
        self.wait = true;
        self
    }

    /// A share of the key: see [`AcquireRequest::share`].
    pub fn share(mut self, share: Share) -> Self {
        self.share = Some(share);
        self
    }

    /// Numbers this attempt: see [`AcquireRequest::attempt`].
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// True for the attempt that costs what the floor costs: one key, no
    /// fence, no queue, no replicas, nobody waiting on the answer. A Redis
    /// backend sends it as one plain `SET key value NX PX ttl`.
    pub fn is_plain(&self) -> bool {
        self.keys.len() == 1
            && self.fence_key.is_none()
            && self.queue_for.is_none()
            && self.replicas == 0
            && self.share.is_none()
            && !self.wait
    }

    /// Mints a fencing token from the counter at `fence_key`.
    pub fn fence_key(mut self, fence_key: &'a str) -> Self {
        self.fence_key = Some(fence_key);
        self
    }

    /// A fair attempt: see [`AcquireRequest::queue_for`].
    pub fn queue_for(mut self, wait: Duration) -> Self {
        self.queue_for = Some(wait);
        self
    }

    /// Waits up to `timeout` for `replicas` replicas to acknowledge the keys.
    pub fn replicas(mut self, replicas: usize, timeout: Duration) -> Self {
        self.replicas = replicas;
        self.replica_timeout = timeout;
        self
    }

    /// The owner's token: the first [`TOKEN_LEN`] bytes of the value (all
    /// of it, if shorter).
    pub fn token(&self) -> &str {
        self.value.get(..TOKEN_LEN).unwrap_or(self.value)
    }
}

/// One lease to refresh, as sent to [`Backend::refresh_many`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RefreshRequest<'a> {
    /// The lease's keys; namespaced, sorted, no duplicates.
    pub keys: &'a [String],
    /// The owner's token.
    pub token: &'a str,
    /// The new lease length.
    pub ttl: Duration,
}

impl<'a> RefreshRequest<'a> {
    /// A request to extend `keys` to `ttl` if they still hold `token`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::MemoryBackend;
    /// use lockmacro_runtime::backend::{Backend, RefreshRequest};
    ///
    /// let backend = MemoryBackend::new();
    /// let keys = ["job".to_owned()];
    /// let token = "0123456789abcdef0123456789abcdef";
    /// let requests = [RefreshRequest::new(&keys, token, Duration::from_secs(5))];
    /// // Nothing holds `job`: the refresh is refused.
    /// assert!(!backend.refresh_many(&requests).await[0].as_ref().unwrap());
    /// # Ok(()) }
    /// ```
    pub fn new(keys: &'a [String], token: &'a str, ttl: Duration) -> Self {
        RefreshRequest { keys, token, ttl }
    }
}

/// What one acquisition attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// All keys are now ours; `fence` is the new fencing token when one was
    /// asked for.
    Obtained {
        /// The fencing token, when a fence key was given.
        fence: Option<u64>,
    },
    /// `keys[index]` is held by someone else, for about `remaining` more
    /// (`None` when the backend cannot tell, e.g. a key without expiry).
    Busy {
        /// Index in the request's keys of a key that is held.
        index: usize,
        /// The holder's remaining lease.
        remaining: Option<Duration>,
        /// The holder's metadata, when the backend read it (a refused
        /// plain Redis attempt reads the holder's value and its `PTTL`).
        holder: Option<String>,
    },
}
