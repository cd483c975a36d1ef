//! A real PostgreSQL server for the integration tests, from Debian's
//! `postgresql` package: `initdb` into a temporary directory, `postgres` on
//! a free loopback port, `fsync=off`. Each test gets a database of its own
//! ([`PostgresServer::database`]).
//!
//! PostgreSQL refuses to run as root: as root, the kit runs `initdb` and
//! `postgres` as the `postgres` user (which the package creates), owning the
//! temporary directory. The server runs in a process group of its own, so
//! that [`PostgresServer::pause`] freezes every backend process, not only
//! the postmaster. It is killed on drop and dies with the test process.

use std::fmt::Display;
use std::fs::{self, File};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{self, Child, Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::redis::{die_with_parent, free_ports, spawn};

const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(10);
const POLL_INTERVAL: Duration = Duration::from_millis(20);
const START_ATTEMPTS: u32 = 5;

/// One `postgres` server (the postmaster and its backends).
pub struct PostgresServer {
    port: u16,
    /// `None` while stopped.
    process: Mutex<Option<Child>>,
    dir: TempDir,
}

/// The directory of a PostgreSQL program: on `PATH`, or where Debian puts
/// it (`/usr/lib/postgresql/<version>/bin`, not on `PATH`).
pub fn bin(program: &str) -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file());
    if let Some(found) = on_path {
        return found;
    }
    let mut versions: Vec<PathBuf> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin").join(program))
        .filter(|candidate| candidate.is_file())
        .collect();
    versions.sort();
    versions.pop().unwrap_or_else(|| {
        panic!("`{program}` is neither on PATH nor in /usr/lib/postgresql/*/bin: run scripts/install-deps")
    })
}

/// The user and group the servers run as: `postgres` when this process is
/// root, else this process's own.
pub(crate) fn server_user() -> Option<(u32, u32)> {
    // SAFETY: no arguments; cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let passwd = fs::read_to_string("/etc/passwd").expect("cannot read /etc/passwd");
    let fields: Vec<&str> = passwd
        .lines()
        .find(|line| line.starts_with("postgres:"))
        .expect("no `postgres` user to run PostgreSQL as: run scripts/install-deps")
        .split(':')
        .collect();
    Some((
        fields[2].parse().expect("a numeric uid"),
        fields[3].parse().expect("a numeric gid"),
    ))
}

/// `command` as the server user, in a process group of its own, killed
/// with the test process.
pub(crate) fn as_server_user(command: &mut Command) {
    if let Some((uid, gid)) = server_user() {
        command.uid(uid).gid(gid);
    }
    let parent = process::id();
    command.process_group(0);
    // SAFETY: `die_with_parent` makes only async-signal-safe system calls.
    unsafe {
        command.pre_exec(move || die_with_parent(parent));
    }
}

/// Gives `path` to the server user.
pub(crate) fn hand_over(path: &Path) {
    if let Some((uid, gid)) = server_user() {
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .expect("a path without NUL");
        // SAFETY: a valid C string and plain integers.
        let owned = unsafe { libc::chown(c_path.as_ptr(), uid, gid) };
        assert_eq!(owned, 0, "cannot chown {}: {}", path.display(), std::io::Error::last_os_error());
    }
}

