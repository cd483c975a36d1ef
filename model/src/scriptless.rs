//! One key taken by a client that runs the scripts and by one that may not
//! (the script-free engine: `scriptless.rs`, `watched.rs`), at once.
//!
//! The scripted client (client 0) asks for a permit of a semaphore of one
//! (`acquire_shared.lua`) or for the lock (`acquire.lua`), each through
//! `kinds.lua`'s `key_kind`, which sweeps a set's lapsed shares and takes a
//! set without a live one as free; its request and reply may be lost or
//! late. The script-free client (client 1) asks for the lock as
//! `acquire_scriptless` does, one command or transaction per step, any
//! other step in between:
//!
//! 1. `SET key value NX PX ttl` (`plain_attempt`); taken, done;
//! 2. `WATCH key`, `GET key` (`acquire_round`): free, go to 5; held as a
//!    lock by the other, busy (`UNWATCH`; a later attempt starts at 1);
//!    another type, read the set:
//! 3. `TIME`, then
//! 4. `ZRANGE key 0 -1 WITHSCORES` (`shares_at`, two plain commands): no
//!    share live at the time read, go to 5; else the refusal stands only if
//!    `MULTI PING EXEC` (`unchanged`) finds the watched key as it was, and
//!    the round starts again at 2 otherwise;
//! 5. `MULTI`, `DEL key` for a set, `SET key value PX ttl`, `EXEC`: nothing
//!    is written if the key changed since the `WATCH` (another client's
//!    write, or its expiry), and the round starts again at 2.
//!
//! The key may start as a set whose one permit lapsed while the set lives
//! on: a permit refreshed to a shorter ttl keeps its set's longer expiry
//! (`leases.lua` `extend` never shortens it), and its holder died. That is
//! the set over which the script-free engine granted one key twice, when
//! step 3-4 was a `MULTI`/`EXEC` of its own, which ended the `WATCH`.

use stateright::{Model, Property};

use crate::steps::{self, Steps};
use crate::time::Timing;

/// Breaks the script-free engine on purpose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ScriptlessMutations {
    /// The set is read (`TIME`, `ZRANGE`) in a `MULTI`/`EXEC` of its own,
    /// as `shares_at` did before issue 36: its `EXEC` ends the `WATCH`, and
    /// the final `EXEC` writes whatever changed meanwhile.
    pub nested_exec_ends_watch: bool,
    /// A refusal read across two replies stands without the empty
    /// transaction (`unchanged`) that checks the key is as watched.
    pub refusal_unconfirmed: bool,
}

/// What the scripted client asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScriptedAsk {
    /// The lock, `acquire.lua`.
    Lock,
    /// A permit of a semaphore of one, `acquire_shared.lua`.
    Permit,
}

/// The key as the server keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Stored {
    /// No key.
    Free,
    /// A string: `holder`'s lock, until `expiry`.
    Lock { holder: u8, expiry: u8 },
    /// A sorted set of permits (its marker left implicit): each member's
    /// holder and score (the tick its permit lapses), and the key's expiry.
    Set { members: Vec<(u8, u8)>, expiry: u8 },
}

/// The script-free client's `WATCH`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Watch {
    /// Not watching.
    Off,
    /// Watching; the key is as it was.
    Clean,
    /// Watching; the key changed (written or expired): `EXEC` answers nil.
    Dirty,
}

/// Where the script-free client is (the step it takes next).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unscripted {
    /// Starts an attempt with `SET NX`.
    Idle,
    /// `WATCH` and `GET`.
    Watch,
    /// `TIME`.
    Time,
    /// `ZRANGE`, judged at the time read.
    Range { time: u8 },
    /// `MULTI PING EXEC`: whether the refusal stands.
    Confirm,
    /// `MULTI` … `EXEC`; `over_set`: it deletes a set first.
    Exec { over_set: bool },
    /// Believes it holds the lock until `deadline`.
    Holding { deadline: u8 },
    /// Refused as another kind: gave up.
    Refused,
}

