use std::time::Duration;

use crate::KeyKind;

/// Everything that can go wrong when taking, keeping or giving back a lock.
///
/// Messages name the key, never the token. The enum is `#[non_exhaustive]`:
/// match the variants you handle and keep a `_` arm.
///
/// ```
/// use lockmacro_runtime::LockError;
///
/// let err = LockError::NotObtained { key: "user:42".into(), remaining: None, holder: None };
/// assert_eq!(err.to_string(), "lock `user:42` is held by someone else");
/// assert!(err.is_not_obtained());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another owner holds the key (after waiting as long as the retry
    /// strategy allows).
    #[error("lock `{key}` is held by someone else")]
    NotObtained {
        /// The key that could not be taken.
        key: String,
        /// How long the holder's lease had left when last seen, when the
        /// backend told: see [`LockError::retry_after`].
        remaining: Option<Duration>,
        /// The holder's metadata
        /// ([`ObtainOptions::metadata`](crate::ObtainOptions::metadata)),
        /// when the backend's answer carried it.
        holder: Option<String>,
    },

    /// The key is held as another kind than the obtain asked for (a lock
    /// asked for on a semaphore, a read on a semaphore, a semaphore of 5
    /// permits on one of 2): refused before anything was written. One key
    /// is one kind while it is held; give each use its own key.
    ///
    /// ```
    /// use lockmacro_runtime::{KeyKind, LockError};
    ///
    /// let err = LockError::WrongKind {
    ///     key: "jobs".into(),
    ///     held: KeyKind::Semaphore { permits: 2 },
    ///     asked: KeyKind::Semaphore { permits: 5 },
    /// };
    /// assert_eq!(
    ///     err.to_string(),
    ///     "`jobs` is a semaphore of 2 permits; asked for a semaphore of 5 permits"
    /// );
    /// ```
    #[error("`{key}` is {held}; asked for {asked}")]
    WrongKind {
        /// The key, as given to the obtain (without the locker's namespace).
        key: String,
        /// What the key is held as.
        held: KeyKind,
        /// What the obtain asked for.
        asked: KeyKind,
    },

    /// A task holding a read of a key asked for its write: upgrading a read
    /// would deadlock with another reader doing the same. Take the write
    /// from the start (and [`downgrade`](crate::Lock::downgrade) it to a
    /// read if need be), or release the read first.
    #[error(
        "this task holds a read of `{key}` and asked for its write: a read cannot be upgraded; \
         take the write from the start, or release the read first"
    )]
    UpgradeRefused {
        /// The key, as given to the obtain (without the locker's namespace).
        key: String,
    },

    /// The lock is no longer ours: it expired, was taken over, or its value was
    /// overwritten. Nothing was changed on the backend.
    #[error("lock `{key}` is no longer held by this owner (expired or taken over)")]
    NotHeld {
        /// The key that is no longer held.
        key: String,
    },

    /// The lease was lost while the protected code ran: the watchdog could not
    /// confirm a refresh before the lease's local deadline.
    #[error("lease on lock `{key}` was lost while the protected code ran")]
    Lost {
        /// The key whose lease was lost.
        key: String,
    },

    /// The locker was shut down ([`Locker::shutdown`](crate::Locker::shutdown),
    /// through it or one of its clones): it takes no more locks, waiting
    /// obtains end with this error, and a body run under a lease that the
    /// shutdown gave back ends with it too. Trying again does not help.
    #[error("lock `{key}`: its locker was shut down, and takes or keeps no locks any more")]
    ShutDown {
        /// The key that was asked for, or whose lease was given back.
        key: String,
    },

    /// `#[distributed_lock]` without `locker = …` found no global locker.
    #[error(
        "no locker configured: call `lockmacro_runtime::set_global(Locker::connect(url).await?)` \
         at start-up, or pass `locker = …` to `#[distributed_lock]`"
    )]
    NotConfigured,

    /// The key cannot be used as a lock key.
    #[error("invalid lock key `{key}`: {reason}")]
    InvalidKey {
        /// The key as given.
        key: String,
        /// Why it was refused and what to do instead.
        reason: String,
    },

    /// A duration is out of range: beyond what the backend can store, or
    /// unusable with the others (a refresh period not shorter than the ttl).
    #[error("invalid {what} {value:?} for lock `{key}`: {reason}")]
    InvalidDuration {
        /// The key the duration was meant for.
        key: String,
        /// Which duration (`ttl`, `hold_at_least`, …).
        what: &'static str,
        /// The value given.
        value: Duration,
        /// What the value must be instead.
        reason: String,
    },

    /// A connection URL could not be parsed.
    #[error("invalid Redis URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL as given, with any password replaced by `***`.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The backend could not be reached or answered with an error.
    #[error(transparent)]
    Backend(#[from] BackendError),

    /// The lock was taken, but fewer replicas than
    /// [`ObtainOptions::replicas`](crate::ObtainOptions::replicas) asked for
    /// acknowledged it in time; it was released (or, if that failed too, is
    /// left to expire with its ttl). Retrying helps once the replicas are
    /// back in sync.
    #[error(
        "lock `{key}` was released: {acknowledged} of the {wanted} replica(s) asked for \
         acknowledged it within {timeout:?}"
    )]
    NotReplicated {
        /// The key, as sent to the server (with the locker's namespace).
        key: String,
        /// How many replicas were asked for.
        wanted: usize,
        /// How many acknowledged the lock in time.
        acknowledged: usize,
        /// How long they were waited for.
        timeout: Duration,
    },
}

