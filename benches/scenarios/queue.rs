//! A release with a long queue of fair waiters ahead.

use std::time::Instant;

use lockmacro_runtime::{Locker, ObtainOptions};

use crate::floor::{self, TTL};
use crate::place::View;
use crate::stats::{micros, percentile};
use crate::{Args, BoxError};

/// `Locker::obtain`, then `Lock::release`, whose script hands the key to the
/// first queued waiter (and pops it). The waiters are entries written as the fair acquire
/// writes them, for tokens nobody holds: after each release the bench frees
/// the key and queues one more, so the queue keeps its length.
pub async fn queue_release(args: &Args, url: &str, view: View) -> Result<(), BoxError> {
    const KEY: &str = "bench:queue";
    const QUEUE: &str = "{bench:queue}:queue";
    // The flag a queued waiter sets, which tells a release to look at the
    // queue; without an expiry here, as the entries have none either.
    const FLAG: &str = "{bench:queue}:waiters";
    let cycles = args.cycles.min(2000);
    let locker = Locker::connect(url).await?;
    let mut admin = floor::admin(url).await?;
    println!(
        "\nRelease with fair waiters queued ({cycles} releases each; {})",
        view.short()
    );
    println!(
        "  {:<20} {:>14} {:>14} {:>22}",
        "waiters queued", "release p50 µs", "release p99 µs", "server µs per script"
    );
    let waiter = |n: usize| format!(r#"{{"v":"{n:032x}","t":30000,"e":99999999999999,"f":""}}"#);
    for queued in [1, 1000] {
        let () = redis::pipe()
            .cmd("DEL")
            .arg(KEY)
            .arg(QUEUE)
            .ignore()
            .cmd("SET")
            .arg(FLAG)
            .arg("")
            .ignore()
            .query_async(&mut admin)
            .await?;
        let mut push = redis::cmd("RPUSH");
        push.arg(QUEUE);
        for n in 0..queued {
            push.arg(waiter(n));
        }
        let _: i64 = push.query_async(&mut admin).await?;
        floor::reset_stats(&mut admin).await;
        let mut latencies = Vec::with_capacity(cycles);
        for n in 0..cycles {
            let lock = locker.obtain(KEY, TTL, ObtainOptions::new()).await?;
            let started = Instant::now();
            lock.release().await?;
            latencies.push(started.elapsed());
            let (): () = redis::pipe()
                .cmd("DEL")
                .arg(KEY)
                .ignore()
                .cmd("RPUSH")
                .arg(QUEUE)
                .arg(waiter(queued + n))
                .ignore()
                .query_async(&mut admin)
                .await?;
        }
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut admin)
            .await?;
        // `usec_per_call` of EVALSHA: the release script (the obtain is a
        // plain `SET`).
        let per_script = info
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_evalsha:"))
            .and_then(|stats| {
                stats
                    .split(',')
                    .find_map(|f| f.strip_prefix("usec_per_call="))
            })
            .unwrap_or("?")
            .to_owned();
        latencies.sort_unstable();
        println!(
            "  {:<20} {:>14} {:>14} {:>22}",
            queued,
            micros(percentile(&latencies, 0.5)),
            micros(percentile(&latencies, 0.99)),
            per_script
        );
    }
    Ok(())
}
