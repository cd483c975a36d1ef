//! Shares of a key (`acquire_shared.lua`): the permits of a semaphore, or
//! the reads and the write of a read-write lock, each a member of a sorted
//! set scored with its expiry; refreshed and released through `leases.lua`'s
//! `held` and `extend` (`refresh.lua`, `release.lua`).
//!
//! A client takes one share, attempting again a tick after a busy answer
//! (the waiters flag is the plain model's concern); holding, it refreshes
//! and releases. Requests and replies may be lost or come late, clients may
//! pause (a crash is a pause that never ends). The set's own expiry is left out: `keep` and `extend`
//! make it outlive its longest share, so it only ever removes members whose
//! score has passed, which every reader of the set already ignores.

use stateright::{Model, Property};

use crate::steps::{self, Steps};

use crate::time::Timing;

/// What the key is shared as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SharesKind {
    /// A semaphore of this many permits.
    Permits(u8),
    /// A read-write lock with this many writers; the other clients read.
    ReadWrite { writers: u8 },
}

/// Breaks the shares on purpose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SharesMutations {
    /// A refresh adds its share back when it expired, instead of refusing.
    pub refresh_retakes: bool,
    /// A read does not look for the write.
    pub read_ignores_write: bool,
    /// The client counts its lease from when the reply came, not from
    /// when it sent the request.
    pub lease_from_reply: bool,
}

/// Shares of one key; see the module documentation.
///
/// ```
/// use lockmacro_model::{Shares, SharesKind, Timing};
/// use stateright::{Checker, Model};
///
/// let timing = Timing { horizon: 3, ..Timing::default() };
/// let model = Shares::new(SharesKind::Permits(1), 2, timing);
/// model.checker().spawn_bfs().join().assert_properties();
/// ```
#[derive(Clone, Debug)]
pub struct Shares {
    /// Permits or read-write.
    pub kind: SharesKind,
    /// How many clients take a share.
    pub clients: u8,
    /// The durations; the clock's horizon.
    pub timing: Timing,
    /// How many attempts a client sends before it gives up.
    pub attempts: u8,
    /// The faults planted on purpose.
    pub mutations: SharesMutations,
    /// Counts the steps offered and taken, when given (see [`Steps`]).
    pub steps: Option<Steps>,
}

impl Shares {
    /// The shares as the scripts keep them.
    pub fn new(kind: SharesKind, clients: u8, timing: Timing) -> Self {
        Shares {
            kind,
            clients,
            timing,
            attempts: 2,
            mutations: SharesMutations::default(),
            steps: None,
        }
    }

    fn writes(&self, c: usize) -> bool {
        matches!(self.kind, SharesKind::ReadWrite { writers } if c < writers as usize)
    }
}

/// Where a client is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Holder {
    /// Has not got its share; may attempt from tick `from`.
    Waiting { from: u8 },
    /// Believes it holds its share until `deadline`.
    Holding { deadline: u8 },
    /// Released, lost or gave up.
    Gone,
}

/// In flight for a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flight {
    /// An attempt, a refresh or a release, sent at `sent`.
    Request { op: ShareOp, sent: u8 },
    /// Its answer: whether the share was taken or extended.
    Reply { op: ShareOp, sent: u8, ok: bool },
}

/// A request about a share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShareOp {
    /// `acquire_shared.lua`.
    Acquire,
    /// `refresh.lua`.
    Refresh,
    /// `release.lua`.
    Release,
}

/// The sorted set and the clients.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SharesState {
    /// The server's clock.
    pub now: u8,
    /// Members: (client, whether it is the write, score), by client.
    pub set: Vec<(u8, bool, u8)>,
    /// The score of the `writing` mark, if any.
    pub writing: Option<u8>,
    /// The clients.
    pub holders: Vec<Holder>,
    /// Each client's request or reply in flight.
    pub flights: Vec<Option<Flight>>,
    /// Attempts sent per client.
    pub attempts: Vec<u8>,
    /// A refresh extended a share that had expired.
    pub confirmed_lapsed: bool,
}

impl SharesState {
    fn believes(&self, c: usize) -> bool {
        matches!(self.holders[c], Holder::Holding { deadline } if self.now < deadline)
    }

    fn live(&self) -> impl Iterator<Item = &(u8, bool, u8)> {
        self.set.iter().filter(|(_, _, score)| *score > self.now)
    }
}

/// A step of the shares model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SharesAction {
    /// The clock advances.
    Tick,
    /// Client `c` sends a request.
    Send(u8, ShareOp),
    /// The server runs client `c`'s request.
    Deliver(u8),
    /// Client `c`'s request or reply is lost.
    Lose(u8),
    /// Client `c` reads its reply.
    Receive(u8),
}

