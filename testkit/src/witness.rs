//! A check of mutual exclusion and fencing that does not trust the lock.
//!
//! Each critical section is recorded on this process's monotonic clock: when
//! its body started (the lock obtained), when it ended, the lease's local
//! deadline then, and its fencing token. The body increments a counter in
//! plain memory without atomicity (read, await, write), and only while its
//! lease is valid by its own deadline, checked with no await before the
//! write. Fenced writes go to a [`FencedStore`] and are judged against what
//! the store had confirmed before each was sent.
//!
//! A section whose lease ran out before it ended (cut short by
//! `on_lost = "abort"`) promises nothing and is left out of the overlap check;
//! its writes are for the fenced store to refuse.

pub mod counter;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockmacro_runtime::{FencedStore, LockGuard};

use crate::history::{FencedWrite, Held, History, Hold, Violation};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// The key of the fenced resource.
pub const RESOURCE: &str = "resource";

#[derive(Debug, Clone)]
struct Section {
    worker: usize,
    token: u64,
    /// When the worker called the locked function: its token was minted after.
    called: Instant,
    start: Instant,
    end: Instant,
    /// The lease was valid by its own deadline when the section ended, and it
    /// wrote the counter.
    valid: bool,
}

pub struct Witness {
    /// The ttl of every lease.
    ttl: Duration,
    /// Where the history's clock starts.
    origin: Instant,
    sections: Mutex<Vec<Section>>,
    /// The counter the sections increment without atomicity.
    counter: AtomicU64,
    /// Windows in which the lock server lost its data (stopped, then restarted).
    data_loss: Mutex<Vec<(Instant, Instant)>>,
    writes: Mutex<JoinSet<()>>,
    written: Mutex<Vec<FencedWrite>>,
}

/// An open critical section; recorded as cut short if dropped before
/// [`Open::write`].
pub struct Open<'a> {
    witness: &'a Witness,
    worker: usize,
    token: u64,
    called: Instant,
    start: Instant,
    seen: u64,
    closed: bool,
}

impl Witness {
    pub fn new(ttl: Duration) -> Self {
        Witness {
            ttl,
            origin: Instant::now(),
            sections: Mutex::default(),
            counter: AtomicU64::default(),
            data_loss: Mutex::default(),
            writes: Mutex::default(),
            written: Mutex::default(),
        }
    }

    /// Opens a section for `worker`, whose call started at `called`: reads the
    /// counter, which [`Open::write`] increments.
    pub fn enter(&self, worker: usize, token: u64, called: Instant) -> Open<'_> {
        Open {
            witness: self,
            worker,
            token,
            called,
            start: Instant::now(),
            seen: self.counter.load(Ordering::SeqCst),
            closed: false,
        }
    }

    pub fn data_lost(&self, from: Instant, to: Instant) {
        self.data_loss.lock().unwrap().push((from, to));
    }

    /// Writes `token` to the fenced resource after `delay` (a write held up in
    /// flight, as by a pause of its sender), in the background: the lease
    /// being lost meanwhile must not cancel it.
    pub fn fenced_write(self: &Arc<Self>, store: &FencedStore, token: u64, delay: Duration) {
        let (witness, store) = (self.clone(), store.clone());
        self.writes.lock().unwrap().spawn(async move {
            tokio::time::sleep(delay).await;
            let sent = Instant::now();
            let accepted = match store
                .set(RESOURCE, &format!("written with {token}"), token)
                .await
            {
                Ok(accepted) => Some(accepted),
                Err(err) => {
                    eprintln!("fenced write with {token} failed: {err}");
                    None
                }
            };
            let write = FencedWrite {
                client: 0,
                resource: RESOURCE.to_owned(),
                token,
                sent: sent - witness.origin,
                accepted,
                answered: Instant::now() - witness.origin,
            };
            witness.written.lock().unwrap().push(write);
        });
    }

    /// What the witness recorded, for [`history::check`](crate::history::check).
    /// Sections become holds of a lock on [`RESOURCE`], worker by worker.
    pub fn history(&self) -> History {
        let since = |at: Instant| at - self.origin;
        let holds = self
            .sections
            .lock()
            .unwrap()
            .iter()
            .map(|section| Hold {
                client: section.worker,
                key: RESOURCE.to_owned(),
                held: Held::Lock,
                called: since(section.called),
                start: since(section.start),
                end: since(section.end),
                fence: Some(section.token),
                counts: section.valid,
            })
            .collect();
        History {
            holds,
            writes: self.written.lock().unwrap().clone(),
            data_loss: self
                .data_loss
                .lock()
                .unwrap()
                .iter()
                .map(|&(from, to)| (since(from), since(to)))
                .collect(),
            ttl: self.ttl,
            held_forever: Vec::new(),
        }
    }

    /// Waits for the fenced writes still in flight, then judges everything.
    pub async fn verdict(&self, store: &FencedStore) -> Verdict {
        let mut writes = std::mem::take(&mut *self.writes.lock().unwrap());
        while let Some(done) = writes.join_next().await {
            if let Err(err) = done {
                std::panic::resume_unwind(err.into_panic());
            }
        }
        let history = self.history();
        let violations = history.violations();
        for violation in &violations {
            eprintln!("{violation}");
        }
        let count = |found: fn(&Violation) -> bool| violations.iter().filter(|v| found(v)).count();
        let overlaps = count(|v| matches!(v, Violation::Exclusion { .. }));
        let without_loss = History {
            data_loss: Vec::new(),
            ..history.clone()
        };
        let overlaps_after_data_loss = without_loss
            .violations()
            .iter()
            .filter(|v| matches!(v, Violation::Exclusion { .. }))
            .count()
            - overlaps;
        let written = &history.writes;
        let outcome =
            |answer: Option<bool>| written.iter().filter(|w| w.accepted == answer).count();
        let sections = &history.holds;
        let valid = sections.iter().filter(|hold| hold.counts).count();
        let increments = valid as u64;
        let counter = self.counter.load(Ordering::SeqCst);
        let applied = store
            .get(RESOURCE)
            .await
            .expect("reading the fenced resource")
            .map(|value| value.token);
        Verdict {
            sections: sections.len(),
            cut_short: sections.len() - valid,
            increments,
            counter,
            lost_updates: increments.saturating_sub(counter),
            overlaps,
            overlaps_after_data_loss,
            tokens_out_of_order: count(|v| matches!(v, Violation::FenceOrder { .. })),
            writes_sent: written.len(),
            writes_accepted: outcome(Some(true)),
            writes_refused: outcome(Some(false)),
            writes_failed: outcome(None),
            stale_writes_accepted: count(|v| matches!(v, Violation::StaleWrite { .. })),
            newest_confirmed: written
                .iter()
                .filter(|w| w.accepted == Some(true))
                .map(|w| w.token)
                .max()
                .unwrap_or(0),
            applied,
        }
    }
}

