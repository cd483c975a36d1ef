//! `lockmacro`: an operator's command line for lockmacro's distributed
//! locks. Lists the keys held, inspects one, force-releases one (its
//! holder then reports its lease lost) and watches one, on any backend URL
//! the library takes, creating nothing there. Built on
//! `lockmacro-runtime`'s public API alone; see the README for the
//! commands, output and exit codes.

mod args;
mod exit;
mod force_release;
mod render;
mod watch;

use std::process::ExitCode;

use clap::Parser;
use lockmacro_runtime::Locker;

use crate::args::{Cli, Command};
use crate::exit::{BACKEND, DONE, Failure, NO_TABLES, NOTHING};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("lockmacro: cannot start: {err}");
            return ExitCode::from(BACKEND);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("lockmacro: {failure}");
            failure.code()
        }
    }
}

async fn run(cli: Cli) -> Result<u8, Failure> {
    let Some(url) = cli.url else {
        return Err(Failure::usage(
            "no backend URL: pass --url or set LOCKMACRO_URL (see --help)",
        ));
    };
    // Only ever reads to open it: a database named by mistake is left as
    // it was found.
    let Some(locker) = Locker::from_url_if_set_up(&url).await? else {
        return Err(Failure::new(
            NO_TABLES,
            "no lockmacro tables in this database: nothing is locked here, \
             or the URL names the wrong database",
        ));
    };
    let locker = locker.with_namespace(&cli.namespace);
    match cli.command {
        Command::List { prefix } => {
            let keys = locker.list(&prefix).await?;
            if cli.json {
                let listed: Vec<_> = keys
                    .iter()
                    .map(|info| render::inspection_json(&info.key, &info.inspection))
                    .collect();
                println!("{}", serde_json::Value::from(listed));
            } else {
                print!("{}", render::table(&keys));
            }
            Ok(DONE)
        }
        Command::Inspect { key } => {
            let seen = locker.inspect(&key).await?;
            if cli.json {
                println!("{}", render::inspection_json(&key, &seen));
            } else {
                print!("{}", render::inspection_text(&key, &seen));
            }
            Ok(if seen.kind.is_some() { DONE } else { NOTHING })
        }
        Command::ForceRelease { key, yes } => {
            force_release::force_release(&locker, &key, yes, cli.json).await
        }
        Command::Watch { key, interval } => {
            watch::watch(&locker, &key, interval, cli.json).await?;
            Ok(DONE)
        }
    }
}
