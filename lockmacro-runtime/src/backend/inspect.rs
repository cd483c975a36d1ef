//! What an operator sees of a key: [`Inspection`], as
//! [`Backend::inspect`](super::Backend::inspect) answers it.

use std::fmt;
use std::time::Duration;

use crate::KeyKind;

/// What holds a key and who waits for it, as [`Locker::inspect`](crate::Locker::inspect)
/// reports it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
/// use std::time::Duration;
/// use lockmacro_runtime::{HeldAs, KeyKind, Locker, ObtainOptions};
///
/// let locker = Locker::memory();
/// let _lock = locker
///     .obtain("report", Duration::from_secs(30), ObtainOptions::new().metadata("worker-7"))
///     .await?;
/// let seen = locker.inspect("report").await?;
/// assert_eq!(seen.kind, Some(KeyKind::Lock));
/// assert_eq!(seen.holders[0].held_as, HeldAs::Lock);
/// assert_eq!(seen.holders[0].metadata, "worker-7");
/// assert!(seen.holders[0].remaining.is_some_and(|left| left <= Duration::from_secs(30)));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Inspection {
    /// What the key is held as; `None` when nothing holds it.
    pub kind: Option<KeyKind>,
    /// Every lease on the key: one for a lock, one per permit, read or
    /// write otherwise.
    pub holders: Vec<Holder>,
    /// Fair waiters in line for the key (0 where the backend keeps no line).
    pub waiters: usize,
    /// The last fencing token minted from the key's fence counter, if any.
    pub fence: Option<u64>,
}

impl Inspection {
    /// A key nothing holds, nobody waits for, with no fence counter.
    pub fn free() -> Self {
        Inspection::default()
    }
}

/// One line for a log or a message: what the key is held as, each holder
/// with its metadata and time left, the waiters and the last fencing token
/// (`-` when none was minted).
///
/// ```
/// use std::time::Duration;
/// use lockmacro_runtime::{HeldAs, Holder, Inspection, KeyKind};
///
/// let mut seen = Inspection::free();
/// assert_eq!(seen.to_string(), "free; waiters: 0, fence: -");
///
/// seen.kind = Some(KeyKind::Semaphore { permits: 3 });
/// seen.holders.push(Holder::new(HeldAs::Permit, "worker-1", Some(Duration::from_millis(29_800))));
/// seen.holders.push(Holder::new(HeldAs::Permit, "worker-2", None));
/// seen.waiters = 2;
/// seen.fence = Some(17);
/// assert_eq!(
///     seen.to_string(),
///     "held as a semaphore of 3 permits: permit by `worker-1` (29.8s left), \
///      permit by `worker-2`; waiters: 2, fence: 17"
/// );
/// ```
impl fmt::Display for Inspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Some(kind) => write!(f, "held as {kind}")?,
            None => f.write_str("free")?,
        }
        for (n, holder) in self.holders.iter().enumerate() {
            f.write_str(if n == 0 { ": " } else { ", " })?;
            write!(f, "{holder}")?;
        }
        write!(f, "; waiters: {}, fence: ", self.waiters)?;
        match self.fence {
            Some(fence) => write!(f, "{fence}"),
            None => f.write_str("-"),
        }
    }
}

/// One lease on a key, as [`Inspection::holders`] lists it. The token is
/// never shown: whoever reads this cannot release or refresh the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// What the lease holds of the key.
    pub held_as: HeldAs,
    /// What the holder recorded with it
    /// ([`ObtainOptions::metadata`](crate::ObtainOptions::metadata)).
    pub metadata: String,
    /// How long the lease has left, when the backend can tell.
    pub remaining: Option<Duration>,
    /// The database session whose transaction holds the key, for a holder
    /// held as [`HeldAs::Transaction`]: on PostgreSQL, the server process
    /// id that `pg_terminate_backend` takes. `None` for a lease, and when
    /// the transaction ended as the key was read.
    pub pid: Option<u32>,
}

impl Holder {
    /// A lease held as `held_as`, with its holder's `metadata`, for
    /// `remaining` more.
    pub fn new(held_as: HeldAs, metadata: impl Into<String>, remaining: Option<Duration>) -> Self {
        Holder {
            held_as,
            metadata: metadata.into(),
            remaining,
            pid: None,
        }
    }
}

/// What the lease holds, whose it is and how long it has left:
/// ``lock by `worker-7` (29.8s left)``, as [`Inspection`] lists its holders.
/// What the backend cannot tell is left out; a lock held by a database
/// transaction names its session, which has no metadata and no lease.
///
/// ```
/// use std::time::Duration;
/// use lockmacro_runtime::{HeldAs, Holder};
///
/// let holder = Holder::new(HeldAs::Lock, "worker-7", Some(Duration::from_millis(29_800)));
/// assert_eq!(holder.to_string(), "lock by `worker-7` (29.8s left)");
/// assert_eq!(Holder::new(HeldAs::Read, "", None).to_string(), "read");
/// ```
impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.held_as == HeldAs::Transaction {
            f.write_str("lock by a database transaction")?;
            return match self.pid {
                Some(pid) => write!(f, ", in session {pid}"),
                None => Ok(()),
            };
        }
        write!(f, "{}", self.held_as)?;
        if !self.metadata.is_empty() {
            write!(f, " by `{}`", self.metadata)?;
        }
        match self.remaining {
            Some(left) => write!(f, " ({:.1}s left)", left.as_secs_f64()),
            None => Ok(()),
        }
    }
}

/// What one lease holds of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeldAs {
    /// The whole key, as a lock.
    Lock,
    /// One permit of a semaphore.
    Permit,
    /// A read of a read-write lock.
    Read,
    /// The write of a read-write lock.
    Write,
    /// The whole key, as a lock held by a database transaction rather than
    /// a lease (PostgreSQL's [`Locker::obtain_in`](crate::Locker::obtain_in)):
    /// no metadata and no time left. It ends with its transaction (or the
    /// transaction's session), never by
    /// [`Locker::force_release`](crate::Locker::force_release).
    Transaction,
}

/// The word for it: `lock`, `permit`, `read`, `write`, `transaction`.
impl fmt::Display for HeldAs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HeldAs::Lock => "lock",
            HeldAs::Permit => "permit",
            HeldAs::Read => "read",
            HeldAs::Write => "write",
            HeldAs::Transaction => "transaction",
        })
    }
}
