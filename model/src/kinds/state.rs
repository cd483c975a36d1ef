//! The state of the kinds model: the key as the server keeps it, the
//! clients, and what is in flight.

/// The kind a client asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Asked {
    /// A lock: the key itself.
    Lock,
    /// A permit of a semaphore of this many.
    Permits(u8),
    /// A read of a read-write lock.
    Read,
    /// The write of a read-write lock.
    Write,
}

impl Asked {
    /// The marker of the set this share lives in; `None` for a lock.
    pub(super) fn marker(self) -> Option<Marker> {
        match self {
            Asked::Lock => None,
            Asked::Permits(n) => Some(Marker::Permits(n)),
            Asked::Read | Asked::Write => Some(Marker::ReadWrite),
        }
    }
}

/// A set's marker member: `kind:<N>` or `kind:rw`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Marker {
    /// `kind:<N>`.
    Permits(u8),
    /// `kind:rw`.
    ReadWrite,
}

/// The key as the server keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// Nothing holds it.
    Free,
    /// A string: the lock of `holder`, until `expiry`.
    Lock { holder: u8, expiry: u8 },
    /// A sorted set: the marker, and (client, whether the write, score).
    Set {
        marker: Marker,
        members: Vec<(u8, bool, u8)>,
    },
}

/// Where a client is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stand {
    /// Has not got its lease; may attempt from tick `from`.
    Waiting { from: u8 },
    /// Believes it holds its lease until `deadline`; `writes`: as the
    /// writer (not downgraded).
    Holding { deadline: u8, writes: bool },
    /// Released, refused, lost or gave up.
    Gone,
}

/// A request about a client's lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KindsOp {
    /// `acquire.lua` or `acquire_shared.lua`.
    Acquire,
    /// `refresh.lua`.
    Refresh,
    /// `release.lua`.
    Release,
    /// `downgrade.lua`.
    Downgrade,
}

/// The key, the clients and what is in flight.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KindsState {
    /// The server's clock.
    pub now: u8,
    /// The key.
    pub key: Key,
    /// The clients.
    pub stands: Vec<Stand>,
    /// Each client's request, or its reply (`Some(ok)`), and when sent.
    pub flights: Vec<Option<(KindsOp, u8, Option<bool>)>>,
    /// Attempts sent per client.
    pub attempts: Vec<u8>,
    /// The read a two-step downgrade is still to add: (client, score).
    pub half_downgraded: Option<(u8, u8)>,
    /// Whether the operator forced the release.
    pub forced: bool,
    /// The clients whose lease was live on the server when it was forced.
    pub evicted: Vec<bool>,
    /// A refresh confirmed a lease the operator had taken away.
    pub survived_force: bool,
    /// A refresh of a lease the operator had taken away was refused.
    pub refused_after_force: Vec<bool>,
}

/// A step of the kinds model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KindsAction {
    /// The clock advances.
    Tick,
    /// Client `c` sends a request.
    Send(u8, KindsOp),
    /// The server runs client `c`'s request.
    Deliver(u8),
    /// Client `c`'s request or reply is lost.
    Lose(u8),
    /// Client `c` reads its reply.
    Receive(u8),
    /// The second step of a two-step downgrade (the mutation).
    FinishDowngrade,
    /// The operator runs `force_release.lua`.
    Force,
}

impl KindsState {
    /// Client `c` believes it holds its lease, not taken from it by force.
    pub(super) fn believes(&self, c: usize) -> bool {
        !self.evicted[c]
            && matches!(self.stands[c], Stand::Holding { deadline, .. } if self.now < deadline)
    }
}
