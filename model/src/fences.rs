//! Fence counters: `fence.lua`'s `next_fence` as `acquire.lua` calls it. A
//! counter is seeded from the server's clock when missing, incremented by
//! every acquisition, expires `fence_expiry` after its last use, and is lost
//! with everything else when the server restarts without persistence (or,
//! as [`Fences::loss`] says, a restart loses the counter alone, the key
//! alone, or every write since a snapshot it comes back with).
//!
//! The clock counts in the counter's unit (microseconds in the scripts), and
//! every script call takes at least one tick: `fence.lua`'s argument that a
//! counter never passes the clock rests on exactly that.
//!
//! Clients obtain the key one after another, each a few times, with fresh
//! tokens; replies may be lost, and an attempt sent again finds its own
//! value and is minted a fence of its own (`next_fence`, called from
//! `acquire.lua` through `taken`), as a fresh acquisition is: reading the
//! counter as it stands would tell it another lock's fence when several
//! share the counter, or nothing once the counter expired.

use stateright::{Model, Property};

use crate::steps::{self, Steps};

use crate::time::Timing;

/// Breaks the fence counter on purpose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FencesMutations {
    /// A missing counter starts at zero rather than at the clock.
    pub seed_from_zero: bool,
    /// The server's clock steps back by this many ticks when it restarts.
    pub clock_steps_back: u8,
    /// A retry that finds its own value reads the counter as it stands,
    /// and a missing one as 0, as the scripts did before `held_fence`.
    pub retry_reads_zero: bool,
}

/// What a restart of the server loses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Loss {
    /// Everything: a server without persistence.
    #[default]
    Everything,
    /// The counter; the key is kept.
    Counter,
    /// The key; the counter is kept.
    Key,
    /// Every write since a snapshot, which the server comes back with (an
    /// RDB snapshot, an AOF not synced at each write, a replica behind its
    /// master at a failover): the counter comes back older, not missing.
    SinceSnapshot,
}

/// The fence counter of one key; see the module documentation.
///
/// ```
/// use lockmacro_model::{Fences, Timing};
/// use stateright::{Checker, Model};
///
/// let model = Fences { obtains: 1, ..Fences::new(2, Timing::default()) };
/// model.checker().spawn_bfs().join().assert_properties();
/// ```
#[derive(Clone, Debug)]
pub struct Fences {
    /// How many clients take the key.
    pub clients: u8,
    /// How many times each client obtains it.
    pub obtains: u8,
    /// The durations; the clock's horizon.
    pub timing: Timing,
    /// `RedisConfig::fence_expiry`, in ticks.
    pub fence_expiry: u8,
    /// How often the server may restart and lose its data.
    pub restarts: u8,
    /// What a restart loses.
    pub loss: Loss,
    /// The faults planted on purpose.
    pub mutations: FencesMutations,
    /// Counts the steps offered and taken, when given (see [`Steps`]).
    pub steps: Option<Steps>,
}

impl Fences {
    /// The counter as `fence.lua` keeps it, with a server that may restart
    /// once, and a counter that outlives every lease of the model (as the
    /// default of a day outlives leases); set `fence_expiry` shorter to see
    /// counters expire.
    pub fn new(clients: u8, timing: Timing) -> Self {
        let horizon = 9;
        Fences {
            clients,
            obtains: 2,
            timing: Timing { horizon, ..timing },
            fence_expiry: horizon + timing.ttl,
            restarts: 1,
            loss: Loss::Everything,
            mutations: FencesMutations::default(),
            steps: None,
        }
    }
}

/// A client: its current obtain, and what is in flight for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Taker {
    /// Obtains finished.
    pub done: u8,
    /// The fence of the lease it holds, once the reply came.
    pub holding: Option<u16>,
    /// An attempt (false) or a release (true) in flight.
    pub request: Option<bool>,
    /// The reply to an attempt: the fence, or `None` for busy.
    pub reply: Option<Option<u16>>,
}