impl LockError {
    /// True for [`LockError::NotObtained`]: someone else holds the key.
    pub fn is_not_obtained(&self) -> bool {
        matches!(self, LockError::NotObtained { .. })
    }

    /// How long to wait before trying again, for a
    /// [`LockError::NotObtained`]: the holder's remaining lease, when the
    /// backend told it (an HTTP handler's `Retry-After`). `None` for every
    /// other error.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, ObtainOptions};
    ///
    /// let locker = Locker::memory();
    /// let _held = locker.obtain("report", Duration::from_secs(30), ObtainOptions::new()).await?;
    /// let err = locker.obtain("report", Duration::from_secs(30), ObtainOptions::new()).await.unwrap_err();
    /// let retry_after = err.retry_after().expect("the memory backend knows the holder's lease");
    /// assert!(retry_after <= Duration::from_secs(30));
    /// # Ok(()) }
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LockError::NotObtained { remaining, .. } => *remaining,
            _ => None,
        }
    }

    /// True for [`LockError::NotHeld`] and [`LockError::Lost`]: the lock is
    /// no longer ours.
    pub fn is_not_held(&self) -> bool {
        matches!(self, LockError::NotHeld { .. } | LockError::Lost { .. })
    }

    /// True for failures that the same call may get past later, with
    /// nothing changed on the caller's side: the backend could not be
    /// reached, did not answer in time, was failing over or answered with an
    /// error of its own ([`BackendErrorKind::is_transient`]), or too few
    /// replicas acknowledged a lock ([`LockError::NotReplicated`]). False for
    /// what retrying cannot cure (credentials, permissions, TLS, a key, a
    /// duration or a URL refused, a combination the backend does not
    /// support) and for the outcomes of contention, which have their own
    /// tests: [`is_not_obtained`](Self::is_not_obtained) (someone else holds
    /// the key) and [`is_not_held`](Self::is_not_held) (the lock is no
    /// longer ours).
    ///
    /// A service can map errors to responses with these three tests:
    ///
    /// ```
    /// use lockmacro_runtime::LockError;
    ///
    /// /// The HTTP status for a handler whose lock failed.
    /// fn status(err: &LockError) -> u16 {
    ///     if err.is_not_obtained() {
    ///         409 // busy: someone else is doing it
    ///     } else if err.is_transient() {
    ///         503 // the lock store is unavailable: try again later
    ///     } else {
    ///         500 // a bug or a misconfiguration: retrying will not help
    ///     }
    /// }
    ///
    /// let busy = LockError::NotObtained { key: "user:42".into(), remaining: None, holder: None };
    /// assert_eq!(status(&busy), 409);
    /// assert_eq!(status(&LockError::NotConfigured), 500);
    /// ```
    pub fn is_transient(&self) -> bool {
        match self {
            LockError::Backend(err) => err.kind().is_transient(),
            LockError::NotReplicated { .. } => true,
            _ => false,
        }
    }
}

/// What kind of backend failure happened: decides whether retrying can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendErrorKind {
    /// The server could not be reached (refused, reset, closed).
    Unreachable,
    /// The server did not answer in time.
    Timeout,
    /// The server refused the credentials.
    Authentication,
    /// The user lacks a permission the library needs (Redis ACL).
    Permission,
    /// The TLS handshake failed: the server's certificate is not trusted or
    /// not for that host name, the port does not speak TLS, or the root
    /// certificate given cannot be read. Retrying does not help.
    Tls,
    /// The backend cannot do what the call asked for (fair hand-off on a
    /// backend without a queue of waiters, replicas where there are none):
    /// the message says what to do instead. Retrying does not help.
    Unsupported,
    /// Any other error reported by the server or the client.
    Other,
}

impl BackendErrorKind {
    /// True for the kinds that trying again may cure: [`Unreachable`],
    /// [`Timeout`] and [`Other`] (which covers a server failing over, still
    /// loading, or answering as a read-only replica). False for
    /// [`Authentication`], [`Permission`], [`Tls`] and [`Unsupported`].
    ///
    /// [`Unreachable`]: Self::Unreachable
    /// [`Timeout`]: Self::Timeout
    /// [`Other`]: Self::Other
    /// [`Authentication`]: Self::Authentication
    /// [`Permission`]: Self::Permission
    /// [`Tls`]: Self::Tls
    /// [`Unsupported`]: Self::Unsupported
    ///
    /// ```
    /// use lockmacro_runtime::BackendErrorKind;
    ///
    /// assert!(BackendErrorKind::Timeout.is_transient());
    /// assert!(!BackendErrorKind::Authentication.is_transient());
    /// ```
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            BackendErrorKind::Unreachable | BackendErrorKind::Timeout | BackendErrorKind::Other
        )
    }
}

/// A failure of the backend, with the server's own message.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {message}")]
pub struct BackendError {
    kind: BackendErrorKind,
    context: String,
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl BackendError {
    /// A backend error of `kind`. `context` says which backend and operation
    /// (`"redis 127.0.0.1:6379: obtain `user:42`"`), `message` what happened.
    pub fn new(
        kind: BackendErrorKind,
        context: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        BackendError {
            kind,
            context: context.into(),
            message: message.into(),
            source: None,
        }
    }

    /// Attaches the underlying error.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> BackendErrorKind {
        self.kind
    }
}
