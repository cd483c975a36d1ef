//! The faults a run suffers, drawn from its seed between the simulation's
//! steps: each is applied at once, and what undoes it later is scheduled.

use std::time::Duration;

use lockmacro_sim::Server;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::clock::ServerClock;
use crate::workload::Recorder;

/// One fault.
enum Fault {
    /// The server stops answering for a while (requests queue).
    Pause(Duration),
    /// The server crashes and restarts, keeping each key with this chance
    /// in percent (0: none), drawn from `keys_seed`.
    Restart { keep_percent: u32, keys_seed: u64 },
    /// Every connection to the server is cut.
    Reset,
    /// A client's messages to and from the server are held, then delivered
    /// at once: a partition that TCP outlasts.
    Hold(usize, Duration),
    /// The server runs the next requests and drops their connections
    /// instead of answering: replies lost on the way back.
    LoseReplies(u64),
    /// The server's clock steps: forward within the drift margin, or back.
    Step(i64),
}

/// Something scheduled to undo a fault, or to finish one.
type Later = Box<dyn FnOnce(&mut turmoil::Sim<'_>)>;

/// Applies faults to a run and undoes them when due.
pub(crate) struct Faults {
    server: Server,
    clock: ServerClock,
    recorder: Recorder,
    clients: Vec<String>,
    /// The server's host, whose links to clients are held.
    host: String,
    later: Vec<(Duration, Later)>,
    /// Each fault applied, with when.
    pub(crate) applied: Vec<(Duration, String)>,
}

impl Faults {
    pub(crate) fn new(
        server: &Server,
        clock: &ServerClock,
        recorder: &Recorder,
        clients: &[String],
        host: &str,
    ) -> Self {
        Faults {
            server: server.clone(),
            clock: clock.clone(),
            recorder: recorder.clone(),
            clients: clients.to_vec(),
            host: host.to_owned(),
            later: Vec::new(),
            applied: Vec::new(),
        }
    }

    /// Runs what is due by `now`, in the order it was scheduled.
    pub(crate) fn heal(&mut self, sim: &mut turmoil::Sim<'_>, now: Duration) {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.later)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.later = later;
        for (_, undo) in due {
            undo(sim);
        }
    }

    /// Undoes every fault at once, once the clients are gone.
    pub(crate) fn end(&mut self, sim: &mut turmoil::Sim<'_>) {
        self.heal(sim, Duration::MAX);
        self.server.lose_replies(0);
        self.server.resume();
    }

    /// Draws a fault from `rng` and applies it at `now`.
    pub(crate) fn apply(&mut self, rng: &mut StdRng, sim: &mut turmoil::Sim<'_>, now: Duration) {
        let fault = pick(rng, self.clients.len());
        self.applied.push((now, describe(&fault)));
        let server = self.server.clone();
        match fault {
            Fault::Pause(d) => {
                server.pause();
                self.later
                    .push((now + d, Box::new(move |_| server.resume())));
            }
            Fault::Restart {
                keep_percent,
                keys_seed,
            } => {
                // The next requests run but are not answered, then the
                // server stops, and comes back a while later with what its
                // snapshot kept (the keys are visited in order: the same
                // ones are kept each run), every connection dropped.
                server.lose_replies(keys_seed % 3 + 1);
                let stops = now + Duration::from_millis(keys_seed % 10 + 1);
                let back = stops + Duration::from_millis(keys_seed / 10 % 50 + 1);
                let stopping = server.clone();
                self.later
                    .push((stops, Box::new(move |_| stopping.pause())));
                let recorder = self.recorder.clone();
                let restart = move |_: &mut turmoil::Sim<'_>| {
                    let mut keep = StdRng::seed_from_u64(keys_seed);
                    server.restart_keeping(|_, _| keep.random_range(0..100) < keep_percent);
                    server.lose_replies(0);
                    server.resume();
                    if keep_percent < 100 {
                        recorder.data_lost(stops, back);
                    }
                };
                self.later.push((back, Box::new(restart)));
            }
            Fault::Reset => server.drop_connections(),
            Fault::LoseReplies(n) => server.lose_replies(n),
            Fault::Hold(c, d) => {
                let (client, host) = (self.clients[c].clone(), self.host.clone());
                sim.hold(client.as_str(), host.as_str());
                let release =
                    move |sim: &mut turmoil::Sim<'_>| sim.release(client.as_str(), host.as_str());
                self.later.push((now + d, Box::new(release)));
            }
            Fault::Step(us) => self.clock.step(us),
        }
    }
}

fn pick(rng: &mut StdRng, clients: usize) -> Fault {
    let ms = |rng: &mut StdRng, range: std::ops::Range<u64>| {
        Duration::from_millis(rng.random_range(range))
    };
    match rng.random_range(0..10) {
        0 | 1 => Fault::Pause(ms(rng, 10..800)),
        2 => Fault::Restart {
            keep_percent: [0, 50, 90][rng.random_range(0..3)],
            keys_seed: rng.random(),
        },
        3 => Fault::Reset,
        4 | 5 => Fault::LoseReplies(rng.random_range(1..4)),
        6 | 7 => Fault::Hold(rng.random_range(0..clients), ms(rng, 10..1_000)),
        // Forward by at most 1 ms: the drift margin is ttl / 100 + 2 ms
        // (docs/timing.md), of which the clock's rate takes up to 0.5 %.
        _ => Fault::Step(if rng.random_bool(0.5) {
            rng.random_range(0..=1_000)
        } else {
            -rng.random_range(0..=50_000)
        }),
    }
}

fn describe(fault: &Fault) -> String {
    match fault {
        Fault::Pause(d) => format!("the server pauses for {d:?}"),
        Fault::Restart { keep_percent, .. } => {
            format!(
                "the server crashes and restarts keeping each key with a chance of {keep_percent}%"
            )
        }
        Fault::Reset => "every connection to the server is cut".into(),
        Fault::Hold(c, d) => format!("client{c}'s messages are held for {d:?}"),
        Fault::LoseReplies(n) => format!("the replies to the next {n} requests are lost"),
        Fault::Step(us) => format!("the server's clock steps by {us} µs"),
    }
}
