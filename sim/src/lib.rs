//! A simulated Redis server for lockmacro's deterministic simulation tests.
//!
//! The runtime, unmodified, talks RESP to this server as it would to Redis
//! 7: its Lua scripts run here in an embedded Lua 5.1 with Redis's
//! conversion rules, its script-free engine's `WATCH`/`MULTI`/`EXEC`
//! transactions abort as Redis's would, and its wake-ups arrive as pub/sub
//! messages. Time is whatever the harness's [`Clock`] says, and every
//! iteration order is fixed, so a run replays from its seed. Faults
//! (pause, restart with all or some keys lost, dropped connections) are
//! hooks on [`Server`].

pub mod clock;
pub mod commands;
pub mod expiry;
mod faults;
pub mod keyspace;
pub mod lua;
pub mod pubsub;
pub mod reply;
pub mod resp;
pub mod server;
mod session;
pub mod sorted;
mod state;

pub use clock::{Clock, ManualClock, SystemClock};
pub use keyspace::{Keyspace, Value};
pub use reply::Reply;
pub use server::Server;
pub use state::VERSION;
