//! Real `redis-server` processes for the integration tests, after redis-rs's `redis-test`,
//! and `valkey-server` ones, started the same way ([`Program`]).
//!
//! Each [`RedisServer`] owns one process on its own port, with its data directory and
//! log in a temporary directory. Every panic the harness raises carries the server's
//! log, and so do [`RedisServer::expect_ok`] and friends in test code.

use std::fmt::{Debug, Display};
use std::fs::{self, File};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{self, Child, Command, Stdio};
use std::sync::LazyLock;
use std::sync::mpsc::{self, Sender};
use std::thread;
use std::time::{Duration, Instant};

use lockmacro_runtime::Locker;
use redis::{Client, ClientTlsConfig, Connection, FromRedisValue, TlsCertificates};
use tempfile::TempDir;

use super::program::Program;
use super::tls::TestCa;

const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(5);
/// Read, write and connect timeout of the raw connections, so that a test talking to a
/// paused or wedged server fails instead of hanging.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// A port found free can be taken by someone else before `redis-server` binds it.
const PORT_ATTEMPTS: u32 = 5;
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Short, so that startup notices soon when our server exited and the port belongs to
/// someone who accepts connections but does not answer.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// A `redis-server` (or a `valkey-server`, see [`RedisServer::start_as`]) on
/// `127.0.0.1`, killed and reaped on drop.
///
/// Started with `--save '' --appendonly no`, so a restart loses all data.
pub struct RedisServer {
    program: Program,
    /// `None` after [`RedisServer::stop`].
    process: Option<Child>,
    port: u16,
    /// With `--cluster-enabled`, the cluster bus gets a port of its own: the default,
    /// `port + 10000`, does not exist for a port above 55535.
    bus_port: Option<u16>,
    args: Vec<String>,
    password: Option<String>,
    dir: TempDir,
    /// Set by [`RedisServer::start_tls`]: the server listens with TLS only.
    /// Boxed, as most servers have none and fixtures hold servers in enums.
    tls: Option<Box<Tls>>,
    /// Set by [`RedisServer::start_sentinel`]: the configuration file a
    /// sentinel starts from (and rewrites).
    sentinel_config: Option<PathBuf>,
}

/// What a TLS-only server was started with.
struct Tls {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    ca_pem: Vec<u8>,
    /// What the harness presents to a server started with
    /// `--tls-auth-clients yes`.
    client_cert_pem: Vec<u8>,
    client_key_pem: Vec<u8>,
}

impl Tls {
    fn of(ca: &TestCa) -> Self {
        Tls {
            cert: ca.server_cert(),
            key: ca.server_key(),
            ca: ca.ca_cert(),
            ca_pem: ca.ca_pem(),
            client_cert_pem: ca.client_cert_pem(),
            client_key_pem: ca.client_key_pem(),
        }
    }
}

enum StartError {
    PortTaken,
    Failed(String),
}

impl RedisServer {
    /// Starts a server with the default configuration.
    #[track_caller]
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra command-line arguments, one token each:
    /// `&["--requirepass", "secret"]`. They come after the defaults, so they can
    /// override them.
    #[track_caller]
    pub fn start_with(args: &[&str]) -> Self {
        Self::start_configured(args, None)
    }

    /// Starts a `valkey-server` with the default configuration: found as
    /// [`Program::Valkey`] says, and panics naming `scripts/install-deps`
    /// when it is nowhere.
    #[track_caller]
    pub fn valkey() -> Self {
        Self::start_as(Program::Valkey, &[])
    }

    /// Starts a server of `program` with extra arguments, as
    /// [`RedisServer::start_with`] does.
    #[track_caller]
    pub fn start_as(program: Program, args: &[&str]) -> Self {
        Self::start_in(program, args, None, None)
    }

    /// Starts a server that accepts TLS only (`--port 0 --tls-port PORT`), with the
    /// server certificate of `ca`, and extra arguments (`--tls-auth-clients yes`
    /// makes it check clients). [`RedisServer::port`] is the TLS port,
    /// [`RedisServer::url`] a `rediss://` URL, and [`RedisServer::client`] trusts
    /// `ca` and presents its client certificate.
    #[track_caller]
    pub fn start_tls(ca: &TestCa, args: &[&str]) -> Self {
        Self::start_configured(args, Some(Box::new(Tls::of(ca))))
    }

    /// A sentinel, as [`RedisServer::start_sentinel`], that accepts TLS
    /// only, as [`RedisServer::start_tls`].
    #[track_caller]
    pub fn start_sentinel_tls(ca: &TestCa, config: &str, args: &[&str]) -> Self {
        Self::start_in(
            Program::Redis,
            args,
            Some(Box::new(Tls::of(ca))),
            Some(config),
        )
    }

