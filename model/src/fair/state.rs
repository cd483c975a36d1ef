//! The fair model's state: the key, the queue and the flag, the waiters,
//! their messages, and what the properties watch.

/// A queue entry (`acquire_fair.lua` lines 135-141): its waiter, its expiry
/// and the attempt that last found it in line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The waiter.
    pub c: u8,
    /// Server time at which the entry is dead.
    pub e: u8,
    /// The attempt number (`n`).
    pub n: u8,
}

/// The key's holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Held {
    /// Who holds it.
    pub owner: u8,
    /// When it expires.
    pub expires: u8,
    /// When it was handed over, while the grant is not confirmed.
    pub granted_at: Option<u8>,
    /// Its value ends with the waiters' mark (`mark.lua`): its release
    /// reads the flag.
    pub marked: bool,
}

/// A fair client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Waiter {
    /// About to attempt.
    Ready,
    /// In line, until woken or `wake_at`.
    Queued { wake_at: u8 },
    /// Believes it holds the key until `deadline`.
    Holding { deadline: u8 },
    /// Released, lost, gave up.
    Done,
    /// Stopped for good.
    Crashed,
}

/// Requests of the fair model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FairOp {
    /// `acquire_fair.lua`, attempt number `n`.
    Acquire { n: u8 },
    /// `confirm.lua`.
    Confirm,
    /// `refresh.lua`.
    Refresh,
    /// `release.lua`.
    Release,
    /// The mutated flag.
    Mark,
}

/// One request or reply in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FairMsg {
    /// Not yet run.
    Request { op: FairOp, sent: u8 },
    /// Run: taken or extended (`true`), or busy for `ms` more ticks.
    Reply {
        op: FairOp,
        sent: u8,
        ok: bool,
        ms: u8,
    },
}

/// The server and the clients.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FairState {
    /// The server's clock.
    pub now: u8,
    /// The key.
    pub key: Option<Held>,
    /// The queue, oldest first.
    pub queue: Vec<Entry>,
    /// When the waiters flag expires.
    pub flag: Option<u8>,
    /// The clients.
    pub waiters: Vec<Waiter>,
    /// Each client's request or reply in flight.
    pub net: Vec<Option<FairMsg>>,
    /// Attempts sent, and when the last one was.
    pub sent: Vec<(u8, u8)>,
    /// A grant published to the client (the attempt it names), not yet read.
    pub grants: Vec<Option<u8>>,
    /// A plain release was published to the client's listener.
    pub woken: Vec<bool>,
    /// A release left the key free with a live waiter in line.
    pub stranded: bool,
}

impl FairState {
    pub(super) fn believes(&self, c: usize) -> bool {
        matches!(self.waiters[c], Waiter::Holding { deadline } if self.now < deadline)
    }

    pub(super) fn listens(&self, c: usize) -> bool {
        matches!(self.waiters[c], Waiter::Ready | Waiter::Queued { .. })
    }
}

/// A step of the fair model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FairAction {
    /// The clock advances; keys, entries and the flag expire.
    Tick,
    /// Client `c` sends an attempt.
    Attempt(u8),
    /// Client `c` goes on with the key handed to it, confirming.
    TakeHanded(u8),
    /// Client `c` sends a refresh.
    Refresh(u8),
    /// Client `c` releases (or its claim gives back, when it cancels).
    Release(u8),
    /// Client `c` crashes.
    Crash(u8),
    /// The server runs client `c`'s request.
    Deliver(u8),
    /// Client `c`'s request or reply is lost.
    Lose(u8),
    /// The grant published to client `c` is lost.
    LoseGrant(u8),
    /// Client `c` reads its reply.
    Receive(u8),
}
