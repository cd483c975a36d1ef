//! What only the cluster and multi-master backends can show: keys that must
//! share a hash slot, redirections, a failover, a majority of masters, and
//! mutual exclusion while nodes fail. The behaviours every backend shares run
//! in `tests/runtime` (`on_cluster`, `on_redlock`).

mod cluster;
mod cluster_failover;
#[cfg(feature = "etcd")]
mod etcd;
#[cfg(feature = "etcd")]
mod etcd_kinds;
#[cfg(feature = "postgres")]
mod pgbouncer;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_sweep;
#[cfg(feature = "postgres")]
mod postgres_transaction;
mod redlock;
mod replicas;
#[cfg(feature = "sentinel")]
mod sentinel;
