//! What the clients of a run believed and did, on one clock, and the
//! checks that judge it without trusting the lock: the real-server fault
//! suites record it through the test kit's `Witness`, and the simulation
//! records it from its clients.
//!
//! Times are offsets from the start of the run on a clock every client
//! shares (this process's monotonic clock, or the simulation's), not on
//! the clients' own clocks, which may run fast or slow.

mod check;

use std::fmt;
use std::time::Duration;

pub use self::check::{Violation, check};

/// How a key was held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Held {
    Lock,
    /// One of at most this many permits.
    Permit(u32),
    Read,
    Write,
}

/// One client's hold of one key: from the call that obtained it to the
/// moment it stopped believing it held it (its release, a loss it was
/// told of, or its lease's local deadline, whichever came first).
#[derive(Debug, Clone)]
pub struct Hold {
    pub client: usize,
    pub key: String,
    pub held: Held,
    /// When the client called: a fence minted for it comes after.
    pub called: Duration,
    /// When the obtain answered `Ok`.
    pub start: Duration,
    pub end: Duration,
    pub fence: Option<u64>,
    /// The hold counts for exclusion: it ended on a release or a loss, or
    /// at its local deadline, and the client acted only within it. A hold
    /// cut short (its body was cancelled past its deadline) is `false`: it
    /// promises nothing, and its fenced writes are for the store to refuse.
    pub counts: bool,
}

/// A write to a fenced resource, and what the resource answered.
#[derive(Debug, Clone)]
pub struct FencedWrite {
    pub client: usize,
    pub resource: String,
    pub token: u64,
    pub sent: Duration,
    /// `Some(true)` accepted, `Some(false)` refused, `None` failed or unanswered.
    pub accepted: Option<bool>,
    /// When the resource answered.
    pub answered: Duration,
}

/// Everything a run recorded.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub holds: Vec<Hold>,
    pub writes: Vec<FencedWrite>,
    /// Windows in which the lock server lost its data: an overlap across
    /// one is not the lock's to prevent (fencing's).
    pub data_loss: Vec<(Duration, Duration)>,
    /// The ttl above every lease's: a hold that began before a loss of data
    /// and ended within it of the loss is excused.
    pub ttl: Duration,
    /// Keys still held on the server once every client was gone and every
    /// lease had ended: each is a violation.
    pub held_forever: Vec<String>,
}

impl History {
    pub fn new(ttl: Duration) -> Self {
        History {
            ttl,
            ..History::default()
        }
    }

    /// The violations in this history: see [`check`].
    pub fn violations(&self) -> Vec<Violation> {
        check(self)
    }

    /// The shortest part of this history that shows `violation`: the holds
    /// and writes it names, and those that overlap them.
    pub fn around(&self, violation: &Violation) -> History {
        let (from, to) = violation.window();
        let near = |start: Duration, end: Duration| start <= to && from <= end;
        History {
            holds: self
                .holds
                .iter()
                .filter(|hold| near(hold.called, hold.end))
                .cloned()
                .collect(),
            writes: self
                .writes
                .iter()
                .filter(|write| near(write.sent, write.answered))
                .cloned()
                .collect(),
            data_loss: self.data_loss.clone(),
            ttl: self.ttl,
            held_forever: self.held_forever.clone(),
        }
    }
}

impl fmt::Display for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        enum Line<'a> {
            Hold(&'a Hold),
            Write(&'a FencedWrite),
            Loss(Duration, Duration),
        }
        let mut lines: Vec<(Duration, Line<'_>)> = Vec::new();
        lines.extend(self.holds.iter().map(|hold| (hold.start, Line::Hold(hold))));
        lines.extend(
            self.writes
                .iter()
                .map(|write| (write.sent, Line::Write(write))),
        );
        lines.extend(
            self.data_loss
                .iter()
                .map(|&(from, to)| (from, Line::Loss(from, to))),
        );
        lines.sort_by_key(|(at, _)| *at);
        for (_, line) in lines {
            match line {
                Line::Hold(hold) => writeln!(
                    f,
                    "{:>10.3?} .. {:<10.3?} client {} holds `{}` as {:?}{}{} (called at {:.3?})",
                    hold.start,
                    hold.end,
                    hold.client,
                    hold.key,
                    hold.held,
                    hold.fence
                        .map(|fence| format!(", fence {fence}"))
                        .unwrap_or_default(),
                    if hold.counts { "" } else { ", cut short" },
                    hold.called,
                )?,
                Line::Write(write) => writeln!(
                    f,
                    "{:>10.3?} .. {:<10.3?} client {} writes `{}` with fence {}: {}",
                    write.sent,
                    write.answered,
                    write.client,
                    write.resource,
                    write.token,
                    match write.accepted {
                        Some(true) => "accepted",
                        Some(false) => "refused",
                        None => "failed",
                    },
                )?,
                Line::Loss(from, to) => writeln!(
                    f,
                    "{from:>10.3?} .. {to:<10.3?} the lock server loses its data"
                )?,
            }
        }
        for key in &self.held_forever {
            writeln!(f, "at the end `{key}` is still held, every client gone")?;
        }
        Ok(())
    }
}
