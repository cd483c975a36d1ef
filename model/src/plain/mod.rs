//! The plain lock: one key taken by `SET key value NX PX ttl` (or
//! `acquire.lua` for an attempt that will wait), refreshed by `refresh.lua`,
//! released by `release.lua`, with the waiters flag of `waiters.lua` that
//! tells a release whether to announce itself, and the mark of `mark.lua` on
//! the key's value that tells the release whether to read the flag at all
//! (`release_plain.lua`).
//!
//! Each client runs one obtain (its token is its index): it attempts, and
//! when it finds the key busy listens and attempts again at once with the
//! flag asked for (`wait.rs`, `Wait::listen`), then sleeps until woken or
//! until the holder's lease ends. Holding, it refreshes (`lease.rs`,
//! `watchdog.rs`) and releases. Any request or reply may be lost or come
//! late; a client may cancel (its claim then gives the key back,
//! `claim.rs`) or stop acting for as long as the clock runs: a pause, or a
//! crash, which the checker reaches as a pause that never ends. Only the
//! first client's clock may run slow (`max_skew`).

use stateright::{Model, Property};

use crate::steps::{self, Steps};

use crate::time::Timing;

mod state;

pub use state::{Answer, Client, Msg, Op, Phase, PlainAction, PlainState};

/// Breaks the plain protocol on purpose, to show that each property can fail.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PlainMutations {
    /// `release.lua` deletes the key without checking that it holds the token.
    pub release_without_token_check: bool,
    /// `refresh.lua` takes the key again when it expired, instead of
    /// refusing.
    pub refresh_retakes: bool,
    /// The waiters flag is set by a request the waiter sends after the busy
    /// answer, instead of by the attempt that finds the key busy.
    pub flag_after_attempt: bool,
    /// The attempt that finds the key busy sets the flag but does not mark
    /// the holder's value, so that its release reads no flag.
    pub waiter_does_not_mark: bool,
}

/// The plain lock with `clients` clients; see the module documentation.
///
/// ```
/// use lockmacro_model::{Plain, Timing};
/// use stateright::{Checker, Model};
///
/// let checker = Plain::new(2, Timing { horizon: 3, ..Timing::default() })
///     .checker()
///     .spawn_bfs()
///     .join();
/// checker.assert_properties();
/// ```
#[derive(Clone, Debug)]
pub struct Plain {
    /// How many clients contend for the key.
    pub clients: u8,
    /// The durations and the clock's bound.
    pub timing: Timing,
    /// How many ticks slower than the server's a client's clock may run over
    /// one lease; within the drift margin when at most `timing.drift`.
    pub max_skew: u8,
    /// How often the server may restart and lose its data.
    pub restarts: u8,
    /// How many attempts a client sends before it gives up.
    pub attempts: u8,
    /// The faults planted on purpose.
    pub mutations: PlainMutations,
    /// Counts the steps offered and taken, when given (see [`Steps`]).
    pub steps: Option<Steps>,
}

impl Plain {
    /// The protocol as the scripts implement it, with clocks within the
    /// drift margin and a server that keeps its data.
    pub fn new(clients: u8, timing: Timing) -> Self {
        Plain {
            clients,
            timing,
            max_skew: timing.drift,
            restarts: 0,
            attempts: 3,
            mutations: PlainMutations::default(),
            steps: None,
        }
    }
}

impl Plain {
    fn expire(&self, s: &mut PlainState) {
        if let Some((owner, expires)) = s.key
            && expires <= s.now
        {
            s.key = None;
            s.marked = false;
            s.lapsed[owner as usize] = true;
        }
        if s.flag.is_some_and(|expires| expires <= s.now) {
            s.flag = None;
        }
    }

    /// `waiters.lua`, `mark_waiting`: lines 51-55.
    fn mark_waiting(s: &mut PlainState, until: u8) {
        if s.flag.is_none_or(|expires| expires < until) {
            s.flag = Some(until);
        }
    }

