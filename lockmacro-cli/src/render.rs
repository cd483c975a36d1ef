//! What the commands print: a table or lines for people, JSON for scripts.

use std::time::Duration;

use lockmacro_runtime::{HeldAs, Holder, Inspection, KeyInfo, KeyKind};
use serde_json::{Value, json};

/// `lock`, `semaphore(3)`, `read-write`; `-` for a free key.
pub fn kind(kind: Option<KeyKind>) -> String {
    match kind {
        None => "-".into(),
        Some(KeyKind::Lock) => "lock".into(),
        Some(KeyKind::Semaphore { permits }) => format!("semaphore({permits})"),
        Some(KeyKind::ReadWrite) => "read-write".into(),
        Some(other) => other.to_string(),
    }
}

/// What a lease holds of its key: `lock`, `permit`, `read`, `write`.
pub fn held_as(holder: &Holder) -> String {
    format!("{:?}", holder.held_as).to_lowercase()
}

/// `29.8s`; `-` when the backend cannot tell.
pub fn remaining(left: Option<Duration>) -> String {
    left.map_or_else(|| "-".into(), |left| format!("{:.1}s", left.as_secs_f64()))
}

fn fence(fence: Option<u64>) -> String {
    fence.map_or_else(|| "-".into(), |fence| fence.to_string())
}

/// One holder, for a sentence: ``lock by `worker-1` (29.8s left)``, or
/// `lock by a database transaction, in session 4242`: a transaction has no
/// metadata and no lease to count down.
pub fn holder(holder: &Holder) -> String {
    match holder.held_as {
        HeldAs::Transaction => format!("lock by {}", transaction(holder)),
        _ => format!(
            "{} by `{}` ({} left)",
            held_as(holder),
            holder.metadata,
            remaining(holder.remaining)
        ),
    }
}

/// A holder held as a transaction: `a database transaction, in session
/// 4242`.
pub fn transaction(holder: &Holder) -> String {
    match holder.pid {
        Some(pid) => format!("a database transaction, in session {pid}"),
        None => "a database transaction".into(),
    }
}

/// What ends a lock held by a database transaction, which no force-release
/// can: the transaction's end, or its session's.
pub fn ending_a_transaction(holder: &Holder) -> String {
    let session = holder
        .pid
        .map_or_else(|| "pid".to_owned(), |pid| pid.to_string());
    format!(
        "commit or roll back that transaction, or end its session with \
         `SELECT pg_terminate_backend({session})`"
    )
}

pub fn holder_json(holder: &Holder) -> Value {
    json!({
        "held_as": held_as(holder),
        "metadata": holder.metadata,
        "remaining_ms": holder.remaining.map(|left| left.as_millis() as u64),
        "pid": holder.pid,
    })
}

/// A key and what `inspect` tells of it, as JSON.
pub fn inspection_json(key: &str, seen: &Inspection) -> Value {
    json!({
        "key": key,
        "held": seen.kind.is_some(),
        "kind": seen.kind.map(|held| kind(Some(held))),
        "holders": seen.holders.iter().map(holder_json).collect::<Vec<_>>(),
        "waiters": seen.waiters,
        "fence": seen.fence,
    })
}

/// A key and what `inspect` tells of it, for people.
pub fn inspection_text(key: &str, seen: &Inspection) -> String {
    let mut text = match seen.kind {
        None => format!("`{key}` is free\n"),
        Some(held) => format!("`{key}` is held as {}\n", kind(Some(held))),
    };
    for one in &seen.holders {
        text.push_str(&format!("  {}\n", holder(one)));
        if one.held_as == HeldAs::Transaction {
            text.push_str(&format!(
                "    force-release cannot end it: {}\n",
                ending_a_transaction(one)
            ));
        }
    }
    text.push_str(&format!(
        "  waiters: {}, fence: {}\n",
        seen.waiters,
        fence(seen.fence)
    ));
    text
}

/// The listed keys as a table, a row per holder.
pub fn table(keys: &[KeyInfo]) -> String {
    let mut rows = vec![
        [
            "KEY",
            "KIND",
            "HELD AS",
            "HOLDER",
            "REMAINING",
            "FENCE",
            "WAITERS",
        ]
        .map(String::from),
    ];
    for info in keys {
        let seen = &info.inspection;
        for one in &seen.holders {
            rows.push([
                info.key.clone(),
                kind(seen.kind),
                held_as(one),
                one.metadata.clone(),
                remaining(one.remaining),
                fence(seen.fence),
                seen.waiters.to_string(),
            ]);
        }
    }
    let mut widths = [0; 7];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_row_per_holder_under_aligned_headers() {
        let mut seen = Inspection::free();
        seen.kind = Some(KeyKind::Semaphore { permits: 2 });
        seen.holders = vec![
            Holder::new(HeldAs::Permit, "a", Some(Duration::from_millis(1500))),
            Holder::new(HeldAs::Permit, "worker-b", None),
        ];
        let listed = table(&[KeyInfo::new("jobs", seen)]);
        let lines: Vec<&str> = listed.lines().collect();
        assert_eq!(lines.len(), 3, "{listed}");
        assert!(
            lines[0].starts_with("KEY   KIND          HELD AS  HOLDER"),
            "{listed}"
        );
        assert!(
            lines[1].starts_with("jobs  semaphore(2)  permit   a    "),
            "{listed}"
        );
        assert!(lines[2].contains("worker-b  -"), "{listed}");
    }

    #[test]
    fn a_transaction_is_shown_with_its_session_and_no_lease() {
        let mut by_transaction = Holder::new(HeldAs::Transaction, "", None);
        by_transaction.pid = Some(4242);
        let mut seen = Inspection::free();
        seen.kind = Some(KeyKind::Lock);
        seen.holders = vec![by_transaction];
        let text = inspection_text("orders", &seen);
        assert!(
            text.contains("lock by a database transaction, in session 4242\n"),
            "{text}"
        );
        assert!(text.contains("pg_terminate_backend(4242)"), "{text}");
        assert!(!text.contains("left"), "{text}");
    }
}
