//! Refreshes of one lease with a ttl of their own, several in flight: the
//! local deadline's rule of `lease.rs` (`Timing`, `Lease::sending`,
//! `Lease::refreshed`, `Lease::settled`, `InFlight`) against `refresh.lua`.
//!
//! The holder (client 0) starts with the key, taken by a request sent at
//! tick 0 for the long ttl. It refreshes (`Lock::refresh(ttl)` or the
//! watchdog) with a short or a long ttl, up to `in_flight` at once. The
//! server runs each refresh as `refresh.lua` does: the key is set to expire
//! the requested ttl from now if the token still holds it, which *shortens*
//! it when the ttl is shorter than what was left. Any request or reply may
//! be lost, delayed and overtaken by another; the client may give up on a
//! refresh at any moment (an error, a timeout, a dropped call: `InFlight`
//! dropped unanswered), and a request it gave up on may still be applied
//! later. A second client (client 1) attempts to take the key with
//! `SET NX` and trusts what it takes from its send time.
//!
//! The rule checked: a refresh moves the deadline in as it is sent, to
//! `min(deadline, sent + ttl - drift)`; a confirmation sets the deadline
//! from its send time with the shortest ttl among itself, the refreshes
//! in flight beside it (read before it leaves their count) and those given
//! up on; one for a request older than the last
//! confirmed changes nothing; one after the deadline cannot revive the
//! lease.

use stateright::{Model, Property};

use crate::steps::{self, Steps};
use crate::time::Timing;

/// Breaks the refresh rule on purpose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RefreshesMutations {
    /// The rule before issue 36: sending a refresh leaves the deadline
    /// where it is, and a confirmation counts its own ttl alone.
    pub deadline_moves_only_on_confirm: bool,
    /// A confirmation counts its own ttl and those of the refreshes given
    /// up on, not those still in flight.
    pub confirm_ignores_in_flight: bool,
    /// A confirmation counts its own ttl and those still in flight, not
    /// those of the refreshes given up on (`doubt`).
    pub confirm_ignores_given_up: bool,
    /// `Lease::refreshed` as the runtime had it before `Timing::counted`:
    /// the confirmation is taken out of the refreshes in flight before the
    /// bound is read, so a
    /// shorter refresh confirmed while it was in flight no longer bounds
    /// it, though it may have been applied after it.
    pub bound_read_after_settling: bool,
}

/// Which ttl a refresh asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ask {
    /// [`Refreshes::short`] ticks.
    Short,
    /// The lease's ttl, `timing.ttl`.
    Long,
}

/// Where a refresh is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// On its way to the server.
    Request,
    /// Run; whether it extended the key, on its way back.
    Reply(bool),
    /// Lost, request or reply: the client has not yet given up on it.
    Gone,
}

/// One refresh of the holder's, sent and not yet settled by the client, or
/// given up on by the client while its request may still be applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Refresh {
    /// When it was sent.
    pub sent: u8,
    /// The ttl it asks for.
    pub ask: Ask,
    /// Where it is.
    pub stage: Stage,
    /// The client gave up on it (`InFlight` dropped: `settled(ttl, true)`).
    pub given_up: bool,
}

/// The holder's lease as `lease.rs`'s `Timing` keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaseTiming {
    /// When the last confirmed acquire or refresh was sent.
    pub sent: u8,
    /// The local deadline, in server ticks.
    pub deadline: u8,
    /// Refreshes sent and not yet answered or given up on.
    pub in_flight: u8,
    /// The shortest ttl among them (as the runtime keeps it: reset by the
    /// first refresh sent when none is in flight).
    pub in_flight_ttl: u8,
    /// The shortest ttl of a refresh given up on.
    pub doubt: Option<u8>,
    /// Lost (a refusal, or a confirmation past the deadline).
    pub lost: bool,
}

/// The second client's attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Taking {
    /// No attempt out.
    Idle,
    /// An attempt sent at `sent`, on its way to the server.
    Request { sent: u8 },
    /// Its answer on the way back.
    Reply { sent: u8, taken: bool },
    /// Believes it holds the key until `deadline`.
    Holding { deadline: u8 },
}

