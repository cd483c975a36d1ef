//! The fair queue: `acquire_fair.lua` queues a waiter that finds the key
//! busy, a release (`release.lua`, `release_announce.lua` `hand_over`) hands
//! the key to the first live entry for its grant lease (`grant.lua`), and
//! the waiter goes on at once when the lease leaves it time, confirming
//! (`confirm.lua`) meanwhile, or tries again, which confirms too.
//!
//! Clients listen before their first attempt (`wait.rs`, `listen_ahead`);
//! a hand-off names the attempt it followed, and a waiter trusts the grant
//! lease from that attempt's send time (`take_handed`). Requests, replies
//! and published messages may be lost or come late; a waiter may crash in
//! the queue, cancel (its claim releases, which leaves the queue), or pause.

use stateright::{Model, Property};

use crate::steps::{self, Steps};

use crate::time::Timing;

mod state;

pub use state::{Entry, FairAction, FairMsg, FairOp, FairState, Held, Waiter};

/// Breaks the fair queue on purpose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FairMutations {
    /// A grant sets the key for the waiter's whole ttl, not its grant lease.
    pub grant_without_lease: bool,
    /// The waiters flag is set by a request sent after the busy answer,
    /// instead of by the attempt that joins the queue.
    pub flag_after_attempt: bool,
    /// A grant writes the waiter's value without the waiters' mark.
    pub grant_unmarked: bool,
    /// A waiter trusts the grant lease from when it heard the hand-off,
    /// not from when it sent the attempt that found it in line.
    pub lease_from_arrival: bool,
}

/// The fair queue of one key; see the module documentation.
///
/// ```
/// use lockmacro_model::{Fair, Timing};
/// use stateright::{Checker, Model};
///
/// let model = Fair::new(2, Timing { horizon: 3, ..Timing::default() });
/// model.checker().spawn_bfs().join().assert_properties();
/// ```
#[derive(Clone, Debug)]
pub struct Fair {
    /// How many clients contend.
    pub clients: u8,
    /// The durations; the clock's horizon.
    pub timing: Timing,
    /// How long a waiter stays queued (`queue_for`), in ticks.
    pub queue_for: u8,
    /// How many attempts a client sends before it gives up.
    pub attempts: u8,
    /// The faults planted on purpose.
    pub mutations: FairMutations,
    /// Counts the steps offered and taken, when given (see [`Steps`]).
    pub steps: Option<Steps>,
}

impl Fair {
    /// The queue as the scripts keep it.
    pub fn new(clients: u8, timing: Timing) -> Self {
        Fair {
            clients,
            timing,
            queue_for: timing.ttl + 1,
            attempts: 3,
            mutations: FairMutations::default(),
            steps: None,
        }
    }
}

impl Fair {
    fn lease(&self) -> u8 {
        if self.mutations.grant_without_lease {
            self.timing.ttl
        } else {
            self.timing.grant.min(self.timing.ttl)
        }
    }

    /// `grant.lua` lines 34-65 and 72-76: the key for the grant lease,
    /// marked, and the message naming the attempt.
    fn grant(&self, s: &mut FairState, entry: Entry) -> u8 {
        let lease = self.lease();
        s.key = Some(Held {
            owner: entry.c,
            expires: s.now + lease,
            granted_at: Some(s.now),
            marked: !self.mutations.grant_unmarked,
        });
        if s.listens(entry.c as usize) {
            s.grants[entry.c as usize] = Some(entry.n);
        }
        lease
    }

    fn mark_waiting(s: &mut FairState, until: u8) {
        if s.flag.is_none_or(|e| e < until) {
            s.flag = Some(until);
        }
    }

