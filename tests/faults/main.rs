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
mod restart;
mod shutdown;
