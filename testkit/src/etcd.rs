//! Real `etcd` members for the integration tests: one member, or a cluster of
//! several, on free loopback ports, from Debian's `etcd-server` package.
//!
//! Each member has its data directory and log in a temporary directory, is
//! killed and reaped on drop, and dies with the test process. Every panic the
//! harness raises carries the members' logs.

use std::fmt::Display;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{self, Child, Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::redis::{die_with_parent, free_ports, spawn};

/// A cluster elects its first leader within a few election timeouts; a loaded
/// machine stretches that.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(5);
const IO_TIMEOUT: Duration = Duration::from_secs(2);
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// A port found free can be taken by someone else before `etcd` binds it.
const START_ATTEMPTS: u32 = 5;

/// One `etcd` process.
pub struct EtcdMember {
    name: String,
    client_port: u16,
    peer_port: u16,
    /// `None` while stopped. Behind a lock so that a fixture shared by `&`
    /// can kill it.
    process: Mutex<Option<Child>>,
    dir: PathBuf,
}

/// `n` members forming one cluster (one member is a cluster of one).
pub struct EtcdCluster {
    members: Vec<EtcdMember>,
    /// Arguments every member was started with, for restarts.
    initial_cluster: String,
    token: String,
    _dir: TempDir,
}

impl EtcdCluster {
    /// A single member.
    #[track_caller]
    pub fn single() -> Self {
        Self::start(1)
    }

    /// `n` members, started together; returns once every member serves
    /// requests (a leader is elected).
    #[track_caller]
    pub fn start(n: usize) -> Self {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match Self::try_start(n) {
                Ok(cluster) => return cluster,
                Err((cluster, _)) if attempts < START_ATTEMPTS && cluster.port_taken() => {}
                Err((cluster, message)) => cluster.fail(message),
            }
        }
    }

    fn try_start(n: usize) -> Result<Self, (Self, String)> {
        let dir = tempfile::Builder::new()
            .prefix("lockmacro-etcd-")
            .tempdir()
            .expect("cannot create a temporary directory for etcd");
        let ports = free_ports(2 * n);
        let members: Vec<EtcdMember> = (0..n)
            .map(|i| EtcdMember {
                name: format!("m{i}"),
                client_port: ports[2 * i],
                peer_port: ports[2 * i + 1],
                process: Mutex::new(None),
                dir: dir.path().join(format!("m{i}")),
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let cluster = EtcdCluster {
            members,
            initial_cluster,
            token: format!("lockmacro-{}-{}", process::id(), ports[0]),
            _dir: dir,
        };
        for index in 0..n {
            if let Err(err) = cluster.launch(index) {
                return Err((cluster, err));
            }
        }
        for index in 0..n {
            if let Err(err) = cluster.wait_healthy(index) {
                return Err((cluster, err));
            }
        }
        Ok(cluster)
    }

    fn port_taken(&self) -> bool {
        self.logs().contains("address already in use")
    }

    fn launch(&self, index: usize) -> Result<(), String> {
        let member = &self.members[index];
        fs::create_dir_all(&member.dir).map_err(|e| format!("cannot create data dir: {e}"))?;
        let log = File::options()
            .create(true)
            .append(true)
            .open(member.log_path())
            .map_err(|e| format!("cannot open the log: {e}"))?;
        let client = format!("http://127.0.0.1:{}", member.client_port);
        let peer = format!("http://127.0.0.1:{}", member.peer_port);
        let mut command = Command::new("etcd");
        command
            .arg("--name")
            .arg(&member.name)
            .arg("--data-dir")
            .arg(member.dir.join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-token", &self.token])
            .args(["--initial-cluster-state", "new"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        let parent = process::id();
        // SAFETY: `die_with_parent` only makes async-signal-safe system calls
        // and does not allocate.
        unsafe { command.pre_exec(move || die_with_parent(parent)) };
        let child = spawn(command).map_err(|err| {
            if err.kind() == io::ErrorKind::NotFound {
                "cannot start `etcd`: not found; install Debian's `etcd-server` package \
                 (scripts/install-deps does)"
                    .to_owned()
            } else {
                format!("cannot start `etcd`: {err}")
            }
        })?;
        *self.members[index].process() = Some(child);
        Ok(())
    }

    fn wait_healthy(&self, index: usize) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let member = &self.members[index];
            {
                let mut process = member.process();
                if let Some(child) = process.as_mut()
                    && let Ok(Some(status)) = child.try_wait()
                {
                    *process = None;
                    return Err(format!(
                        "etcd {} exited during startup: {status}",
                        member.name
                    ));
                }
            }
            if member.status().is_ok_and(|status| status.leader != 0) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "etcd {} did not serve with a leader within {STARTUP_TIMEOUT:?}",
                    member.name
                ));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// A new locker on the cluster (`Locker::etcd` of its endpoints), with
    /// connections of its own; panics with every member's log when it
    /// cannot connect.
    #[cfg(feature = "etcd")]
    pub async fn locker(&self) -> lockmacro_runtime::Locker {
        match lockmacro_runtime::Locker::etcd(self.endpoints()).await {
            Ok(locker) => locker,
            Err(error) => self.fail(format_args!("connect: {error:?}")),
        }
    }

    /// Every member's client URL, for `Locker::etcd`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(EtcdMember::url).collect()
    }

    pub fn members(&self) -> &[EtcdMember] {
        &self.members
    }

    pub fn member(&self, index: usize) -> &EtcdMember {
        &self.members[index]
    }

    /// The index of the member that is leader, as the running members say.
    #[track_caller]
    pub fn leader(&self) -> usize {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            for member in self.members.iter().filter(|m| m.is_running()) {
                if let Ok(status) = member.status()
                    && status.leader != 0
                    && let Some(index) = self.members.iter().position(|m| {
                        m.is_running() && m.status().is_ok_and(|s| s.id == status.leader)
                    })
                {
                    return index;
                }
            }
            if Instant::now() > deadline {
                self.fail(format_args!("no leader within {STARTUP_TIMEOUT:?}"));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Kills member `index` with SIGKILL and reaps it.
    #[track_caller]
    pub fn kill(&self, index: usize) {
        let taken = self.members[index].process().take();
        if let Some(mut process) = taken
            && let Err(err) = process.kill().and_then(|()| process.wait().map(drop))
        {
            self.fail(format_args!("cannot kill etcd m{index}: {err}"));
        }
    }

    /// Starts a killed member again on its ports and data; returns once it
    /// serves with a leader.
    #[track_caller]
    pub fn restart(&self, index: usize) {
        self.kill(index);
        if let Err(err) = self.launch(index).and_then(|()| self.wait_healthy(index)) {
            self.fail(err);
        }
    }

    /// SIGKILL to every member, as a crash of the whole cluster would.
    pub fn kill_all(&self) {
        for index in 0..self.members.len() {
            self.kill(index);
        }
    }

    /// Freezes every member with SIGSTOP: connections stay open, nothing is
    /// answered.
    pub fn pause(&self) {
        for member in &self.members {
            member.signal(libc::SIGSTOP, |state| state == 'T');
        }
    }

    /// Undoes [`EtcdCluster::pause`].
    pub fn resume(&self) {
        for member in &self.members {
            member.signal(libc::SIGCONT, |state| state != 'T');
        }
    }

    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|member| {
                format!(
                    "--- log of etcd {} (client port {}) ---\n{}",
                    member.name,
                    member.client_port,
                    member.log().trim_end()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[track_caller]
    pub fn fail(&self, message: impl Display) -> ! {
        panic!("{message}\n\n{}\n--- end of logs ---", self.logs())
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for member in &self.members {
            if let Some(mut process) = member.process().take() {
                let _ = process.kill();
                let _ = process.wait();
            }
        }
    }
}

/// What a member's `/v3/maintenance/status` says.
pub struct Status {
    /// The member's own id.
    pub id: u64,
    /// The leader's id, 0 when there is none.
    pub leader: u64,
}

impl EtcdMember {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.client_port))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn is_running(&self) -> bool {
        self.process().is_some()
    }

    fn process(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.process.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.process().as_ref().map(Child::id)
    }

    pub fn log(&self) -> String {
        fs::read(self.log_path()).map_or_else(
            |err| format!("(cannot read the log: {err})"),
            |bytes| String::from_utf8_lossy(&bytes).into_owned(),
        )
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("etcd.log")
    }

    /// The member's status through the JSON gateway on its client port: plain
    /// HTTP/1.1, so that the harness needs no async runtime.
    pub fn status(&self) -> io::Result<Status> {
        let mut stream = TcpStream::connect_timeout(&self.addr(), IO_TIMEOUT)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        let body = "{}";
        write!(
            stream,
            "POST /v3/maintenance/status HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply)?;
        let field = |name: &str| -> Option<u64> {
            let at = reply.find(&format!("\"{name}\":\""))? + name.len() + 4;
            let end = reply[at..].find('"')? + at;
            reply[at..end].parse().ok()
        };
        match (field("member_id"), field("leader")) {
            (Some(id), leader) => Ok(Status {
                id,
                leader: leader.unwrap_or(0),
            }),
            _ => Err(io::Error::other(format!(
                "unexpected status reply: {reply}"
            ))),
        }
    }

    /// The value of the Prometheus metric `name` (without labels) on the
    /// member's `/metrics`.
    pub fn metric(&self, name: &str) -> io::Result<f64> {
        let mut stream = TcpStream::connect_timeout(&self.addr(), IO_TIMEOUT)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply)?;
        reply
            .lines()
            .find_map(|line| {
                line.strip_prefix(name)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .ok_or_else(|| io::Error::other(format!("no metric {name} on {}", self.name)))
    }

    /// Sends `signal` and waits until the process state satisfies `state`.
    fn signal(&self, signal: libc::c_int, state: impl Fn(char) -> bool) {
        let Some(pid) = self.pid() else {
            return;
        };
        // SAFETY: `pid` is an unreaped child of this process.
        unsafe { libc::kill(pid as libc::pid_t, signal) };
        let deadline = Instant::now() + SIGNAL_TIMEOUT;
        loop {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let current = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            if current.is_some_and(&state) || Instant::now() > deadline {
                return;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Freezes this member with SIGSTOP.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP, |state| state == 'T');
    }

    /// Undoes [`EtcdMember::pause`].
    pub fn resume(&self) {
        self.signal(libc::SIGCONT, |state| state != 'T');
    }
}