/// The counter, the key and the clients.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FencesState {
    /// The server's clock.
    pub now: u8,
    /// The key's holder (client, obtain) and its expiry.
    pub key: Option<((u8, u8), u8)>,
    /// The counter's value and its expiry.
    pub counter: Option<(u16, u8)>,
    /// Restarts so far.
    pub restarts: u8,
    /// The key and the counter as a snapshot kept them (with
    /// [`Loss::SinceSnapshot`]), once taken.
    pub snapshot: Option<Snapshot>,
    /// The clients.
    pub takers: Vec<Taker>,
    /// The largest fence minted for a fresh acquisition.
    pub newest: u16,
    /// A fresh acquisition was given a fence not above an earlier one.
    pub went_back: bool,
    /// The fence minted for each client's current obtain.
    pub minted: Vec<Option<u16>>,
    /// A retried attempt was told a fence below the one minted for it.
    pub retold: bool,
}

/// The key and the counter as a snapshot kept them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Snapshot {
    /// The key's holder and expiry.
    pub key: Option<((u8, u8), u8)>,
    /// The counter's value and expiry.
    pub counter: Option<(u16, u8)>,
}

/// A step of the fence model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FencesAction {
    /// The clock advances; keys expire.
    Tick,
    /// The server restarts and loses its data (see [`Loss`]).
    Restart,
    /// The server writes a snapshot, which a restart comes back with.
    Snapshot,
    /// Client `c` sends (or sends again) its attempt.
    Attempt(u8),
    /// Client `c` releases.
    Release(u8),
    /// The server runs client `c`'s request.
    Deliver(u8),
    /// Client `c`'s request or reply is lost.
    Lose(u8),
    /// Client `c` reads its reply.
    Receive(u8),
}

impl Fences {
    fn expire(s: &mut FencesState) {
        if s.key.is_some_and(|(_, e)| e <= s.now) {
            s.key = None;
        }
        if s.counter.is_some_and(|(_, e)| e <= s.now) {
            s.counter = None;
        }
    }

    /// `fence.lua`, `next_fence`: lines 57-65.
    fn next_fence(&self, s: &mut FencesState) -> u16 {
        let seed = if self.mutations.seed_from_zero {
            0
        } else {
            u16::from(s.now)
        };
        let value = s.counter.map_or(seed, |(v, _)| v) + 1;
        s.counter = Some((value, s.now + self.fence_expiry));
        value
    }

    /// A fence minted for client `c`'s current obtain: above every earlier
    /// one, or the property that fences only go up is broken.
    fn mint(&self, s: &mut FencesState, c: usize) -> u16 {
        let fence = self.next_fence(s);
        if fence <= s.newest {
            s.went_back = true;
        }
        s.newest = s.newest.max(fence);
        s.minted[c] = Some(fence);
        fence
    }

    /// `acquire.lua` with one key and a counter: lines 54-68 and 96.
    fn acquire(&self, s: &mut FencesState, c: usize) -> Option<u16> {
        let token = (c as u8, s.takers[c].done);
        match s.key {
            None => {
                s.key = Some((token, s.now + self.timing.ttl));
                Some(self.mint(s, c))
            }
            Some((holder, _)) if holder == token => {
                // PEXPIRE, then `next_fence`, as for a fresh acquisition.
                s.key = Some((token, s.now + self.timing.ttl));
                let fence = match s.counter {
                    Some((value, _)) if self.mutations.retry_reads_zero => value,
                    None if self.mutations.retry_reads_zero => 0,
                    _ => self.mint(s, c),
                };
                if s.minted[c].is_some_and(|minted| fence < minted) {
                    s.retold = true;
                }
                Some(fence)
            }
            Some(_) => None,
        }
    }
}

impl Fences {
    /// The steps `actions` offers in `s`.
    fn offer(&self, s: &FencesState, actions: &mut Vec<FencesAction>) {
        let running = s.now < self.timing.horizon;
        if running {
            actions.push(FencesAction::Tick);
        }
        if s.restarts < self.restarts {
            actions.push(FencesAction::Restart);
            if self.loss == Loss::SinceSnapshot && s.snapshot.is_none() {
                actions.push(FencesAction::Snapshot);
            }
        }
        for (i, t) in s.takers.iter().enumerate() {
            let c = i as u8;
            if t.request.is_some() {
                if running {
                    actions.push(FencesAction::Deliver(c));
                }
                actions.push(FencesAction::Lose(c));
            } else if t.reply.is_some() {
                actions.push(FencesAction::Receive(c));
                actions.push(FencesAction::Lose(c));
            } else if t.holding.is_some() {
                actions.push(FencesAction::Release(c));
            } else if t.done < self.obtains {
                actions.push(FencesAction::Attempt(c));
            }
        }
    }

