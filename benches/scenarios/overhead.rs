//! What the attribute adds to the runtime calls it makes, on the memory
//! backend (no server, so no view).

use std::time::Instant;

use lockmacro_runtime::{LockError, Locker, ObtainOptions, distributed_lock};

use crate::floor::TTL;
use crate::{Args, BoxError};

#[distributed_lock(key = "bench:macro", ttl = "30s", locker = locker)]
async fn macro_attribute(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

pub async fn macro_overhead(args: &Args) -> Result<(), BoxError> {
    let locker = Locker::memory();
    let n = args.macro_calls;
    println!("\nMacro overhead on the memory backend ({n} calls each)");
    for name in [
        "attribute",
        "obtain + keep_alive + release",
        "obtain + release",
    ] {
        let started = Instant::now();
        for _ in 0..n {
            match name {
                "attribute" => macro_attribute(&locker).await?,
                "obtain + keep_alive + release" => {
                    locker
                        .obtain("bench:macro", TTL, ObtainOptions::default())
                        .await?
                        .keep_alive()
                        .release()
                        .await?;
                }
                _ => {
                    locker
                        .obtain("bench:macro", TTL, ObtainOptions::default())
                        .await?
                        .release()
                        .await?;
                }
            }
        }
        let ns = started.elapsed().as_nanos() as f64 / n as f64;
        println!("  {name:<32} {ns:>8.0} ns/call");
    }
    Ok(())
}