/// The key, the holder's lease and refreshes, the second client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RefreshesState {
    /// The server's clock.
    pub now: u8,
    /// The key's owner and expiry.
    pub key: Option<(u8, u8)>,
    /// How slow the holder's clock runs.
    pub skew: u8,
    /// The holder's lease.
    pub lease: LeaseTiming,
    /// The holder's refreshes, sorted.
    pub refreshes: Vec<Refresh>,
    /// Refreshes sent so far.
    pub sent: u8,
    /// The second client.
    pub taker: Taking,
    /// Attempts the second client sent.
    pub attempts: u8,
    /// A refresh shortened the key's expiry on the server.
    pub shortened: bool,
    /// A short refresh was confirmed and moved the deadline.
    pub short_confirmed: bool,
}

/// A step of the refreshes model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RefreshesAction {
    /// The clock advances; the key expires.
    Tick,
    /// The holder sends a refresh (`Lease::sending`).
    Refresh(Ask),
    /// The server runs refresh `i` (`refresh.lua`).
    Deliver(usize),
    /// Refresh `i`'s request or reply is lost.
    Lose(usize),
    /// The holder reads refresh `i`'s reply.
    Receive(usize),
    /// The holder gives up on refresh `i` (`InFlight` dropped).
    GiveUp(usize),
    /// The second client sends `SET NX`.
    Attempt,
    /// The server runs it.
    DeliverAttempt,
    /// Its request or reply is lost.
    LoseAttempt,
    /// The second client reads its answer.
    ReceiveAttempt,
}

/// One lease refreshed with ttls of its own; see the module documentation.
///
/// ```
/// use lockmacro_model::{Refreshes, Timing};
/// use stateright::{Checker, Model};
///
/// let model = Refreshes { attempts: 1, ..Refreshes::new(Timing::default()) };
/// model.checker().spawn_bfs().join().assert_properties();
/// ```
#[derive(Clone, Debug)]
pub struct Refreshes {
    /// The durations (`ttl` is the long ttl) and the clock's bound.
    pub timing: Timing,
    /// The short ttl, in ticks.
    pub short: u8,
    /// How many refreshes the holder sends in all.
    pub refreshes: u8,
    /// How many may be in flight at once (the caller's and the watchdog's).
    pub in_flight: u8,
    /// How many attempts the second client sends.
    pub attempts: u8,
    /// How many ticks slower than the server's the holder's clock may run.
    pub max_skew: u8,
    /// The faults planted on purpose.
    pub mutations: RefreshesMutations,
    /// Counts the steps offered and taken, when given (see [`Steps`]).
    pub steps: Option<Steps>,
}

impl Refreshes {
    /// The rule of `lease.rs` (with the bound read before the confirmation
    /// settles: see [`RefreshesMutations::bound_read_after_settling`]): a
    /// long ttl of 4 ticks and a short one of 2, horizon 5, 2 refreshes,
    /// both in flight at once, 2 attempts of the second client, the
    /// holder's clock slow by up to the drift.
    pub fn new(timing: Timing) -> Self {
        Refreshes {
            timing: Timing {
                ttl: 4,
                horizon: 5,
                ..timing
            },
            short: 2,
            refreshes: 2,
            in_flight: 2,
            attempts: 2,
            max_skew: timing.drift,
            mutations: RefreshesMutations::default(),
            steps: None,
        }
    }

    fn ttl(&self, ask: Ask) -> u8 {
        match ask {
            Ask::Short => self.short,
            Ask::Long => self.timing.ttl,
        }
    }

    /// `Lease::sending`: counted in flight; the deadline moves in to what
    /// the refresh may leave.
    fn sending(&self, s: &mut RefreshesState, ttl: u8) {
        let lease = &mut s.lease;
        lease.in_flight_ttl = if lease.in_flight == 0 {
            ttl
        } else {
            lease.in_flight_ttl.min(ttl)
        };
        lease.in_flight += 1;
        if !self.mutations.deadline_moves_only_on_confirm {
            lease.deadline = lease.deadline.min(self.timing.deadline(s.now, ttl, s.skew));
        }
    }