    /// What `action` makes of `last`, or `None` when it is not enabled.
    fn step(&self, last: &FencesState, action: FencesAction) -> Option<FencesState> {
        let mut s = last.clone();
        match action {
            FencesAction::Tick => {
                s.now += 1;
                Self::expire(&mut s);
            }
            FencesAction::Restart => {
                match self.loss {
                    Loss::Everything => (s.key, s.counter) = (None, None),
                    Loss::Counter => s.counter = None,
                    Loss::Key => s.key = None,
                    Loss::SinceSnapshot => {
                        let kept = s.snapshot.take().unwrap_or(Snapshot {
                            key: None,
                            counter: None,
                        });
                        (s.key, s.counter) = (kept.key, kept.counter);
                    }
                }
                s.restarts += 1;
                s.now = s.now.saturating_sub(self.mutations.clock_steps_back);
                // Keys past their expiry are not loaded.
                Self::expire(&mut s);
            }
            FencesAction::Snapshot => {
                s.snapshot = Some(Snapshot {
                    key: s.key,
                    counter: s.counter,
                });
            }
            FencesAction::Attempt(c) => s.takers[c as usize].request = Some(false),
            FencesAction::Release(c) => s.takers[c as usize].request = Some(true),
            FencesAction::Deliver(c) => {
                let c = c as usize;
                if s.takers[c].request.take() == Some(true) {
                    // release.lua lines 41-43: DEL when the token holds it.
                    if s.key
                        .is_some_and(|(holder, _)| holder == (c as u8, s.takers[c].done))
                    {
                        s.key = None;
                    }
                    let t = &mut s.takers[c];
                    t.holding = None;
                    t.done += 1;
                    s.minted[c] = None;
                } else {
                    let fence = self.acquire(&mut s, c);
                    s.takers[c].reply = Some(fence);
                }
                // A script call takes at least one tick of the counter's clock.
                s.now += 1;
                Self::expire(&mut s);
            }
            FencesAction::Lose(c) => {
                let t = &mut s.takers[c as usize];
                match t.request.take() {
                    Some(true) => {
                        t.holding = None;
                        t.done += 1;
                        s.minted[c as usize] = None;
                    }
                    Some(false) => {}
                    None => t.reply = None,
                }
            }
            FencesAction::Receive(c) => {
                let t = &mut s.takers[c as usize];
                if let Some(Some(fence)) = t.reply.take() {
                    t.holding = Some(fence);
                }
            }
        }
        Some(s)
    }
}

impl Model for Fences {
    type State = FencesState;
    type Action = FencesAction;

    fn init_states(&self) -> Vec<FencesState> {
        let n = self.clients as usize;
        let taker = Taker {
            done: 0,
            holding: None,
            request: None,
            reply: None,
        };
        vec![FencesState {
            // Any clock but zero: a counter seeded at zero is the mutation.
            now: 1,
            key: None,
            counter: None,
            restarts: 0,
            snapshot: None,
            takers: vec![taker; n],
            newest: 0,
            went_back: false,
            minted: vec![None; n],
            retold: false,
        }]
    }

    fn actions(&self, s: &FencesState, actions: &mut Vec<FencesAction>) {
        self.offer(s, actions);
        steps::offered(self.steps.as_ref(), actions);
    }

    fn next_state(&self, last: &FencesState, action: FencesAction) -> Option<FencesState> {
        steps::taken(self.steps.as_ref(), &action, self.step(last, action))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("fences only go up", |_, s: &FencesState| !s.went_back),
            Property::always(
                "a retry is told no fence below its own",
                |_, s: &FencesState| !s.retold,
            ),
            Property::sometimes("a fence is minted after a restart", |_, s: &FencesState| {
                s.restarts > 0 && s.newest > 0 && s.minted.iter().any(Option::is_some)
            }),
        ]
    }
}
