use std::sync::Arc;

use lockmacro_runtime::{Locker, MemoryBackend, RedisBackend};

use crate::support::RedisServer;

/// A backend under test: hands out independent lockers on it (each with its
/// own connection, for Redis), as separate processes would have.
pub struct Fixture {
    pub server: Option<RedisServer>,
    memory: Option<Arc<MemoryBackend>>,
}

impl Fixture {
    pub async fn redis() -> Self {
        Fixture {
            server: Some(RedisServer::start()),
            memory: None,
        }
    }

    pub fn memory() -> Self {
        Fixture {
            server: None,
            memory: Some(Arc::new(MemoryBackend::new())),
        }
    }

    /// A new locker on the shared backend.
    pub async fn locker(&self) -> Locker {
        match (&self.server, &self.memory) {
            (Some(server), _) => {
                Locker::new(server.expect_ok(RedisBackend::connect(&server.url()).await, "connect"))
            }
            (None, Some(memory)) => Locker::new(memory.clone()),
            (None, None) => unreachable!("a fixture has a backend"),
        }
    }

    /// Panics with `what`, plus the server log when there is a server.
    #[track_caller]
    pub fn check<T, E: std::fmt::Debug>(&self, result: Result<T, E>, what: &str) -> T {
        match &self.server {
            Some(server) => server.expect_ok(result, what),
            None => result.unwrap_or_else(|err| panic!("{what}: {err:?}")),
        }
    }
}
