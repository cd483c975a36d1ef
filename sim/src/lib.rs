//! A simulated Redis server for lockmacro's deterministic simulation tests.
//!
//! The runtime, unmodified, talks RESP to this server as it would to Redis
//! 7: its Lua scripts run here in an embedded Lua 5.1 with Redis's
//! conversion rules, its script-free engine's `WATCH`/`MULTI`/`EXEC`
//! transactions abort as Redis's would, and its wake-ups arrive as pub/sub
//! messages. Keys expire and `TIME` answers by the harness's [`Clock`];
//! what blocks a connection (a `WAIT` for replicas this server does not
//! have) waits on tokio's clock, which a simulation drives too. Every
//! iteration order is fixed, so a run replays from its seed. Faults
//! (pause, restart with all or some keys lost, dropped connections) are
//! hooks on [`Server`].
//!
//! ```
//! use lockmacro_sim::{ManualClock, Reply, Server};
//!
//! let clock = ManualClock::new(1_700_000_000_000);
//! let server = Server::new(clock.clone());
//! assert_eq!(server.call(&["SET", "job", "token", "PX", "30000", "NX"]), Reply::ok());
//! clock.advance_ms(30_001);
//! assert_eq!(server.call(&["GET", "job"]), Reply::Nil);
//! // Lose some keys in a restart, chosen in key order (a seeded RNG would
//! // decide the same way each run):
//! server.call(&["SET", "a", "1"]);
//! server.call(&["SET", "b", "2"]);
//! server.restart_keeping(|key, _| key == b"a");
//! assert_eq!(server.call(&["EXISTS", "a", "b"]), Reply::Int(1));
//! ```
//!
//! A connection is served by [`Server::serve`] on any `AsyncRead +
//! AsyncWrite` stream (a simulated network's, or an in-memory one that the
//! runtime's `RedisConfig::dial` hands out: see `tests/dial.rs`), or by
//! [`Server::listen`] on a loopback port. With [`TokioClock`] the server's
//! time is tokio's, which paused time or turmoil drive. Tests wait for states with [`Server::until`],
//! [`Server::until_subscriptions`] and [`Server::until_held`], never on
//! timers.

pub mod clock;
pub mod commands;
pub mod expiry;
mod faults;
pub mod hash;
pub mod keyspace;
pub mod lua;
pub mod pubsub;
pub mod reply;
pub mod resp;
pub mod server;
mod session;
pub mod sorted;
mod state;

pub use clock::{Clock, ManualClock, SystemClock, TokioClock};
pub use keyspace::{Keyspace, Value};
pub use reply::Reply;
pub use server::Server;
pub use state::VERSION;