impl Shares {
    /// `acquire_shared.lua`, lines 50-62 and 90-100 (a share already held),
    /// 127-152 (the write and the read) and 208-219 (permits without a queue).
    fn acquire(&self, s: &mut SharesState, c: usize) -> bool {
        let now = s.now;
        let ttl = self.timing.ttl;
        s.set.retain(|(_, _, score)| *score > now);
        if s.writing.is_some_and(|score| score <= now) {
            s.writing = None;
        }
        let write = self.writes(c);
        if let Some(member) = s.set.iter_mut().find(|(m, _, _)| *m as usize == c) {
            member.2 = now + ttl;
            return true;
        }
        let shares = s.set.len() as u8;
        let first = s.set.iter().map(|(_, _, score)| *score).min();
        let free = match self.kind {
            SharesKind::Permits(permits) => shares < permits,
            SharesKind::ReadWrite { .. } if write => {
                if let Some(until) = first {
                    let mark = until + self.timing.margin;
                    if s.writing.is_none_or(|w| mark > w) {
                        s.writing = Some(mark);
                    }
                    false
                } else {
                    s.writing = None;
                    true
                }
            }
            SharesKind::ReadWrite { .. } => {
                let written = s.set.iter().any(|(_, w, _)| *w);
                (self.mutations.read_ignores_write || !written) && s.writing.is_none()
            }
        };
        if free {
            s.set.push((c as u8, write, now + ttl));
            s.set.sort_unstable();
        }
        free
    }

    /// `leases.lua` `held` (a member whose score has not passed) and
    /// `extend` (`ZADD XX`), as `refresh.lua` lines 6-14 run them.
    fn refresh(&self, s: &mut SharesState, c: usize) -> bool {
        let now = s.now;
        let ttl = self.timing.ttl;
        let write = self.writes(c);
        match s.set.iter_mut().find(|(m, _, _)| *m as usize == c) {
            Some(member) if member.2 > now => {
                member.2 = now + ttl;
                true
            }
            found if self.mutations.refresh_retakes => {
                match found {
                    Some(member) => member.2 = now + ttl,
                    None => {
                        s.set.push((c as u8, write, now + ttl));
                        s.set.sort_unstable();
                    }
                }
                s.confirmed_lapsed = true;
                true
            }
            _ => false,
        }
    }
}

impl Shares {
    /// The steps `actions` offers in `s`.
    fn offer(&self, s: &SharesState, actions: &mut Vec<SharesAction>) {
        if s.now < self.timing.horizon {
            actions.push(SharesAction::Tick);
        }
        for c in 0..s.holders.len() {
            let id = c as u8;
            match s.flights[c] {
                Some(Flight::Request { .. }) => {
                    actions.push(SharesAction::Deliver(id));
                    actions.push(SharesAction::Lose(id));
                }
                Some(Flight::Reply { .. }) => {
                    actions.push(SharesAction::Receive(id));
                    actions.push(SharesAction::Lose(id));
                }
                None => match s.holders[c] {
                    Holder::Waiting { from } if s.now >= from && s.attempts[c] < self.attempts => {
                        actions.push(SharesAction::Send(id, ShareOp::Acquire));
                    }
                    Holder::Holding { deadline } => {
                        if s.now < deadline {
                            actions.push(SharesAction::Send(id, ShareOp::Refresh));
                        }
                        actions.push(SharesAction::Send(id, ShareOp::Release));
                    }
                    _ => {}
                },
            }
        }
    }

