//! A test's own database on a [`PostgresServer`]: lockers on it, and a look
//! at its tables behind the library's back.

use std::sync::Arc;
use std::time::Duration;

use lockmacro_runtime::{Locker, POSTGRES_MIGRATION, PostgresBackend};
use sqlx::{AssertSqlSafe, Connection, PgConnection};

use crate::postgres::PostgresServer;

/// A database of its own on a (maybe shared) server, with lockmacro's
/// schema already in place.
pub struct PostgresDb {
    server: Arc<PostgresServer>,
    name: String,
}

impl PostgresDb {
    /// A new database on `server`, with the migration run.
    pub async fn create(server: Arc<PostgresServer>) -> Self {
        let name = server.database().await;
        server.execute(&name, POSTGRES_MIGRATION).await;
        PostgresDb { server, name }
    }

    /// The database `name` on `server`, as it is (no migration run).
    pub fn existing(server: Arc<PostgresServer>, name: &str) -> Self {
        PostgresDb {
            server,
            name: name.to_owned(),
        }
    }

    /// The server.
    pub fn server(&self) -> &PostgresServer {
        &self.server
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The database's URL, as the superuser.
    pub fn url(&self) -> String {
        self.server.url(&self.name)
    }

    /// A new locker with a pool of its own, as another process would have.
    pub async fn locker(&self) -> Locker {
        match PostgresBackend::connect(&self.url()).await {
            Ok(backend) => Locker::new(backend),
            Err(err) => self.server.fail(format_args!("connect: {err:?}")),
        }
    }

    async fn connection(&self) -> PgConnection {
        match PgConnection::connect(&self.url()).await {
            Ok(connection) => connection,
            Err(err) => self
                .server
                .fail(format_args!("connect to {}: {err}", self.name)),
        }
    }

    /// The rows of `sql`, which selects one column of text (`NULL` as
    /// `None`).
    pub async fn column(&self, sql: &str) -> Vec<Option<String>> {
        let mut connection = self.connection().await;
        match sqlx::query_scalar::<_, Option<String>>(AssertSqlSafe(sql.to_owned()))
            .fetch_all(&mut connection)
            .await
        {
            Ok(rows) => rows,
            Err(err) => self.server.fail(format_args!("`{sql}`: {err}")),
        }
    }

    /// Runs `sql` behind the library's back.
    pub async fn execute(&self, sql: &str) {
        self.server.execute(&self.name, sql).await;
    }

    /// Whether a live lease holds `key`: its lock, or a share of it.
    pub async fn is_held(&self, key: &str) -> bool {
        let shares = format!(
            "SELECT key FROM lockmacro_shares WHERE key = {} AND expires_at > clock_timestamp()",
            quote(key)
        );
        self.live(key, "key").await.is_some() || !self.column(&shares).await.is_empty()
    }

    /// What is left of the lease on `key`, on the server's clock.
    pub async fn lease_left(&self, key: &str) -> Option<Duration> {
        let millis = self
            .live(key, "lockmacro_ms(expires_at - clock_timestamp())")
            .await?;
        millis.parse().ok().map(Duration::from_millis)
    }

    /// The value of a live lease on `key`.
    pub async fn value(&self, key: &str) -> Option<String> {
        self.live(key, "value").await
    }

    async fn live(&self, key: &str, what: &str) -> Option<String> {
        let sql = format!(
            "SELECT ({what})::text FROM lockmacro_locks WHERE key = {} \
             AND expires_at > clock_timestamp()",
            quote(key)
        );
        self.column(&sql).await.into_iter().next().flatten()
    }

    /// Writes `value` under `key` for 30 s, as another owner would.
    pub async fn overwrite(&self, key: &str, value: &str) {
        self.execute(&format!(
            "INSERT INTO lockmacro_locks (key, token, value, expires_at) \
             VALUES ({k}, left({v}, 32), {v}, clock_timestamp() + interval '30 seconds') \
             ON CONFLICT (key) DO UPDATE SET token = excluded.token, value = excluded.value, \
             expires_at = excluded.expires_at",
            k = quote(key),
            v = quote(value),
        ))
        .await;
    }

    /// Sets the fence counter of `key` to `value`, and moves the sequence
    /// every key's tokens come from up to `value` if it is below: the next
    /// token is above `value`.
    pub async fn set_fence_counter(&self, key: &str, value: u64) {
        self.execute(&format!(
            "INSERT INTO lockmacro_fences (key, value) VALUES ({k}, {value}) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value; \
             SELECT setval('lockmacro_fence_seq', {value}) FROM lockmacro_fence_seq \
             WHERE last_value < {value}",
            k = quote(key),
        ))
        .await;
    }

    /// Ends the sessions of every other client of the database
    /// (`pg_terminate_backend`), as an administrator or a failing network
    /// would; returns how many.
    pub async fn terminate_sessions(&self) -> usize {
        let sql = format!(
            "SELECT pg_terminate_backend(pid)::text FROM pg_stat_activity \
             WHERE datname = {} AND pid <> pg_backend_pid()",
            quote(&self.name)
        );
        self.column(&sql).await.len()
    }
}

/// `value` as a string literal.
pub fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}