/// The scripted client's answer from the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScriptAnswer {
    /// Taken (or its own, extended).
    Taken,
    /// Held by another of its kind.
    Busy,
    /// Held as another kind (`WrongKind`).
    Refused,
}

/// A request of the scripted client's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScriptOp {
    /// `acquire.lua` or `acquire_shared.lua`.
    Acquire,
    /// `refresh.lua`, for the ttl (`true`) or the short ttl.
    Refresh { full: bool },
    /// `release.lua`.
    Release,
}

/// Where the scripted client is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scripted {
    /// Has not got its lease.
    Idle,
    /// Believes it holds its lease until `deadline`.
    Holding { deadline: u8 },
    /// Released, refused, lost or gave up.
    Done,
}

/// The scripted client's request, or its answer (`Some`), and when sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ScriptFlight {
    /// What it asks.
    pub op: ScriptOp,
    /// When it was sent.
    pub sent: u8,
    /// The answer, once run.
    pub answer: Option<ScriptAnswer>,
}

/// The key, the two clients, and what the properties watch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScriptlessState {
    /// The server's clock.
    pub now: u8,
    /// The key.
    pub key: Stored,
    /// The scripted client.
    pub scripted: Scripted,
    /// Its request or reply in flight.
    pub flight: Option<ScriptFlight>,
    /// Its refreshes so far.
    pub refreshes: u8,
    /// Its attempts so far.
    pub scripted_attempts: u8,
    /// The script-free client.
    pub free: Unscripted,
    /// Its attempts so far.
    pub free_attempts: u8,
    /// When its current attempt started (its lease counts from then).
    pub started: u8,
    /// Its connection's `WATCH`.
    pub watch: Watch,
    /// An `EXEC` answered nil: a watched change kept it from writing.
    pub aborted: bool,
    /// The script-free client took the key over a set.
    pub took_set: bool,
    /// The script-free client was refused while the key held no set of
    /// shares (a refusal read from a key that changed between two reads).
    pub misrefused: bool,
}

/// A step of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScriptlessAction {
    /// The clock advances; the key expires.
    Tick,
    /// The scripted client sends its attempt.
    Attempt,
    /// It sends a refresh, for the ttl (`true`) or the short ttl.
    Refresh(bool),
    /// It sends its release.
    Release,
    /// The server runs it.
    Deliver,
    /// Its request or reply is lost.
    Lose,
    /// The scripted client reads its answer.
    Receive,
    /// The script-free client's `SET NX`.
    SetNx,
    /// Its `WATCH` and `GET`.
    Watch,
    /// Its `TIME`.
    Time,
    /// Its `ZRANGE`.
    Range,
    /// Its `MULTI PING EXEC`.
    Confirm,
    /// Its `MULTI` … `EXEC`.
    Exec,
}

/// A scripted and a script-free client on one key; see the module
/// documentation.
///
/// ```
/// use lockmacro_model::{ScriptedAsk, Scriptless, Timing};
/// use stateright::{Checker, Model};
///
/// let model = Scriptless {
///     attempts: 2,
///     ..Scriptless::new(ScriptedAsk::Permit, Timing { horizon: 4, ..Timing::default() })
/// };
/// model.checker().spawn_bfs().join().assert_properties();
/// ```
#[derive(Clone, Debug)]
pub struct Scriptless {
    /// What the scripted client asks for.
    pub ask: ScriptedAsk,
    /// The durations and the clock's bound.
    pub timing: Timing,
    /// How many attempts each client sends.
    pub attempts: u8,
    /// How many refreshes the scripted client sends.
    pub refreshes: u8,
    /// The short ttl a refresh may ask for.
    pub short: u8,
    /// When the set left by a dead holder expires, its permit lapsed from
    /// the start; `None`: the key starts free only.
    pub lapsed_set: Option<u8>,
    /// The faults planted on purpose.
    pub mutations: ScriptlessMutations,
    /// Counts the steps offered and taken, when given (see [`Steps`]).
    pub steps: Option<Steps>,
}