    /// `Lease::refreshed`: no revival past the deadline; an older request
    /// than the last confirmed changes nothing; else the deadline counts
    /// from its send time with the shortest ttl whose fate is unknown.
    fn refreshed(&self, s: &mut RefreshesState, ttl: u8, sent: u8) {
        let m = self.mutations;
        let lease = &mut s.lease;
        // Every refresh in flight at any moment this one was (the running
        // minimum is reset only by a refresh sent when none is in flight):
        // any of them, confirmed since or not, may have been applied after
        // this one.
        let overlapping = lease.in_flight_ttl;
        lease.in_flight = lease.in_flight.saturating_sub(1);
        if lease.lost || s.now >= lease.deadline {
            lease.lost = true;
            return;
        }
        if sent >= lease.sent {
            let counted = if self.mutations.deadline_moves_only_on_confirm {
                ttl
            } else {
                let flying = if m.confirm_ignores_in_flight {
                    None
                } else if m.bound_read_after_settling {
                    (lease.in_flight > 0).then_some(lease.in_flight_ttl)
                } else {
                    Some(overlapping)
                };
                let doubt = lease.doubt.filter(|_| !m.confirm_ignores_given_up);
                [flying, doubt].into_iter().flatten().fold(ttl, u8::min)
            };
            lease.sent = sent;
            lease.deadline = self.timing.deadline(sent, counted, s.skew);
            if ttl == self.short {
                s.short_confirmed = true;
            }
        }
    }

    /// `Lease::settled`: a refusal (the lease is then lost, `refused`) or a
    /// refresh given up on, which may still be applied.
    fn settled(s: &mut RefreshesState, ttl: u8, failed: bool) {
        let lease = &mut s.lease;
        lease.in_flight = lease.in_flight.saturating_sub(1);
        if failed {
            lease.doubt = Some(lease.doubt.map_or(ttl, |doubt| doubt.min(ttl)));
        } else {
            lease.lost = true;
        }
    }

    /// Drops what can no longer matter (a refresh given up on whose request
    /// has run or was lost) and sorts the rest.
    fn tidy(s: &mut RefreshesState) {
        s.refreshes
            .retain(|r| !(r.given_up && r.stage != Stage::Request));
        s.refreshes.sort_unstable();
    }

    fn offer(&self, s: &RefreshesState, actions: &mut Vec<RefreshesAction>) {
        if s.now < self.timing.horizon {
            actions.push(RefreshesAction::Tick);
        }
        if s.believes_lease()
            && s.sent < self.refreshes
            && s.refreshes.len() < self.in_flight as usize
        {
            actions.push(RefreshesAction::Refresh(Ask::Short));
            actions.push(RefreshesAction::Refresh(Ask::Long));
        }
        for (i, r) in s.refreshes.iter().enumerate() {
            match r.stage {
                Stage::Request => {
                    actions.push(RefreshesAction::Deliver(i));
                    actions.push(RefreshesAction::Lose(i));
                }
                Stage::Reply(_) => {
                    actions.push(RefreshesAction::Receive(i));
                    actions.push(RefreshesAction::Lose(i));
                }
                Stage::Gone => {}
            }
            if !r.given_up && r.stage != Stage::Reply(true) && r.stage != Stage::Reply(false) {
                actions.push(RefreshesAction::GiveUp(i));
            }
        }
        match s.taker {
            Taking::Idle if s.attempts < self.attempts => actions.push(RefreshesAction::Attempt),
            Taking::Request { .. } => {
                actions.push(RefreshesAction::DeliverAttempt);
                actions.push(RefreshesAction::LoseAttempt);
            }
            Taking::Reply { .. } => {
                actions.push(RefreshesAction::ReceiveAttempt);
                actions.push(RefreshesAction::LoseAttempt);
            }
            _ => {}
        }
    }

