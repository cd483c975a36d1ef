use std::sync::Arc;

use lockmacro_runtime::{Locker, MemoryBackend, RedisBackend};

use crate::support::RedisServer;
use crate::support::cluster::RedisCluster;

/// Independent masters behind the Redlock fixture: the smallest count with a
/// majority that is not everyone.
const REDLOCK_MASTERS: usize = 3;

/// A backend under test: hands out independent lockers on it (each with its
/// own connections, for Redis), as separate processes would have.
pub struct Fixture {
    backend: Under,
}

enum Under {
    Redis(RedisServer),
    Cluster(RedisCluster),
    Redlock(Vec<RedisServer>),
    Memory(Arc<MemoryBackend>),
}

impl Fixture {
    pub async fn redis() -> Self {
        Fixture {
            backend: Under::Redis(RedisServer::start()),
        }
    }

    /// A fresh cluster of three masters with a replica each, per test: tests
    /// share no keys, so none can see another's locks.
    pub async fn cluster() -> Self {
        let cluster = tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .expect("starting the cluster");
        Fixture {
            backend: Under::Cluster(cluster),
        }
    }

    pub async fn redlock() -> Self {
        Fixture {
            backend: Under::Redlock(RedisServer::start_many(REDLOCK_MASTERS)),
        }
    }

    pub fn memory() -> Self {
        Fixture {
            backend: Under::Memory(Arc::new(MemoryBackend::new())),
        }
    }

    /// A new locker on the shared backend.
    pub async fn locker(&self) -> Locker {
        match &self.backend {
            Under::Redis(server) => {
                Locker::new(server.expect_ok(RedisBackend::connect(&server.url()).await, "connect"))
            }
            Under::Cluster(cluster) => {
                self.check(Locker::cluster(cluster.seeds()).await, "connect")
            }
            Under::Redlock(masters) => {
                let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
                self.check(Locker::redlock(urls).await, "connect")
            }
            Under::Memory(memory) => Locker::new(memory.clone()),
        }
    }

    /// Panics with `what`, plus the server logs when there are servers.
    #[track_caller]
    pub fn check<T, E: std::fmt::Debug>(&self, result: Result<T, E>, what: &str) -> T {
        match (&self.backend, result) {
            (_, Ok(value)) => value,
            (Under::Redis(server), Err(err)) => server.expect_ok(Err(err), what),
            (Under::Cluster(cluster), Err(err)) => {
                cluster.fail(format_args!("{what}: unexpected error: {err:?}"))
            }
            (Under::Redlock(masters), Err(err)) => {
                let logs: Vec<String> = masters
                    .iter()
                    .map(|master| {
                        format!(
                            "--- log of master on port {} ---\n{}",
                            master.port(),
                            master.log()
                        )
                    })
                    .collect();
                panic!("{what}: unexpected error: {err:?}\n{}", logs.join("\n"))
            }
            (Under::Memory(_), Err(err)) => panic!("{what}: {err:?}"),
        }
    }
}