    /// Starts a Redis Sentinel (`redis-server <file> --sentinel`) whose
    /// configuration file holds `config` (`sentinel monitor …` lines); a
    /// sentinel rewrites that file as it learns, so it gets its own.
    ///
    /// `args` as for [`RedisServer::start_with`]: `--requirepass` makes the
    /// sentinel ask for a password, which [`RedisServer::client`] gives.
    #[track_caller]
    pub fn start_sentinel(config: &str, args: &[&str]) -> Self {
        Self::start_in(Program::Redis, args, None, Some(config))
    }

    #[track_caller]
    fn start_configured(args: &[&str], tls: Option<Box<Tls>>) -> Self {
        Self::start_in(Program::Redis, args, tls, None)
    }

    #[track_caller]
    fn start_in(
        program: Program,
        args: &[&str],
        tls: Option<Box<Tls>>,
        sentinel: Option<&str>,
    ) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lockmacro-redis-")
            .tempdir()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot create a temporary directory for {}: {error}",
                    program.name()
                )
            });
        let sentinel_config = sentinel.map(|config| {
            let path = dir.path().join("sentinel.conf");
            fs::write(&path, config).expect("cannot write the sentinel's configuration");
            path
        });
        let args: Vec<String> = args.iter().map(|&arg| arg.to_owned()).collect();
        let cluster = has_flag(&args, "--cluster-enabled") && !has_flag(&args, "--cluster-port");
        let mut server = RedisServer {
            program,
            process: None,
            port: 0,
            bus_port: None,
            password: flag_value(&args, "--requirepass"),
            args,
            dir,
            tls,
            sentinel_config,
        };
        let mut attempts = 0;
        loop {
            attempts += 1;
            let ports = free_ports(if cluster { 2 } else { 1 });
            server.port = ports[0];
            server.bus_port = ports.get(1).copied();
            match server.launch() {
                Ok(()) => return server,
                Err(StartError::PortTaken) if attempts < PORT_ATTEMPTS => {}
                Err(StartError::PortTaken) => {
                    server.fail(format_args!("no free port after {PORT_ATTEMPTS} attempts"))
                }
                Err(StartError::Failed(message)) => server.fail(message),
            }
        }
    }

    /// Starts `n` independent servers with the default configuration.
    #[track_caller]
    pub fn start_many(n: usize) -> Vec<Self> {
        Self::start_many_with(n, &[])
    }

    /// Starts `n` independent servers with the same extra arguments.
    #[track_caller]
    pub fn start_many_with(n: usize, args: &[&str]) -> Vec<Self> {
        // A loop rather than `map`: `#[track_caller]` does not reach into closures.
        let mut servers = Vec::with_capacity(n);
        for _ in 0..n {
            servers.push(Self::start_with(args));
        }
        servers
    }

    /// `redis://127.0.0.1:PORT/` (`rediss://` for a TLS server), without the
    /// `--requirepass` password.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Which program this server runs.
    pub fn program(&self) -> Program {
        self.program
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The process id; panics when the server is stopped.
    #[track_caller]
    pub fn pid(&self) -> u32 {
        match &self.process {
            Some(process) => process.id(),
            None => self.fail("the server is stopped"),
        }
    }

    /// Everything the server wrote to its log and to stdout and stderr, over all its
    /// runs.
    pub fn log(&self) -> String {
        self.log_since(0)
    }

    /// Whether the process exists (a paused server is running). Reaps a server that
    /// died on its own.
    pub fn is_running(&mut self) -> bool {
        self.process
            .as_mut()
            .is_some_and(|process| matches!(process.try_wait(), Ok(None)))
    }

    /// Kills the server with SIGKILL and reaps it; a paused server too.
    #[track_caller]
    pub fn stop(&mut self) {
        if let Some(mut process) = self.process.take()
            && let Err(error) = process.kill().and_then(|()| process.wait())
        {
            self.fail(format_args!("cannot kill {}: {error}", self.program.name()));
        }
    }

    /// Freezes the server with SIGSTOP: connections stay open, nothing is answered.
    #[track_caller]
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
        self.wait_for_state(|state| state == 'T', "stop");
    }

    /// Undoes [`RedisServer::pause`] with SIGCONT.
    #[track_caller]
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
        self.wait_for_state(|state| state != 'T', "continue");
    }

    /// Stops the server and starts it again on the same port with the same arguments.
    /// The data is gone; the log keeps growing.
    #[track_caller]
    pub fn restart(&mut self) {
        self.stop();
        match self.launch() {
            Ok(()) => {}
            Err(StartError::PortTaken) => self.fail(format_args!(
                "cannot restart: port {} was taken while the server was down",
                self.port,
            )),
            Err(StartError::Failed(message)) => self.fail(message),
        }
    }

    /// A new locker on the server (`Locker::connect` of [`RedisServer::url`]),
    /// with connections of its own, as another process would have; panics
    /// with the server's log when it cannot connect.
    pub async fn locker(&self) -> Locker {
        self.expect_ok(Locker::connect(&self.url()).await, "connect")
    }

    /// A new Redlock locker on `masters` (`Locker::redlock` of their URLs);
    /// panics with every master's log when it cannot connect.
    pub async fn redlock_locker(masters: &[RedisServer]) -> Locker {
        let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
        match Locker::redlock(urls).await {
            Ok(locker) => locker,
            Err(error) => RedisServer::fail_all(masters, format_args!("connect: {error:?}")),
        }
    }

    /// Panics with `message` followed by the log of every one of `servers`.
    #[track_caller]
    pub fn fail_all(servers: &[RedisServer], message: impl Display) -> ! {
        let logs: Vec<String> = servers
            .iter()
            .map(|server| {
                format!(
                    "--- log of {} on port {} ---\n{}",
                    server.program.name(),
                    server.port(),
                    server.log().trim_end()
                )
            })
            .collect();
        panic!("{message}\n\n{}\n--- end of logs ---", logs.join("\n"))
    }

    /// A connection for a witness's own reads and writes: its hang limits
    /// are 30 s, not the client's default 500 ms response timeout, which a
    /// stall of the test process on a loaded machine can outlast (the
    /// witness's server is never the one frozen).
    pub async fn witness_connection(&self) -> redis::aio::MultiplexedConnection {
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(Some(Duration::from_secs(30)))
            .set_connection_timeout(Some(Duration::from_secs(30)));
        match self
            .client()
            .get_multiplexed_async_connection_with_config(&config)
            .await
        {
            Ok(conn) => conn,
            Err(err) => self.fail(format_args!("the witness's connection: {err}")),
        }
    }

    /// A client for the server, authenticated when it was started with `--requirepass`,
    /// trusting the test CA of a TLS server.
    pub fn client(&self) -> Client {
        let url = match &self.password {
            Some(password) => self.url().replacen("://", &format!("://:{password}@"), 1),
            None => self.url(),
        };
        match &self.tls {
            None => Client::open(url).expect("the server's URL is valid"),
            Some(tls) => {
                let certificates = TlsCertificates {
                    client_tls: Some(ClientTlsConfig {
                        client_cert: tls.client_cert_pem.clone(),
                        client_key: tls.client_key_pem.clone(),
                    }),
                    root_cert: Some(tls.ca_pem.clone()),
                };
                Client::build_with_tls(url, certificates).expect("the test CA is valid PEM")
            }
        }
    }

    /// A new synchronous connection from [`RedisServer::client`], with 5 s timeouts.
    #[track_caller]
    pub fn connection(&self) -> Connection {
        let connection = self.expect_ok(
            self.client().get_connection_with_timeout(IO_TIMEOUT),
            "connecting",
        );
        self.expect_ok(
            connection
                .set_read_timeout(Some(IO_TIMEOUT))
                .and_then(|()| connection.set_write_timeout(Some(IO_TIMEOUT))),
            "setting timeouts",
        );
        connection
    }

    /// Runs one command on a new connection, bypassing the library under test:
    /// `let ttl: i64 = server.cmd(&["PTTL", "key"]);`. Panics on an error reply.
    #[track_caller]
    pub fn cmd<T: FromRedisValue>(&self, args: &[&str]) -> T {
        let Some((name, rest)) = args.split_first() else {
            self.fail("`cmd` needs at least a command name");
        };
        let mut connection = self.connection();
        self.expect_ok(
            redis::cmd(name).arg(rest).query(&mut connection),
            &args.join(" "),
        )
    }

    /// Unwraps `result`, or panics with `what`, the error and the server's log.
    #[track_caller]
    pub fn expect_ok<T, E: Debug>(&self, result: Result<T, E>, what: &str) -> T {
        match result {
            Ok(value) => value,
            Err(error) => self.fail(format_args!("{what}: unexpected error: {error:?}")),
        }
    }

    /// Unwraps the error of `result`, or panics with `what` and the server's log.
    #[track_caller]
    pub fn expect_err<T, E>(&self, result: Result<T, E>, what: &str) -> E {
        match result {
            Ok(_) => self.fail(format_args!("{what}: expected an error, but it succeeded")),
            Err(error) => error,
        }
    }

    /// Panics with `message` followed by the server's log.
    #[track_caller]
    pub fn fail(&self, message: impl Display) -> ! {
        let log = self.log();
        let log = match log.trim_end() {
            "" => "(empty)",
            log => log,
        };
        panic!(
            "{message}\n\n--- log of {} on port {} ---\n{log}\n--- end of log ---",
            self.program.name(),
            self.port,
        )
    }

    fn log_since(&self, offset: usize) -> String {
        match fs::read(self.log_path()) {
            Ok(bytes) => {
                String::from_utf8_lossy(bytes.get(offset..).unwrap_or_default()).into_owned()
            }
            Err(error) => format!("(cannot read {}: {error})", self.log_path().display()),
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// Spawns the process and waits until it answers, on `self.port`.
    fn launch(&mut self) -> Result<(), StartError> {
        let log_start = fs::metadata(self.log_path()).map_or(0, |meta| meta.len() as usize);
        let command = self.command().map_err(|error| {
            StartError::Failed(format!(
                "cannot open {}: {error}",
                self.log_path().display()
            ))
        })?;
        let process =
            spawn(command).map_err(|error| StartError::Failed(self.program.spawn_error(&error)))?;
        let pid = process.id();
        self.process = Some(process);

        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let process = self.process.as_mut().expect("just spawned");
            if let Ok(Some(status)) = process.try_wait() {
                self.process = None;
                return Err(
                    if self.log_since(log_start).contains("Address already in use") {
                        StartError::PortTaken
                    } else {
                        StartError::Failed(format!(
                            "{} exited during startup: {status}",
                            self.program.name()
                        ))
                    },
                );
            }
            match self.server_pid() {
                Ok(answering) if answering == pid => return Ok(()),
                // Another server owns the port; ours is about to exit.
                Ok(_) => {
                    self.stop();
                    return Err(StartError::PortTaken);
                }
                Err(error) if Instant::now() > deadline => {
                    return Err(StartError::Failed(format!(
                        "{} did not answer within {STARTUP_TIMEOUT:?}: {error}",
                        self.program.name()
                    )));
                }
                Err(_) => thread::sleep(POLL_INTERVAL),
            }
        }
    }

    fn command(&self) -> io::Result<Command> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let mut command = Command::new(self.program.binary());
        if let Some(config) = &self.sentinel_config {
            // The configuration file must come first.
            command.arg(config).arg("--sentinel");
        }
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--logfile")
            .arg(self.log_path())
            .arg("--dir")
            .arg(self.dir.path());
        if let Some(bus_port) = self.bus_port {
            command.arg("--cluster-port").arg(bus_port.to_string());
        }
        if let Some(tls) = &self.tls {
            // The plain port is closed: only TLS clients get in.
            command
                .args(["--port", "0", "--tls-port"])
                .arg(self.port.to_string())
                .arg("--tls-cert-file")
                .arg(&tls.cert)
                .arg("--tls-key-file")
                .arg(&tls.key)
                .arg("--tls-ca-cert-file")
                .arg(&tls.ca)
                .args(["--tls-auth-clients", "no"]);
        }
        // Configuration errors are printed before the log file is opened.
        command
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let parent = process::id();
        // SAFETY: `die_with_parent` only makes async-signal-safe system calls and does
        // not allocate.
        unsafe { command.pre_exec(move || die_with_parent(parent)) };
        Ok(command)
    }

    /// The pid the server on our port reports, which tells our server from a stranger
    /// that took the port first.
    fn server_pid(&self) -> redis::RedisResult<u32> {
        let mut connection = self.client().get_connection_with_timeout(PROBE_TIMEOUT)?;
        connection.set_read_timeout(Some(PROBE_TIMEOUT))?;
        let info: String = redis::cmd("INFO").arg("server").query(&mut connection)?;
        Ok(info
            .lines()
            .find_map(|line| line.strip_prefix("process_id:")?.trim().parse().ok())
            .unwrap_or(0))
    }

    #[track_caller]
    fn signal(&self, signal: libc::c_int) {
        let pid = self.pid() as libc::pid_t;
        // SAFETY: `pid` is our unreaped child, so it cannot have been reused.
        if unsafe { libc::kill(pid, signal) } == -1 {
            let error = io::Error::last_os_error();
            self.fail(format_args!(
                "cannot signal {}: {error}",
                self.program.name()
            ));
        }
    }

    /// Signals are delivered asynchronously; waiting for the state makes `pause` and
    /// `resume` take effect before they return.
    #[track_caller]
    fn wait_for_state(&self, done: impl Fn(char) -> bool, what: &str) {
        let stat_path = format!("/proc/{}/stat", self.pid());
        let deadline = Instant::now() + SIGNAL_TIMEOUT;
        loop {
            let stat = fs::read_to_string(&stat_path).unwrap_or_default();
            // The state follows the command name, which is in parentheses.
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            if state.is_some_and(&done) {
                return;
            }
            if Instant::now() > deadline {
                self.fail(format_args!(
                    "{} did not {what} within {SIGNAL_TIMEOUT:?} (state {state:?})",
                    self.program.name()
                ));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL also ends a paused process. Errors are ignored: panicking in drop
        // would abort a test that is already unwinding.
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }
}

/// Ports that were free a moment ago; distinct, since all are bound at once.
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("cannot bind 127.0.0.1:0"))
        .collect();
    listeners
        .iter()
        .map(|listener| listener.local_addr().expect("bound").port())
        .collect()
}

