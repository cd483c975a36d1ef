//! The checks: exclusion per kind, fences in the order of grants, no stale
//! fenced write accepted, nothing held forever.

use std::fmt;
use std::time::Duration;

use crate::{FencedWrite, Held, History, Hold};

/// One broken promise.
#[derive(Debug, Clone)]
pub enum Violation {
    /// `entered` began while `inside` were held, which its kind does not
    /// allow beside them (two locks, a writer beside anyone, more permits
    /// than the count, two kinds at once).
    Exclusion { entered: Hold, inside: Vec<Hold> },
    /// `later` was called after `earlier` had its fence, and was told a
    /// fence no larger.
    FenceOrder { earlier: Hold, later: Hold },
    /// `write` was accepted though a larger fence, `floor`, had been
    /// accepted before it was sent.
    StaleWrite { write: FencedWrite, floor: u64 },
    /// The key was still held once every client was gone.
    HeldForever { key: String },
}

impl Violation {
    /// From the first to the last moment the violation involves.
    pub fn window(&self) -> (Duration, Duration) {
        match self {
            Violation::Exclusion { entered, inside } => inside
                .iter()
                .fold((entered.called, entered.end), |(from, to), hold| {
                    (from.min(hold.called), to.max(hold.end))
                }),
            Violation::FenceOrder { earlier, later } => {
                (earlier.called, later.end.max(earlier.end))
            }
            Violation::StaleWrite { write, .. } => (Duration::ZERO, write.answered),
            Violation::HeldForever { .. } => (Duration::MAX, Duration::MAX),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Exclusion { entered, inside } => {
                write!(
                    f,
                    "client {} entered `{}` as {:?} at {:.3?} while ",
                    entered.client, entered.key, entered.held, entered.start
                )?;
                for (i, hold) in inside.iter().enumerate() {
                    let comma = if i == 0 { "" } else { ", " };
                    write!(
                        f,
                        "{comma}client {} held it as {:?} ({:.3?} .. {:.3?})",
                        hold.client, hold.held, hold.start, hold.end
                    )?;
                }
                Ok(())
            }
            Violation::FenceOrder { earlier, later } => write!(
                f,
                "client {} was told fence {:?} for `{}` at {:.3?}, called after client {} held \
                 fence {:?} from {:.3?}",
                later.client,
                later.fence,
                later.key,
                later.start,
                earlier.client,
                earlier.fence,
                earlier.start
            ),
            Violation::StaleWrite { write, floor } => write!(
                f,
                "client {}'s write to `{}` with fence {} sent at {:.3?} was accepted after fence \
                 {floor} had been",
                write.client, write.resource, write.token, write.sent
            ),
            Violation::HeldForever { key } => {
                write!(f, "`{key}` was still held once every client was gone")
            }
        }
    }
}

/// Every violation in `history`:
///
/// - **exclusion**: among the holds that count, on each key, at most one
///   lock, a writer alone, readers only beside readers, at most `n`
///   permits of a count of `n`, and never two kinds at once. An overlap
///   whose earlier hold was called before a loss of the server's data, and
///   ended within a ttl of it, is excused: no lock survives that;
/// - **fences in the order of grants**: a fenced hold called after another
///   hold of the same key had its fence is told a larger one;
/// - **no stale write accepted**: a fenced write is refused when a larger
///   fence was accepted by the same resource before it was sent;
/// - **nothing held forever**: every key in `held_forever`.
pub fn check(history: &History) -> Vec<Violation> {
    let mut violations = exclusion(history);
    violations.extend(fence_order(history));
    violations.extend(stale_writes(&history.writes));
    violations.extend(
        history
            .held_forever
            .iter()
            .map(|key| Violation::HeldForever { key: key.clone() }),
    );
    violations
}

fn exclusion(history: &History) -> Vec<Violation> {
    let mut counting: Vec<&Hold> = history.holds.iter().filter(|hold| hold.counts).collect();
    counting.sort_by_key(|hold| hold.start);
    let excused = |earlier: &Hold, later: &Hold| {
        history.data_loss.iter().any(|&(from, _)| {
            earlier.called <= from && from <= later.start && earlier.end <= from + history.ttl
        })
    };
    let mut violations = Vec::new();
    for (i, entered) in counting.iter().enumerate() {
        let inside: Vec<&Hold> = counting[..i]
            .iter()
            .copied()
            .filter(|hold| {
                hold.key == entered.key
                    && hold.start <= entered.start
                    && entered.start < hold.end
                    && !excused(hold, entered)
            })
            .collect();
        if !allowed(entered.held, inside.iter().map(|hold| hold.held)) {
            violations.push(Violation::Exclusion {
                entered: (*entered).clone(),
                inside: inside.into_iter().cloned().collect(),
            });
        }
    }
    violations
}

/// Whether a hold of kind `entered` may begin beside holds of kinds `inside`.
fn allowed(entered: Held, inside: impl Iterator<Item = Held>) -> bool {
    let mut beside = 0;
    for held in inside {
        beside += 1;
        let compatible = matches!(
            (entered, held),
            (Held::Read, Held::Read) | (Held::Permit(_), Held::Permit(_))
        );
        if !compatible || held != entered {
            return false;
        }
    }
    match entered {
        Held::Permit(count) => beside < count,
        _ => true,
    }
}

