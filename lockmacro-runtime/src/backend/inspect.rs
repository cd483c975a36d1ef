//! What an operator sees of a key: [`Inspection`], as
//! [`Backend::inspect`](super::Backend::inspect) answers it.

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
