//! One key, several kinds: the kind kept with a key (`kinds.lua`: a lock is
//! a string, a set of shares carries the marker member `kind:<N>` or
//! `kind:rw`), the `WrongKind` refusals of `acquire.lua` (lines 44-62) and
//! `acquire_shared.lua` (lines 50-62), which come before any write; the
//! write turned into a read (`downgrade.lua`); and the operator's
//! `force_release.lua`, which deletes every lease on the key.
//!
//! Each client asks for one kind, attempts again a tick after a busy answer
//! and gives up on a refusal; holding, it refreshes (`leases.lua` `held` and
//! `extend`, through `refresh.lua`), releases, and a writer may downgrade.
//! A downgrading writer stops writing when it sends the request: it holds
//! a read from then on, or nothing if the answer says so. Requests and
//! replies may be lost or come late. The operator forces a release once,
//! at any moment.

use stateright::{Model, Property};

use crate::steps::{self, Steps};

use crate::time::Timing;

mod state;

pub use state::{Asked, Key, KindsAction, KindsOp, KindsState, Marker, Stand};

/// Breaks the kinds on purpose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KindsMutations {
    /// `acquire.lua` writes its string over a set without asking
    /// `key_kind` whether a share in it is live.
    pub lock_ignores_shares: bool,
    /// `force_release.lua` deletes a lock but leaves a set of shares.
    pub force_spares_shares: bool,
    /// `downgrade.lua` removes the write, and adds the read in a second
    /// step, letting another script run in between.
    pub downgrade_in_two_steps: bool,
}

/// One key asked for as several kinds; see the module documentation.
///
/// ```
/// use lockmacro_model::{Asked, Kinds, Timing};
/// use stateright::{Checker, Model};
///
/// let timing = Timing { horizon: 3, ..Timing::default() };
/// let model = Kinds::new(vec![Asked::Lock, Asked::Permits(2)], timing);
/// model.checker().spawn_bfs().join().assert_properties();
/// ```
#[derive(Clone, Debug)]
pub struct Kinds {
    /// What each client asks for.
    pub clients: Vec<Asked>,
    /// The durations; the clock's horizon.
    pub timing: Timing,
    /// How many attempts a client sends before it gives up.
    pub attempts: u8,
    /// The faults planted on purpose.
    pub mutations: KindsMutations,
    /// Counts the steps offered and taken, when given (see [`Steps`]).
    pub steps: Option<Steps>,
}

impl Kinds {
    /// The kinds as the scripts keep them.
    pub fn new(clients: Vec<Asked>, timing: Timing) -> Self {
        Kinds {
            clients,
            timing,
            attempts: 2,
            mutations: KindsMutations::default(),
            steps: None,
        }
    }

    /// `kinds.lua` `key_kind`: what holds the key now, an expired lock or a
    /// set without a live share being free. Frees the key when nothing does.
    fn sweep(s: &mut KindsState) {
        let now = s.now;
        let free = match &mut s.key {
            Key::Free => false,
            Key::Lock { expiry, .. } => *expiry <= now,
            Key::Set { members, .. } => {
                members.retain(|(_, _, score)| *score > now);
                members.is_empty() && s.half_downgraded.is_none()
            }
        };
        if free {
            s.key = Key::Free;
        }
    }

    /// `acquire.lua` lines 54-68 for a lock, `acquire_shared.lua` lines
    /// 50-62, 90-100, 127-152 and 208-219 for a share. `None`: refused as
    /// another kind.
    fn acquire(&self, s: &mut KindsState, c: usize) -> Option<bool> {
        let asked = self.clients[c];
        let (now, ttl) = (s.now, self.timing.ttl);
        Self::sweep(s);
        if self.mutations.lock_ignores_shares
            && asked == Asked::Lock
            && matches!(s.key, Key::Set { .. })
        {
            s.key = Key::Free;
        }
        let id = c as u8;
        match (&mut s.key, asked.marker()) {
            (Key::Free, None) => {
                s.key = Key::Lock {
                    holder: id,
                    expiry: now + ttl,
                };
                Some(true)
            }
            (Key::Free, Some(marker)) => {
                s.key = Key::Set {
                    marker,
                    members: vec![(id, asked == Asked::Write, now + ttl)],
                };
                Some(true)
            }
            (Key::Lock { holder, expiry }, None) => {
                if *holder == id {
                    *expiry = now + ttl;
                }
                Some(*holder == id)
            }
            (Key::Set { marker, members }, Some(wanted)) if *marker == wanted => {
                if let Some(member) = members.iter_mut().find(|(m, _, _)| *m == id) {
                    member.2 = now + ttl;
                    return Some(true);
                }
                let written = members.iter().any(|(_, w, _)| *w);
                let free = match asked {
                    Asked::Permits(n) => members.len() < n as usize,
                    Asked::Write => members.is_empty(),
                    _ => !written,
                };
                if free {
                    members.push((id, asked == Asked::Write, now + ttl));
                    members.sort_unstable();
                }
                Some(free)
            }
            _ => None,
        }
    }

