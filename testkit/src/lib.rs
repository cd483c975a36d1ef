//! The test kit of lockmacro's own integration tests and benchmark, after
//! redis-rs's `redis-test`: real servers on free loopback ports, network
//! faults, TLS material, and one fixture per backend that knows what its
//! backend can do.
//!
//! - Servers: [`RedisServer`] (one `redis-server`, or one `valkey-server`:
//!   [`program::Program`]), [`cluster::RedisCluster`],
//!   [`sentinel::RedisSentinel`] (a master, two replicas, three sentinels),
//!   [`etcd::EtcdCluster`] (one member or several), [`etcd_secure::SecureEtcd`]
//!   (one member with TLS or users), `postgres::PostgresServer` (and its
//!   streaming replica, `pgreplica`) and `pgbouncer::PgBouncer` (feature `postgres`); every process is killed
//!   and reaped on drop, dies with the test process, and every panic the kit
//!   raises carries the servers' logs. [`shared::Shared`] keeps one server
//!   for every test of a binary.
//! - Faults: [`proxy::Proxy`], a TCP proxy that adds latency, black-holes,
//!   drops connections or moves them to another server.
//! - TLS: [`tls::TestCa`], a throw-away certificate authority.
//! - Witnesses that do not trust the lock: [`witness::Witness`] records
//!   every critical section and checks that none overlapped, that no update
//!   was lost and that no stale fenced write was accepted;
//!   [`witness::counter`] counts increments kept in a Redis server of its
//!   own.
//! - Backends: [`Fixture`], a backend under test, and [`Kind`], which backend
//!   it is and what it can do ([`Capability`]); [`for_each_backend!`] turns
//!   one scenario into one test per backend that has what it needs.
//! - [`outside::MapBackend`], a backend written against the runtime's public
//!   `backend` module only.
//!
//! Not published: it serves this workspace's tests.

pub mod cluster;
pub mod etcd;
pub mod etcd_secure;
pub mod fixture;
pub mod kind;
pub mod logs;
pub mod outside;
#[cfg(feature = "postgres")]
pub mod pgbouncer;
#[cfg(feature = "postgres")]
pub mod pgdb;
#[cfg(feature = "postgres")]
pub mod pgreplica;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod program;
pub mod proxy;
pub mod redis;
pub mod sentinel;
pub mod shared;
pub mod tls;
pub mod witness;

pub use self::fixture::Fixture;
pub use self::kind::{Capability, Kind};
pub use self::redis::RedisServer;
/// The recorded history of a run and its checks.
pub use lockmacro_history as history;
