//! Server time per refresh and per release, by path: the Lua scripts, the
//! native compare command (Valkey 8.1's `SET … IFEQ`), and the
//! `WATCH`/`MULTI`/`EXEC` transaction of the script-free protocol. Each
//! path runs `--calls` times on a fresh server; the figure is the server's
//! own time in the commands the client sent (`usec` in `INFO
//! commandstats`: for a script, its `EVALSHA`'s, which includes the
//! commands the script called) divided by the calls, with the commands
//! each call ran.
//!
//! ```text
//! cargo bench --bench native                   # 20,000 calls per path
//! cargo bench --bench native -- --calls 2000
//! ```
//!
//! Needs `redis-server` (or `LOCKMACRO_REDIS_SERVER`) and `valkey-server`
//! (`LOCKMACRO_VALKEY_SERVER`, or `bash scripts/install-deps`).

use std::time::Duration;

use lockmacro_runtime::backend::{AcquireRequest, Backend};
use lockmacro_runtime::{RedisBackend, RedisConfig, Scripts};
use lockmacro_testkit::RedisServer;

const TTL: Duration = Duration::from_secs(30);

/// What one path cost the server: µs per call, and the commands per call.
struct Cost {
    usec_per_call: f64,
    commands: Vec<(String, f64)>,
}

/// `calls` and `usec` per command since the last `CONFIG RESETSTAT`, the
/// bench's own left out, over `calls` calls; `scripted` when the client
/// sent scripts.
fn cost(server: &RedisServer, calls: u64, scripted: bool) -> Cost {
    let info: String = server.cmd(&["INFO", "commandstats"]);
    let mut total = 0.0;
    let mut commands = Vec::new();
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|line| line.split_once(':'))
        else {
            continue;
        };
        let own = ["info", "config", "client", "hello", "command"];
        if own.iter().any(|own| name.starts_with(own)) {
            continue;
        }
        let field = |key: &str| -> f64 {
            rest.split(',')
                .find_map(|part| part.strip_prefix(key))
                .and_then(|value| value.parse().ok())
                .unwrap_or(0.0)
        };
        // A script's time includes what it called; counted once.
        let sent = !scripted || name.starts_with("eval");
        if sent {
            total += field("usec=");
        }
        commands.push((name.to_owned(), field("calls=") / calls as f64));
    }
    Cost {
        usec_per_call: total / calls as f64,
        commands,
    }
}

async fn connect(server: &RedisServer, scripts: Scripts) -> RedisBackend {
    let config = RedisConfig::default().scripts(scripts);
    server.expect_ok(
        RedisBackend::connect_with(&server.url(), config).await,
        "connect",
    )
}

/// The refreshes and then the releases of `calls` locks through `backend`.
async fn measure(server: &RedisServer, scripts: Scripts, calls: u64) -> (Cost, Cost) {
    let backend = connect(server, scripts).await;
    let keys: Vec<[String; 1]> = (0..calls).map(|i| [format!("job:{i}")]).collect();
    let token = "a".repeat(32);
    for key in &keys {
        let req = AcquireRequest::new(key, &token, TTL);
        server.expect_ok(backend.acquire(req).await, "acquire");
    }
    let () = server.cmd(&["CONFIG", "RESETSTAT"]);
    for key in &keys {
        let refreshed = server.expect_ok(backend.refresh(key, &token, TTL).await, "refresh");
        assert!(refreshed, "a refresh failed");
    }
    let scripted = scripts != Scripts::Never;
    let refresh = cost(server, calls, scripted);
    let () = server.cmd(&["CONFIG", "RESETSTAT"]);
    for key in &keys {
        let released = server.expect_ok(backend.release(key, &token).await, "release");
        assert!(released, "a release failed");
    }
    (refresh, cost(server, calls, scripted))
}

fn print(server: &str, path: &str, what: &str, cost: &Cost) {
    let commands: Vec<String> = cost
        .commands
        .iter()
        .map(|(name, per_call)| format!("{name} ×{per_call:.2}"))
        .collect();
    println!(
        "| {server} | {path} | {what} | {:.2} | {} |",
        cost.usec_per_call,
        commands.join(", ")
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let mut calls = 20_000;
    while let Some(arg) = args.next() {
        if arg == "--calls" {
            calls = args
                .next()
                .and_then(|value| value.parse().ok())
                .expect("--calls takes a number");
        }
    }
    println!("| server | path | call | server µs per call | commands per call |");
    println!("|---|---|---|---|---|");
    let paths = [
        ("Valkey 8.1", "scripts", Scripts::Required),
        (
            "Valkey 8.1",
            "native (SET IFEQ) / transaction",
            Scripts::Never,
        ),
        ("Redis 7.0", "scripts", Scripts::Required),
        ("Redis 7.0", "transaction", Scripts::Never),
    ];
    for (name, path, scripts) in paths {
        let server = if name.starts_with("Valkey") {
            RedisServer::valkey()
        } else {
            RedisServer::start()
        };
        let (refresh, release) = measure(&server, scripts, calls).await;
        print(name, path, "refresh", &refresh);
        print(name, path, "release", &release);
    }
}