    /// What `action` makes of `last`, or `None` when it is not enabled.
    fn step(&self, last: &SharesState, action: SharesAction) -> Option<SharesState> {
        let mut s = last.clone();
        let t = self.timing;
        match action {
            SharesAction::Tick => s.now += 1,
            SharesAction::Send(c, op) => {
                let c = c as usize;
                match op {
                    ShareOp::Acquire => s.attempts[c] += 1,
                    ShareOp::Release => s.holders[c] = Holder::Gone,
                    ShareOp::Refresh => {}
                }
                // A release's send time matters to no one.
                let sent = if op == ShareOp::Release { 0 } else { s.now };
                s.flights[c] = Some(Flight::Request { op, sent });
            }
            SharesAction::Deliver(c) => {
                let c = c as usize;
                let Some(Flight::Request { op, sent }) = s.flights[c] else {
                    return None;
                };
                let ok = match op {
                    ShareOp::Acquire => self.acquire(&mut s, c),
                    ShareOp::Refresh => self.refresh(&mut s, c),
                    // release.lua lines 41-45: ZREM of its own member.
                    ShareOp::Release => {
                        s.set.retain(|(m, _, _)| *m as usize != c);
                        true
                    }
                };
                s.flights[c] = Some(Flight::Reply { op, sent, ok });
            }
            SharesAction::Lose(c) => {
                let c = c as usize;
                if let Some(Flight::Request {
                    op: ShareOp::Release,
                    ..
                }) = s.flights[c]
                {
                    s.holders[c] = Holder::Gone;
                }
                if let Some(Flight::Reply {
                    op: ShareOp::Release,
                    ..
                }) = s.flights[c]
                {
                    s.holders[c] = Holder::Gone;
                }
                s.flights[c] = None;
            }
            SharesAction::Receive(c) => {
                let c = c as usize;
                let Some(Flight::Reply { op, sent, ok }) = s.flights[c].take() else {
                    return None;
                };
                let now = s.now;
                let sent = if self.mutations.lease_from_reply {
                    now
                } else {
                    sent
                };
                s.holders[c] = match (s.holders[c], op, ok) {
                    (Holder::Gone, _, _) | (_, ShareOp::Release, _) => Holder::Gone,
                    (Holder::Waiting { .. }, ShareOp::Acquire, true) => {
                        let deadline = t.deadline(sent, t.ttl, 0);
                        if now < deadline {
                            Holder::Holding { deadline }
                        } else {
                            s.flights[c] = Some(Flight::Request {
                                op: ShareOp::Release,
                                sent: now,
                            });
                            Holder::Waiting { from: u8::MAX }
                        }
                    }
                    (Holder::Waiting { .. }, ShareOp::Acquire, false) => {
                        Holder::Waiting { from: now + 1 }
                    }
                    (Holder::Holding { deadline }, ShareOp::Refresh, true) if now < deadline => {
                        Holder::Holding {
                            deadline: t.deadline(sent, t.ttl, 0).max(deadline),
                        }
                    }
                    (Holder::Holding { .. }, ShareOp::Refresh, _) => Holder::Gone,
                    (holder, _, _) => holder,
                };
            }
        }
        Some(s)
    }
}

impl Model for Shares {
    type State = SharesState;
    type Action = SharesAction;

    fn init_states(&self) -> Vec<SharesState> {
        let n = self.clients as usize;
        vec![SharesState {
            now: 0,
            set: Vec::new(),
            writing: None,
            holders: vec![Holder::Waiting { from: 0 }; n],
            flights: vec![None; n],
            attempts: vec![0; n],
            confirmed_lapsed: false,
        }]
    }

    fn actions(&self, s: &SharesState, actions: &mut Vec<SharesAction>) {
        self.offer(s, actions);
        steps::offered(self.steps.as_ref(), actions);
    }

    fn next_state(&self, last: &SharesState, action: SharesAction) -> Option<SharesState> {
        steps::taken(self.steps.as_ref(), &action, self.step(last, action))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "no more holders than shares allow",
                |m: &Shares, s: &SharesState| {
                    let believers: Vec<usize> =
                        (0..s.holders.len()).filter(|&c| s.believes(c)).collect();
                    match m.kind {
                        SharesKind::Permits(permits) => believers.len() <= permits as usize,
                        SharesKind::ReadWrite { .. } => {
                            !believers.iter().any(|&c| m.writes(c)) || believers.len() <= 1
                        }
                    }
                },
            ),
            Property::always(
                "the server keeps no more shares than allowed",
                |m: &Shares, s: &SharesState| {
                    let live: Vec<_> = s.live().collect();
                    match m.kind {
                        SharesKind::Permits(permits) => live.len() <= permits as usize,
                        SharesKind::ReadWrite { .. } => {
                            !live.iter().any(|(_, w, _)| *w) || live.len() <= 1
                        }
                    }
                },
            ),
            Property::always("a holder's share is on the server", |_, s: &SharesState| {
                (0..s.holders.len())
                    .filter(|&c| s.believes(c))
                    .all(|c| s.live().any(|(m, _, _)| *m as usize == c))
            }),
            Property::always("no lapsed share is confirmed", |_, s: &SharesState| {
                !s.confirmed_lapsed
            }),
            Property::sometimes(
                "the key is shared as far as it allows",
                |m: &Shares, s: &SharesState| {
                    let most = match m.kind {
                        SharesKind::Permits(permits) => permits.min(m.clients),
                        SharesKind::ReadWrite { writers } => {
                            m.clients.saturating_sub(writers).max(1)
                        }
                    };
                    (0..s.holders.len()).filter(|&c| s.believes(c)).count() == most as usize
                },
            ),
        ]
    }
}
