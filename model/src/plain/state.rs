//! The plain model's state: the server's key, its mark and flag, the clients, the
//! messages between them, and what the properties watch.

/// What a client asks of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// An attempt; `listen` when the client listens and asks for the flag.
    Acquire { listen: bool },
    /// `refresh.lua`.
    Refresh,
    /// `release.lua`.
    Release,
    /// The mutated flag (and mark): set apart from the attempt.
    Mark,
}

/// The server's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// The key is the client's.
    Taken,
    /// Held by another for `pttl` more ticks.
    Busy { pttl: u8 },
    /// Whether the refresh extended the key.
    Refreshed(bool),
    /// A release or a mark, done.
    Done,
}

/// One request or its reply, in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Msg {
    /// Sent at `sent`, not yet run by the server.
    Request { op: Op, sent: u8 },
    /// Run; the answer travels back.
    Reply { op: Op, sent: u8, answer: Answer },
}

/// Where a client's obtain is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not started.
    Idle,
    /// An attempt is out (or was lost and is due again).
    Attempting { listen: bool },
    /// Found it busy; listening until woken or until `wake_at`.
    Listening { wake_at: u8 },
    /// Believes it holds the key until `deadline` (server time).
    Holding { deadline: u8 },
    /// A release or give-back is out.
    Releasing,
    /// Finished, by a release, a loss or giving up.
    Done,
}

/// One client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// Its obtain.
    pub phase: Phase,
    /// Its one request or reply in flight.
    pub net: Option<Msg>,
    /// A release was announced to its listener.
    pub woken: bool,
    /// Attempts sent.
    pub attempts: u8,
    /// How slow its clock runs (see [`Plain::max_skew`](crate::Plain::max_skew)).
    pub skew: u8,
}

/// The key, its mark, the flag, the clients, and what the properties watch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PlainState {
    /// The server's clock.
    pub now: u8,
    /// The key's holder and when it expires.
    pub key: Option<(u8, u8)>,
    /// The key's value ends with the waiters' mark (`mark.lua`).
    pub marked: bool,
    /// When the waiters flag expires.
    pub flag: Option<u8>,
    /// Restarts so far.
    pub restarts: u8,
    /// The clients.
    pub clients: Vec<Client>,
    /// Per client: until when it waits on its listener for a release, as the
    /// server last told it the key was busy.
    pub awaiting: Vec<Option<u8>>,
    /// Per client: its key went away while it was not releasing it.
    pub lapsed: Vec<bool>,
    /// A release deleted the key without announcing it while a waiter
    /// waited for it.
    pub missed_wakeup: bool,
    /// A refresh confirmed a lease that had lapsed on the server.
    pub confirmed_lapsed: bool,
}

impl PlainState {
    /// True when client `c` believes it holds the key.
    pub fn believes(&self, c: usize) -> bool {
        matches!(self.clients[c].phase, Phase::Holding { deadline } if self.now < deadline)
    }
}

/// A step of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlainAction {
    /// The server's clock advances a tick; keys expire.
    Tick,
    /// The server restarts and loses its data.
    Restart,
    /// Client `c` sends an attempt.
    Attempt(u8),
    /// Client `c` sends a refresh.
    Refresh(u8),
    /// Client `c` sends a release.
    Release(u8),
    /// Client `c` stops waiting; its claim gives the key back.
    Cancel(u8),
    /// The server runs client `c`'s request.
    Deliver(u8),
    /// Client `c`'s request or reply is lost.
    Lose(u8),
    /// Client `c` reads its reply.
    Receive(u8),
}
