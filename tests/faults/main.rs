//! The fault suite: each claim about what the library does when something
//! fails (a holder process killed, Redis frozen, restarted or cut off, a slow
//! or broken network) shown against real `redis-server` processes (and etcd
//! and PostgreSQL ones, with their features), with ttls around a second so
//! that it runs in bounded time.
//!
//! Exclusion is checked by a witness (`lockmacro_testkit::witness`) that does
//! not trust the lock: it records every critical section on the monotonic
//! clock and checks that none overlap, that no update is lost and that no
//! stale fenced write is accepted.
//!
//! The cases that freeze or restart the server, or pause a holder beside it,
//! run once per server program: on Redis and on Valkey (`on_each_program!`).

use lockmacro_testkit::program::Program;

/// Each case once per server program, in a module named after it
/// (`on_redis::case`, `on_valkey::case`; [`module_of`] names them): a case
/// is an `async fn(Program)` that starts its servers with
/// `RedisServer::start_as(program, …)`. Its `#[tokio::test]` arguments are
/// the group's `runtime`, or its own in parentheses after its name.
macro_rules! on_each_program {
    (runtime: $runtime:tt, cases: $cases:tt $(,)?) => {
        on_each_program!(@module on_redis, Redis, $runtime, $cases);
        on_each_program!(@module on_valkey, Valkey, $runtime, $cases);
    };
    (@module $module:ident, $program:ident, $runtime:tt, [$($case:ident $(($($own:tt)*))?),* $(,)?]) => {
        mod $module {
            $(on_each_program!(@test $program, $case, $runtime $(, ($($own)*))?);)*
        }
    };
    (@test $program:ident, $case:ident, $default:tt, $own:tt) => {
        on_each_program!(@test $program, $case, $own);
    };
    (@test $program:ident, $case:ident, ($($runtime:tt)*)) => {
        #[tokio::test($($runtime)*)]
        async fn $case() {
            super::$case(lockmacro_testkit::program::Program::$program).await;
        }
    };
}

/// The module [`on_each_program!`] puts `program`'s tests in: a case that
/// runs itself again in a child process names its test with it.
pub fn module_of(program: Program) -> &'static str {
    match program {
        Program::Redis => "on_redis",
        Program::Valkey => "on_valkey",
    }
}

mod at_risk;
mod chaos;
mod dead_waiter;
mod election;
#[cfg(feature = "etcd")]
mod etcd;
#[cfg(feature = "etcd")]
mod etcd_permits;
mod failover;
mod force_release;
mod lease;
mod lock_delay;
mod network;
mod pause;
mod permits;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_failover;
#[cfg(feature = "postgres")]
mod postgres_network;
#[cfg(feature = "postgres")]
mod postgres_permits;
#[cfg(feature = "postgres")]
mod postgres_transaction;
mod process;
mod refresh;
mod restart;
mod shutdown;
mod signal;
