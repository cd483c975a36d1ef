//! One run: a seed decides the network's latencies, the server's clock,
//! each client's operations and every fault; the run's history is checked
//! at the end.

use std::time::Duration;

use lockmacro_history::{History, Violation};
use lockmacro_runtime::{FencedStore, Locker, ObtainOptions, RedisBackend, RedisConfig, Scripts};
use lockmacro_sim::Server;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::clock::ServerClock;
use crate::dial::SimulatedNetwork;
use crate::faults::Faults;
use crate::workload::{self, KEYS, Recorder};

/// The host of the lock server, and of the fenced resource's server.
const SERVER: &str = "redis";
const PORT: u16 = 6379;
/// The fenced resource's own server, on the same host (one host less to
/// step each tick), which no server fault touches: the lock server's
/// faults are what fencing must survive.
const STORE_PORT: u16 = 6380;
/// Above every ttl the clients use.
const MAX_TTL: Duration = Duration::from_millis(1_500);
/// The simulation's step: each host's clock moves on by this much, and
/// messages are delivered on these boundaries. Coarser than a real clock,
/// which only brings more events together in one step.
const TICK: Duration = Duration::from_millis(2);
/// How long a run may last in simulated time before it counts as hung.
const LIMIT: Duration = Duration::from_secs(600);

/// What a run is made of; everything else comes from the seed.
#[derive(Debug, Clone)]
pub struct Config {
    pub clients: usize,
    pub operations: usize,
    pub faults: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            clients: 3,
            operations: 8,
            faults: true,
        }
    }
}

/// What a run recorded, and what the checker found in it.
pub struct Outcome {
    pub seed: u64,
    pub history: History,
    pub violations: Vec<Violation>,
    /// Faults applied, in order, with when.
    pub faults: Vec<(Duration, String)>,
    /// The run's own failure (a hang, a client's panic), if any.
    pub error: Option<String>,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.error.is_none()
    }
}

/// Runs `seed` with `config`.
pub fn run(seed: u64, config: &Config) -> Outcome {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .tick_duration(TICK)
        .simulation_duration(LIMIT)
        .min_message_latency(Duration::from_micros(rng.random_range(50..500)))
        .max_message_latency(Duration::from_millis(rng.random_range(1..20)))
        .build();
    let clock = ServerClock::new(rng.random_range(-5_000..=5_000));
    let server = Server::new(clock.clone());
    // Now and then the server refuses scripts to everyone (an ACL): the
    // clients find out and go on without them. Otherwise some clients are
    // set never to use them, beside others that do, on the same keys.
    if rng.random_bool(0.1) {
        server.refuse_scripts(true);
    }
    serve(&mut sim, &server, &Server::new(ServerClock::new(0)));
    let recorder = Recorder::new(MAX_TTL);
    let names: Vec<String> = (0..config.clients)
        .map(|id| format!("client{id}"))
        .collect();
    // The keys this run contends on: one or two of them, most often, so
    // that the clients meet on each, or all of them.
    let mut keys = KEYS.to_vec();
    let focus = [1, 2, 2, KEYS.len()][rng.random_range(0..4)];
    while keys.len() > focus {
        keys.remove(rng.random_range(0..keys.len()));
    }
    for (id, name) in names.iter().enumerate() {
        let recorder = recorder.clone();
        let scripts = if rng.random_bool(0.3) {
            Scripts::Never
        } else {
            Scripts::Auto
        };
        let operations = config.operations;
        let keys = keys.clone();
        sim.client(name.as_str(), async move {
            let locker = Locker::new(connect(scripts).await?);
            let store =
                FencedStore::connect_with(&url(STORE_PORT), client_config(Scripts::Auto)).await?;
            workload::run(id, seed, &keys, operations, locker.clone(), store, recorder).await;
            locker.shutdown().await;
            Ok(())
        });
    }

    let mut faults = Faults::new(&server, &clock, &recorder, &names, SERVER);
    let mut error = None;
    let mut next_fault = Duration::from_millis(rng.random_range(100..1_000));
    loop {
        let elapsed = sim.elapsed();
        faults.heal(&mut sim, elapsed);
        if config.faults && elapsed >= next_fault {
            faults.apply(&mut rng, &mut sim, elapsed);
            next_fault = elapsed + Duration::from_millis(rng.random_range(200..2_000));
        }
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(err) => {
                error = Some(err.to_string());
                break;
            }
        }
    }
    faults.end(&mut sim);
    if error.is_none() {
        error = settle(&mut sim, &clock, &recorder);
    }
    let history = recorder.history();
    let violations = history.violations();
    Outcome {
        seed,
        history,
        violations,
        faults: faults.applied,
        error,
    }
}

/// The lock server and the resource's server, on one host.
fn serve(sim: &mut turmoil::Sim<'_>, locks: &Server, store: &Server) {
    let servers = [(PORT, locks.clone()), (STORE_PORT, store.clone())];
    sim.host(SERVER, move || {
        let servers = servers.clone();
        async move {
            let mut listening = tokio::task::JoinSet::new();
            for (port, server) in servers {
                let listener = turmoil::net::TcpListener::bind(("0.0.0.0", port)).await?;
                listening.spawn(async move {
                    while let Ok((stream, _)) = listener.accept().await {
                        let server = server.clone();
                        tokio::spawn(async move { server.serve(stream).await });
                    }
                });
            }
            while listening.join_next().await.is_some() {}
            Ok(())
        }
    });
}

fn url(port: u16) -> String {
    format!("redis://{SERVER}:{port}/")
}

/// How the clients connect: over the simulated network, with timeouts
/// short beside the ttls.
fn client_config(scripts: Scripts) -> RedisConfig {
    RedisConfig::default()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(300))
        .scripts(scripts)
        .dial(SimulatedNetwork)
}

/// A locker's backend on the lock server. The server may be paused or cut
/// off as the client starts: connecting is tried again a while.
async fn connect(scripts: Scripts) -> Result<RedisBackend, Box<dyn std::error::Error>> {
    let mut last = None;
    for _ in 0..20 {
        match RedisBackend::connect_with(&url(PORT), client_config(scripts)).await {
            Ok(backend) => return Ok(backend),
            Err(err) => last = Some(err),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(last.map_or_else(|| "no connect".into(), Into::into))
}

/// Once every client is gone: after every lease has ended, a new client
/// must obtain each key at once. Answers the run's failure, if any.
fn settle(sim: &mut turmoil::Sim<'_>, clock: &ServerClock, recorder: &Recorder) -> Option<String> {
    let recorder = recorder.clone();
    // Every lease has ended after the longest ttl, and a clock stepped back
    // keeps every expiry that much longer.
    let wait = MAX_TTL + Duration::from_millis(200) + clock.behind();
    sim.client("after", async move {
        tokio::time::sleep(wait).await;
        let locker = Locker::new(connect(Scripts::Auto).await?);
        for (key, _) in KEYS {
            if locker
                .obtain(key, Duration::from_secs(1), ObtainOptions::new())
                .await
                .is_err()
            {
                recorder.held_forever(key);
            }
        }
        Ok(())
    });
    loop {
        match sim.step() {
            Ok(true) => return None,
            Ok(false) => {}
            Err(err) => return Some(err.to_string()),
        }
    }
}
