//! A real PostgreSQL server for the integration tests, from Debian's
//! `postgresql` package: `initdb` into a temporary directory, `postgres` on
//! a free loopback port, `fsync=off`. Each test gets a database of its own
//! ([`PostgresServer::database`]).
//!
//! PostgreSQL refuses to run as root: as root, the kit runs `initdb` and
//! `postgres` as the `postgres` user (which the package creates), owning the
//! temporary directory. Each backend process calls `setsid()`, so signals go
//! to the postmaster and to each of its children by pid: that is how
//! [`PostgresServer::pause`] freezes every one of them. The server is killed
//! on drop and dies with the test process.

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

/// The password of the superuser `postgres`.
pub const PASSWORD: &str = "postgres";

/// One `postgres` server (the postmaster and its backends).
pub struct PostgresServer {
    port: u16,
    /// `None` while stopped.
    process: Mutex<Option<Child>>,
    dir: TempDir,
    /// `-c name=value` settings beyond the kit's own (a replica's upstream).
    settings: Vec<String>,
}

/// Whether the PostgreSQL programs the kit runs are installed, for callers
/// that skip what needs them rather than fail (the benchmark).
pub fn available() -> bool {
    std::panic::catch_unwind(|| (bin("initdb"), bin("postgres"), bin("pg_isready"))).is_ok()
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

/// `command` as the server user, killed with the test process.
pub(crate) fn as_server_user(command: &mut Command) {
    if let Some((uid, gid)) = server_user() {
        command.uid(uid).gid(gid);
    }
    let parent = process::id();
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
        assert_eq!(
            owned,
            0,
            "cannot chown {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
}

impl PostgresServer {
    /// A fresh server, ready for connections.
    #[track_caller]
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A fresh server with `settings` (`name=value`) over the kit's own:
    /// `["fsync=on", "full_page_writes=on"]` for one whose commits are
    /// durable, as on a default server.
    #[track_caller]
    pub fn start_with(settings: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lockmacro-postgres-")
            .tempdir()
            .expect("cannot create a temporary directory for PostgreSQL");
        hand_over(dir.path());
        let password = dir.path().join("password");
        fs::write(&password, PASSWORD).expect("cannot write the password file");
        hand_over(&password);
        let mut init = Command::new(bin("initdb"));
        init.arg("-D")
            .arg(dir.path().join("data"))
            .args([
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ])
            .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
            .arg(format!("--pwfile={}", password.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                File::create(dir.path().join("initdb.log")).expect("cannot create the initdb log"),
            );
        as_server_user(&mut init);
        let status = init.status().expect("cannot run initdb");
        let server = PostgresServer {
            port: 0,
            process: Mutex::new(None),
            dir,
            settings: settings
                .iter()
                .map(|setting| (*setting).to_owned())
                .collect(),
        };
        if !status.success() {
            server.fail(format_args!("initdb failed: {status}"));
        }
        // The superuser is trusted over TCP, for replication too: a
        // password exchange (SCRAM's key stretching, slow in a debug build)
        // would take a good part of a short ttl each time a pool opens a
        // connection. Other users give their password, so that wrong
        // credentials are refused.
        let hba = server.data_dir().join("pg_hba.conf");
        let rules = fs::read_to_string(&hba).expect("cannot read pg_hba.conf");
        fs::write(
            &hba,
            format!(
                "host all postgres 127.0.0.1/32 trust\n\
                 host replication postgres 127.0.0.1/32 trust\n{rules}"
            ),
        )
        .expect("cannot write pg_hba.conf");
        server.launch_on_a_free_port()
    }

    /// A server on the data directory `dir/data` with `settings`, started
    /// on a free port.
    #[track_caller]
    pub(crate) fn on_data(dir: TempDir, settings: Vec<String>) -> Self {
        PostgresServer {
            port: 0,
            process: Mutex::new(None),
            dir,
            settings,
        }
        .launch_on_a_free_port()
    }

    #[track_caller]
    fn launch_on_a_free_port(mut self) -> Self {
        let mut attempts = 0;
        loop {
            attempts += 1;
            self.port = free_ports(1)[0];
            match self.launch() {
                Ok(()) => return self,
                Err(_) if attempts < START_ATTEMPTS && self.log().contains("could not bind") => {}
                Err(message) => self.fail(message),
            }
        }
    }

    /// The data directory.
    pub(crate) fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
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
            .arg(self.data_dir())
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                self.dir.path().display()
            ))
            // No fsync: a crash of the server's processes (a test's kill)
            // keeps what the kernel was given; only a crash of the machine
            // would not. Commits still wait for their WAL to reach the
            // kernel, so a restart keeps every commit a client saw.
            .args(["-c", "fsync=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=400"])
            .args(["-c", "shared_buffers=32MB"])
            .args(self.settings.iter().flat_map(|setting| ["-c", setting]))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        as_server_user(&mut command);
        let child = spawn(command).map_err(|e| format!("cannot start postgres: {e}"))?;
        *self.process.lock().unwrap_or_else(|p| p.into_inner()) = Some(child);
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let ready = Command::new(bin("pg_isready"))
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &self.port.to_string(),
                    "-U",
                    "postgres",
                    "-q",
                ])
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
        format!(
            "postgres://postgres:{PASSWORD}@127.0.0.1:{}/{db}",
            self.port
        )
    }

    /// A new, empty database; returns its name.
    pub async fn database(&self) -> String {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        let name = format!("t{}", NEXT.fetch_add(1, Ordering::Relaxed));
        self.execute("postgres", &format!("CREATE DATABASE {name}"))
            .await;
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
        let backends = children(child.id());
        signal_all(child.id(), &backends, libc::SIGKILL);
        let _ = child.wait();
        // Backends may outlive the postmaster for a moment: wait until they
        // are gone, so that the port and data directory are free.
        let deadline = Instant::now() + SIGNAL_TIMEOUT;
        while backends
            .iter()
            .any(|pid| Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(*pid))
        {
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
        let postmaster = self.pid();
        // The postmaster first: it starts no backend once stopped. A signal
        // takes effect when the process next runs in user space, so it may
        // still fork one meanwhile, on the other CPU: wait until it is
        // stopped, then stop its children until none is left running.
        signal_all(postmaster, &[], libc::SIGSTOP);
        self.until_stopped(postmaster);
        let mut stopped = Vec::new();
        loop {
            let running: Vec<u32> = children(postmaster)
                .into_iter()
                .filter(|pid| !stopped.contains(pid))
                .collect();
            if running.is_empty() {
                break;
            }
            for &pid in &running {
                // SAFETY: a plain system call, to a child of the postmaster
                // just read from `/proc`.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGSTOP);
                }
                self.until_stopped(pid);
            }
            stopped.extend(running);
        }
    }

    /// Waits until `pid` is stopped (or gone).
    #[track_caller]
    fn until_stopped(&self, pid: u32) {
        let deadline = Instant::now() + SIGNAL_TIMEOUT;
        while stat_field(pid, 0).is_some_and(|state| state != "T" && state != "t" && state != "Z") {
            if Instant::now() > deadline {
                self.fail(format_args!("process {pid} did not stop after SIGSTOP"));
            }
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// Undoes [`pause`](Self::pause).
    #[track_caller]
    pub fn resume(&self) {
        let postmaster = self.pid();
        signal_all(postmaster, &children(postmaster), libc::SIGCONT);
    }

    /// The postmaster and every process it started (a backend per
    /// connection, the WAL writer, the checkpointer, ...): where the
    /// server's CPU time is spent, and what the benchmark pins.
    pub fn pids(&self) -> Vec<u32> {
        let postmaster = self.pid();
        let mut pids = vec![postmaster];
        pids.extend(children(postmaster));
        pids
    }

    fn pid(&self) -> u32 {
        let process = self.process.lock().unwrap_or_else(|p| p.into_inner());
        match process.as_ref() {
            Some(child) => child.id(),
            None => self.fail("the server is not running"),
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
            let backends = children(child.id());
            signal_all(child.id(), &backends, libc::SIGCONT);
            signal_all(child.id(), &backends, libc::SIGKILL);
            let _ = child.wait();
        }
    }
}

/// The processes whose parent is `parent`, from `/proc`.
fn children(parent: u32) -> Vec<u32> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| stat_field(*pid, 1).and_then(|ppid| ppid.parse().ok()) == Some(parent))
        .collect()
}

/// Field `index` after the command name of `/proc/<pid>/stat` (0: the
/// state, 1: the parent's pid).
fn stat_field(pid: u32, index: usize) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split(' ').nth(index).map(str::to_owned)
}

fn is_zombie(pid: u32) -> bool {
    stat_field(pid, 0).is_none_or(|state| state == "Z" || state == "X")
}

/// `signal` to the postmaster `postmaster` and to `backends`. A backend
/// that exited meanwhile is no error.
fn signal_all(postmaster: u32, backends: &[u32], signal: libc::c_int) {
    for pid in std::iter::once(postmaster).chain(backends.iter().copied()) {
        // SAFETY: a plain system call. The postmaster is an unreaped child
        // of this process; a backend's pid could only be reused after it
        // exited, within the moment since `/proc` was read.
        unsafe {
            libc::kill(pid as libc::pid_t, signal);
        }
    }
}