/// The dead holder of the lapsed set's permit.
const DEAD: u8 = 2;

impl Scriptless {
    /// The engine as `scriptless.rs` runs it: 3 attempts each, 2
    /// refreshes (for the ttl or a short ttl of 2) before the scripted
    /// client's release, the key free or a lapsed set that lives until the
    /// ttl.
    pub fn new(ask: ScriptedAsk, timing: Timing) -> Self {
        Scriptless {
            ask,
            timing,
            attempts: 3,
            refreshes: 2,
            short: 2,
            lapsed_set: Some(timing.ttl),
            mutations: ScriptlessMutations::default(),
            steps: None,
        }
    }

    /// `kinds.lua` `key_kind` and `set_shares` (lines 26-60), then
    /// `acquire.lua` (lines 54-68) for the lock or `acquire_shared.lua`
    /// (lines 48-85 and 193-204) for a permit of one, with `keep`'s
    /// `PEXPIRE` that never shortens the set.
    fn script(&self, s: &mut ScriptlessState) -> ScriptAnswer {
        let (now, ttl) = (s.now, self.timing.ttl);
        if let Stored::Set { members, .. } = &mut s.key {
            members.retain(|&(_, score)| score > now);
        }
        let lapsed = matches!(&s.key, Stored::Set { members, .. } if members.is_empty());
        match (self.ask, &mut s.key) {
            (ScriptedAsk::Lock, Stored::Free) => {
                s.key = Stored::Lock {
                    holder: 0,
                    expiry: now + ttl,
                };
                ScriptAnswer::Taken
            }
            (ScriptedAsk::Lock, Stored::Set { .. }) if lapsed => {
                s.key = Stored::Lock {
                    holder: 0,
                    expiry: now + ttl,
                };
                ScriptAnswer::Taken
            }
            (ScriptedAsk::Lock, Stored::Set { .. }) => ScriptAnswer::Refused,
            (ScriptedAsk::Lock, Stored::Lock { holder, expiry }) => {
                if *holder == 0 {
                    *expiry = now + ttl;
                    ScriptAnswer::Taken
                } else {
                    ScriptAnswer::Busy
                }
            }
            (ScriptedAsk::Permit, Stored::Free) => {
                s.key = Stored::Set {
                    members: vec![(0, now + ttl)],
                    expiry: now + ttl,
                };
                ScriptAnswer::Taken
            }
            (ScriptedAsk::Permit, Stored::Lock { .. }) => ScriptAnswer::Refused,
            (ScriptedAsk::Permit, Stored::Set { members, expiry }) => {
                let own = members.iter().position(|&(holder, _)| holder == 0);
                if own.is_none() && !members.is_empty() {
                    return ScriptAnswer::Busy;
                }
                match own {
                    Some(i) => members[i].1 = now + ttl,
                    None => members.push((0, now + ttl)),
                }
                *expiry = (*expiry).max(now + ttl);
                ScriptAnswer::Taken
            }
        }
    }

    fn ttl(&self, full: bool) -> u8 {
        if full { self.timing.ttl } else { self.short }
    }

    /// `refresh.lua` through `leases.lua`: `held` (a lock's value, or a
    /// permit scored past now), then `extend` (a lock's `PEXPIRE`; a
    /// permit's `ZADD XX`, and the set's `PEXPIRE` only when it would
    /// lengthen it).
    fn refresh(&self, s: &mut ScriptlessState, ttl: u8) -> ScriptAnswer {
        let now = s.now;
        match &mut s.key {
            Stored::Lock { holder: 0, expiry } => {
                *expiry = now + ttl;
                ScriptAnswer::Taken
            }
            Stored::Set { members, expiry } => {
                match members
                    .iter_mut()
                    .find(|(holder, score)| *holder == 0 && *score > now)
                {
                    Some(member) => {
                        member.1 = now + ttl;
                        *expiry = (*expiry).max(now + ttl);
                        ScriptAnswer::Taken
                    }
                    None => ScriptAnswer::Refused,
                }
            }
            _ => ScriptAnswer::Refused,
        }
    }

