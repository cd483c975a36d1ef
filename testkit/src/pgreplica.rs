//! A streaming replica of a [`PostgresServer`]: a hot standby made with
//! `pg_basebackup -R`, receiving the primary's WAL asynchronously (unless
//! the primary names it in `synchronous_standby_names`), and promoted to
//! primary by the test.

use std::fs::File;
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use sqlx::{Connection, PgConnection};

use crate::postgres::{PostgresServer, as_server_user, bin, hand_over};

/// The name the replica gives the primary (`application_name`), for
/// `synchronous_standby_names`.
pub const REPLICA_NAME: &str = "replica";

impl PostgresServer {
    /// A hot standby of this server, copied from it with `pg_basebackup`
    /// and streaming its WAL from `upstream`: this server's own address,
    /// or a proxy in front of it, so that a test can cut replication off.
    #[track_caller]
    pub fn start_replica(&self, upstream: SocketAddr) -> PostgresServer {
        let dir = tempfile::Builder::new()
            .prefix("lockmacro-postgres-replica-")
            .tempdir()
            .expect("cannot create a temporary directory for the replica");
        hand_over(dir.path());
        let mut backup = Command::new(bin("pg_basebackup"));
        backup
            .args(["-h", "127.0.0.1", "-p", &self.port().to_string()])
            .args(["-U", "postgres", "-D"])
            .arg(dir.path().join("data"))
            // Writes `standby.signal`: the copy starts as a standby.
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // Under the name the server's log starts with, so that a
            // failure of the replica shows how it was made.
            .stderr(
                File::create(dir.path().join("initdb.log"))
                    .expect("cannot create the pg_basebackup log"),
            );
        as_server_user(&mut backup);
        let status = backup.status().expect("cannot run pg_basebackup");
        if !status.success() {
            let log = std::fs::read_to_string(dir.path().join("initdb.log")).unwrap_or_default();
            self.fail(format_args!(
                "pg_basebackup failed: {status}\n--- its log ---\n{log}"
            ));
        }
        let upstream = format!(
            "primary_conninfo=host={} port={} user=postgres application_name={REPLICA_NAME}",
            upstream.ip(),
            upstream.port()
        );
        PostgresServer::on_data(dir, vec![upstream, "hot_standby=on".to_owned()])
    }

    /// Promotes this standby to primary (`pg_promote`), waiting until it
    /// takes writes.
    pub async fn promote(&self) {
        let mut connection = match PgConnection::connect(&self.url("postgres")).await {
            Ok(connection) => connection,
            Err(err) => self.fail(format_args!("connect to promote: {err}")),
        };
        match sqlx::query_scalar::<_, bool>("SELECT pg_promote(true, 60)")
            .fetch_one(&mut connection)
            .await
        {
            Ok(true) => {}
            Ok(false) => self.fail("not promoted within 60 s"),
            Err(err) => self.fail(format_args!("pg_promote: {err}")),
        }
    }

    /// The WAL position this server has written up to, as a primary.
    pub async fn written_lsn(&self) -> String {
        self.text("SELECT pg_current_wal_lsn()::text").await
    }

    /// Whether this standby has received, and whether it has replayed, the
    /// WAL up to `lsn` (a primary's [`written_lsn`](Self::written_lsn)).
    pub async fn has_wal_up_to(&self, lsn: &str) -> (bool, bool) {
        let sql = format!(
            "SELECT coalesce(pg_last_wal_receive_lsn() >= '{lsn}'::pg_lsn, false)::text \
             || ',' || coalesce(pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn, false)::text"
        );
        let answer = self.text(&sql).await;
        let (received, replayed) = answer.split_once(',').unwrap_or_default();
        (received == "true", replayed == "true")
    }

    async fn text(&self, sql: &str) -> String {
        let mut connection = match PgConnection::connect(&self.url("postgres")).await {
            Ok(connection) => connection,
            Err(err) => self.fail(format_args!("connect: {err}")),
        };
        match sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_one(&mut connection)
            .await
        {
            Ok(text) => text,
            Err(err) => self.fail(format_args!("`{sql}`: {err}")),
        }
    }
}