    /// `acquire_fair.lua` for client `c`'s attempt `n`; `(taken, ms)`.
    fn acquire(&self, s: &mut FairState, c: usize, n: u8) -> (bool, u8) {
        let (now, ttl) = (s.now, self.timing.ttl);
        // Lines 51-58: its own value, a retry or a confirmation.
        if let Some(held) = s.key.as_mut()
            && held.owner as usize == c
        {
            held.expires = now + ttl;
            held.granted_at = None;
            return (true, 0);
        }
        // Lines 66-76: dead entries dropped from the front.
        while s.queue.first().is_some_and(|e| e.e <= now) {
            s.queue.remove(0);
        }
        let mine = s.queue.iter().position(|e| e.c as usize == c);
        let mut granted = None;
        // Lines 105-132: a free key goes to the first live waiter.
        if s.key.is_none() {
            match s.queue.first().copied() {
                Some(head) if head.c as usize != c => {
                    s.queue.remove(0);
                    granted = Some(self.grant(s, head));
                }
                _ => {
                    // Lines 86-100: take, marked when others are in line.
                    s.queue.retain(|e| e.c as usize != c);
                    s.key = Some(Held {
                        owner: c as u8,
                        expires: now + ttl,
                        granted_at: None,
                        marked: !s.queue.is_empty(),
                    });
                    return (true, 0);
                }
            }
        }
        // Lines 134-161: join, or note the attempt, and set the flag.
        match s.queue.iter().position(|e| e.c as usize == c) {
            Some(at) => s.queue[at].n = n,
            None if mine.is_none() => s.queue.push(Entry {
                c: c as u8,
                e: now + self.queue_for,
                n,
            }),
            None => {}
        }
        if !self.mutations.flag_after_attempt {
            Self::mark_waiting(s, now + self.queue_for + ttl);
            // waiters.lua `mark_held`: the holder found, marked.
            if granted.is_none()
                && let Some(held) = s.key.as_mut()
            {
                held.marked = true;
            }
        }
        let pttl = s.key.map_or(0, |held| held.expires - now);
        (false, granted.unwrap_or(pttl))
    }

    /// `release_plain.lua` for a key owned and unmarked (deleted, the flag
    /// not read; the model's values carry no metadata), else `release.lua`
    /// lines 37-62, then
    /// `release_announce.lua`: a hand-over for an owner, `leave` (lines
    /// 56-82) for a waiter that gives up.
    fn release(&self, s: &mut FairState, c: usize) {
        let now = s.now;
        let owned = s.key.is_some_and(|held| held.owner as usize == c);
        let marked = s.key.is_some_and(|held| held.marked);
        if owned {
            s.key = None;
        }
        // release_plain.lua ends early only for its own unmarked value.
        let ended_early = owned && !marked;
        if !ended_early && s.flag.is_some() {
            if owned {
                self.hand_over(s, c);
            } else if let Some(at) = s.queue.iter().position(|e| e.c as usize == c) {
                s.queue.remove(at);
                s.queue.retain(|e| e.e > now || e.c as usize == c);
            }
        }
        let in_line = s
            .queue
            .iter()
            .any(|e| e.e > now && matches!(s.waiters[e.c as usize], Waiter::Queued { .. }));
        if owned && s.key.is_none() && in_line {
            s.stranded = true;
        }
    }

    /// `release_announce.lua` `hand_over` (lines 13-30), else the plain
    /// announcement (line 105).
    fn hand_over(&self, s: &mut FairState, c: usize) {
        while !s.queue.is_empty() {
            let entry = s.queue.remove(0);
            if entry.e > s.now && entry.c as usize != c {
                self.grant(s, entry);
                return;
            }
        }
        for d in 0..s.waiters.len() {
            if s.listens(d) {
                s.woken[d] = true;
            }
        }
    }

    fn send(s: &mut FairState, c: usize, op: FairOp) {
        s.net[c] = Some(FairMsg::Request { op, sent: s.now });
    }
}