    /// `release.lua` lines 36-60: a lock held deleted; a permit removed,
    /// and the set with it when no live share is left.
    fn release(&self, s: &mut ScriptlessState) {
        let now = s.now;
        match &mut s.key {
            Stored::Lock { holder: 0, .. } => s.key = Stored::Free,
            Stored::Set { members, .. }
                if members.iter().any(|&(h, score)| h == 0 && score > now) =>
            {
                members.retain(|&(h, score)| h != 0 && score > now);
                if members.is_empty() {
                    s.key = Stored::Free;
                }
            }
            _ => {}
        }
    }

    /// The key as the server keeps it, changed: a watch on it is dirty.
    fn touch(s: &mut ScriptlessState, before: &Stored) {
        if s.key != *before && s.watch == Watch::Clean {
            s.watch = Watch::Dirty;
        }
    }

    fn offer(&self, s: &ScriptlessState, actions: &mut Vec<ScriptlessAction>) {
        if s.now < self.timing.horizon {
            actions.push(ScriptlessAction::Tick);
        }
        match s.flight {
            Some(ScriptFlight { answer: None, .. }) => {
                actions.push(ScriptlessAction::Deliver);
                actions.push(ScriptlessAction::Lose);
            }
            Some(_) => {
                actions.push(ScriptlessAction::Receive);
                actions.push(ScriptlessAction::Lose);
            }
            None => match s.scripted {
                Scripted::Idle if s.scripted_attempts < self.attempts => {
                    actions.push(ScriptlessAction::Attempt);
                }
                Scripted::Holding { deadline } => {
                    if s.now < deadline && s.refreshes < self.refreshes {
                        actions.push(ScriptlessAction::Refresh(false));
                        actions.push(ScriptlessAction::Refresh(true));
                    }
                    actions.push(ScriptlessAction::Release);
                }
                _ => {}
            },
        }
        let step = match s.free {
            Unscripted::Idle if s.free_attempts < self.attempts => ScriptlessAction::SetNx,
            Unscripted::Watch => ScriptlessAction::Watch,
            Unscripted::Time => ScriptlessAction::Time,
            Unscripted::Range { .. } => ScriptlessAction::Range,
            Unscripted::Confirm => ScriptlessAction::Confirm,
            Unscripted::Exec { .. } => ScriptlessAction::Exec,
            _ => return,
        };
        actions.push(step);
    }

