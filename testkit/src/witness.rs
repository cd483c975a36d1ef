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

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockmacro_runtime::{FencedStore, LockGuard};
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
    sections: Mutex<Vec<Section>>,
    /// The counter the sections increment without atomicity.
    counter: AtomicU64,
    /// Windows in which the lock server lost its data (stopped, then restarted).
    data_loss: Mutex<Vec<(Instant, Instant)>>,
    writes: Mutex<JoinSet<()>>,
    /// The largest token whose fenced write the store confirmed.
    confirmed: AtomicU64,
    sent: AtomicUsize,
    accepted: AtomicUsize,
    refused: AtomicUsize,
    failed: AtomicUsize,
    stale_accepted: AtomicUsize,
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
            sections: Mutex::default(),
            counter: AtomicU64::default(),
            data_loss: Mutex::default(),
            writes: Mutex::default(),
            confirmed: AtomicU64::default(),
            sent: AtomicUsize::default(),
            accepted: AtomicUsize::default(),
            refused: AtomicUsize::default(),
            failed: AtomicUsize::default(),
            stale_accepted: AtomicUsize::default(),
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
            let floor = witness.confirmed.load(Ordering::SeqCst);
            witness.sent.fetch_add(1, Ordering::SeqCst);
            match store
                .set(RESOURCE, &format!("written with {token}"), token)
                .await
            {
                Ok(true) => {
                    witness.accepted.fetch_add(1, Ordering::SeqCst);
                    if token < floor {
                        witness.stale_accepted.fetch_add(1, Ordering::SeqCst);
                    }
                    witness.confirmed.fetch_max(token, Ordering::SeqCst);
                }
                Ok(false) => {
                    witness.refused.fetch_add(1, Ordering::SeqCst);
                }
                Err(err) => {
                    eprintln!("fenced write with {token} failed: {err}");
                    witness.failed.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    }

    /// Waits for the fenced writes still in flight, then judges everything.
    pub async fn verdict(&self, store: &FencedStore) -> Verdict {
        let mut writes = std::mem::take(&mut *self.writes.lock().unwrap());
        while let Some(done) = writes.join_next().await {
            if let Err(err) = done {
                std::panic::resume_unwind(err.into_panic());
            }
        }
        let sections = self.sections.lock().unwrap().clone();
        let data_loss = self.data_loss.lock().unwrap().clone();
        let mut valid: Vec<&Section> = sections.iter().filter(|s| s.valid).collect();
        valid.sort_by_key(|s| s.start);

        let mut overlaps = 0;
        let mut overlaps_after_data_loss = 0;
        for (i, later) in valid.iter().enumerate() {
            for earlier in &valid[..i] {
                if earlier.end <= later.start {
                    continue;
                }
                // Both leases were valid by their own clocks, yet they
                // overlapped: excused only if the server lost its data in
                // between, which the lock cannot survive. Every refresh
                // after the loss is refused, so the earlier lease was last
                // confirmed before it, and a valid section ends within a ttl.
                let lost = data_loss.iter().any(|&(from, _)| {
                    earlier.called <= from && from <= later.start && earlier.end <= from + self.ttl
                });
                if lost {
                    overlaps_after_data_loss += 1;
                } else {
                    overlaps += 1;
                    eprintln!(
                        "OVERLAP: worker {} (token {}) still inside {:?} after worker {} (token {}) entered",
                        earlier.worker,
                        earlier.token,
                        earlier.end - later.start,
                        later.worker,
                        later.token,
                    );
                }
            }
        }

        // A token minted after another section had started must be larger.
        let mut by_start: Vec<&Section> = sections.iter().collect();
        by_start.sort_by_key(|s| s.start);
        let mut tokens_out_of_order = 0;
        for later in &sections {
            let newest = by_start
                .iter()
                .take_while(|earlier| earlier.start < later.called)
                .map(|earlier| earlier.token)
                .max();
            if let Some(newest) = newest
                && later.token <= newest
            {
                tokens_out_of_order += 1;
                eprintln!(
                    "TOKEN ORDER: worker {} got {} after {newest} was in use",
                    later.worker, later.token
                );
            }
        }

        let increments = valid.len() as u64;
        let counter = self.counter.load(Ordering::SeqCst);
        let applied = store
            .get(RESOURCE)
            .await
            .expect("reading the fenced resource")
            .map(|value| value.token);
        Verdict {
            sections: sections.len(),
            cut_short: sections.len() - valid.len(),
            increments,
            counter,
            lost_updates: increments.saturating_sub(counter),
            overlaps,
            overlaps_after_data_loss,
            tokens_out_of_order,
            writes_sent: self.sent.load(Ordering::SeqCst),
            writes_accepted: self.accepted.load(Ordering::SeqCst),
            writes_refused: self.refused.load(Ordering::SeqCst),
            writes_failed: self.failed.load(Ordering::SeqCst),
            stale_writes_accepted: self.stale_accepted.load(Ordering::SeqCst),
            newest_confirmed: self.confirmed.load(Ordering::SeqCst),
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
