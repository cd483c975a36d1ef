//! S4: many leases kept alive by the watchdog of one `Locker`.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use lockmacro_runtime::{Lock, Locker, ObtainOptions};

use crate::floor::{self, TTL};
use crate::place::cpu_time_self;
use crate::{Args, BoxError};

/// Resident set size of this process, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split(' ').nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

/// `--leases` locks obtained on one `Locker` (one connection), then
/// `keep_alive()`; over `--window-s`: client CPU, commands and refreshes per
/// second, memory per lease.
pub async fn s4(args: &Args, url: &str) -> Result<(), BoxError> {
    let mut admin = floor::admin(url).await?;
    let locker = Locker::connect(url).await?;
    let before = rss();
    let obtained = Instant::now();
    let locks: Vec<_> = futures::stream::iter(0..args.leases)
        .map(|i| {
            let locker = locker.clone();
            async move {
                locker
                    .obtain(&format!("bench:s4:{i}"), TTL, ObtainOptions::default())
                    .await
            }
        })
        .buffer_unordered(256)
        .try_collect()
        .await?;
    let locks_only = rss().saturating_sub(before) as f64 / args.leases as f64;
    let guards: Vec<_> = locks.into_iter().map(Lock::keep_alive).collect();
    let per_lease = rss().saturating_sub(before) as f64 / args.leases as f64;
    let obtain_time = obtained.elapsed();
    floor::reset_stats(&mut admin).await;
    let cpu = cpu_time_self();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.window_s)).await;
    let window = started.elapsed();
    let cpu = cpu_time_self() - cpu;
    let calls = floor::command_calls(&mut admin).await;
    // Only the watchdog talks to the server in the window; a script missing
    // from a fresh server costs each refresh in flight a `SCRIPT LOAD` and a
    // second `EVALSHA`.
    let commands = floor::sent(&calls, false);
    let refreshes = calls.get("pexpire").copied().unwrap_or(0);
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    println!(
        "\nS4 watchdog: {} leases on one Locker, ttl 30 s, refresh every 10 s \
         (obtained in {:.1} s), window {:.1} s",
        args.leases,
        obtain_time.as_secs_f64(),
        window.as_secs_f64()
    );
    println!(
        "  client CPU          {:.1} % of one core",
        100.0 * cpu.as_secs_f64() / window.as_secs_f64()
    );
    println!(
        "  commands/s          {:.0} for {:.0} refreshes/s (one period needs {} refreshes)",
        commands as f64 / window.as_secs_f64(),
        refreshes as f64 / window.as_secs_f64(),
        args.leases
    );
    let scripts =
        calls.get("evalsha").copied().unwrap_or(0) + calls.get("eval").copied().unwrap_or(0);
    println!(
        "  refreshes           {refreshes} in the window, {:.0} per script call",
        refreshes as f64 / scripts.max(1) as f64
    );
    println!(
        "  memory per lease    {per_lease:.0} bytes (RSS delta / leases; {locks_only:.0} before keep_alive)"
    );
    println!("  leases lost         {lost}");
    let released = Instant::now();
    futures::stream::iter(guards)
        .map(|guard| async move {
            let _ = guard.release().await;
        })
        .buffer_unordered(256)
        .collect::<()>()
        .await;
    println!("  (released in {:.1} s)", released.elapsed().as_secs_f64());
    Ok(())
}