fn fence_order(history: &History) -> Vec<Violation> {
    let fenced: Vec<&Hold> = history
        .holds
        .iter()
        .filter(|hold| hold.fence.is_some())
        .collect();
    let mut violations = Vec::new();
    for later in &fenced {
        // The largest fence among the holds of the key that had theirs
        // before `later` was called.
        let newest = fenced
            .iter()
            .filter(|earlier| earlier.key == later.key && earlier.start < later.called)
            .max_by_key(|earlier| earlier.fence);
        if let Some(earlier) = newest
            && later.fence <= earlier.fence
        {
            violations.push(Violation::FenceOrder {
                earlier: (*earlier).clone(),
                later: (*later).clone(),
            });
        }
    }
    violations
}

fn stale_writes(writes: &[FencedWrite]) -> Vec<Violation> {
    let mut violations = Vec::new();
    for write in writes.iter().filter(|write| write.accepted == Some(true)) {
        let floor = writes
            .iter()
            .filter(|earlier| {
                earlier.resource == write.resource
                    && earlier.accepted == Some(true)
                    && earlier.answered < write.sent
            })
            .map(|earlier| earlier.token)
            .max();
        if let Some(floor) = floor
            && write.token < floor
        {
            violations.push(Violation::StaleWrite {
                write: write.clone(),
                floor,
            });
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Violation, check};
    use crate::{FencedWrite, Held, History, Hold};

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn hold(client: usize, held: Held, start: u64, end: u64, fence: Option<u64>) -> Hold {
        Hold {
            client,
            key: "k".into(),
            held,
            called: ms(start.saturating_sub(1)),
            start: ms(start),
            end: ms(end),
            fence,
            counts: true,
        }
    }

    fn history(holds: Vec<Hold>) -> History {
        History {
            holds,
            ..History::new(ms(100))
        }
    }

    /// Each check is only worth its silence if it speaks when it should:
    /// each case breaks one promise, and is named for it.
    #[test]
    fn each_broken_promise_is_found_and_nothing_else() {
        let two_locks = history(vec![
            hold(0, Held::Lock, 10, 50, None),
            hold(1, Held::Lock, 40, 60, None),
        ]);
        assert!(matches!(
            &check(&two_locks)[..],
            [Violation::Exclusion { .. }]
        ));

        let after_one_another = history(vec![
            hold(0, Held::Lock, 10, 50, Some(1)),
            hold(1, Held::Lock, 50, 60, Some(2)),
        ]);
        assert!(check(&after_one_another).is_empty());

        let readers = history(vec![
            hold(0, Held::Read, 10, 50, None),
            hold(1, Held::Read, 20, 60, None),
        ]);
        assert!(check(&readers).is_empty());
        let writer_beside_reader = history(vec![
            hold(0, Held::Read, 10, 50, None),
            hold(1, Held::Write, 20, 60, None),
        ]);
        assert_eq!(check(&writer_beside_reader).len(), 1);
        let reader_beside_writer = history(vec![
            hold(0, Held::Write, 10, 50, None),
            hold(1, Held::Read, 20, 60, None),
        ]);
        assert_eq!(check(&reader_beside_writer).len(), 1);

        let two_of_two = history(vec![
            hold(0, Held::Permit(2), 10, 50, None),
            hold(1, Held::Permit(2), 20, 60, None),
        ]);
        assert!(check(&two_of_two).is_empty());
        let three_of_two = history(vec![
            hold(0, Held::Permit(2), 10, 50, None),
            hold(1, Held::Permit(2), 20, 60, None),
            hold(2, Held::Permit(2), 30, 70, None),
        ]);
        assert_eq!(check(&three_of_two).len(), 1);
        let two_kinds = history(vec![
            hold(0, Held::Permit(2), 10, 50, None),
            hold(1, Held::Lock, 20, 60, None),
        ]);
        assert_eq!(check(&two_kinds).len(), 1);

        let mut cut_short = two_locks.clone();
        cut_short.holds[0].counts = false;
        assert!(check(&cut_short).is_empty());

        let mut across_a_loss = two_locks.clone();
        across_a_loss.data_loss.push((ms(30), ms(35)));
        assert!(check(&across_a_loss).is_empty());

        let fences_back = history(vec![
            hold(0, Held::Lock, 10, 50, Some(5)),
            hold(1, Held::Lock, 60, 70, Some(5)),
        ]);
        assert!(matches!(
            &check(&fences_back)[..],
            [Violation::FenceOrder { .. }]
        ));

        let write = |client, token, sent, answered, accepted| FencedWrite {
            client,
            resource: "r".into(),
            token,
            sent: ms(sent),
            accepted: Some(accepted),
            answered: ms(answered),
        };
        let mut stale = history(Vec::new());
        stale.writes = vec![write(1, 7, 10, 20, true), write(0, 6, 30, 40, true)];
        assert!(matches!(
            &check(&stale)[..],
            [Violation::StaleWrite { floor: 7, .. }]
        ));
        stale.writes[1].accepted = Some(false);
        assert!(check(&stale).is_empty());
        // In flight together, the store's order decides: not stale.
        stale.writes = vec![write(1, 7, 10, 20, true), write(0, 6, 15, 25, true)];
        assert!(check(&stale).is_empty());

        let mut forever = history(Vec::new());
        forever.held_forever.push("k".into());
        assert!(matches!(
            &check(&forever)[..],
            [Violation::HeldForever { .. }]
        ));
    }

    #[test]
    fn the_part_around_a_violation_keeps_what_it_names() {
        let mut run = history(vec![
            hold(0, Held::Lock, 10, 50, None),
            hold(1, Held::Lock, 40, 60, None),
            hold(2, Held::Lock, 500, 600, None),
        ]);
        run.holds[2].called = ms(499);
        let violations = check(&run);
        assert_eq!(violations.len(), 1);
        let around = run.around(&violations[0]);
        assert_eq!(around.holds.len(), 2);
        assert!(around.to_string().contains("client 1 holds `k` as Lock"));
    }
}