    /// Runs client `c`'s request on the server.
    fn run(&self, s: &mut PlainState, c: usize, op: Op) -> Answer {
        let t = self.timing;
        let now = s.now;
        match op {
            // protocol.rs `plain_set`/`plain_outcome` (no listen), else
            // acquire.lua lines 36-51 and 62-106: SET NX, a retry finding its
            // own value (marked or not) extends it, keeping its mark; a busy
            // answer with `listen` sets the flag and marks the value
            // (waiters.lua `mark_held`).
            Op::Acquire { listen } => {
                s.awaiting[c] = None;
                match s.key {
                    Some((owner, _)) if owner as usize == c => {
                        s.key = Some((owner, now + t.ttl));
                        Answer::Taken
                    }
                    Some((_, expires)) => {
                        let pttl = expires - now;
                        if listen {
                            s.awaiting[c] = Some(expires);
                            if !self.mutations.flag_after_attempt {
                                Self::mark_waiting(s, expires + t.margin);
                                s.marked |= !self.mutations.waiter_does_not_mark;
                            }
                        }
                        Answer::Busy { pttl }
                    }
                    None => {
                        s.key = Some((c as u8, now + t.ttl));
                        s.marked = false;
                        s.lapsed[c] = false;
                        Answer::Taken
                    }
                }
            }
            Op::Mark => {
                if let Some((_, expires)) = s.key {
                    Self::mark_waiting(s, expires + t.margin);
                    s.marked = true;
                }
                Answer::Done
            }
            // refresh.lua lines 6-14 (held, then extend).
            Op::Refresh => {
                let held = s.key.is_some_and(|(owner, _)| owner as usize == c);
                let retaken = self.mutations.refresh_retakes && s.key.is_none();
                if retaken {
                    s.marked = false;
                }
                if held || retaken {
                    s.key = Some((c as u8, now + t.ttl));
                    if s.lapsed[c] {
                        s.confirmed_lapsed = true;
                    }
                }
                Answer::Refreshed(held || retaken)
            }
            // release_plain.lua: a value held and unmarked is deleted, the
            // flag not read; else release.lua lines 37-62: delete if held,
            // announce when the flag is set (release_announce.lua line 105).
            Op::Release => {
                let deleted = match s.key {
                    Some((owner, _)) if owner as usize == c => true,
                    Some((owner, _)) if self.mutations.release_without_token_check => {
                        s.lapsed[owner as usize] = true;
                        true
                    }
                    _ => false,
                };
                if deleted {
                    s.key = None;
                    let marked = std::mem::take(&mut s.marked);
                    if marked && s.flag.is_some() {
                        for (d, client) in s.clients.iter_mut().enumerate() {
                            if matches!(
                                client.phase,
                                Phase::Listening { .. } | Phase::Attempting { listen: true }
                            ) {
                                client.woken = true;
                                s.awaiting[d] = None;
                            }
                        }
                    } else if s.awaiting.iter().any(|w| w.is_some_and(|w| now < w)) {
                        s.missed_wakeup = true;
                    }
                }
                Answer::Done
            }
        }
    }

    /// What client `c` does with the answer to a request sent at `sent`.
    fn receive(&self, s: &mut PlainState, c: usize, op: Op, sent: u8, answer: Answer) {
        let t = self.timing;
        let now = s.now;
        let client = &mut s.clients[c];
        match (client.phase, op, answer) {
            // wait.rs `attempt`: a lease trusted from the send time.
            (Phase::Attempting { .. }, Op::Acquire { .. }, Answer::Taken) => {
                let deadline = t.deadline(sent, t.ttl, client.skew);
                client.phase = if now < deadline {
                    Phase::Holding { deadline }
                } else {
                    // A reply too late to trust: the claim gives it back.
                    client.net = Some(Msg::Request {
                        op: Op::Release,
                        sent: now,
                    });
                    Phase::Releasing
                };
            }
            // wait.rs `listen`: the first busy answer makes the listener and
            // sends the attempt again at once, asking for the flag.
            (Phase::Attempting { listen: false }, Op::Acquire { .. }, Answer::Busy { .. }) => {
                client.phase = Phase::Attempting { listen: true };
            }
            (Phase::Attempting { listen: true }, Op::Acquire { .. }, Answer::Busy { pttl }) => {
                client.phase = Phase::Listening {
                    wake_at: now + pttl,
                };
                if self.mutations.flag_after_attempt {
                    client.net = Some(Msg::Request {
                        op: Op::Mark,
                        sent: now,
                    });
                }
            }
            // lease.rs `refreshed`: no revival past the deadline.
            (Phase::Holding { deadline }, Op::Refresh, Answer::Refreshed(true)) => {
                if now < deadline {
                    let moved = t.deadline(sent, t.ttl, client.skew).max(deadline);
                    client.phase = Phase::Holding { deadline: moved };
                } else {
                    client.phase = Phase::Done;
                }
            }
            (Phase::Holding { .. }, Op::Refresh, Answer::Refreshed(false)) => {
                client.phase = Phase::Done;
            }
            (Phase::Releasing, Op::Release, _) => client.phase = Phase::Done,
            _ => {}
        }
    }

    fn send(s: &mut PlainState, c: usize, op: Op) {
        s.clients[c].net = Some(Msg::Request { op, sent: s.now });
    }
}

