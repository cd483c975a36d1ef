//! `watch`: each change of one key, read with `Locker::inspect` whenever
//! the backend announces a release (its release listener), and on a timer:
//! when a holder's lease is due to end, and every `--interval`, since
//! nothing announces an acquire.

use std::time::Duration;

use lockmacro_runtime::backend::ReleaseListener;
use lockmacro_runtime::{HeldAs, Holder, Inspection, LockError, Locker};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::render;

/// The shortest pause between two reads: a lease read as (nearly) over is
/// read again after this.
const MIN_READ: Duration = Duration::from_millis(10);

/// The longest pause after a read failed, before trying again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A change of the key, between two reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Held when the watch started.
    Held,
    Acquired,
    /// Gone before its lease was over: its holder released it, or an
    /// operator forced it.
    Released,
    /// Gone once its lease was over: its holder stopped refreshing.
    Expired,
}

impl Change {
    fn word(self) -> &'static str {
        match self {
            Change::Held => "held",
            Change::Acquired => "acquired",
            Change::Released => "released",
            Change::Expired => "expired",
        }
    }
}

/// A lease as the watch tells leases apart: holders carry no token, so two
/// leases with the same share, metadata, fence and session are one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Lease {
    held_as: HeldAs,
    metadata: String,
    fence: Option<u64>,
    remaining: Option<Duration>,
    /// The session of a lock held by a database transaction.
    pid: Option<u32>,
}

impl Lease {
    fn all(seen: &Inspection) -> Vec<Lease> {
        seen.holders
            .iter()
            .map(|holder| Lease {
                held_as: holder.held_as,
                metadata: holder.metadata.clone(),
                // Only a lock, a lease or a transaction's, mints a token
                // per holder.
                fence: seen
                    .fence
                    .filter(|_| matches!(holder.held_as, HeldAs::Lock | HeldAs::Transaction)),
                remaining: holder.remaining,
                pid: holder.pid,
            })
            .collect()
    }

    fn same(&self, other: &Lease) -> bool {
        (self.held_as, &self.metadata, self.fence, self.pid)
            == (other.held_as, &other.metadata, other.fence, other.pid)
    }

    fn holder(&self) -> Holder {
        let mut holder = Holder::new(self.held_as, self.metadata.clone(), self.remaining);
        holder.pid = self.pid;
        holder
    }
}

/// The changes from `before` (read `elapsed` ago) to `now`.
fn changes(before: &[Lease], now: &[Lease], elapsed: Duration) -> Vec<(Change, Lease)> {
    let mut kept: Vec<&Lease> = now.iter().collect();
    let mut found = Vec::new();
    for old in before {
        match kept.iter().position(|new| new.same(old)) {
            Some(at) => {
                kept.remove(at);
            }
            None => {
                let over = old.remaining.is_some_and(|left| left <= elapsed);
                let change = if over {
                    Change::Expired
                } else {
                    Change::Released
                };
                found.push((change, old.clone()));
            }
        }
    }
    found.extend(kept.into_iter().map(|new| (Change::Acquired, new.clone())));
    found
}

fn print(key: &str, json: bool, change: Change, lease: &Lease) {
    if json {
        let mut line: Value = render::holder_json(&lease.holder());
        line["at"] =
            json!(humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string());
        line["event"] = json!(change.word());
        line["key"] = json!(key);
        line["fence"] = json!(lease.fence);
        println!("{line}");
    } else {
        let fence = lease
            .fence
            .map(|fence| format!(", fence {fence}"))
            .unwrap_or_default();
        println!(
            "{}  {:<8}  `{key}`  {}{fence}",
            humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
            change.word(),
            render::holder(&lease.holder()),
        );
    }
}

/// Prints the changes of `key` until Ctrl-C, or until a read fails with an
/// error that trying again cannot cure.
pub async fn watch(
    locker: &Locker,
    key: &str,
    interval: Duration,
    json: bool,
) -> Result<(), LockError> {
    let wire_key = locker.wire_key(key);
    let mut listener = ReleaseListener::deaf();
    let mut before: Option<(Vec<Lease>, Instant)> = None;
    let mut failures = 0_u32;
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        // Listening first: a release after the read below is heard.
        if !listener.hears() {
            listener = locker.backend().listen(&wire_key).await;
        }
        let read_at = Instant::now();
        let pause = match locker.inspect(key).await {
            Ok(seen) => {
                failures = 0;
                let now = Lease::all(&seen);
                match &before {
                    None => {
                        announce(key, json, &seen);
                        for lease in &now {
                            print(key, json, Change::Held, lease);
                        }
                    }
                    Some((old, at)) => {
                        for (change, lease) in changes(old, &now, read_at - *at) {
                            print(key, json, change, &lease);
                        }
                    }
                }
                let due = now.iter().filter_map(|lease| lease.remaining).min();
                before = Some((now, read_at));
                due.map_or(interval, |due| due.min(interval)).max(MIN_READ)
            }
            Err(err) if err.is_transient() => {
                failures += 1;
                eprintln!("lockmacro: cannot read `{key}` ({err}); trying again");
                (interval * failures).min(MAX_BACKOFF)
            }
            Err(err) => return Err(err),
        };
        tokio::select! {
            _ = &mut interrupted => return Ok(()),
            () = listener.wait(pause) => {}
        }
    }
}

/// The first line: what is watched, and whether the backend announces
/// releases (else they are seen at the next read).
fn announce(key: &str, json: bool, seen: &Inspection) {
    if json {
        println!(
            "{}",
            json!({"event": "watching", "key": key, "held": seen.kind.is_some()})
        );
    } else {
        let state = seen.kind.map_or_else(
            || "free".to_owned(),
            |kind| format!("held as {}", render::kind(Some(kind))),
        );
        println!("watching `{key}` ({state}); Ctrl-C to stop");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(metadata: &str, fence: Option<u64>, left_ms: u64) -> Lease {
        Lease {
            held_as: HeldAs::Lock,
            metadata: metadata.into(),
            fence,
            remaining: Some(Duration::from_millis(left_ms)),
            pid: None,
        }
    }

    fn words(found: &[(Change, Lease)]) -> Vec<(Change, &str)> {
        found
            .iter()
            .map(|(change, lease)| (*change, lease.metadata.as_str()))
            .collect()
    }

    #[test]
    fn a_lease_gone_before_its_end_was_released_after_it_expired() {
        let a = [lease("a", None, 5_000)];
        let second = Duration::from_secs(1);
        assert_eq!(words(&changes(&a, &[], second)), [(Change::Released, "a")]);
        assert_eq!(
            words(&changes(&a, &[], 5 * second)),
            [(Change::Expired, "a")]
        );
    }

    #[test]
    fn a_new_holder_or_a_new_fence_is_an_acquire() {
        let a = [lease("a", Some(1), 5_000)];
        let again = [lease("a", Some(1), 4_000)];
        assert!(changes(&a, &again, Duration::from_secs(1)).is_empty());
        let b = [lease("b", Some(2), 5_000)];
        assert_eq!(
            words(&changes(&a, &b, Duration::ZERO)),
            [(Change::Released, "a"), (Change::Acquired, "b")]
        );
        let retaken = [lease("a", Some(2), 5_000)];
        assert_eq!(
            words(&changes(&a, &retaken, Duration::ZERO)),
            [(Change::Released, "a"), (Change::Acquired, "a")]
        );
    }
}