impl PostgresServer {
    /// A fresh server, ready for connections.
    #[track_caller]
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lockmacro-postgres-")
            .tempdir()
            .expect("cannot create a temporary directory for PostgreSQL");
        hand_over(dir.path());
        let mut init = Command::new(bin("initdb"));
        init.arg("-D")
            .arg(dir.path().join("data"))
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(dir.path().join("initdb.log")).expect("cannot create the initdb log"));
        as_server_user(&mut init);
        let status = init.status().expect("cannot run initdb");
        let mut attempts = 0;
        let mut server = PostgresServer {
            port: 0,
            process: Mutex::new(None),
            dir,
        };
        if !status.success() {
            server.fail(format_args!("initdb failed: {status}"));
        }
        loop {
            attempts += 1;
            server.port = free_ports(1)[0];
            match server.launch() {
                Ok(()) => return server,
                Err(_) if attempts < START_ATTEMPTS && server.log().contains("could not bind") => {}
                Err(message) => server.fail(message),
            }
        }
    }

    fn launch(&self) -> Result<(), String> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.dir.path().join("postgres.log"))
            .map_err(|e| format!("cannot open the log: {e}"))?;
        let mut command = Command::new(bin("postgres"));
        command
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", self.dir.path().display()))
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=400"])
            .args(["-c", "shared_buffers=32MB"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        as_server_user(&mut command);
        let child = spawn(command).map_err(|e| format!("cannot start postgres: {e}"))?;
        *self.process.lock().unwrap_or_else(|p| p.into_inner()) = Some(child);
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let ready = Command::new(bin("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres", "-q"])
                .status()
                .is_ok_and(|status| status.success());
            if ready {
                return Ok(());
            }
            if let Some(status) = self.exited() {
                return Err(format!("postgres exited at start: {status}"));
            }
            if Instant::now() > deadline {
                return Err(format!("postgres not ready within {STARTUP_TIMEOUT:?}"));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    fn exited(&self) -> Option<process::ExitStatus> {
        let mut process = self.process.lock().unwrap_or_else(|p| p.into_inner());
        process.as_mut()?.try_wait().ok().flatten()
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` as the superuser `postgres`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// A new, empty database; returns its name.
    pub async fn database(&self) -> String {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        let name = format!("t{}", NEXT.fetch_add(1, Ordering::Relaxed));
        self.execute("postgres", &format!("CREATE DATABASE {name}")).await;
        name
    }

    /// Runs `sql` on database `db` as the superuser, behind the library's
    /// back; panics with the log when it fails.
    pub async fn execute(&self, db: &str, sql: &str) {
        use sqlx::Connection;
        let mut connection = match sqlx::PgConnection::connect(&self.url(db)).await {
            Ok(connection) => connection,
            Err(err) => self.fail(format_args!("connect to {db}: {err}")),
        };
        if let Err(err) = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut connection)
            .await
        {
            self.fail(format_args!("`{sql}` on {db}: {err}"));
        }
    }

    /// SIGKILL to every process of the server, as a crash would; returns
    /// once they are gone.
    #[track_caller]
    pub fn kill(&self) {
        let mut process = self.process.lock().unwrap_or_else(|p| p.into_inner());
        let Some(mut child) = process.take() else {
            return;
        };
        self.signal_group(child.id(), libc::SIGKILL);
        let _ = child.wait();
        // Backends may outlive the postmaster for a moment: wait until the
        // group is empty, so that the port and data directory are free.
        let deadline = Instant::now() + SIGNAL_TIMEOUT;
        // SAFETY: signal 0 only checks that the group exists.
        while unsafe { libc::kill(-(child.id() as libc::pid_t), 0) } == 0 {
            if Instant::now() > deadline {
                self.fail("the server's processes did not exit after SIGKILL");
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Starts the server again on the same port, with its data (what was
    /// committed before a [`kill`](Self::kill) is kept: crash recovery
    /// replays it).
    #[track_caller]
    pub fn start_again(&self) {
        if let Err(message) = self.launch() {
            self.fail(message);
        }
    }

    /// Freezes every process of the server with SIGSTOP: connections stay
    /// open, nothing is answered.
    #[track_caller]
    pub fn pause(&self) {
        self.signal_group(self.pid(), libc::SIGSTOP);
    }

    /// Undoes [`pause`](Self::pause).
    #[track_caller]
    pub fn resume(&self) {
        self.signal_group(self.pid(), libc::SIGCONT);
    }

    fn pid(&self) -> u32 {
        let process = self.process.lock().unwrap_or_else(|p| p.into_inner());
        match process.as_ref() {
            Some(child) => child.id(),
            None => self.fail("the server is not running"),
        }
    }

    #[track_caller]
    fn signal_group(&self, pid: u32, signal: libc::c_int) {
        // SAFETY: the group of a child of this process, which is not reaped
        // yet, so its id cannot have been reused.
        if unsafe { libc::kill(-(pid as libc::pid_t), signal) } == -1 {
            self.fail(format_args!(
                "cannot signal the server: {}",
                std::io::Error::last_os_error()
            ));
        }
    }

    /// The server's log.
    pub fn log(&self) -> String {
        let read = |name: &str| fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
        format!("{}{}", read("initdb.log"), read("postgres.log"))
    }

    /// Panics with `message` and the server's log.
    #[track_caller]
    pub fn fail(&self, message: impl Display) -> ! {
        panic!(
            "{message}\n--- log of postgres on port {} ---\n{}",
            self.port,
            self.log().trim_end()
        )
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let process = self.process.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(mut child) = process.take() {
            // SAFETY: as in `signal_group`.
            unsafe {
                libc::kill(-(child.id() as libc::pid_t), libc::SIGCONT);
                libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
            }
            let _ = child.wait();
        }
    }
}