/// A loopback port where nothing listens, for as long as this lives: a
/// socket bound to it and never listening, so that a connect is refused at
/// once and no server started meanwhile (by a test beside this one) can
/// take the port, as one picked by [`free_ports`] and let go could be.
pub struct ClosedPort {
    /// Held: the port stays bound, to nobody who listens, until dropped.
    _socket: std::os::fd::OwnedFd,
    port: u16,
}

impl ClosedPort {
    /// Binds a fresh port on 127.0.0.1.
    pub fn bind() -> Self {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: plain system calls on a socket this function owns; the
        // address structures are initialised before use.
        unsafe {
            let raw = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(raw >= 0, "socket: {}", io::Error::last_os_error());
            let fd = std::os::fd::OwnedFd::from_raw_fd(raw);
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_addr.s_addr = u32::from(Ipv4Addr::LOCALHOST).to_be();
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let bound = libc::bind(fd.as_raw_fd(), std::ptr::addr_of!(addr).cast(), len);
            assert_eq!(bound, 0, "bind: {}", io::Error::last_os_error());
            let mut local: libc::sockaddr_in = std::mem::zeroed();
            let mut local_len = len;
            let named = libc::getsockname(
                fd.as_raw_fd(),
                std::ptr::addr_of_mut!(local).cast(),
                &mut local_len,
            );
            assert_eq!(named, 0, "getsockname: {}", io::Error::last_os_error());
            ClosedPort {
                _socket: fd,
                port: u16::from_be(local.sin_port),
            }
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

fn has_flag(args: &[String], flag: &str) -> bool {
    args.iter().any(|arg| arg == flag)
}

fn flag_value(args: &[String], flag: &str) -> Option<String> {
    let position = args.iter().position(|arg| arg == flag)?;
    args.get(position + 1).cloned()
}

/// Runs in the forked child before `exec`: a backstop so that no `redis-server`
/// outlives a test process that dies without running destructors (a SIGKILL, an
/// abort, a double panic), where it would keep its port and memory until someone
/// notices.
pub(crate) fn die_with_parent(parent: u32) -> io::Result<()> {
    // SAFETY: plain system calls with integer arguments.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
            return Err(io::Error::last_os_error());
        }
        // The test process may have died before the signal was armed.
        if libc::getppid() as u32 != parent {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(())
}

/// Spawns `command` from a thread that lives as long as the process.
///
/// The parent-death signal fires when the *thread* that forked the child exits, not
/// the process: a server spawned from a test thread, a tokio worker or a
/// `spawn_blocking` thread (which exits after 10 s idle) would be killed while still
/// in use, for instance when shared through a `static`.
pub(crate) fn spawn(command: Command) -> io::Result<Child> {
    type Request = (Command, Sender<io::Result<Child>>);
    static SPAWNER: LazyLock<Sender<Request>> = LazyLock::new(|| {
        let (requests, incoming) = mpsc::channel::<Request>();
        thread::Builder::new()
            .name("redis-spawner".into())
            .spawn(move || {
                for (mut command, reply) in incoming {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("cannot start the redis-server spawner thread");
        requests
    });
    let (reply, result) = mpsc::channel();
    SPAWNER
        .send((command, reply))
        .expect("the spawner thread lives as long as the process");
    result
        .recv()
        .expect("the spawner thread lives as long as the process")
}