    fn step(&self, last: &ScriptlessState, action: ScriptlessAction) -> Option<ScriptlessState> {
        let mut s = last.clone();
        let t = self.timing;
        let now = s.now;
        match action {
            ScriptlessAction::Tick => {
                let before = s.key.clone();
                s.now += 1;
                let expired = match &s.key {
                    Stored::Free => false,
                    Stored::Lock { expiry, .. } | Stored::Set { expiry, .. } => *expiry <= s.now,
                };
                if expired {
                    s.key = Stored::Free;
                }
                Self::touch(&mut s, &before);
            }
            ScriptlessAction::Attempt => {
                s.scripted_attempts += 1;
                s.flight = Some(ScriptFlight {
                    op: ScriptOp::Acquire,
                    sent: now,
                    answer: None,
                });
            }
            // lease.rs `sending`: the deadline moves in to what the
            // refresh may leave.
            ScriptlessAction::Refresh(full) => {
                let Scripted::Holding { deadline } = s.scripted else {
                    return None;
                };
                let ttl = self.ttl(full);
                s.refreshes += 1;
                s.scripted = Scripted::Holding {
                    deadline: deadline.min(t.deadline(now, ttl, 0)),
                };
                s.flight = Some(ScriptFlight {
                    op: ScriptOp::Refresh { full },
                    sent: now,
                    answer: None,
                });
            }
            ScriptlessAction::Release => {
                s.scripted = Scripted::Done;
                s.flight = Some(ScriptFlight {
                    op: ScriptOp::Release,
                    sent: now,
                    answer: None,
                });
            }
            ScriptlessAction::Deliver => {
                let flight = s.flight?;
                let before = s.key.clone();
                let answer = match flight.op {
                    ScriptOp::Acquire => self.script(&mut s),
                    ScriptOp::Refresh { full } => self.refresh(&mut s, self.ttl(full)),
                    ScriptOp::Release => {
                        self.release(&mut s);
                        ScriptAnswer::Taken
                    }
                };
                Self::touch(&mut s, &before);
                s.flight = Some(ScriptFlight {
                    answer: Some(answer),
                    ..flight
                });
            }
            ScriptlessAction::Lose => s.flight = None,
            // wait.rs `attempt`: trusted from the send time; a busy answer
            // tries again later; a refusal ends the obtain. lease.rs
            // `refreshed`: no revival past the deadline.
            ScriptlessAction::Receive => {
                let Some(ScriptFlight {
                    op,
                    sent,
                    answer: Some(answer),
                }) = s.flight.take()
                else {
                    return None;
                };
                s.scripted = match (op, s.scripted, answer) {
                    (ScriptOp::Acquire, Scripted::Idle, ScriptAnswer::Taken) => {
                        let deadline = t.deadline(sent, t.ttl, 0);
                        if now < deadline {
                            Scripted::Holding { deadline }
                        } else {
                            Scripted::Idle
                        }
                    }
                    (ScriptOp::Acquire, _, ScriptAnswer::Refused) => Scripted::Done,
                    (
                        ScriptOp::Refresh { full },
                        Scripted::Holding { deadline },
                        ScriptAnswer::Taken,
                    ) if now < deadline => Scripted::Holding {
                        deadline: t.deadline(sent, self.ttl(full), 0),
                    },
                    (ScriptOp::Refresh { .. }, _, _) => Scripted::Done,
                    (_, scripted, _) => scripted,
                };
            }
            // locks.rs `plain_attempt`: SET NX PX.
            ScriptlessAction::SetNx => {
                s.free_attempts += 1;
                s.started = now;
                if s.key == Stored::Free {
                    s.key = Stored::Lock {
                        holder: 1,
                        expiry: now + t.ttl,
                    };
                    s.free = Unscripted::Holding {
                        deadline: t.deadline(now, t.ttl, 0),
                    };
                } else {
                    s.free = Unscripted::Watch;
                }
            }
            // scriptless.rs `acquire_round`: WATCH, GET (and PTTL).
            ScriptlessAction::Watch => {
                s.watch = Watch::Clean;
                s.free = match s.key {
                    Stored::Free => Unscripted::Exec { over_set: false },
                    Stored::Lock { .. } => {
                        // `busy`: UNWATCH; the caller tries again later.
                        s.watch = Watch::Off;
                        Unscripted::Idle
                    }
                    Stored::Set { .. } => Unscripted::Time,
                };
            }
            // `shares_at`: TIME, a plain command (or, mutated, inside a
            // MULTI/EXEC that ends the WATCH).
            ScriptlessAction::Time => {
                if self.mutations.nested_exec_ends_watch {
                    s.watch = Watch::Off;
                }
                s.free = Unscripted::Range { time: now };
            }
            // `shares_at`: ZRANGE, judged at the TIME read; a string is
            // another kind (`Shares::Other`), a missing key an empty set.
            ScriptlessAction::Range => {
                let Unscripted::Range { time } = s.free else {
                    return None;
                };
                s.free = match &s.key {
                    Stored::Free => Unscripted::Exec { over_set: true },
                    Stored::Lock { .. } => Unscripted::Confirm,
                    Stored::Set { members, .. } => {
                        if members.iter().any(|&(_, score)| score > time) {
                            Unscripted::Confirm
                        } else {
                            Unscripted::Exec { over_set: true }
                        }
                    }
                };
            }
            // `unchanged`: MULTI PING EXEC, which ends the WATCH.
            ScriptlessAction::Confirm => {
                s.free = if s.watch == Watch::Dirty && !self.mutations.refusal_unconfirmed {
                    Unscripted::Watch
                } else {
                    s.misrefused |= !matches!(s.key, Stored::Set { .. });
                    Unscripted::Refused
                };
                s.watch = Watch::Off;
            }
            // MULTI, DEL (over a set), SET PX, EXEC: nil when a watched key
            // changed, and the round is read again (`Exclusive::run`).
            ScriptlessAction::Exec => {
                let Unscripted::Exec { over_set } = s.free else {
                    return None;
                };
                if s.watch == Watch::Dirty {
                    s.aborted = true;
                    s.free = Unscripted::Watch;
                } else {
                    s.key = Stored::Lock {
                        holder: 1,
                        expiry: now + t.ttl,
                    };
                    s.took_set |= over_set;
                    s.free = Unscripted::Holding {
                        deadline: t.deadline(s.started, t.ttl, 0),
                    };
                }
                s.watch = Watch::Off;
            }
        }
        Some(s)
    }
}