impl Plain {
    /// The steps `actions` offers in `s`.
    fn offer(&self, s: &PlainState, actions: &mut Vec<PlainAction>) {
        if s.now < self.timing.horizon {
            actions.push(PlainAction::Tick);
        }
        if s.restarts < self.restarts {
            actions.push(PlainAction::Restart);
        }
        for (i, client) in s.clients.iter().enumerate() {
            let c = i as u8;
            match client.net {
                Some(Msg::Request { .. }) => {
                    actions.push(PlainAction::Deliver(c));
                    actions.push(PlainAction::Lose(c));
                }
                Some(Msg::Reply { .. }) => {
                    actions.push(PlainAction::Receive(c));
                    actions.push(PlainAction::Lose(c));
                }
                None => {}
            }
            let idle = client.net.is_none();
            let may_attempt = client.attempts < self.attempts;
            match client.phase {
                Phase::Idle | Phase::Attempting { .. } if idle && may_attempt => {
                    actions.push(PlainAction::Attempt(c));
                }
                Phase::Listening { wake_at }
                    if idle && may_attempt && (client.woken || s.now >= wake_at) =>
                {
                    actions.push(PlainAction::Attempt(c));
                }
                Phase::Holding { deadline } if idle => {
                    if s.now < deadline {
                        actions.push(PlainAction::Refresh(c));
                    }
                    actions.push(PlainAction::Release(c));
                }
                _ => {}
            }
            if matches!(
                client.phase,
                Phase::Attempting { .. } | Phase::Listening { .. }
            ) && idle
            {
                actions.push(PlainAction::Cancel(c));
            }
        }
    }

    /// What `action` makes of `last`, or `None` when it is not enabled.
    fn step(&self, last: &PlainState, action: PlainAction) -> Option<PlainState> {
        let mut s = last.clone();
        match action {
            PlainAction::Tick => {
                s.now += 1;
                self.expire(&mut s);
            }
            PlainAction::Restart => {
                if let Some((owner, _)) = s.key.take() {
                    s.lapsed[owner as usize] = true;
                }
                s.marked = false;
                s.flag = None;
                s.restarts += 1;
            }
            PlainAction::Attempt(c) => {
                let c = c as usize;
                let listen = match s.clients[c].phase {
                    Phase::Idle => false,
                    Phase::Attempting { listen } => listen,
                    _ => true,
                };
                let client = &mut s.clients[c];
                client.phase = Phase::Attempting { listen };
                client.woken = false;
                client.attempts += 1;
                Self::send(&mut s, c, Op::Acquire { listen });
            }
            PlainAction::Refresh(c) => Self::send(&mut s, c as usize, Op::Refresh),
            PlainAction::Release(c) | PlainAction::Cancel(c) => {
                let c = c as usize;
                s.clients[c].phase = Phase::Releasing;
                s.awaiting[c] = None;
                Self::send(&mut s, c, Op::Release);
            }
            PlainAction::Deliver(c) => {
                let c = c as usize;
                let Some(Msg::Request { op, sent }) = s.clients[c].net else {
                    return None;
                };
                let answer = self.run(&mut s, c, op);
                s.clients[c].net = Some(Msg::Reply { op, sent, answer });
            }
            PlainAction::Lose(c) => {
                let client = &mut s.clients[c as usize];
                client.net = None;
                if client.phase == Phase::Releasing {
                    client.phase = Phase::Done;
                }
            }
            PlainAction::Receive(c) => {
                let c = c as usize;
                let Some(Msg::Reply { op, sent, answer }) = s.clients[c].net.take() else {
                    return None;
                };
                self.receive(&mut s, c, op, sent, answer);
            }
        }
        Some(s)
    }
}

impl Model for Plain {
    type State = PlainState;
    type Action = PlainAction;

    fn init_states(&self) -> Vec<PlainState> {
        let n = self.clients as usize;
        // Only the first client's clock runs slow: a counterexample that
        // needs one slow clock is found with it as that client.
        (0..=self.max_skew)
            .map(|skew| {
                let mut skews = vec![0; n];
                skews[0] = skew;
                skews
            })
            .map(|skews| PlainState {
                now: 0,
                key: None,
                marked: false,
                flag: None,
                restarts: 0,
                clients: skews
                    .into_iter()
                    .map(|skew| Client {
                        phase: Phase::Idle,
                        net: None,
                        woken: false,
                        attempts: 0,
                        skew,
                    })
                    .collect(),
                awaiting: vec![None; n],
                lapsed: vec![false; n],
                missed_wakeup: false,
                confirmed_lapsed: false,
            })
            .collect()
    }

    fn actions(&self, s: &PlainState, actions: &mut Vec<PlainAction>) {
        self.offer(s, actions);
        steps::offered(self.steps.as_ref(), actions);
    }

    fn next_state(&self, last: &PlainState, action: PlainAction) -> Option<PlainState> {
        steps::taken(self.steps.as_ref(), &action, self.step(last, action))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at most one holder", |_, s: &PlainState| {
                (0..s.clients.len()).filter(|&c| s.believes(c)).count() <= 1
            }),
            Property::always("a holder's key is its own", |_, s: &PlainState| {
                (0..s.clients.len())
                    .filter(|&c| s.believes(c))
                    .all(|c| s.key.is_some_and(|(owner, _)| owner as usize == c))
            }),
            Property::always("a release wakes its waiters", |_, s: &PlainState| {
                !s.missed_wakeup
            }),
            Property::always("no lapsed lease is confirmed", |_, s: &PlainState| {
                !s.confirmed_lapsed
            }),
            Property::sometimes("a waiter gets the key", |_, s: &PlainState| {
                s.clients.iter().any(|c| c.attempts >= 2)
                    && (0..s.clients.len()).any(|c| s.believes(c))
            }),
        ]
    }
}