    fn step(&self, last: &RefreshesState, action: RefreshesAction) -> Option<RefreshesState> {
        let mut s = last.clone();
        let t = self.timing;
        match action {
            RefreshesAction::Tick => {
                s.now += 1;
                if s.key.is_some_and(|(_, expires)| expires <= s.now) {
                    s.key = None;
                }
            }
            RefreshesAction::Refresh(ask) => {
                self.sending(&mut s, self.ttl(ask));
                s.sent += 1;
                s.refreshes.push(Refresh {
                    sent: s.now,
                    ask,
                    stage: Stage::Request,
                    given_up: false,
                });
            }
            // refresh.lua lines 6-14 (leases.lua `held`, then `extend`: a
            // lock's PEXPIRE, which sets the expiry whether it is nearer or
            // further).
            RefreshesAction::Deliver(i) => {
                let ttl = self.ttl(s.refreshes[i].ask);
                let held = s.key.is_some_and(|(owner, _)| owner == 0);
                if held {
                    if s.key.is_some_and(|(_, expires)| s.now + ttl < expires) {
                        s.shortened = true;
                    }
                    s.key = Some((0, s.now + ttl));
                }
                s.refreshes[i].stage = Stage::Reply(held);
            }
            RefreshesAction::Lose(i) => s.refreshes[i].stage = Stage::Gone,
            RefreshesAction::Receive(i) => {
                let r = s.refreshes.remove(i);
                let ttl = self.ttl(r.ask);
                match r.stage {
                    Stage::Reply(true) => self.refreshed(&mut s, ttl, r.sent),
                    Stage::Reply(false) => Self::settled(&mut s, ttl, false),
                    _ => return None,
                }
            }
            RefreshesAction::GiveUp(i) => {
                s.refreshes[i].given_up = true;
                let ttl = self.ttl(s.refreshes[i].ask);
                Self::settled(&mut s, ttl, true);
            }
            RefreshesAction::Attempt => {
                s.attempts += 1;
                s.taker = Taking::Request { sent: s.now };
            }
            // protocol.rs `plain_set`: SET key value NX PX ttl.
            RefreshesAction::DeliverAttempt => {
                let Taking::Request { sent } = s.taker else {
                    return None;
                };
                let taken = s.key.is_none();
                if taken {
                    s.key = Some((1, s.now + t.ttl));
                }
                s.taker = Taking::Reply { sent, taken };
            }
            RefreshesAction::LoseAttempt => s.taker = Taking::Idle,
            // wait.rs `attempt`: trusted from the send time.
            RefreshesAction::ReceiveAttempt => {
                let Taking::Reply { sent, taken } = s.taker else {
                    return None;
                };
                let deadline = t.deadline(sent, t.ttl, 0);
                s.taker = if taken && s.now < deadline {
                    Taking::Holding { deadline }
                } else {
                    Taking::Idle
                };
            }
        }
        Self::tidy(&mut s);
        Some(s)
    }
}

impl RefreshesState {
    /// The holder believes it holds the key.
    pub fn believes_lease(&self) -> bool {
        !self.lease.lost && self.now < self.lease.deadline
    }

    /// The second client believes it holds the key.
    pub fn believes_taker(&self) -> bool {
        matches!(self.taker, Taking::Holding { deadline } if self.now < deadline)
    }
}

impl Model for Refreshes {
    type State = RefreshesState;
    type Action = RefreshesAction;

    fn init_states(&self) -> Vec<RefreshesState> {
        let ttl = self.timing.ttl;
        (0..=self.max_skew)
            .map(|skew| RefreshesState {
                now: 0,
                key: Some((0, ttl)),
                skew,
                lease: LeaseTiming {
                    sent: 0,
                    deadline: self.timing.deadline(0, ttl, skew),
                    in_flight: 0,
                    in_flight_ttl: ttl,
                    doubt: None,
                    lost: false,
                },
                refreshes: Vec::new(),
                sent: 0,
                taker: Taking::Idle,
                attempts: 0,
                shortened: false,
                short_confirmed: false,
            })
            .collect()
    }

    fn actions(&self, s: &RefreshesState, actions: &mut Vec<RefreshesAction>) {
        self.offer(s, actions);
        steps::offered(self.steps.as_ref(), actions);
    }

    fn next_state(&self, last: &RefreshesState, action: RefreshesAction) -> Option<RefreshesState> {
        steps::taken(self.steps.as_ref(), &action, self.step(last, action))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at most one holder", |_, s: &RefreshesState| {
                !(s.believes_lease() && s.believes_taker())
            }),
            Property::always("a holder's key is its own", |_, s: &RefreshesState| {
                let owner = s.key.map(|(owner, _)| owner);
                (!s.believes_lease() || owner == Some(0))
                    && (!s.believes_taker() || owner == Some(1))
            }),
            Property::sometimes(
                "a shortened refresh is confirmed",
                |_, s: &RefreshesState| s.short_confirmed && s.believes_lease(),
            ),
            Property::sometimes(
                "the second client takes the key a refresh shortened",
                |_, s: &RefreshesState| s.shortened && s.believes_taker(),
            ),
        ]
    }
}
