//! Exhaustively checked models of lockmacro's Redis lock protocol, built on
//! [stateright](https://docs.rs/stateright).
//!
//! Each model is a small state machine: a server running the transitions of
//! the Lua scripts (each names the script and the lines it mirrors), clients
//! running the runtime's side of them (`wait.rs`, `lease.rs`,
//! `watchdog.rs`), and a network that loses and delays. The clock advances
//! in whole ticks up to a horizon, which keeps every state space finite, so
//! the checker visits every state. `docs/model.md` says what is modelled and
//! what is not, and what the checker found.
//!
//! | model | protocol |
//! |---|---|
//! | [`Plain`] | `SET NX` / `acquire.lua`, `refresh.lua`, `release.lua`, the waiters flag |
//! | [`Fair`] | `acquire_fair.lua`, `grant.lua`, `confirm.lua`, the queue and grant leases |
//! | [`Shares`] | `acquire_shared.lua`: permits, and read-write locks |
//! | [`Fences`] | `fence.lua`: counters seeded from the clock, expiring, lost on restart |
//! | [`Kinds`] | `kinds.lua`'s marker and `WrongKind`, `downgrade.lua`, `force_release.lua` |
//! | [`Scriptless`] | the script-free engine's `WATCH`/`MULTI`/`EXEC` beside `acquire.lua` or `acquire_shared.lua` on one key |
//! | [`Refreshes`] | `refresh.lua` with a ttl per call, several in flight: the local deadline's rule of `lease.rs` |
//!
//! ```
//! use lockmacro_model::{Fences, Timing};
//! use stateright::{Checker, Model};
//!
//! let checker = Fences::new(2, Timing::default()).checker().spawn_bfs().join();
//! checker.assert_properties();
//! ```

mod fair;
mod fences;
mod kinds;
mod plain;
mod refreshes;
mod scriptless;
mod scripts;
mod shares;
mod steps;
mod time;

pub use fair::{Entry, Fair, FairAction, FairMsg, FairMutations, FairOp, FairState, Held, Waiter};
pub use fences::{Fences, FencesAction, FencesMutations, FencesState, Loss, Snapshot, Taker};
pub use kinds::{
    Asked, Key, Kinds, KindsAction, KindsMutations, KindsOp, KindsState, Marker, Stand,
};
pub use plain::{Answer, Client, Msg, Op, Phase, Plain, PlainAction, PlainMutations, PlainState};
pub use refreshes::{
    Ask, LeaseTiming, Refresh, Refreshes, RefreshesAction, RefreshesMutations, RefreshesState,
    Stage, Taking,
};
pub use scriptless::{
    ScriptAnswer, ScriptFlight, ScriptOp, Scripted, ScriptedAsk, Scriptless, ScriptlessAction,
    ScriptlessMutations, ScriptlessState, Stored, Unscripted, Watch,
};
pub use scripts::{SCRIPTS, Script};
pub use shares::{
    Flight, Holder, ShareOp, Shares, SharesAction, SharesKind, SharesMutations, SharesState,
};
pub use steps::{Count, Steps};
pub use time::Timing;
