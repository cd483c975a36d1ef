//! What a key is: a lock, a semaphore of some permits, or a read-write lock.

/// What a key is held as, kept on the server with it: one kind per key.
///
/// A key taken as a lock cannot be taken as a semaphore or a read-write lock
/// while it is held, nor a semaphore of 2 permits as one of 5: the backend
/// refuses such an obtain before it writes anything, with
/// [`LockError::WrongKind`](crate::LockError::WrongKind).
///
/// ```
/// use lockmacro_runtime::KeyKind;
///
/// assert_eq!(KeyKind::Semaphore { permits: 3 }.to_string(), "a semaphore of 3 permits");
/// assert_eq!(KeyKind::Lock.to_string(), "a lock");
/// assert_eq!(KeyKind::ReadWrite.to_string(), "a read-write lock");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyKind {
    /// A lock: one holder at a time.
    Lock,
    /// A semaphore: at most `permits` holders at a time.
    Semaphore {
        /// How many holders the key admits at once.
        permits: u32,
    },
    /// A read-write lock: many readers, or one writer.
    ReadWrite,
}

impl std::fmt::Display for KeyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyKind::Lock => f.write_str("a lock"),
            KeyKind::Semaphore { permits: 1 } => f.write_str("a semaphore of 1 permit"),
            KeyKind::Semaphore { permits } => write!(f, "a semaphore of {permits} permits"),
            KeyKind::ReadWrite => f.write_str("a read-write lock"),
        }
    }
}