    /// `leases.lua` `held` and `extend`, as `refresh.lua` runs them.
    fn refresh(&self, s: &mut KindsState, c: usize) -> bool {
        let (now, ttl, id) = (s.now, self.timing.ttl, c as u8);
        let ok = match &mut s.key {
            Key::Lock { holder, expiry } if *holder == id && *expiry > now => {
                *expiry = now + ttl;
                true
            }
            Key::Set { members, .. } => match members.iter_mut().find(|(m, _, _)| *m == id) {
                Some(member) if member.2 > now => {
                    member.2 = now + ttl;
                    true
                }
                _ => false,
            },
            _ => false,
        };
        if s.evicted[c] {
            s.survived_force |= ok;
            s.refused_after_force[c] = !ok;
        }
        ok
    }

    /// `release.lua`: the lock deleted when the token holds it, a share
    /// removed; the set deleted with its last share.
    fn release(s: &mut KindsState, c: usize) {
        let id = c as u8;
        match &mut s.key {
            Key::Lock { holder, .. } if *holder == id => s.key = Key::Free,
            Key::Set { members, .. } => {
                members.retain(|(m, _, _)| *m != id);
                Self::sweep(s);
            }
            _ => {}
        }
    }

    /// `downgrade.lua` lines 9-17: the live write becomes a read with the
    /// same score, in one step (or two, the mutation).
    fn downgrade(&self, s: &mut KindsState, c: usize) -> bool {
        let (now, id) = (s.now, c as u8);
        let Key::Set { members, .. } = &mut s.key else {
            return false;
        };
        let Some(at) = members
            .iter()
            .position(|&(m, w, score)| m == id && w && score > now)
        else {
            return false;
        };
        let score = members[at].2;
        if self.mutations.downgrade_in_two_steps {
            members.remove(at);
            s.half_downgraded = Some((id, score));
        } else {
            members[at].1 = false;
        }
        true
    }

    /// `force_release.lua` lines 11-28: every lease on the key deleted.
    fn force(&self, s: &mut KindsState) {
        Self::sweep(s);
        let holders: Vec<u8> = match &s.key {
            Key::Free => Vec::new(),
            Key::Lock { holder, .. } => vec![*holder],
            Key::Set { members, .. } => members.iter().map(|(m, _, _)| *m).collect(),
        };
        for holder in holders {
            s.evicted[holder as usize] = true;
        }
        if !(self.mutations.force_spares_shares && matches!(s.key, Key::Set { .. })) {
            s.key = Key::Free;
        }
        s.forced = true;
    }
}

impl Kinds {
    /// The steps `actions` offers in `s`.
    fn offer(&self, s: &KindsState, actions: &mut Vec<KindsAction>) {
        if s.now < self.timing.horizon {
            actions.push(KindsAction::Tick);
        }
        if s.half_downgraded.is_some() {
            actions.push(KindsAction::FinishDowngrade);
        }
        if !s.forced {
            actions.push(KindsAction::Force);
        }
        for (c, stand) in s.stands.iter().enumerate() {
            let id = c as u8;
            match s.flights[c] {
                Some((_, _, None)) => {
                    actions.push(KindsAction::Deliver(id));
                    actions.push(KindsAction::Lose(id));
                }
                Some(_) => {
                    actions.push(KindsAction::Receive(id));
                    actions.push(KindsAction::Lose(id));
                }
                None => match *stand {
                    Stand::Waiting { from } if s.now >= from && s.attempts[c] < self.attempts => {
                        actions.push(KindsAction::Send(id, KindsOp::Acquire));
                    }
                    Stand::Holding { deadline, writes } => {
                        if s.now < deadline {
                            actions.push(KindsAction::Send(id, KindsOp::Refresh));
                            if writes {
                                actions.push(KindsAction::Send(id, KindsOp::Downgrade));
                            }
                        }
                        actions.push(KindsAction::Send(id, KindsOp::Release));
                    }
                    _ => {}
                },
            }
        }
    }

