//! `force-release`: what holds the key, a confirmation, the release, and
//! what was released. A lock held by a database transaction (PostgreSQL's
//! `Locker::obtain_in`) has no lease to delete: it is named, with what ends
//! it, rather than reported as not held.

use std::io::{BufRead, IsTerminal, Write};

use lockmacro_runtime::{HeldAs, Locker};

use crate::exit::{BACKEND, DONE, Failure, NOTHING};
use crate::render;

/// Shows what holds `key`, asks (unless `yes`), releases it by force and
/// says what was released.
pub async fn force_release(
    locker: &Locker,
    key: &str,
    yes: bool,
    json: bool,
) -> Result<u8, Failure> {
    let seen = locker.inspect(key).await?;
    let transaction = seen
        .holders
        .iter()
        .find(|holder| holder.held_as == HeldAs::Transaction);
    if let Some(transaction) = transaction {
        return Err(Failure::new(
            BACKEND,
            format!(
                "`{key}` is held by {}: force-release cannot end it; {}",
                render::transaction(transaction),
                render::ending_a_transaction(transaction)
            ),
        ));
    }
    if !yes {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::usage(format!(
                "refusing to force-release `{key}` without --yes: standard input is not a terminal"
            )));
        }
        eprint!(
            "{}force-release `{key}`? [y/N] ",
            render::inspection_text(key, &seen)
        );
        std::io::stderr().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            eprintln!("lockmacro: nothing released");
            return Ok(NOTHING);
        }
    }
    let released = locker.force_release(key).await?;
    if json {
        let mut answer = render::inspection_json(key, &seen);
        answer["released"] = released.into();
        println!("{answer}");
    } else if released {
        println!("released `{key}`:");
        for holder in &seen.holders {
            println!("  {}", render::holder(holder));
        }
    } else {
        println!("`{key}` was not held: nothing released");
    }
    Ok(if released { DONE } else { NOTHING })
}