impl Open<'_> {
    /// Ends the section with the counter's increment, if the lease is still
    /// valid by its own deadline; returns whether it was.
    pub fn write(mut self, lease: &LockGuard) -> bool {
        // No await from the check to the write: nothing else runs between.
        let now = Instant::now();
        let valid = !lease.is_lost() && now < lease.deadline();
        if valid {
            self.witness.counter.store(self.seen + 1, Ordering::SeqCst);
        }
        self.record(now, valid);
        valid
    }

    fn record(&mut self, end: Instant, valid: bool) {
        self.closed = true;
        self.witness.sections.lock().unwrap().push(Section {
            worker: self.worker,
            token: self.token,
            called: self.called,
            start: self.start,
            end,
            valid,
        });
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        if !self.closed {
            self.record(Instant::now(), false);
        }
    }
}

/// What the witness saw.
#[derive(Debug)]
pub struct Verdict {
    pub sections: usize,
    /// Sections whose lease ran out before they ended.
    pub cut_short: usize,
    pub increments: u64,
    pub counter: u64,
    pub lost_updates: u64,
    /// Overlaps between sections whose leases were both valid.
    pub overlaps: usize,
    /// Overlaps across a loss of the lock server's data: not prevented by the
    /// lock, only by fencing.
    pub overlaps_after_data_loss: usize,
    pub tokens_out_of_order: usize,
    pub writes_sent: usize,
    pub writes_accepted: usize,
    pub writes_refused: usize,
    pub writes_failed: usize,
    pub stale_writes_accepted: usize,
    pub newest_confirmed: u64,
    /// The token the resource holds at the end.
    pub applied: Option<u64>,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "critical sections      {} ({} cut short by a lost lease)",
            self.sections, self.cut_short
        )?;
        writeln!(
            f,
            "increments             {} made, counter {}: lost updates {}",
            self.increments, self.counter, self.lost_updates
        )?;
        writeln!(
            f,
            "overlaps               {} (and {} across a loss of the lock server's data)",
            self.overlaps, self.overlaps_after_data_loss
        )?;
        writeln!(f, "tokens out of order    {}", self.tokens_out_of_order)?;
        write!(
            f,
            "fenced writes          {} sent, {} accepted, {} refused, {} failed: stale writes accepted {}",
            self.writes_sent,
            self.writes_accepted,
            self.writes_refused,
            self.writes_failed,
            self.stale_writes_accepted
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use lockmacro_runtime::{FencedStore, Locker, ObtainOptions};
    use tokio::time::Instant;

    use super::Witness;

    /// The witness is only worth its zeros if it counts what it is meant to:
    /// here two lockers on separate backends, which do not exclude each
    /// other, both enter.
    #[tokio::test]
    async fn witness_counts_what_a_lock_that_does_not_exclude_lets_through() {
        let ttl = Duration::from_secs(5);
        let witness = Arc::new(Witness::new(ttl));
        let store = FencedStore::memory();
        let (a, b) = (Locker::memory(), Locker::memory());
        let fenced = || ObtainOptions::new().fence();
        let a = a.obtain("k", ttl, fenced()).await.unwrap().keep_alive();
        let b = b.obtain("k", ttl, fenced()).await.unwrap().keep_alive();
        let called = Instant::now();
        let first = witness.enter(0, a.fence_token().unwrap(), called);
        let second = witness.enter(1, b.fence_token().unwrap(), called);
        assert!(first.write(&a));
        assert!(second.write(&b));
        // A token smaller than one already in use, minted for a later call.
        drop(witness.enter(2, 1, Instant::now()));

        let verdict = witness.verdict(&store).await;
        assert_eq!(verdict.overlaps, 1, "{verdict}");
        assert_eq!(verdict.lost_updates, 1, "{verdict}");
        assert_eq!(verdict.tokens_out_of_order, 1, "{verdict}");
        assert_eq!(verdict.cut_short, 1, "{verdict}");
    }
}
