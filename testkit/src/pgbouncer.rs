//! PgBouncer from Debian's package (`/usr/sbin/pgbouncer`) in front of a
//! [`PostgresServer`](crate::postgres::PostgresServer), in transaction
//! pooling: each transaction may run on another server connection, and
//! nothing of a session (prepared statements, `LISTEN`) survives between
//! them.

use std::fs::{self, File};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::postgres::{PASSWORD, as_server_user, hand_over};
use super::redis::{free_ports, spawn};

const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// One `pgbouncer` process.
pub struct PgBouncer {
    port: u16,
    process: Mutex<Option<Child>>,
    dir: TempDir,
}

impl PgBouncer {
    /// PgBouncer on a free port, pooling the server on `server_port` in
    /// transaction mode with at most `server_connections` connections to
    /// it per database, so that a client's statements move between them.
    /// Nothing else is set: no `ignore_startup_parameters`, as PgBouncer
    /// comes.
    #[track_caller]
    pub fn start(server_port: u16, server_connections: u32) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lockmacro-pgbouncer-")
            .tempdir()
            .expect("cannot create a temporary directory for pgbouncer");
        hand_over(dir.path());
        let port = free_ports(1)[0];
        let config = format!(
            "[databases]\n\
             * = host=127.0.0.1 port={server_port} user=postgres password={PASSWORD}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = any\n\
             pool_mode = transaction\n\
             default_pool_size = {server_connections}\n\
             max_client_conn = 500\n\
             logfile = {log}\n",
            log = dir.path().join("pgbouncer.log").display(),
        );
        let ini = dir.path().join("pgbouncer.ini");
        fs::write(&ini, config).expect("cannot write pgbouncer.ini");
        let mut command = Command::new("/usr/sbin/pgbouncer");
        command
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(dir.path().join("stderr.log")).expect("cannot create a log"));
        as_server_user(&mut command);
        let child =
            spawn(command).expect("cannot start /usr/sbin/pgbouncer: run scripts/install-deps");
        let bouncer = PgBouncer {
            port,
            process: Mutex::new(Some(child)),
            dir,
        };
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                panic!(
                    "pgbouncer did not listen within {STARTUP_TIMEOUT:?}\n{}",
                    bouncer.log()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
        bouncer
    }

    /// [`start`](Self::start) in front of `db`'s server, from async code.
    pub async fn before(db: &crate::pgdb::PostgresDb, server_connections: u32) -> Self {
        let port = db.server().port();
        tokio::task::spawn_blocking(move || PgBouncer::start(port, server_connections))
            .await
            .expect("pgbouncer did not start")
    }

    /// The URL of database `db` through PgBouncer.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// PgBouncer's log.
    pub fn log(&self) -> String {
        let read = |name: &str| fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        format!("{}{}", read("stderr.log"), read("pgbouncer.log"))
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let process = self.process.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(mut child) = process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
