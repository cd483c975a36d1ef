use std::sync::Arc;
use std::time::Duration;

use lockmacro_runtime::{Locker, MemoryBackend, ObtainOptions, RedisBackend};

use crate::support::RedisServer;
use crate::support::cluster::RedisCluster;

pub const LONG: Duration = Duration::from_secs(30);

pub fn once() -> ObtainOptions {
    ObtainOptions::new()
}

/// One backend under test, with a view of the raw servers behind it.
pub enum Fixture {
    Redis(RedisServer),
    Cluster(RedisCluster),
    Redlock(Vec<RedisServer>),
    Memory(Arc<MemoryBackend>),
}

impl Fixture {
    pub fn redis() -> Self {
        Fixture::Redis(RedisServer::start())
    }

    pub async fn cluster() -> Self {
        let cluster = tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .expect("starting the cluster");
        Fixture::Cluster(cluster)
    }

    pub fn redlock() -> Self {
        Fixture::Redlock(RedisServer::start_many(3))
    }

    pub fn memory() -> Self {
        Fixture::Memory(Arc::new(MemoryBackend::new()))
    }

    /// A new locker with its own connections, as another process would have.
    pub async fn locker(&self) -> Locker {
        match self {
            Fixture::Redis(server) => {
                Locker::new(server.expect_ok(RedisBackend::connect(&server.url()).await, "connect"))
            }
            Fixture::Cluster(cluster) => {
                self.check(Locker::cluster(cluster.seeds()).await, "connect")
            }
            Fixture::Redlock(masters) => {
                let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
                self.check(Locker::redlock(urls).await, "connect")
            }
            Fixture::Memory(memory) => Locker::new(memory.clone()),
        }
    }

    /// The servers that store `wire_key` (none for the memory backend): the
    /// server, every Redlock master, or the cluster master of its slot.
    pub fn servers_for(&self, wire_key: &str) -> Vec<&RedisServer> {
        match self {
            Fixture::Redis(server) => vec![server],
            Fixture::Cluster(cluster) => vec![cluster.node(cluster.master_for(wire_key))],
            Fixture::Redlock(masters) => masters.iter().collect(),
            Fixture::Memory(_) => Vec::new(),
        }
    }

    /// Unwraps `result`, or panics with `what` and the server logs.
    #[track_caller]
    pub fn check<T, E: std::fmt::Debug>(&self, result: Result<T, E>, what: &str) -> T {
        match (self, result) {
            (_, Ok(value)) => value,
            (Fixture::Redis(server), Err(err)) => server.expect_ok(Err(err), what),
            (Fixture::Cluster(cluster), Err(err)) => {
                cluster.fail(format_args!("{what}: unexpected error: {err:?}"))
            }
            (Fixture::Redlock(masters), Err(err)) => {
                let logs: Vec<String> = masters
                    .iter()
                    .map(|master| {
                        format!("--- master on port {} ---\n{}", master.port(), master.log())
                    })
                    .collect();
                panic!("{what}: unexpected error: {err:?}\n{}", logs.join("\n"))
            }
            (Fixture::Memory(_), Err(err)) => panic!("{what}: {err:?}"),
        }
    }
}

/// One test per backend for each body in `$module`, each on a fresh fixture.
macro_rules! on_every_backend {
    ($module:ident: $($case:ident),* $(,)?) => {
        mod on_redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::$module::$case(&crate::fixture::Fixture::redis()).await;
                }
            )*
        }

        mod on_cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::$module::$case(&crate::fixture::Fixture::cluster().await).await;
                }
            )*
        }

        mod on_redlock {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::$module::$case(&crate::fixture::Fixture::redlock()).await;
                }
            )*
        }

        mod on_memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::$module::$case(&crate::fixture::Fixture::memory()).await;
                }
            )*
        }
    };
}

pub(crate) use on_every_backend;
