//! `lockmacro`: an operator's command line for lockmacro's distributed
//! locks. Lists the keys held, inspects one, force-releases one (its
//! holder then reports its lease lost) and watches one, on any backend URL
//! the library takes. Built on `lockmacro-runtime`'s public API alone; see
//! the README for the commands, output and exit codes.

mod args;
mod exit;
mod render;
mod watch;

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;
use lockmacro_runtime::Locker;

use crate::args::{Cli, Command};
use crate::exit::{BACKEND, DONE, Failure, NOTHING};

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
    let locker = Locker::from_url(&url).await?.with_namespace(&cli.namespace);
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
        Command::ForceRelease { key, yes } => force_release(&locker, &key, yes, cli.json).await,
        Command::Watch { key, interval } => {
            watch::watch(&locker, &key, interval, cli.json).await?;
            Ok(DONE)
        }
    }
}

/// Shows what holds `key`, asks (unless `yes`), releases it by force and
/// says what was released.
async fn force_release(locker: &Locker, key: &str, yes: bool, json: bool) -> Result<u8, Failure> {
    let seen = locker.inspect(key).await?;
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
