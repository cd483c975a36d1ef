use std::time::Duration;

use crate::KeyKind;

/// Everything that can go wrong when taking, keeping or giving back a lock.
///
/// Messages name the key, never the token: the key as the caller gave it,
/// with the locker's namespace beside it when it has one
/// (`` lock `customer:42` (namespace `shop`) is held by someone else ``),
/// in every error about a lock, backend errors included; the variants carry
/// both. The enum is `#[non_exhaustive]`: match the variants you handle and
/// keep a `_` arm.
///
/// ```
/// use lockmacro_runtime::LockError;
///
/// let err = LockError::NotObtained { key: "user:42".into(), namespace: String::new(), remaining: None, holder: None };
/// assert_eq!(err.to_string(), "lock `user:42` is held by someone else");
/// assert!(err.is_not_obtained());
///
/// let err = LockError::NotObtained { key: "customer:42".into(), namespace: "shop".into(), remaining: None, holder: None };
/// assert_eq!(
///     err.to_string(),
///     "lock `customer:42` (namespace `shop`) is held by someone else"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another owner holds the key (after waiting as long as the retry
    /// strategy allows).
    #[error("lock {} is held by someone else", described_key(key, namespace))]
    NotObtained {
        /// The key that could not be taken, as the caller gave it.
        key: String,
        /// The locker's namespace (empty without one).
        namespace: String,
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
    #[error(
        "lock {} is no longer held by this owner (expired or taken over)",
        described_key(key, namespace)
    )]
    NotHeld {
        /// The key that is no longer held, as the caller gave it.
        key: String,
        /// The locker's namespace (empty without one).
        namespace: String,
    },

    /// The lease was lost while the protected code ran: the watchdog could not
    /// confirm a refresh before the lease's local deadline.
    #[error(
        "lease on lock {} was lost while the protected code ran",
        described_key(key, namespace)
    )]
    Lost {
        /// The key whose lease was lost, as the caller gave it.
        key: String,
        /// The locker's namespace (empty without one).
        namespace: String,
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

    /// A fencing token no backend mints: 0. A write that carried it would
    /// be ordered before every real token, and a store that took it would
    /// then take an older holder's write over it. Use the token of the
    /// lock ([`Lock::fence_token`](crate::Lock::fence_token)).
    #[error("invalid fencing token {token} for `{key}`: {reason}")]
    InvalidToken {
        /// The resource's key, as given.
        key: String,
        /// The token given.
        token: u64,
        /// Why it was refused.
        reason: String,
    },

    /// A connection URL could not be parsed.
    #[error("invalid URL `{url}`: {reason}")]
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
        "lock {} was released: {acknowledged} of the {wanted} replica(s) asked for \
         acknowledged it within {timeout:?}",
        described_key(key, namespace)
    )]
    NotReplicated {
        /// The key, as the caller gave it.
        key: String,
        /// The locker's namespace (empty without one).
        namespace: String,
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
    /// backend told it. `None` for every other error. A holder that renews
    /// its lease (the watchdog of `#[distributed_lock]` and
    /// [`Locker::hold`](crate::Locker::hold)) keeps it near its ttl: then
    /// how long the holder's work takes is the better `Retry-After`.
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
    /// let busy = LockError::NotObtained { key: "user:42".into(), namespace: String::new(), remaining: None, holder: None };
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

    /// This error of a call on `keys` (as the caller named them, sent as
    /// `wire_keys`) under `namespace`, with its keys named as the caller
    /// gave them: a backend only knows the keys on the wire
    /// (`shop:customer:42`).
    pub(crate) fn named(self, keys: &[String], wire_keys: &[String], namespace: &str) -> Self {
        if namespace.is_empty() {
            return self;
        }
        let given = |wire: &str| {
            wire_keys
                .iter()
                .position(|sent| sent == wire)
                .and_then(|index| keys.get(index))
                .cloned()
        };
        match self {
            LockError::NotReplicated {
                key,
                wanted,
                acknowledged,
                timeout,
                ..
            } => LockError::NotReplicated {
                key: given(&key).unwrap_or(key),
                namespace: namespace.to_owned(),
                wanted,
                acknowledged,
                timeout,
            },
            LockError::WrongKind { key, held, asked } => LockError::WrongKind {
                key: given(&key).unwrap_or(key),
                held,
                asked,
            },
            LockError::Backend(mut err) => {
                for (key, wire) in keys.iter().zip(wire_keys) {
                    let sent = format!("`{wire}`");
                    let described = described_key(key, namespace);
                    err.context = err.context.replace(&sent, &described);
                    err.message = err.message.replace(&sent, &described);
                }
                LockError::Backend(err)
            }
            other => other,
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
    /// The server refused the credentials, or wants some and the URL gave
    /// none: put the user and password in the URL
    /// (`redis://user:password@host:port/`). Retrying does not help.
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
    /// The peer is not a Redis server: it answered the connect in another
    /// protocol (an HTTP server, another database on the port). Check the
    /// host and port of the URL; retrying does not help.
    Protocol,
    /// The server refused what the connection asked for: a database that
    /// does not exist, a startup parameter a pooler does not accept. The
    /// message names the setting to change; retrying does not help.
    Configuration,
    /// Any other error reported by the server or the client.
    Other,
}

impl BackendErrorKind {
    /// True for the kinds that trying again may cure: [`Unreachable`],
    /// [`Timeout`] and [`Other`] (which covers a server failing over, still
    /// loading, or answering as a read-only replica). False for
    /// [`Authentication`], [`Permission`], [`Tls`], [`Unsupported`],
    /// [`Protocol`] and [`Configuration`].
    ///
    /// [`Unreachable`]: Self::Unreachable
    /// [`Timeout`]: Self::Timeout
    /// [`Other`]: Self::Other
    /// [`Authentication`]: Self::Authentication
    /// [`Permission`]: Self::Permission
    /// [`Tls`]: Self::Tls
    /// [`Protocol`]: Self::Protocol
    /// [`Unsupported`]: Self::Unsupported
    /// [`Configuration`]: Self::Configuration
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

    /// A short lowercase name for logs and metric labels: `unreachable`,
    /// `timeout`, `authentication`, `permission`, `tls`, `unsupported`,
    /// `protocol`, `configuration`, `other`.
    ///
    /// ```
    /// use lockmacro_runtime::BackendErrorKind;
    ///
    /// assert_eq!(BackendErrorKind::Unreachable.as_str(), "unreachable");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            BackendErrorKind::Unreachable => "unreachable",
            BackendErrorKind::Timeout => "timeout",
            BackendErrorKind::Authentication => "authentication",
            BackendErrorKind::Permission => "permission",
            BackendErrorKind::Tls => "tls",
            BackendErrorKind::Unsupported => "unsupported",
            BackendErrorKind::Protocol => "protocol",
            BackendErrorKind::Configuration => "configuration",
            BackendErrorKind::Other => "other",
        }
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

/// `key` as messages name it: as the caller gave it, with the locker's
/// namespace beside it when there is one (`` `customer:42` (namespace
/// `shop`) ``), so that the key the caller wrote is found in the message and
/// the key on the server can be told from it.
pub(crate) fn described_key(key: &str, namespace: &str) -> String {
    if namespace.is_empty() {
        format!("`{key}`")
    } else {
        format!("`{key}` (namespace `{namespace}`)")
    }
}