    /// What `action` makes of `last`, or `None` when it is not enabled.
    fn step(&self, last: &KindsState, action: KindsAction) -> Option<KindsState> {
        let mut s = last.clone();
        let t = self.timing;
        match action {
            KindsAction::Tick => {
                s.now += 1;
                Self::sweep(&mut s);
            }
            KindsAction::Force => self.force(&mut s),
            KindsAction::FinishDowngrade => {
                let (id, score) = s.half_downgraded.take()?;
                match &mut s.key {
                    Key::Set { members, .. } => {
                        members.push((id, false, score));
                        members.sort_unstable();
                    }
                    key => {
                        *key = Key::Set {
                            marker: Marker::ReadWrite,
                            members: vec![(id, false, score)],
                        };
                    }
                }
            }
            KindsAction::Send(c, op) => {
                let c = c as usize;
                match (op, s.stands[c]) {
                    (KindsOp::Acquire, _) => s.attempts[c] += 1,
                    (KindsOp::Release, _) => s.stands[c] = Stand::Gone,
                    (KindsOp::Downgrade, Stand::Holding { deadline, .. }) => {
                        s.stands[c] = Stand::Holding {
                            deadline,
                            writes: false,
                        };
                    }
                    _ => {}
                }
                s.flights[c] = Some((op, s.now, None));
            }
            KindsAction::Deliver(c) => {
                let c = c as usize;
                let (op, sent, None) = s.flights[c]? else {
                    return None;
                };
                let ok = match op {
                    KindsOp::Acquire => {
                        let taken = self.acquire(&mut s, c);
                        // A lease taken after the force is a new one.
                        if taken == Some(true) && s.forced {
                            s.evicted[c] = false;
                        }
                        taken
                    }
                    KindsOp::Refresh => Some(self.refresh(&mut s, c)),
                    KindsOp::Release => {
                        Self::release(&mut s, c);
                        Some(true)
                    }
                    KindsOp::Downgrade => Some(self.downgrade(&mut s, c)),
                };
                // A refusal as another kind ends the obtain: `false` and gone.
                if ok.is_none() {
                    s.stands[c] = Stand::Gone;
                }
                s.flights[c] = Some((op, sent, Some(ok.unwrap_or(false))));
            }
            KindsAction::Lose(c) => {
                let c = c as usize;
                if matches!(s.flights[c], Some((KindsOp::Downgrade, _, _))) {
                    s.stands[c] = Stand::Gone;
                }
                s.flights[c] = None;
            }
            KindsAction::Receive(c) => {
                let c = c as usize;
                let (op, sent, Some(ok)) = s.flights[c].take()? else {
                    return None;
                };
                let now = s.now;
                s.stands[c] = match (s.stands[c], op, ok) {
                    (Stand::Waiting { .. }, KindsOp::Acquire, true) => {
                        let deadline = t.deadline(sent, t.ttl, 0);
                        let writes = self.clients[c] == Asked::Write;
                        if now < deadline {
                            Stand::Holding { deadline, writes }
                        } else {
                            s.flights[c] = Some((KindsOp::Release, now, None));
                            Stand::Gone
                        }
                    }
                    (Stand::Waiting { .. }, KindsOp::Acquire, false) => {
                        Stand::Waiting { from: now + 1 }
                    }
                    (Stand::Holding { deadline, writes }, KindsOp::Refresh, true)
                        if now < deadline =>
                    {
                        Stand::Holding {
                            deadline: t.deadline(sent, t.ttl, 0).max(deadline),
                            writes,
                        }
                    }
                    (Stand::Holding { .. }, KindsOp::Refresh | KindsOp::Downgrade, false) => {
                        Stand::Gone
                    }
                    (stand, _, _) => stand,
                };
            }
        }
        Some(s)
    }
}

impl Model for Kinds {
    type State = KindsState;
    type Action = KindsAction;

    fn init_states(&self) -> Vec<KindsState> {
        let n = self.clients.len();
        vec![KindsState {
            now: 0,
            key: Key::Free,
            stands: vec![Stand::Waiting { from: 0 }; n],
            flights: vec![None; n],
            attempts: vec![0; n],
            half_downgraded: None,
            forced: false,
            evicted: vec![false; n],
            survived_force: false,
            refused_after_force: vec![false; n],
        }]
    }

    fn actions(&self, s: &KindsState, actions: &mut Vec<KindsAction>) {
        self.offer(s, actions);
        steps::offered(self.steps.as_ref(), actions);
    }

    fn next_state(&self, last: &KindsState, action: KindsAction) -> Option<KindsState> {
        steps::taken(self.steps.as_ref(), &action, self.step(last, action))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "a key is never held as two kinds at once",
                |m: &Kinds, s: &KindsState| {
                    let mut markers = (0..s.stands.len())
                        .filter(|&c| s.believes(c))
                        .map(|c| m.clients[c].marker());
                    markers
                        .next()
                        .is_none_or(|first| markers.all(|other| other == first))
                },
            ),
            Property::always(
                "a writer holds alone, across a downgrade",
                |_, s: &KindsState| {
                    let believers: Vec<usize> =
                        (0..s.stands.len()).filter(|&c| s.believes(c)).collect();
                    let writing = believers
                        .iter()
                        .any(|&c| matches!(s.stands[c], Stand::Holding { writes: true, .. }));
                    !writing || believers.len() <= 1
                },
            ),
            Property::always(
                "a forced release ends every lease on the key",
                |_, s: &KindsState| !s.survived_force,
            ),
            Property::sometimes(
                "a lease taken by force is refused its refresh",
                |_, s: &KindsState| (0..s.stands.len()).any(|c| s.refused_after_force[c]),
            ),
        ]
    }
}