impl ScriptlessState {
    /// The scripted client believes it holds its lease.
    pub fn believes_scripted(&self) -> bool {
        matches!(self.scripted, Scripted::Holding { deadline } if self.now < deadline)
    }

    /// The script-free client believes it holds the lock.
    pub fn believes_free(&self) -> bool {
        matches!(self.free, Unscripted::Holding { deadline } if self.now < deadline)
    }
}

impl Model for Scriptless {
    type State = ScriptlessState;
    type Action = ScriptlessAction;

    fn init_states(&self) -> Vec<ScriptlessState> {
        let free = ScriptlessState {
            now: 0,
            key: Stored::Free,
            scripted: Scripted::Idle,
            flight: None,
            refreshes: 0,
            scripted_attempts: 0,
            free: Unscripted::Idle,
            free_attempts: 0,
            started: 0,
            watch: Watch::Off,
            aborted: false,
            took_set: false,
            misrefused: false,
        };
        let lapsed = self.lapsed_set.map(|expiry| ScriptlessState {
            key: Stored::Set {
                members: vec![(DEAD, 0)],
                expiry,
            },
            ..free.clone()
        });
        std::iter::once(free).chain(lapsed).collect()
    }

    fn actions(&self, s: &ScriptlessState, actions: &mut Vec<ScriptlessAction>) {
        self.offer(s, actions);
        steps::offered(self.steps.as_ref(), actions);
    }

    fn next_state(
        &self,
        last: &ScriptlessState,
        action: ScriptlessAction,
    ) -> Option<ScriptlessState> {
        steps::taken(self.steps.as_ref(), &action, self.step(last, action))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at most one holder", |_, s: &ScriptlessState| {
                !(s.believes_scripted() && s.believes_free())
            }),
            Property::always(
                "a holder's key is its own",
                |m: &Scriptless, s: &ScriptlessState| {
                    let scripted = !s.believes_scripted()
                        || match (&s.key, m.ask) {
                            (Stored::Lock { holder, .. }, ScriptedAsk::Lock) => *holder == 0,
                            (Stored::Set { members, .. }, ScriptedAsk::Permit) => members
                                .iter()
                                .any(|&(holder, score)| holder == 0 && score > s.now),
                            _ => false,
                        };
                    let free =
                        !s.believes_free() || matches!(s.key, Stored::Lock { holder: 1, .. });
                    scripted && free
                },
            ),
            Property::always(
                "a script-free refusal names a set of shares",
                |_, s: &ScriptlessState| !s.misrefused,
            ),
            Property::sometimes(
                "the script-free client takes the key over a set",
                |_, s: &ScriptlessState| s.took_set && s.believes_free(),
            ),
            Property::sometimes(
                "a watched change aborts the script-free EXEC",
                |_, s: &ScriptlessState| s.aborted,
            ),
        ]
    }
}