impl Fair {
    /// The steps `actions` offers in `s`.
    fn offer(&self, s: &FairState, actions: &mut Vec<FairAction>) {
        if s.now < self.timing.horizon {
            actions.push(FairAction::Tick);
        }
        for c in 0..s.waiters.len() {
            let id = c as u8;
            match s.net[c] {
                Some(FairMsg::Request { .. }) => actions.push(FairAction::Deliver(id)),
                Some(FairMsg::Reply { .. }) => actions.push(FairAction::Receive(id)),
                None => {}
            }
            if s.net[c].is_some() {
                actions.push(FairAction::Lose(id));
            }
            if s.grants[c].is_some() {
                actions.push(FairAction::LoseGrant(id));
            }
            if s.waiters[c] == Waiter::Crashed {
                continue;
            }
            // A crash anywhere else is a pause that never ends, which the
            // checker reaches anyway; one in line is what grant leases are for.
            if matches!(s.waiters[c], Waiter::Queued { .. }) {
                actions.push(FairAction::Crash(id));
            }
            if s.net[c].is_some() {
                continue;
            }
            let may_attempt = s.sent[c].0 < self.attempts;
            match s.waiters[c] {
                Waiter::Ready if may_attempt => actions.push(FairAction::Attempt(id)),
                Waiter::Queued { wake_at } => {
                    let handed = s.grants[c] == Some(s.sent[c].0);
                    if handed {
                        actions.push(FairAction::TakeHanded(id));
                    }
                    let due = s.woken[c] || s.grants[c].is_some() || s.now >= wake_at;
                    if due && may_attempt {
                        actions.push(FairAction::Attempt(id));
                    }
                    actions.push(FairAction::Release(id));
                }
                Waiter::Holding { deadline } => {
                    if s.now < deadline {
                        actions.push(FairAction::Refresh(id));
                    }
                    actions.push(FairAction::Release(id));
                }
                _ => {}
            }
        }
    }

    /// What `action` makes of `last`, or `None` when it is not enabled.
    fn step(&self, last: &FairState, action: FairAction) -> Option<FairState> {
        let mut s = last.clone();
        let t = self.timing;
        let now = s.now;
        match action {
            FairAction::Tick => {
                s.now += 1;
                let now = s.now;
                if s.key.is_some_and(|held| held.expires <= now) {
                    s.key = None;
                }
                if s.flag.is_some_and(|e| e <= now) {
                    s.flag = None;
                }
            }
            FairAction::Attempt(c) => {
                let c = c as usize;
                s.sent[c] = (s.sent[c].0 + 1, now);
                s.grants[c] = None;
                s.woken[c] = false;
                let n = s.sent[c].0;
                Self::send(&mut s, c, FairOp::Acquire { n });
            }
            // wait.rs `take_handed`: trusted until the attempt's send time
            // plus the lease, when that leaves half the lease.
            FairAction::TakeHanded(c) => {
                let c = c as usize;
                s.grants[c] = None;
                let lease = self.lease();
                let from = if self.mutations.lease_from_arrival {
                    now
                } else {
                    s.sent[c].1
                };
                let until = t.deadline(from, lease, 0);
                if until <= now + lease / 2 {
                    return None;
                }
                s.waiters[c] = Waiter::Holding { deadline: until };
                Self::send(&mut s, c, FairOp::Confirm);
            }
            FairAction::Refresh(c) => Self::send(&mut s, c as usize, FairOp::Refresh),
            FairAction::Release(c) => {
                let c = c as usize;
                s.waiters[c] = Waiter::Done;
                Self::send(&mut s, c, FairOp::Release);
            }
            FairAction::Crash(c) => s.waiters[c as usize] = Waiter::Crashed,
            FairAction::Deliver(c) => {
                let c = c as usize;
                let Some(FairMsg::Request { op, sent }) = s.net[c] else {
                    return None;
                };
                let (ok, ms) = match op {
                    FairOp::Acquire { n } => self.acquire(&mut s, c, n),
                    // confirm.lua lines 8-15 and refresh.lua lines 6-14.
                    FairOp::Confirm | FairOp::Refresh => match s.key.as_mut() {
                        Some(held) if held.owner as usize == c => {
                            held.expires = now + t.ttl;
                            held.granted_at = None;
                            (true, 0)
                        }
                        _ => (false, 0),
                    },
                    FairOp::Release => {
                        self.release(&mut s, c);
                        (true, 0)
                    }
                    FairOp::Mark => {
                        Self::mark_waiting(&mut s, now + self.queue_for + t.ttl);
                        (true, 0)
                    }
                };
                s.net[c] = Some(FairMsg::Reply { op, sent, ok, ms });
            }
            FairAction::Lose(c) => s.net[c as usize] = None,
            FairAction::LoseGrant(c) => s.grants[c as usize] = None,
            FairAction::Receive(c) => {
                let c = c as usize;
                let Some(FairMsg::Reply { op, sent, ok, ms }) = s.net[c].take() else {
                    return None;
                };
                s.waiters[c] = match (s.waiters[c], op) {
                    (Waiter::Ready | Waiter::Queued { .. }, FairOp::Acquire { .. }) if ok => {
                        let deadline = t.deadline(sent, t.ttl, 0);
                        if now < deadline {
                            Waiter::Holding { deadline }
                        } else {
                            Self::send(&mut s, c, FairOp::Release);
                            Waiter::Done
                        }
                    }
                    (Waiter::Ready | Waiter::Queued { .. }, FairOp::Acquire { .. }) => {
                        if self.mutations.flag_after_attempt {
                            Self::send(&mut s, c, FairOp::Mark);
                        }
                        Waiter::Queued { wake_at: now + ms }
                    }
                    // lease.rs `refreshed` and `confirm_grant`.
                    (Waiter::Holding { deadline }, FairOp::Confirm | FairOp::Refresh)
                        if ok && now < deadline =>
                    {
                        Waiter::Holding {
                            deadline: t.deadline(sent, t.ttl, 0).max(deadline),
                        }
                    }
                    (Waiter::Holding { .. }, FairOp::Confirm | FairOp::Refresh) => Waiter::Done,
                    (waiter, _) => waiter,
                };
            }
        }
        Some(s)
    }
}

impl Model for Fair {
    type State = FairState;
    type Action = FairAction;

    fn init_states(&self) -> Vec<FairState> {
        let n = self.clients as usize;
        vec![FairState {
            now: 0,
            key: None,
            queue: Vec::new(),
            flag: None,
            waiters: vec![Waiter::Ready; n],
            net: vec![None; n],
            sent: vec![(0, 0); n],
            grants: vec![None; n],
            woken: vec![false; n],
            stranded: false,
        }]
    }

    fn actions(&self, s: &FairState, actions: &mut Vec<FairAction>) {
        self.offer(s, actions);
        steps::offered(self.steps.as_ref(), actions);
    }

    fn next_state(&self, last: &FairState, action: FairAction) -> Option<FairState> {
        steps::taken(self.steps.as_ref(), &action, self.step(last, action))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at most one holder", |_, s: &FairState| {
                (0..s.waiters.len()).filter(|&c| s.believes(c)).count() <= 1
            }),
            Property::always("a holder's key is its own", |_, s: &FairState| {
                (0..s.waiters.len())
                    .filter(|&c| s.believes(c))
                    .all(|c| s.key.is_some_and(|held| held.owner as usize == c))
            }),
            Property::always(
                "a release hands the key to a waiter in line",
                |_, s: &FairState| !s.stranded,
            ),
            Property::always(
                "a dead waiter holds a grant for its lease at most",
                |m: &Fair, s: &FairState| {
                    s.key.is_none_or(|held| {
                        s.waiters[held.owner as usize] != Waiter::Crashed
                            || held
                                .granted_at
                                .is_none_or(|at| held.expires <= at + m.timing.grant)
                    })
                },
            ),
            Property::sometimes("a waiter is handed the key", |_, s: &FairState| {
                (0..s.waiters.len()).any(|c| s.believes(c) && s.sent[c].0 >= 2)
                    || s.key.is_some_and(|held| held.granted_at.is_some())
            }),
        ]
    }
}
